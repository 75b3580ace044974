"""The one child runner: code under test computes in a child, the parent judges what comes back.

Code under test (aiter, SGLang, a checkout's worker, a mutant under pytest) has accidents, not
intentions (docs/architecture.md, threat model). A child runs in its own process group with a
deadline (SIGTERM, SIGKILL after :data:`KILL_GRACE_S`); what escapes the group (a ``setsid``
daemon) carries a marker (``$FP4MOE_CHILD_TAG``) or holds its pipes, and is killed and reaped here
(``PR_SET_CHILD_SUBREAPER``) when it ends; its output is captured bounded; its result is one JSON
record (``$FP4MOE_CHILD_RESULT``), never its exit status or stdout. :func:`run_judged` adds a
scratch HOME/TMPDIR/caches, a validated record and bounded outputs (safetensors, never pickle).
Signals: :func:`install_signal_cleanup`; one ``--timeout``: ``fp4moe.infra.deadline``; child
side: :func:`child_session`.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import json
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from fp4moe.infra import culprit
from fp4moe.infra.culprit import MAX_LINE_CHARS, QUOTE_CHARS  # longest cannot-run line; quote of the code under test
from fp4moe.infra.culprit import bounded as one_line  # one line, at most MAX_LINE_CHARS
from fp4moe.infra.errors import GateCannotRun
from fp4moe.infra.files import atomic_write_text, read_regular_bytes

#: The folder holding this ``fp4moe`` package (put first on every child's ``PYTHONPATH``).
PACKAGE_PARENT = Path(__file__).resolve().parents[2]
KILL_GRACE_S = 5.0
#: Longest time limit accepted anywhere (a week).
MAX_TIMEOUT_S = 7 * 24 * 3600.0
RESULT_ENV = "FP4MOE_CHILD_RESULT"
TAG_ENV = "FP4MOE_CHILD_TAG"
OUTPUT_DIR_ENV = "FP4MOE_CHILD_OUTPUTS"
INPUT_DIR_ENV = "FP4MOE_CHILD_INPUTS"
STAGE_ENV = "FP4MOE_CHILD_STAGE"
CAPTURE_HEAD, CAPTURE_TAIL = 64 * 1024, 256 * 1024
#: Seconds the output pipes are still read after the child's processes are gone.
DRAIN_S = 1.0
MAX_RECORD_BYTES = 16 << 20
MAX_OUTPUT_BYTES = 512 << 20
MAX_TOTAL_OUTPUT_BYTES = 2 << 30
MAX_STAGE_BYTES = 4096
#: Compiler and tool caches the code under test may write: sent into the scratch folder.
CACHE_VARS = ("XDG_CACHE_HOME", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "HF_HOME")


def check_timeout(option: str, value: float | None, *, allow_none: bool = True) -> None:
    """ValueError naming ``option`` unless ``value`` is a usable limit (> 0 s, at most a week)."""
    if value is None and allow_none:
        return
    if value is None or not 0 < value <= MAX_TIMEOUT_S:  # False for nan too
        raise ValueError(f"{option} {value}: must be > 0 and <= {MAX_TIMEOUT_S:.0f} seconds")


def quote(text: str, n: int = QUOTE_CHARS) -> str:
    """Text from the code under test: one line, cut to ``n`` characters, quoted with every control
    character escaped (a terminal escape is printed as ``\\u001b``, never acted on)."""
    return json.dumps(one_line(text, n))


def exception_line(e: BaseException, n: int = MAX_LINE_CHARS) -> str:
    return one_line(f"{type(e).__name__}: {e}", n)


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
    record_error: str | None = None
    swept: int = 0  # processes that left the child's group and were killed after it

    @property
    def tail(self) -> str:
        return (self.stdout + self.stderr)[-2000:]

    def why_no_record(self) -> str:
        if self.timed_out:
            return f"timed out after {self.seconds:.0f} s (killed)"
        if self.record_error:
            return self.record_error
        last = next((ln for ln in reversed(self.tail.strip().splitlines()) if ln.strip()), "")
        return f"exited {self.rc} without a result record" + (f": {quote(last, 300)}" if last else "")


class _Capture:
    """One thread reading pipe fds until EOF or :meth:`finish`; per stream the first
    :data:`CAPTURE_HEAD` and last :data:`CAPTURE_TAIL` bytes are kept, the middle counted."""

    def __init__(self, fds: dict[str, int]):
        self._fds, self._stop = dict(fds), threading.Event()
        self.bufs = {k: [bytearray(), bytearray(), 0] for k in fds}  # head, tail, dropped
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _add(self, buf: list, data: bytes) -> None:
        room = max(0, CAPTURE_HEAD - len(buf[0]))
        buf[0] += data[:room]
        buf[1] += data[room:]
        if len(buf[1]) > CAPTURE_TAIL:
            buf[2] += len(buf[1]) - CAPTURE_TAIL
            del buf[1][: len(buf[1]) - CAPTURE_TAIL]

    def text(self, name: str) -> str:
        head, tail, dropped = self.bufs[name]
        mid = f"\n[... {dropped} bytes of output dropped ...]\n".encode() if dropped else b""
        return bytes(head + mid + tail).decode("utf-8", errors="replace")

    def _run(self) -> None:
        with selectors.DefaultSelector() as sel:
            for k, fd in self._fds.items():
                os.set_blocking(fd, False)
                sel.register(fd, selectors.EVENT_READ, k)
            while sel.get_map() and not self._stop.is_set():
                for key, _ in sel.select(timeout=0.05):
                    try:
                        data = os.read(key.fd, 65536)
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    self._add(self.bufs[key.data], data) if data else sel.unregister(key.fd)

    def finish(self, grace_s: float = DRAIN_S) -> dict[str, str]:
        self._t.join(grace_s)
        self._stop.set()
        self._t.join()
        for fd in self._fds.values():
            _close(fd)
        return {k: self.text(k) for k in self.bufs}


def _close(fd: int) -> None:
    with suppress(OSError):
        os.close(fd)


_LIVE: set = set()
#: reentrant: the signal handler (main thread) takes it, and may interrupt the main thread holding it
_LIVE_LOCK = threading.RLock()


@functools.cache  # once per process
def _become_subreaper() -> None:
    """Orphans of our children are reparented to this process (Linux), not to init: reaped here."""
    if sys.platform.startswith("linux"):
        with suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def _holds(pid: str, marker: bytes, pipes: set[str]) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            if marker in f.read().split(b"\0"):
                return True
        return any(os.readlink(f"/proc/{pid}/fd/{fd}") in pipes for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


def sweep(tag: str, pipes: set[str] = frozenset()) -> int:
    """SIGKILL (and reap, where this process is their subreaper) every process carrying the
    child's marker or holding one of its pipes; repeated while any is found. Returns the count."""
    if not os.path.isdir("/proc"):
        return 0
    marker, me, killed = f"{TAG_ENV}={tag}".encode(), str(os.getpid()), set()
    for _ in range(50):
        found = [int(p) for p in os.listdir("/proc") if p.isdigit() and p != me and int(p) not in killed
                 and _holds(p, marker, pipes)]
        if not found:
            break
        for pid in found:
            with suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
        time.sleep(0.01)
    for pid in killed:
        with suppress(ChildProcessError):
            os.waitpid(pid, 0)  # our orphan (subreaper): reaped; anyone else's: ECHILD
    return len(killed)


