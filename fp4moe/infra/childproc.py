"""Run code under test in a child process with a time limit, and write results atomically.

Every gate that executes someone else's code (a mutant under pytest, aiter's ``shuffle.py``,
an installed SGLang, an lm-eval run) does it here, so that the code under test can neither
end the gate (``sys.exit(0)`` in an import), nor hang it, nor leak patches or stubs into it:

- the child runs in its own process group (``start_new_session``); on timeout the whole group
  gets SIGTERM, then SIGKILL after ``KILL_GRACE_S``;
- :func:`install_signal_cleanup` (called once by ``fp4moe.commands.main``) turns SIGTERM into
  ``KeyboardInterrupt`` and kills every live child group before the gate exits, so SIGINT or
  SIGTERM to the gate never orphans a child pytest;
- inherited signal dispositions, by POSIX convention: SIGTERM is always handled (``kill PID``
  ends the gate, children first, wherever it runs). SIGINT and SIGHUP are handled unless the
  gate *inherited them ignored*: a shell starts a background job (``cmd &`` in a script) with
  SIGINT ignored, and ``nohup`` ignores SIGHUP, precisely so that a Ctrl-C typed at the terminal
  or a closed session does not reach it; such a gate keeps them ignored (as Python itself does
  for SIGINT) and is stopped with SIGTERM. A gate in the foreground of a terminal inherits
  SIGINT at its default, so Ctrl-C works there. A caller that wants Ctrl-C semantics in a
  process it starts from a background job resets SIGINT to ``SIG_DFL`` before ``exec`` (the
  tests that send SIGINT do: ``tests/conftest.py``'s ``default_signals``);
- the child's verdict travels as one JSON record in a file named by ``$FP4MOE_CHILD_RESULT``
  (:func:`write_record` on the child side), never through its exit status or stdout, which
  the code under test controls. No record means the child could not judge.
"""

from __future__ import annotations

from fp4moe.infra.files import atomic_write_text

import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

#: Seconds between SIGTERM and SIGKILL for a child group that outlived its time limit.
KILL_GRACE_S = 5.0
#: Longest time limit accepted anywhere (a week): beyond it the OS timers overflow, and no
#: gate run on a shared runner should be allowed to hold it longer.
MAX_TIMEOUT_S = 7 * 24 * 3600.0
#: Environment variable naming the file a child writes its JSON record to.
RESULT_ENV = "FP4MOE_CHILD_RESULT"

_LIVE: set[subprocess.Popen] = set()
_LIVE_LOCK = threading.Lock()


@dataclass
class ChildResult:
    """What one child run left behind. ``rc`` is None when it was killed for time."""

    cmd: list[str]
    rc: int | None
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False
    record: dict | None = None
    record_error: str | None = field(default=None)

    @property
    def tail(self) -> str:
        return (self.stdout + self.stderr)[-2000:]

    def why_no_record(self) -> str:
        """One line: why this run produced no verdict (for a 'could not run' message)."""
        if self.timed_out:
            return f"timed out after {self.seconds:.0f} s (killed)"
        if self.record_error:
            return self.record_error
        last = next((ln for ln in reversed(self.tail.strip().splitlines()) if ln.strip()), "")
        return f"exited {self.rc} without a result record" + (f": {last[:300]}" if last else "")


