"""``--json`` and the other outputs at their edges (issue #48 items 7, 8, 9), a fault table:

- a device that cannot be opened is named for what it is (``/dev/tty`` without a controlling
  terminal is a terminal, not "a FIFO with no reader");
- a write that fails part-way -- ``/dev/full`` (ENOSPC), a FIFO whose reader leaves after 10
  bytes (EPIPE, or the bytes left unread in the pipe) -- is exit 2 naming the path, never exit 0;
- two writers of one output at once (threads and processes): the last writer wins, whole;
- text from code under test in the one line is quoted with control characters escaped
  (:func:`fp4moe.infra.files.quoted`)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time

import pytest

from fp4moe.infra import files
from fp4moe.infra.paths import REPO_ROOT

FOOTPRINT = ("footprint", "--model", "dsv4-pro", "--tp", "8", "--align", "128")


def _child(code: str, **kw) -> subprocess.CompletedProcess:
    """A bare interpreter (fp4moe.infra.files imports the standard library only: ~30 ms)."""
    return subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
                          capture_output=True, text=True, timeout=60, **kw)


def test_dev_tty_without_a_terminal_is_named_a_terminal_not_a_fifo():
    r = _child("import sys\nfrom fp4moe.infra.files import atomic_write_text\n"
               "try:\n    atomic_write_text('/dev/tty', 'x')\nexcept OSError as e:\n    print(e.strerror)\n",
               start_new_session=True)  # a new session: no controlling terminal
    assert r.stdout.strip() == ("/dev/tty: a terminal that cannot be opened: No such device or address "
                                "(this process has no controlling terminal)"), r.stderr
    assert "FIFO" not in r.stdout


def test_dev_tty_without_a_terminal_is_exit_2_naming_it(gate, monkeypatch):
    real = os.open

    def no_tty(path, flags, *a):  # what open(2) answers in a process without a controlling terminal
        if os.fspath(path) == "/dev/tty":
            raise OSError(6, os.strerror(6))
        return real(path, flags, *a)

    monkeypatch.setattr(files.os, "open", no_tty)
    gate(*FOOTPRINT, "--json", "/dev/tty").cannot_run("/dev/tty", "a terminal that cannot be opened")


def _reader_leaving_after(fifo, n: int):
    """A reader there before the writer (opened non-blocking), that reads ``n`` bytes and leaves."""
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    got = []

    def read():
        end = time.monotonic() + 30
        buf = b""
        while len(buf) < n and time.monotonic() < end:
            try:
                buf += os.read(fd, n - len(buf))
            except BlockingIOError:
                time.sleep(0.002)
        got.append(buf)
        os.close(fd)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    return t, got


def test_a_fifo_whose_reader_leaves_after_10_bytes_is_an_error_naming_it(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    t, got = _reader_leaving_after(fifo, 10)
    with pytest.raises(OSError) as e:
        files.atomic_write_text(fifo, json.dumps({"status": "pass", "pad": "x" * 1000}))
    t.join(30)
    assert got == [b'{"status":']
    assert str(fifo) in str(e.value) and ("unread" in str(e.value) or "Broken pipe" in str(e.value))
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_fifo_whose_reader_leaves_after_10_bytes_is_exit_2(gate, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    t, got = _reader_leaving_after(fifo, 10)
    gate(*FOOTPRINT, "--json", fifo).cannot_run(str(fifo), "--json")
    t.join(30)
    assert len(got[0]) == 10


def test_a_fifo_read_whole_is_written(tmp_path):
    """The control: a reader that reads everything gets it all, no error."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    text = json.dumps({"status": "pass", "pad": "y" * 100_000})  # more than a pipe holds
    t, got = _reader_leaving_after(fifo, len(text))
    files.atomic_write_text(fifo, text)
    t.join(30)
    assert got == [text.encode()]


def test_dev_full_is_exit_2_naming_it(gate):
    if not os.path.exists("/dev/full"):
        pytest.skip("[cpu tier] no /dev/full on this machine")
    gate(*FOOTPRINT, "--json", "/dev/full").cannot_run("/dev/full", "No space left on device")


def test_a_regular_file_that_cannot_be_flushed_is_named_and_leaves_no_temporary(tmp_path, monkeypatch):
    out = tmp_path / "r.json"
    out.write_text("old\n")

    real = os.fdopen

    class Full:
        def __init__(self, fd, mode):
            self.f = real(fd, mode)
            self.closed = False

        def write(self, data):
            return self.f.write(data)

        def close(self):
            self.f.close()
            self.closed = True
            raise OSError(28, os.strerror(28))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.close()

    monkeypatch.setattr(files.os, "fdopen", Full)
    with pytest.raises(OSError, match=rf"{out}: cannot write: No space left on device"):
        files.atomic_write_text(out, "new\n")
    assert out.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


# ---- two writers at once --------------------------------------------------------------------