def end(proc: subprocess.Popen, grace_s: float = KILL_GRACE_S) -> None:
    """SIGTERM the child's group, SIGKILL after ``grace_s``; then sweep what escaped it; untracked."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            break
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    with suppress(ProcessLookupError, PermissionError):  # the leader is reaped: what of its group outlived it dies now
        os.killpg(proc.pid, signal.SIGKILL)
    proc.fp4moe_swept = getattr(proc, "fp4moe_swept", 0) + sweep(proc.fp4moe_tag, proc.fp4moe_pipes)
    with _LIVE_LOCK:
        _LIVE.discard(proc)


def children_alive() -> bool:
    """Whether any child of this gate is alive."""
    with _LIVE_LOCK:
        return bool(_LIVE)


def kill_all_children() -> None:
    """Kill every live child (the signal handlers, ``fp4moe.commands.main`` and ``atexit`` call it)."""
    with _LIVE_LOCK:
        live = list(_LIVE)
    for p in live:
        end(p, grace_s=1.0)


def pipe_id(fd: int) -> str:
    with suppress(OSError):
        return os.readlink(f"/proc/self/fd/{fd}")
    return ""


def start(cmd: list[str], env: dict | None, cwd, fds: dict, *, stdin_pipe: bool = False, pass_fds=()):
    """``cmd`` in a session of its own, marked, tracked, its output captured: (Popen, capture); ``fds``:
    stream name -> (read end, write end) of its pipes (``out``: stdout and stderr both). Once the gate
    is interrupted no child starts, from any thread: ``KeyboardInterrupt`` (a worker thread's retry)."""
    if _INTERRUPTED:
        for fd in (fd for pair in fds.values() for fd in pair):
            _close(fd)
        raise KeyboardInterrupt(f"signal {_INTERRUPTED[0]}")
    _become_subreaper()
    env = dict(os.environ if env is None else env)
    env[TAG_ENV] = tag = secrets.token_hex(16)
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # never a __pycache__ in the tree under test
    env.pop("PYTHONOPTIMIZE", None)  # the code under test (and a test child's asserts) as written
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(PACKAGE_PARENT) not in paths:  # a child that imports fp4moe imports this one
        env["PYTHONPATH"] = os.pathsep.join([str(PACKAGE_PARENT), *paths])
    writers = {w for _, w in fds.values()}
    try:
        out = fds.get("stdout", fds.get("out"))[1]
        err = fds.get("stderr", fds.get("out"))[1]
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=err, start_new_session=True,
                                stdin=subprocess.PIPE if stdin_pipe else subprocess.DEVNULL, text=stdin_pipe or None,
                                pass_fds=pass_fds)
    except BaseException:
        for r, _ in fds.values():
            _close(r)
        raise
    finally:
        for w in writers:
            _close(w)
    proc.fp4moe_tag, proc.fp4moe_pipes = tag, {pipe_id(r) for r, _ in fds.values()} - {""}
    with _LIVE_LOCK:  # the handler appends to _INTERRUPTED before it takes the lock: seen here, or it sees proc
        _LIVE.add(proc)
        late = bool(_INTERRUPTED)
    cap = _Capture({k: r for k, (r, _) in fds.items()})
    if late:  # a thread starting a child (a retry, the next group) after the gate was interrupted
        end(proc, grace_s=0)
        cap.finish(0)
        raise KeyboardInterrupt(f"signal {_INTERRUPTED[0]}")
    return proc, cap