def _kill_group(proc: subprocess.Popen, grace_s: float | None = None) -> None:
    """SIGTERM the child's group, SIGKILL it after ``grace_s`` (default :data:`KILL_GRACE_S`);
    then SIGKILL whatever of the group outlived its leader (a grandchild ignoring SIGTERM)."""
    grace_s = KILL_GRACE_S if grace_s is None else grace_s
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    try:  # the leader is reaped, so its pid (= the group id) cannot be reused while members live
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _drain(proc: subprocess.Popen) -> tuple[str, str]:
    """Output left after a kill; bounded, since a grandchild that left the group may still
    hold the pipes open."""
    try:
        return proc.communicate(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        for pipe in (proc.stdout, proc.stderr):
            try:
                pipe.close()
            except OSError:
                pass
        return "", "(output lost: a process outside the killed group held the pipes)"


def kill_all_children() -> None:
    """Kill every live child group (the signal handlers, ``fp4moe.commands.main`` and ``atexit`` call this)."""
    with _LIVE_LOCK:
        live = list(_LIVE)
    for p in live:
        _kill_group(p, grace_s=1.0)


def run_child(
    cmd: list[str],
    *,
    timeout_s: float,
    env: dict | None = None,
    cwd: str | Path | None = None,
    want_record: bool = True,
    tracked: bool = True,
) -> ChildResult:
    """Run ``cmd`` in a new process group, killed after ``timeout_s``; read its JSON record.

    The record file is fresh per run (a stale record can never be read as this run's). Output
    is captured; the child's exit status is reported but is not a verdict. ``tracked=False``
    keeps the child out of :func:`kill_all_children` (its time limit and an exception in the
    caller still kill it): for a background child of the test suite, which the tests of that
    cleanup must not end.
    """
    if not 0 < timeout_s <= MAX_TIMEOUT_S:  # False for nan too
        raise ValueError(f"timeout: {timeout_s} must be > 0 and <= {MAX_TIMEOUT_S:.0f} seconds")
    env = dict(os.environ if env is None else env)
    with tempfile.TemporaryDirectory(prefix="fp4moe-child-") as tmp:
        record_path = Path(tmp) / "record.json"
        if want_record:
            env[RESULT_ENV] = str(record_path)
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
            text=True, errors="replace", start_new_session=True,
        )
        if tracked:
            with _LIVE_LOCK:
                _LIVE.add(proc)
        timed_out = False
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            out, err = _drain(proc)
        except BaseException:
            _kill_group(proc, grace_s=1.0)
            raise
        finally:
            with _LIVE_LOCK:
                _LIVE.discard(proc)
        res = ChildResult(cmd=list(cmd), rc=None if timed_out else proc.returncode, stdout=out or "", stderr=err or "",
                          seconds=time.perf_counter() - t0, timed_out=timed_out)
        if want_record and not timed_out and record_path.exists():
            try:
                record = json.loads(record_path.read_text())
            except (OSError, ValueError) as e:
                res.record_error = f"unreadable result record: {type(e).__name__}: {e}"
            else:
                if isinstance(record, dict):
                    res.record = record
                else:
                    res.record_error = f"result record is a JSON {type(record).__name__}, not an object"
        if not timed_out:  # a grandchild left behind in the child's group dies with it
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        return res


class WorkerError(RuntimeError):
    """A long-lived worker died, timed out or answered nonsense (the message says which)."""


