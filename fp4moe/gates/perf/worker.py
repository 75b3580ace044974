"""The perf gate's long-lived workers: a child answering JSON requests one at a time (``perf ab``
times each side in one, started once for the whole run), on the one child runner's processes
(``fp4moe.infra.runner.start``/``end``: its own process group, marked, bounded output, killed with
the gate)."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import time
from pathlib import Path

from fp4moe.infra import runner
from fp4moe.infra.runner import check_timeout, one_line, quote

WORKER_FD_ENV = "FP4MOE_WORKER_FD"
MAX_REPLY_BYTES = 1 << 20

class WorkerError(RuntimeError):
    """A long-lived worker died, timed out or answered nonsense (the message says which)."""


class Worker:
    """A long-lived child answering JSON requests one at a time: requests on its stdin, one object a
    line; replies on a pipe of their own (``$FP4MOE_WORKER_FD``), so what the code under test prints
    is never read as a reply. Each request's deadline covers the whole reply line; past it, or when
    the worker dies, it is killed like any child and :class:`WorkerError` names the request."""

    FD_ENV = WORKER_FD_ENV

    def __init__(self, cmd: list[str], *, name: str, env: dict | None = None, cwd: str | Path | None = None):
        self.name, self._closed, self._buf = name, False, bytearray()
        self._fd, write_fd = os.pipe()
        env = dict(os.environ if env is None else env)
        env[WORKER_FD_ENV] = str(write_fd)
        try:
            self.proc, self._cap = runner.start(list(cmd), env, cwd, {"out": os.pipe()}, stdin_pipe=True, pass_fds=(write_fd,))
        except OSError as e:
            os.close(self._fd)
            raise WorkerError(f"{name}: cannot start {cmd[0]}: {e}") from e
        finally:
            os.close(write_fd)
        self.proc.fp4moe_pipes.add(runner.pipe_id(self._fd))
        os.set_blocking(self._fd, False)

    def output_tail(self, n: int = 1500) -> str:
        return self._cap.text("out")[-n:]

    def _read_line(self, deadline: float) -> bytes | None:
        """One reply line by ``deadline`` (monotonic); None past it; what there is at EOF."""
        with selectors.DefaultSelector() as sel:
            sel.register(self._fd, selectors.EVENT_READ)
            while (nl := self._buf.find(b"\n")) < 0:
                if len(self._buf) > MAX_REPLY_BYTES:
                    raise ValueError(f"a reply line longer than {MAX_REPLY_BYTES} bytes")
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                if not sel.select(timeout=min(left, 1.0)):
                    continue
                try:
                    data = os.read(self._fd, 65536)
                except BlockingIOError:
                    continue
                if not data:
                    return bytes(self._buf)
                self._buf += data
        line = bytes(self._buf[: nl + 1])
        del self._buf[: nl + 1]
        return line

    def request(self, obj: dict, *, timeout_s: float) -> dict:
        """Send one request, wait up to ``timeout_s`` for its reply (a dict); ``"error"`` raises."""
        self.send(obj)
        return self.receive(obj.get("op"), timeout_s=timeout_s)

    def send(self, obj: dict) -> None:
        """Send one request without waiting (its reply: :meth:`receive`): two workers set up at once."""
        try:
            self.proc.stdin.write(json.dumps(obj) + "\n")
            self.proc.stdin.flush()
        except OSError:
            self._fail(f"died before request {obj.get('op')!r}")

    def receive(self, op, *, timeout_s: float) -> dict:
        """The reply to the request ``op`` sent last, within ``timeout_s`` (a dict); ``"error"`` raises."""
        check_timeout("timeout", timeout_s, allow_none=False)
        try:
            line = self._read_line(time.monotonic() + timeout_s)
        except ValueError as e:
            self._fail(f"answered {op!r} with {e}")
        if line is None:
            part = f" (a partial reply {quote(bytes(self._buf[:80]))} and then nothing)" if self._buf else ""
            self._fail(f"request {op!r} took more than {timeout_s:g} s{part} (killed)")
        if not line.endswith(b"\n"):
            self._fail(f"died during request {op!r} (exit {self.proc.poll()})"
                       + (f" after a partial reply {quote(line[:80])}" if line else ""))
        try:
            reply = json.loads(line)
        except ValueError:
            reply = line
        if not isinstance(reply, dict):
            self._fail(f"answered {quote(line[:200])} to {op!r}, not a JSON object")
        if "error" in reply:
            self.close(kill=True)
            raise WorkerError(f"{self.name}: {one_line(reply['error'], 500)}")
        return reply

    def _fail(self, what: str):
        self.close(kill=True)
        tail = " | ".join(self.output_tail(600).strip().splitlines()[-4:])
        raise WorkerError(f"{self.name}: {what}" + (f"; last output: {quote(tail[-380:], 400)}" if tail else ""))

    def close(self, kill: bool = False) -> None:
        """End the worker: EOF on its stdin (a clean exit) unless ``kill``; then its group and marker."""
        if self._closed:
            return
        self._closed = True
        if not kill and self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        runner.end(self.proc, grace_s=2.0 if self.proc.poll() is None else 0)
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        self._cap.finish(0.2)
        os.close(self._fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def worker_reply(obj: dict) -> None:
    """Worker side: one reply on the pipe :class:`Worker` gave this process."""
    fd = os.environ.get(WORKER_FD_ENV)
    if not fd:
        raise RuntimeError(f"${WORKER_FD_ENV} is not set: not running under fp4moe.gates.perf.worker.Worker")
    data = (json.dumps(obj) + "\n").encode()
    while data:
        data = data[os.write(int(fd), data):]