def run_child(cmd: list[str], *, timeout_s: float, env: dict | None = None, cwd: str | Path | None = None,
              want_record: bool = True) -> ChildResult:
    """Run ``cmd`` in its own process group, killed after ``timeout_s``; read its JSON record.
    When this returns (or raises, an interrupt included), every process the child started is gone."""
    check_timeout("timeout", timeout_s, allow_none=False)
    env = dict(os.environ if env is None else env)
    env.pop(RESULT_ENV, None)
    with tempfile.TemporaryDirectory(prefix="fp4moe-child-") as tmp:
        record_path = Path(tmp) / "record.json"
        if want_record:
            env[RESULT_ENV] = str(record_path)
        t0 = time.perf_counter()
        proc, cap = start(list(cmd), env, cwd, {"stdout": os.pipe(), "stderr": os.pipe()})
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        except BaseException:
            end(proc, grace_s=1.0)
            cap.finish(0.1)
            raise
        end(proc, grace_s=KILL_GRACE_S if timed_out else 0)
        texts = cap.finish()
        res = ChildResult(list(cmd), None if timed_out else proc.returncode, texts["stdout"], texts["stderr"],
                          time.perf_counter() - t0, timed_out, swept=proc.fp4moe_swept)
        if want_record and not timed_out and os.path.lexists(record_path):
            res.record, res.record_error = _read_record(record_path)
        return res


def run_python(args: list[str], **kw) -> ChildResult:
    return run_child([sys.executable, *args], **kw)