class Worker:
    """A long-lived child (own process group) answering JSON requests one at a time.

    Requests go to its stdin, one JSON object per line; replies come back on a pipe of their
    own (its fd number in ``$FP4MOE_WORKER_FD``), so whatever the code under test prints on
    stdout/stderr (kept in a temporary file, see ``output_tail``) cannot be read as a reply.
    Each request has a time limit; past it, or when the worker dies, the whole group is
    killed and ``WorkerError`` names the request. ``close()`` (or the context manager) ends it;
    the gate's SIGINT/SIGTERM cleanup kills it like any child.
    """

    FD_ENV = "FP4MOE_WORKER_FD"

    def __init__(self, cmd: list[str], *, name: str, env: dict | None = None, cwd: str | Path | None = None):
        self.name = name
        env = dict(os.environ if env is None else env)
        read_fd, write_fd = os.pipe()
        env[self.FD_ENV] = str(write_fd)
        self._log = tempfile.TemporaryFile(mode="w+", errors="replace")
        try:
            self.proc = subprocess.Popen(
                cmd, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=self._log, stderr=subprocess.STDOUT,
                text=True, start_new_session=True, pass_fds=(write_fd,),
            )
        except OSError as e:
            os.close(read_fd)
            os.close(write_fd)
            raise WorkerError(f"{name}: cannot start {cmd[0]}: {e}") from e
        os.close(write_fd)
        self._replies = os.fdopen(read_fd, "r")
        with _LIVE_LOCK:
            _LIVE.add(self.proc)

    def output_tail(self, n: int = 1500) -> str:
        self._log.flush()
        self._log.seek(0)
        return self._log.read()[-n:]

    def request(self, obj: dict, *, timeout_s: float) -> dict:
        """Send one request, wait up to ``timeout_s`` for its reply (a dict). A reply with
        ``"error"`` raises ``WorkerError`` with the worker's message."""
        import selectors

        try:
            self.proc.stdin.write(json.dumps(obj) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self._fail(f"died before request {obj.get('op')!r}")
        sel = selectors.DefaultSelector()
        sel.register(self._replies, selectors.EVENT_READ)
        ready = sel.select(timeout=timeout_s)
        sel.close()
        if not ready:
            self._fail(f"request {obj.get('op')!r} took more than {timeout_s:g} s (killed)")
        line = self._replies.readline()
        if not line:
            self._fail(f"died during request {obj.get('op')!r} (exit {self.proc.poll()})")
        try:
            reply = json.loads(line)
        except ValueError:
            self._fail(f"answered {line[:200]!r} to {obj.get('op')!r}, not JSON")
        if not isinstance(reply, dict):
            self._fail(f"answered {reply!r} to {obj.get('op')!r}, not an object")
        if "error" in reply:
            self.close(kill=True)
            raise WorkerError(f"{self.name}: {reply['error']}")
        return reply

    def _fail(self, what: str):
        self.close(kill=True)
        tail = " | ".join(ln for ln in self.output_tail(600).strip().splitlines()[-4:])
        raise WorkerError(f"{self.name}: {what}" + (f"; last output: {tail}" if tail else ""))

    def close(self, kill: bool = False) -> None:
        """End the worker: EOF on its stdin (a clean exit) unless ``kill``; either way its group
        is killed if it is still there after a few seconds."""
        if self.proc.poll() is None and not kill:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self.proc.poll() is None:
            _kill_group(self.proc, grace_s=2.0)
        with _LIVE_LOCK:
            _LIVE.discard(self.proc)
        try:
            self._replies.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def worker_reply(obj: dict) -> None:
    """Worker side: write one reply on the pipe ``Worker`` gave this process."""
    fd = os.environ.get(Worker.FD_ENV)
    if not fd:
        raise RuntimeError(f"${Worker.FD_ENV} is not set: not running under fp4moe.infra.childproc.Worker")
    data = (json.dumps(obj) + "\n").encode()
    while data:
        data = data[os.write(int(fd), data):]


def run_python(args: list[str], **kw) -> ChildResult:
    """``run_child([sys.executable, *args])``; e.g. ``run_python(["-m", "fp4moe.x", ...])``."""
    return run_child([sys.executable, *args], **kw)


def write_record(record: dict) -> None:
    """Child side: write this run's verdict to ``$FP4MOE_CHILD_RESULT`` (atomically)."""
    path = os.environ.get(RESULT_ENV)
    if not path:
        raise RuntimeError(f"${RESULT_ENV} is not set: not running under fp4moe.infra.childproc.run_child")
    atomic_write_text(path, json.dumps(record))


def _on_sigterm(signum, frame):  # pragma: no cover - exercised by the reliability suite
    kill_all_children()
    raise KeyboardInterrupt(f"signal {signum}")


_ATEXIT = False


def install_signal_cleanup() -> None:
    """Main thread only: SIGTERM, and SIGHUP unless inherited ignored (``nohup``), ->
    KeyboardInterrupt (children killed first); SIGINT (Python's ``KeyboardInterrupt``, left
    ignored when inherited ignored: a background job) kills children through the
    KeyboardInterrupt path of :func:`run_child`; at exit, any child still alive is killed.
    See the module docstring for why inherited ignores are kept."""
    global _ATEXIT
    if not _ATEXIT:
        atexit.register(kill_all_children)
        _ATEXIT = True
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_sigterm)
        if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
            signal.signal(signal.SIGHUP, _on_sigterm)
