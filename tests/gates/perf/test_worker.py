"""``fp4moe.gates.perf.worker``: a worker's reply has a deadline for the whole line; a reply that is
no object, an error, or a worker that dies is named, and the worker is dead afterwards."""

import sys

import pytest

from fp4moe.gates.perf.worker import Worker, WorkerError

pytestmark = pytest.mark.reliability


def _worker(tmp_path, body: str, ready: bytes):
    """A worker that answers ``hello`` (with ``ready``: bytes written in the same ``write``
    as the reply, so they are read with it), then reads one request and runs ``body``."""
    script = tmp_path / "w.py"
    script.write_text("import os, sys, time\nfd = int(os.environ['FP4MOE_WORKER_FD'])\nsys.stdin.readline()\n"
                      f"os.write(fd, b'{{\"hello\": 1}}\\n' + {ready!r})\nsys.stdin.readline()\n" + body)
    return Worker([sys.executable, str(script)], name="test worker")


#: (body after the hello, bytes sent with the hello reply, the request's limit, the error)
WORKER_FAULTS = {
    "half-line-then-sleep": ("time.sleep(300)\n", b'{"seconds": 0.00', 0.25, "took more than 0.25 s (a partial reply"),
    "silence": ("time.sleep(300)\n", b"", 0.25, "took more than 0.25 s"),
    "half-line-then-exit": ("os.write(fd, b'{\"seconds\": 0.00')\n", b"", 60, "died during request 'time' (exit"),
    "endless-line": ("os.write(fd, b'x' * (3 << 20))\ntime.sleep(300)\n", b"", 60, "longer than"),
    "not-an-object": ("os.write(fd, b'[1]\\n')\n", b"", 60, "not a JSON object"),
    "error-reply": ("os.write(fd, b'{\"error\": \"no such workload\"}\\n')\n", b"", 60, "test worker: no such workload"),
}


@pytest.mark.parametrize("case", WORKER_FAULTS)
def test_worker_reply_has_a_deadline_for_the_whole_line(tmp_path, case):
    """Half a reply line and a sleep is cut at the request's deadline; a reply that is no object,
    or an error, is named; the worker is dead afterwards."""
    body, ready, limit, expect = WORKER_FAULTS[case]
    w = _worker(tmp_path, body, ready)
    assert w.request({"op": "hello"}, timeout_s=120) == {"hello": 1}
    with pytest.raises(WorkerError, match=expect.replace("(", r"\(")):
        w.request({"op": "time"}, timeout_s=limit)
    assert w.proc.poll() is not None