def _read_record(path: Path) -> tuple[dict | None, str | None]:
    try:
        record = json.loads(read_regular_bytes(path, limit=MAX_RECORD_BYTES).decode("utf-8"))
    except (OSError, ValueError) as e:
        return None, f"unreadable result record: {exception_line(e, 300)}"
    if not isinstance(record, dict):
        return None, f"result record is a JSON {type(record).__name__}, not an object"
    return record, None


def record_writer():
    """Child side: ``write(record)`` writes this run's record to ``$FP4MOE_CHILD_RESULT`` atomically."""
    path = os.environ.get(RESULT_ENV)
    if not path:
        raise RuntimeError(f"${RESULT_ENV} is not set: not running under fp4moe.infra.runner")
    return lambda record: atomic_write_text(path, json.dumps(record), replace=True)


_INTERRUPTED: list[int] = []
_ATEXIT = False


def interrupted() -> bool:
    """Whether a handled signal arrived since :func:`install_signal_cleanup` (a library that
    swallowed the KeyboardInterrupt cannot turn the run into a verdict)."""
    return bool(_INTERRUPTED)


def _on_signal(signum, frame):
    _INTERRUPTED.append(signum)
    kill_all_children()
    raise KeyboardInterrupt(f"signal {signum}")


def install_signal_cleanup() -> None:
    """Main thread only: SIGINT, SIGTERM and SIGHUP kill every live child, then raise
    ``KeyboardInterrupt`` (the command's one line says "interrupted"); a SIGINT or SIGHUP the gate
    inherited *ignored* (a script's background job, ``nohup``) stays ignored, by POSIX convention.
    At exit, any child still alive is killed."""
    global _ATEXIT
    if not _ATEXIT:
        _ATEXIT = bool(atexit.register(kill_all_children))
    _INTERRUPTED.clear()
    _SPENT.clear()  # a deadline of an earlier run in this process (the test suite's) is not this one's
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            if sig == signal.SIGTERM or signal.getsignal(sig) is not signal.SIG_IGN:
                signal.signal(sig, _on_signal)


class DeadlineSpent(BaseException):
    """The run's one deadline passed while the gate itself worked (``fp4moe.infra.deadline``): one
    line naming the option. A BaseException: no ``except Exception`` of a library swallows it."""


_SPENT: list[str] = []


def deadline_spent() -> str | None:
    """The line of a watched deadline that fired in this run (a library that swallowed it cannot
    turn the run into a verdict), else None."""
    return _SPENT[-1] if _SPENT else None


def note_spent(line: str | None) -> None:
    """Remember that the run's deadline fired (:func:`deadline_spent`); None: a new run, forget it."""
    if line is None:
        _SPENT.clear()
    else:
        _SPENT.append(line)


@dataclass(frozen=True)
class RecordSchema:
    """A child's record: ``{"schema": name, "schema_version": version, **fields}``; ``fields`` maps
    each key to its type (or tuple of types); keys in ``optional`` may be absent."""

    name: str
    version: int
    fields: dict
    optional: frozenset = frozenset()

    def validate(self, record: dict, label: str) -> dict:
        if record.get("schema") != self.name or record.get("schema_version") != self.version:
            raise GateCannotRun(one_line(f"{label}: the child's record is schema {record.get('schema')!r} version "
                                         f"{record.get('schema_version')!r}, the judge reads {self.name!r} version {self.version}"))
        body = {k: v for k, v in record.items() if k not in ("schema", "schema_version", "outputs")}
        unknown, missing = sorted(set(body) - set(self.fields)), sorted(set(self.fields) - set(body) - set(self.optional))
        if unknown or missing:
            raise GateCannotRun(one_line(f"{label}: record {self.name} v{self.version}: "
                                         + (f"unknown key(s) {unknown} " if unknown else "")
                                         + (f"missing key(s) {missing}" if missing else "")))
        for k, v in body.items():
            types = self.fields[k] if isinstance(self.fields[k], tuple) else (self.fields[k],)
            if not isinstance(v, types) or (isinstance(v, bool) and bool not in types):
                raise GateCannotRun(f"{label}: record {self.name}: {k!r} is {type(v).__name__}, "
                                    f"not {'/'.join(t.__name__ for t in types)}")
        return body