def test_two_threads_writing_one_output_leave_one_whole_record(tmp_path):
    out = tmp_path / "r.json"
    docs = [{"writer": w, "rows": [w] * 5_000} for w in (1, 2)]
    errors = []

    def write(doc):
        try:
            for _ in range(10):
                files.atomic_write_json(out, doc)
        except Exception as e:  # pragma: no cover - the assertion below names it
            errors.append(e)

    threads = [threading.Thread(target=write, args=(d,)) for d in docs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert json.loads(out.read_text()) in docs
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temporary left behind


_WRITER = """
import sys
from fp4moe.infra.files import atomic_write_json
doc = {"writer": sys.argv[2], "rows": [sys.argv[2]] * 20_000}
for _ in range(10):
    atomic_write_json(sys.argv[1], doc)
"""


@pytest.mark.slow
def test_two_processes_writing_one_output_leave_one_whole_record(tmp_path):
    out = tmp_path / "r.json"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(out), w], env=env) for w in "ab"]
    seen = set()
    while any(p.poll() is None for p in procs):  # a reader at any moment sees one whole record
        try:
            seen.add(json.loads(out.read_text())["writer"])
        except FileNotFoundError:
            pass
    assert [p.wait() for p in procs] == [0, 0]
    assert json.loads(out.read_text())["writer"] in "ab"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]
    assert seen <= {"a", "b"}


def test_two_gates_with_one_json_and_one_tmpdir_give_their_own_verdicts(gate, tmp_path, monkeypatch):
    """Two gates at once in one process (threads), the same --json and TMPDIR: each its own
    verdict; the file is one of the two records, whole."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    out = tmp_path / "same.json"
    from fp4moe.commands import main as cli

    rcs = {}

    def run(name, argv):
        rcs[name] = cli.main([*argv, "--json", str(out)])

    threads = [threading.Thread(target=run, args=(n, a)) for n, a in (("a", FOOTPRINT), ("b", FOOTPRINT))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert rcs == {"a": 0, "b": 0}
    assert json.loads(out.read_text())["status"] == "pass"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["same.json"]


# ---- one quoted line -------------------------------------------------------------------------

@pytest.mark.parametrize("raw,want", [
    ("\x1b[2J", r'"\x1b[2J"'),
    ("ok\rfp4moe-gate: exit 0", r'"ok\rfp4moe-gate: exit 0"'),
    ("a\nb", r'"a\nb"'),
    ('say "pass"', r'"say \"pass\""'),
    ("\u009b31m", r'"\x9b31m"'),  # the 8-bit CSI
    ("line\u2028sep", r'"line\u2028sep"'),
    ("\u200e", r'"\u200e"'),  # a format character (bidi mark)
    (b"\xff\xfe", r'"\\xff\\xfe"'),  # bytes that are no UTF-8: escaped, the backslash quoted
    ("é ü 漢", '"é ü 漢"'),  # printable text stays as it is
], ids=["ESC", "CR", "LF", "quote", "C1", "U+2028", "format", "bad UTF-8", "printable"])
def test_quoted_escapes_every_control(raw, want):
    assert files.quoted("body", raw) == f"body {want}"


def test_quoted_is_bounded():
    q = files.quoted("body", "x" * 10_000, limit=50)
    assert q == 'body "' + "x" * 50 + '..."'


def test_json_dash_on_a_closed_stdout_is_exit_2_naming_it(gate, monkeypatch):
    from fp4moe.commands import output

    class Closed:
        def write(self, text):
            raise BrokenPipeError(32, os.strerror(32))

        def flush(self):
            pass

    real = output._State.__init__

    def closed_stdout(self, stdout):
        real(self, Closed())

    monkeypatch.setattr(output._State, "__init__", closed_stdout)
    gate(*FOOTPRINT, "--json", "-").cannot_run("--json -: cannot write to stdout: Broken pipe")


@pytest.mark.slow
def test_two_gate_processes_with_one_json_and_one_tmpdir_give_the_verdicts_they_give_alone(tmp_path):
    """Two ``fp4moe-gate`` processes at once, the same ``--json`` and ``TMPDIR``: a pass and a
    could-not-run (a bad option), each exits as it does alone; the file is one of the two
    records, whole; the shared TMPDIR is left as it was found."""
    out, tmp = tmp_path / "same.json", tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "TMPDIR": str(tmp)}
    runs = {"pass": [*FOOTPRINT], "cannot": [*FOOTPRINT[:-1], "96"]}  # align 96: refused, exit 2

    def start(argv):
        return subprocess.Popen([sys.executable, "-m", "fp4moe.commands.main", *argv, "--json", str(out)], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    alone = {}
    for name, argv in runs.items():
        p = start(argv)
        alone[name] = (p.wait(timeout=300), p.stderr.read())
    together = {name: start(argv) for name, argv in runs.items()}
    got = {name: (p.wait(timeout=300), p.stderr.read()) for name, p in together.items()}
    assert {k: v[0] for k, v in got.items()} == {k: v[0] for k, v in alone.items()} == {"pass": 0, "cannot": 2}
    assert got["cannot"][1] == alone["cannot"][1]  # the same one line
    assert json.loads(out.read_text())["status"] in ("pass", "cannot-run")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["same.json", "tmp"] and list(tmp.iterdir()) == []