@dataclass
class ChildOutputs:
    """A judged child's record body and output files (bytes)."""

    record: dict
    result: ChildResult
    files: dict = field(default_factory=dict)

    def names(self) -> list[str]:
        return sorted(self.files)

    def _get(self, name: str):
        if name not in self.files:
            raise GateCannotRun(f"the child returned no output {name!r} (it returned {sorted(self.files)})")
        return self.files[name]

    def json(self, name: str):
        try:
            return json.loads(self._get(name))
        except ValueError as e:
            raise GateCannotRun(one_line(f"the child's output {name!r} is not JSON: {e}")) from e

    def tensors(self, name: str):
        v = self._get(name)
        try:
            from safetensors.torch import load

            return load(v)
        except Exception as e:  # noqa: BLE001 -- a malformed file is a cannot-run naming it
            raise GateCannotRun(one_line(f"the child's output {name!r} is not a safetensors file: {e}")) from e


def _read_outputs(outdir: Path, listed, label: str) -> dict:
    listed = list(listed) if isinstance(listed, dict) else listed  # {name: ...}: its names
    if not isinstance(listed, list) or not all(isinstance(n, str) and "/" not in n and n not in ("", ".", "..")
                                               for n in listed):
        raise GateCannotRun(one_line(f"{label}: the record's 'outputs' is not a list of file names: {listed!r}"))
    files, total = {}, 0
    for name in listed:
        limit = min(MAX_OUTPUT_BYTES, MAX_TOTAL_OUTPUT_BYTES - total)
        try:
            data = read_regular_bytes(outdir / name, limit=limit)
        except OSError as e:
            raise GateCannotRun(one_line(f"{label}: output {name!r}: {e}")) from e
        files[name], total = data, total + len(data)
    return files


def run_judged(module: str, args: list[str], *, label: str, timeout_s: float, schema: RecordSchema | None = None,
               inputs: dict | None = None, env: dict | None = None, deadline=None,
               timeout_option: str = "--timeout") -> ChildOutputs:
    """Run ``python -m module args`` (or ``python module.py args``) in a scratch folder and return its
    validated outputs. ``label`` opens every cannot-run line; ``timeout_s`` is cut to what ``deadline``
    (an ``fp4moe.infra.deadline.Deadline``) has left; ``inputs``: name -> tensors the child reads (:meth:`ChildSession.input_tensors`).
    Raises :class:`GateCannotRun` (one line) when the child wrote no usable record or ran out of time."""
    if deadline is not None:
        timeout_s = min(timeout_s, deadline.remaining(label))
    root = Path(tempfile.mkdtemp(prefix="fp4moe-judged-"))
    try:
        scratch, outdir, indir = root / "cwd", root / "out", root / "in"
        for d in (scratch, outdir, indir, scratch / ".home"):
            d.mkdir()
        if inputs:
            from safetensors.torch import save_file

            for name, tensors in inputs.items():
                save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, str(indir / f"{name}.safetensors"))
        stage_file = scratch / ".stage"
        caches = {k: str(scratch / ".cache" / k.lower()) for k in CACHE_VARS}  # TMPDIR, HOME, every cache: scratch
        child_env = {**os.environ, "TMPDIR": str(scratch), "HOME": str(scratch / ".home"), **caches, OUTPUT_DIR_ENV: str(outdir),
                     INPUT_DIR_ENV: str(indir), STAGE_ENV: str(stage_file), **(env or {})}
        target = [str(Path(module).resolve())] if module.endswith(".py") else ["-m", module]
        res = run_python([*target, *args], timeout_s=timeout_s, cwd=scratch, env=child_env)
        try:
            stage = read_regular_bytes(stage_file, limit=MAX_STAGE_BYTES).decode("utf-8", "replace").strip()
        except OSError:
            stage = ""
        where = f" while {one_line(stage, 300)}" if stage else ""
        if res.timed_out:
            raise GateCannotRun(one_line((deadline.spent_line(label) if deadline is not None and deadline.spent() else
                                          f"{label}: timed out after {timeout_s:g} s (killed; limit {timeout_option} {timeout_s:g} s)")
                                         + where))
        rec = res.record
        if rec is None:
            raise GateCannotRun(one_line(f"{label}: {res.why_no_record()}{where}"))
        if "cannot_run" in rec:
            raise GateCannotRun(one_line(f"{label}: {rec['cannot_run']}"))
        files = _read_outputs(outdir, rec.get("outputs", []), label)
        body = schema.validate(rec, label) if schema is not None else {k: v for k, v in rec.items() if k != "outputs"}
        return ChildOutputs(body, res, files)
    finally:
        shutil.rmtree(root, ignore_errors=True)


class ChildSession:
    """The child's side of one judged run (see :func:`child_session`)."""

    def __init__(self, schema: RecordSchema | None):
        self.schema, self._write, self.done = schema, record_writer(), False
        self._outdir = Path(os.environ[OUTPUT_DIR_ENV]) if os.environ.get(OUTPUT_DIR_ENV) else None
        self._indir = Path(os.environ[INPUT_DIR_ENV]) if os.environ.get(INPUT_DIR_ENV) else None
        self._stage_file = os.environ.get(STAGE_ENV)
        self._outputs: list[str] = []
        self._stage = "starting (before any code under test ran)"
        #: why the child's writes are not confined (records that still carry the field): no sandbox
        self.unconfined = "not confined: the gate runs no sandbox (docs/architecture.md, threat model)"

    @property
    def current_stage(self) -> str:
        """The last stage noted, here or by a hook writing ``$FP4MOE_CHILD_STAGE`` directly."""
        try:
            return one_line(Path(self._stage_file).read_text(errors="replace")[:MAX_STAGE_BYTES], 300) or self._stage
        except (OSError, TypeError):
            return self._stage

    def stage(self, text: str) -> None:
        """Where the child is now: named if the code under test ends, raises or hangs here."""
        self._stage = one_line(text, 300)
        if self._stage_file:
            with suppress(OSError):
                Path(self._stage_file).write_text(self._stage)

    def input_tensors(self, name: str) -> dict:
        from safetensors.torch import load_file

        if self._indir is None or not (self._indir / f"{name}.safetensors").is_file():
            raise RuntimeError(f"no input {name!r} from the parent")
        return load_file(str(self._indir / f"{name}.safetensors"))

    def _path(self, name: str) -> Path:
        if "/" in name or name in ("", ".", "..") or name in self._outputs:
            raise ValueError(f"output name {name!r}: a new plain file name")
        if self._outdir is None:
            raise RuntimeError("not running under fp4moe.infra.runner.run_judged (no output folder)")
        self._outputs.append(name)
        return self._outdir / name

    def put_tensors(self, name: str, tensors: dict) -> None:
        from safetensors.torch import save_file

        save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, str(self._path(name)))

    def put_json(self, name: str, obj) -> None:
        self._path(name).write_text(json.dumps(obj))

    def finish(self, record: dict) -> None:
        head = {"schema": self.schema.name, "schema_version": self.schema.version} if self.schema else {}
        self._write({**record, **head, "outputs": self._outputs})
        self.done = True

    def cannot_run(self, why: str) -> None:
        self._write({"cannot_run": one_line(why)})
        self.done = True


@contextmanager
def child_session(schema: RecordSchema | None = None, *, trees=(), speaker: str = "it"):
    """Child side: ``with child_session(SCHEMA) as s: ...; s.finish(record)``. A body that raises,
    calls ``sys.exit`` or returns without ``finish`` writes a cannot-run record naming the stage."""
    s = ChildSession(schema)
    if trees:  # an os._exit in the code under test leaves no traceback: the record names its file
        culprit.note_exits(list(trees), s.cannot_run)
    try:
        yield s
        if not s.done:
            s.cannot_run(f"the child ended without a result while {s.current_stage}")
    except BaseException as e:  # noqa: BLE001 -- SystemExit and KeyboardInterrupt of the code under test included
        if not s.done:  # the innermost frame in ``trees`` named, its own text quoted and labelled
            s.cannot_run(one_line(str(e)) if isinstance(e, GateCannotRun) else
                         culprit.describe(e, list(trees), stage=s.current_stage, speaker=speaker))
    finally:
        sys.stdout.flush()
