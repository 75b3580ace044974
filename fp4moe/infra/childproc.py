"""Run code under test in a child process with a time limit, and write results atomically.

Every gate that executes someone else's code (a mutant under pytest, aiter's ``shuffle.py``,
an installed SGLang, an lm-eval run, a pull request's perf worker) does it here. That code is
untrusted (a stranger's pull request), so it can neither end the gate (``sys.exit(0)`` in an
import), nor hang it, nor flood it, nor outlive it, nor write the verdict:

- the child runs in its own process group (``start_new_session``) with bytecode writing off
  (``PYTHONDONTWRITEBYTECODE=1``); on timeout the whole group gets SIGTERM, then SIGKILL after
  ``KILL_GRACE_S``;
- **processes that left the group** (``setsid``, a daemon) are found by a marker: every child
  gets ``$FP4MOE_CHILD_TAG`` (random, per run) in its environment, which its descendants
  inherit; when the child's leader ends (or is killed), every process whose
  ``/proc/PID/environ`` holds the marker, or that holds one of the child's output pipes
  (``/proc/PID/fd``), is SIGKILLed (:func:`sweep`). The gate waits for the leader's exit, not
  for its pipes' EOF, so a daemon holding the pipes cannot make a finished check wait out its
  limit;
- **a PID namespace** where the kernel gives one (``fp4moe/infra/pidns.py``: directly as root,
  in a user namespace otherwise; :func:`containment` says which, probed once), with a mount
  namespace and its own ``/proc`` where proc can be mounted (:class:`Hold`): the child is the
  only tree of a fresh namespace, and when it ends the kernel kills everything left in it -- a
  process that clears its environment and closes the inherited pipes, or keeps re-forking,
  which the sweep alone cannot catch -- and the gate's pid cannot be addressed from inside (a
  ``SIGSTOP`` to the parent reaches the namespace's PID 1, which ignores it). Its own ``/proc``
  lets a gate running inside sweep its own children; a namespace with the host's ``/proc`` is
  not given to such a child (``own_proc``), and :func:`sweep` refuses a ``/proc`` of another
  namespace. Without one, the sweep is all there is. :attr:`ChildResult.contained` (a
  :class:`Containment`: the hold and why not stronger, Landlock ABI, seccomp, signal scoping)
  says how each child was held, and every gate's record lists them (:func:`contained_summary`);
- output is captured **bounded** (:data:`CAPTURE_HEAD` + :data:`CAPTURE_TAIL` bytes per
  stream, the middle dropped and counted), so the gate's memory does not grow with what the
  code under test prints;
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
- the child's verdict travels as one JSON record in a file (``$FP4MOE_CHILD_RESULT``), never
  through its exit status or stdout, and the record is **authenticated**: the parent writes a
  fresh per-run key into a pipe the child inherits (fd in ``$FP4MOE_CHILD_KEY_FD``); the
  child's harness takes it once with :func:`record_writer` *before* any code under test runs
  (the pipe is closed and the variable removed), and the record carries an HMAC-SHA256 of its
  body. A record written by the code under test (it can see the file's path) fails the check
  and is no verdict (exit 2). Scope: code that deliberately digs the key out of the harness's
  own frames in the same interpreter is not stopped by this; the harness holds the key only
  in a closure, never in a module attribute or the environment.
"""

from __future__ import annotations

import atexit
import hashlib
import hmac
import json
import os
import platform
import secrets
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path

from fp4moe.infra.files import atomic_write_text, read_regular_bytes

#: The folder holding this ``fp4moe`` package (put first on every child's ``PYTHONPATH``).
PACKAGE_PARENT = Path(__file__).resolve().parents[2]
#: Seconds between SIGTERM and SIGKILL for a child group that outlived its time limit.
KILL_GRACE_S = 5.0
#: Longest time limit accepted anywhere (a week): beyond it the OS timers overflow, and no
#: gate run on a shared runner should be allowed to hold it longer.
MAX_TIMEOUT_S = 7 * 24 * 3600.0
#: Environment variable naming the file a child writes its JSON record to.
RESULT_ENV = "FP4MOE_CHILD_RESULT"
#: Environment variable naming the inherited pipe fd that carries the record key (read once).
KEY_FD_ENV = "FP4MOE_CHILD_KEY_FD"
#: Environment marker every descendant of a child inherits (found again in /proc/PID/environ).
TAG_ENV = "FP4MOE_CHILD_TAG"
#: Bytes kept of each output stream: the first CAPTURE_HEAD and the last CAPTURE_TAIL.
CAPTURE_HEAD = 64 * 1024
CAPTURE_TAIL = 256 * 1024
#: Seconds the output pipes are still read after the child's processes are gone.
DRAIN_S = 1.0
#: Longest worker reply line accepted (a reply is a small JSON object).
MAX_REPLY_BYTES = 1 << 20
#: Largest result record read (a record holds check rows, not tensors): a bigger one, or a FIFO
#: or device left at the record's path, is refused without reading it (never blocks, never
#: loads a gigabyte).
MAX_RECORD_BYTES = 16 << 20

def check_timeout(option: str, value: float | None, *, allow_none: bool = True) -> None:
    """ValueError naming ``option`` unless ``value`` is a usable time limit (> 0 s, finite, at
    most :data:`MAX_TIMEOUT_S`); ``inf``, ``nan``, 0 and negatives are refused."""
    if value is None and allow_none:
        return
    if value is None or not 0 < value <= MAX_TIMEOUT_S:  # False for nan too
        raise ValueError(f"{option} {value}: must be > 0 and <= {MAX_TIMEOUT_S:.0f} seconds")


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
    swept: int = 0  # processes that left the child's group and were killed after it
    contained: Containment | None = None  # how it was held: namespaces or the sweep only (why), Landlock, seccomp
    #: a run killed for time: the authenticated record it had written by then (never a verdict;
    #: a harness that writes progress records tells where the child was)
    partial: dict | None = None
    #: forked from this process's zygote (``fp4moe/infra/zygote.py``), not a fresh interpreter
    warm: bool = False

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


# --------------------------------------------------------------------------- bounded capture


class _Bounded:
    """Head + tail of a byte stream; the middle is counted, not kept."""

    def __init__(self, head: int, tail: int):
        self.head, self.tail_max = head, tail
        self.first = bytearray()
        self.last = bytearray()
        self.dropped = 0

    def add(self, data: bytes) -> None:
        room = self.head - len(self.first)
        if room > 0:
            self.first += data[:room]
            data = data[room:]
        if data:
            self.last += data
            extra = len(self.last) - self.tail_max
            if extra > 0:
                del self.last[:extra]
                self.dropped += extra

    def text(self) -> str:
        mid = f"\n[... {self.dropped} bytes of output dropped ...]\n".encode() if self.dropped else b""
        return bytes(self.first + mid + self.last).decode("utf-8", errors="replace")


class _Capture:
    """One thread reading any number of pipe fds into bounded buffers until EOF or stop()."""

    def __init__(self, fds: dict[str, int]):
        self.bufs = {k: _Bounded(CAPTURE_HEAD, CAPTURE_TAIL) for k in fds}
        self._fds = dict(fds)
        self._stop = threading.Event()
        for fd in fds.values():
            os.set_blocking(fd, False)
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        for k, fd in self._fds.items():
            sel.register(fd, selectors.EVENT_READ, k)
        open_ = len(self._fds)
        while open_ and not self._stop.is_set():
            for key, _ in sel.select(timeout=0.05):
                try:
                    data = os.read(key.fd, 65536)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if data:
                    self.bufs[key.data].add(data)
                else:
                    sel.unregister(key.fd)
                    open_ -= 1
        sel.close()

    def finish(self, grace_s: float = DRAIN_S) -> dict[str, str]:
        """Read until EOF or ``grace_s``, then close the fds; the captured text per stream."""
        self._t.join(grace_s)
        self._stop.set()
        self._t.join()
        for fd in self._fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        return {k: b.text() for k, b in self.bufs.items()}

    def peek(self, name: str) -> str:
        return self.bufs[name].text()


def _pipe_inode(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}") if os.path.exists(f"/proc/self/fd/{fd}") else ""


# --------------------------------------------------------------------------- the sweep


def _marked(pid: str, marker: bytes, pipes: set[str]) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            if marker in f.read().split(b"\0"):
                return True
    except OSError:
        pass
    if pipes:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    if os.readlink(f"/proc/{pid}/fd/{fd}") in pipes:
                        return True
                except OSError:
                    continue
        except OSError:
            pass
    return False


def proc_is_ours() -> bool:
    """Whether /proc lists this process's PID namespace (``/proc/self`` is this pid): not so in a
    namespace that kept the host's /proc, whose numbers ``kill`` here would take for others."""
    try:
        return os.readlink("/proc/self") == str(os.getpid())
    except OSError:
        return False


def sweep(tag: str, pipes: set[str] = frozenset()) -> int:
    """SIGKILL every process (but this one) carrying ``$FP4MOE_CHILD_TAG=tag`` in its
    environment or holding one of ``pipes`` ("pipe:[inode]"); repeated until none is left (a
    process may fork while it is being killed). Returns how many were killed."""
    if not os.path.isdir("/proc") or not proc_is_ours():
        return 0  # another PID namespace's numbers: a kill by them would hit other processes
    marker = f"{TAG_ENV}={tag}".encode()
    me = str(os.getpid())
    killed: set[int] = set()
    for _ in range(50):
        found = [int(p) for p in os.listdir("/proc") if p.isdigit() and p != me and int(p) not in killed
                 and _marked(p, marker, pipes)]
        if not found:
            break
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.01)
    return len(killed)


def _kill_group(proc: subprocess.Popen, grace_s: float | None = None) -> None:
    """SIGTERM the child's group, SIGKILL it after ``grace_s`` (default :data:`KILL_GRACE_S`);
    then SIGKILL whatever of the group outlived its leader (a grandchild ignoring SIGTERM)."""
    grace_s = KILL_GRACE_S if grace_s is None else grace_s
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
    try:  # the leader is reaped, so its pid (= the group id) cannot be reused while members live
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    tag = getattr(proc, "_fp4moe_tag", None)
    if tag:
        proc._fp4moe_swept = getattr(proc, "_fp4moe_swept", 0) + sweep(tag, getattr(proc, "_fp4moe_pipes", set()))


def kill_all_children() -> None:
    """Kill every live child group (the signal handlers, ``fp4moe.commands.main`` and ``atexit`` call this)."""
    with _LIVE_LOCK:
        live = list(_LIVE)
    for p in live:
        _kill_group(p, grace_s=1.0)


def _child_env(env: dict | None) -> tuple[dict, str]:
    env = dict(os.environ if env is None else env)
    tag = secrets.token_hex(16)
    env[TAG_ENV] = tag
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # never a __pycache__ in the tree under test
    # a child that imports fp4moe imports THIS one (the checkout's or the installed package's),
    # whether or not it is installed and whatever the child's working folder
    here = str(PACKAGE_PARENT)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if here not in paths:
        env["PYTHONPATH"] = os.pathsep.join([here, *paths])
    for k in (RESULT_ENV, KEY_FD_ENV):
        env.pop(k, None)
    return env, tag


#: the PID-namespace starter, executed by path (never imported; see its docstring)
PIDNS_INIT = Path(__file__).with_name("pidns.py")
#: the launcher that confines a worker's process before its command starts (run by path)
CONFINED_EXEC = Path(__file__).with_name("confined_exec.py")
#: the CPUs ``confined_exec.py`` pins its command to (a comma list; its own constant of that name)
CPUS_ENV = "FP4MOE_CPUS"

#: seconds the one-time namespace probe may take
PIDNS_PROBE_TIMEOUT_S = 20.0
_CONTAINMENT: tuple[str | None, str] | None = None


#: ``FP4MOE_PID_NAMESPACE=0``: no PID namespace (the sweep only), e.g. where a driver misbehaves in one
PIDNS_ENV = "FP4MOE_PID_NAMESPACE"


class Hold(str, Enum):
    """How a child's processes are held, strongest first (the ways of ``pidns.py``, then none)."""

    PID_PROC = "pid+proc"  # PID and mount namespace, its own /proc (as root)
    USER_PID_PROC = "user+pid+proc"  # the same inside a user namespace (not root)
    PID = "pid"  # PID namespace; /proc is the host's (mounting proc was refused)
    USER_PID = "user+pid"
    SWEEP = "sweep"  # process group, marker and pipe sweep only

    @property
    def own_proc(self) -> bool:
        return self in (Hold.PID_PROC, Hold.USER_PID_PROC)


HOLD_TEXT = {Hold.PID_PROC: "PID namespace with its own /proc", Hold.USER_PID_PROC:
             "user+PID namespace with its own /proc", Hold.PID: "PID namespace (the host's /proc)",
             Hold.USER_PID: "user+PID namespace (the host's /proc)", Hold.SWEEP: "process group and sweep only"}


@dataclass(frozen=True)
class Containment:
    """How one child was held: its processes (:class:`Hold`, and why not stronger), its writes
    (Landlock, ``fp4moe.infra.confine``), metadata syscalls (seccomp) and signals. What the
    parent arranged and the kernel offers; a harness child's own report of a confinement that
    failed replaces ``confine_why`` (``harness.run_judged``)."""

    processes: Hold
    why: str = ""  # why not a namespace with its own /proc ("" when it is one)
    landlock_abi: int = 0  # the kernel's Landlock ABI the child's writes were confined with; 0: not confined
    seccomp: str = "not asked"  # "metadata filter (x86_64)", "not available on <arch>", "not asked"
    signals_scoped: bool = False  # signals out of the child's Landlock domain refused (ABI >= 6)
    confine_why: str = "not asked"  # why writes are not confined ("" when they are)

    def as_dict(self) -> dict:
        return {"processes": self.processes.value, "why": self.why, "landlock_abi": self.landlock_abi,
                "seccomp": self.seccomp, "signals_scoped": self.signals_scoped, "confine_why": self.confine_why}

    def line(self) -> str:
        writes = f"writes: Landlock ABI {self.landlock_abi}" if self.landlock_abi else \
            f"writes: not confined ({self.confine_why})"
        return (f"{HOLD_TEXT[self.processes]}" + (f" ({self.why})" if self.why else "")
                + f"; {writes}; seccomp: {self.seccomp}; signals {'scoped' if self.signals_scoped else 'not scoped'}")


#: the type of each field of :meth:`Containment.as_dict` (the ``contained`` entries of every record)
CONTAINMENT_FIELDS = {"processes": str, "why": str, "landlock_abi": int, "seccomp": str, "signals_scoped": bool,
                      "confine_why": str, "children": int}


def containment() -> tuple[str | None, str]:
    """(the :class:`Hold` value, a description) where children get a PID namespace here; (None,
    the reason) where not. Probed once per process (one ~30 ms child)."""
    global _CONTAINMENT
    if os.environ.get(PIDNS_ENV) == "0":
        return None, f"process group and sweep only ({PIDNS_ENV}=0)"
    if _CONTAINMENT is None:
        try:
            r = subprocess.run([sys.executable, "-I", "-S", str(PIDNS_INIT), "--probe"], capture_output=True,
                               text=True, timeout=PIDNS_PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL, check=False)
            out = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else f"exit {r.returncode}"
            how, _, rest = out.partition(" ")
            ok = r.returncode == 0 and how in {h.value for h in Hold} - {Hold.SWEEP.value}
        except (OSError, subprocess.SubprocessError) as e:
            ok, how, out = False, "", f"{type(e).__name__}: {e}"
        _CONTAINMENT = (how, f"{HOLD_TEXT[Hold(how)]}" + (f" {rest.strip()[:200]}" if rest.strip() else "")) if ok else \
            (None, f"process group and sweep only (no PID namespace here: {' '.join(out.split())[:200]})")
    return _CONTAINMENT


def containment_of(how: str | None, why: str, env: dict) -> Containment:
    """The :class:`Containment` of a child started with ``how`` (a :class:`Hold` value, None: the
    sweep) and ``env`` (confined when it names :data:`confine.WRITABLE_ENV`)."""
    from fp4moe.infra import confine

    hold = Hold(how) if how else Hold.SWEEP
    why = "" if hold.own_proc else why
    if not env.get(confine.WRITABLE_ENV):
        return Containment(hold, why)
    abi = confine.landlock_abi()
    machine = platform.machine()
    seccomp = f"metadata filter ({machine})" if confine.metadata_filter(machine) is not None else \
        f"not available on {machine}"
    return Containment(hold, why, landlock_abi=abi, seccomp=seccomp, signals_scoped=abi >= confine.SCOPE_ABI,
                       confine_why="" if abi >= 1 else "the kernel has no Landlock")


# --------------------------------------------------------------------------- warm starts

#: ``FP4MOE_WARM_START=0``: every child a fresh interpreter (no zygote)
WARM_ENV = "FP4MOE_WARM_START"
#: the zygote, executed by path (never imported; see its docstring)
ZYGOTE = Path(__file__).with_name("zygote.py")
#: what the zygote imports once for all the children it forks
WARM_PRELOAD = ("torch",)
#: seconds the zygote may take to import :data:`WARM_PRELOAD` (past them: cold starts, said once)
ZYGOTE_START_TIMEOUT_S = 180.0
#: seconds a request to a started zygote may take to be answered (a fork)
ZYGOTE_REPLY_TIMEOUT_S = 60.0
#: environment read when the interpreter or a preload starts (thread pools, allocator, library
#: paths, locale, Python's own): a child whose values differ from the zygote's starts cold
IMPORT_TIME_ENV = ("PYTHON", "OMP_", "MKL_", "OPENBLAS_", "KMP_", "GOMP_", "TORCH_", "PYTORCH_", "CUDA_", "HIP_",
                   "ROCM", "ROCR_", "HSA_", "NUMPY_", "LD_", "MALLOC_", "LC_", "LANG")
#: of those, the ones a warm child sets for itself (sys.path, bytecode writing), and one that only
#: lets a second OpenMP runtime load (threadpoolctl sets it in the caller at its import): it acts
#: when a library loads, and what the zygote loaded loaded without it
WARM_SETS = ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "KMP_DUPLICATE_LIB_OK")
_STATUS = struct.Struct("=i")
#: bytes of room for a child's command line (and, beyond the zygote's own, its environment)
ZYGOTE_ROOM = 16384
#: the blank variable that holds that room in the zygote's environment (``zygote.py``'s ROOM_ENV)
ZYGOTE_ROOM_ENV = "_FP4MOE_ZYGOTE_ROOM"


def _import_env(env: dict) -> dict:
    return {k: v for k, v in env.items() if k.startswith(IMPORT_TIME_ENV) and k not in WARM_SETS}


def warm_eligible(cmd: list[str]) -> bool:
    """Whether ``cmd`` is ``python [-W X]... (-m MOD | -c CODE | SCRIPT) ARGS`` of this interpreter:
    what the zygote can start in place."""
    if not cmd or cmd[0] != sys.executable:
        return False
    args = list(cmd[1:])
    while args[:1] == ["-W"] and len(args) >= 2:
        args = args[2:]
    if not args:
        return False
    return (args[0] in ("-m", "-c") and len(args) >= 2) or not args[0].startswith("-")


class ZygoteUnavailable(OSError):
    """The zygote started nothing (gone before the request, or refused it): start the child cold.
    Any other failure after a request was sent is an error: it may have forked the child."""


class WarmProc:
    """The ``subprocess.Popen`` face of a child the zygote forked: ``pid`` (its session and group),
    ``poll``, ``wait`` and ``returncode`` from the wait status the zygote writes to its status
    pipe, ``stdin`` where a pipe was asked. Any thread may wait (the gate's signal cleanup and
    the run's own wait at once): the status is read once, under a lock."""

    def __init__(self, args: list[str], pid: int, status_r: int, stdin=None):
        self.args, self.pid, self._status_r, self.stdin, self.returncode = args, pid, status_r, stdin, None
        self.warm = True
        self._lock = threading.Lock()

    def _ready(self, timeout: float | None) -> bool:
        with selectors.DefaultSelector() as sel:
            sel.register(self._status_r, selectors.EVENT_READ)
            return bool(sel.select(timeout))

    def _collect(self) -> None:
        with self._lock:
            if self.returncode is not None:
                return
            data = b""
            while len(data) < _STATUS.size:
                chunk = os.read(self._status_r, _STATUS.size - len(data))
                if not chunk:
                    break
                data += chunk
            # no status (the zygote was killed before it could reap): as a child killed outright
            self.returncode = os.waitstatus_to_exitcode(_STATUS.unpack(data)[0]) if len(data) == _STATUS.size \
                else -signal.SIGKILL

    def poll(self):
        if self.returncode is None and self._ready(0):
            self._collect()
        return self.returncode

    def wait(self, timeout: float | None = None):
        end = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None and not self._ready(None if end is None else max(0.0, end - time.monotonic())):
            if end is not None and time.monotonic() >= end:
                raise subprocess.TimeoutExpired(self.args, timeout)
        self._collect()
        return self.returncode

    def __del__(self):
        try:
            os.close(self._status_r)
        except (OSError, AttributeError):
            pass


class Zygote:
    """One per process, started at its first eligible child (:func:`warm_zygote`): ``zygote.py``
    with :data:`WARM_PRELOAD` imported, asked over a socketpair only this process holds."""

    def __init__(self, env: dict):
        self.owner, self.lock, self.import_env = os.getpid(), threading.Lock(), _import_env(env)
        mine, theirs = socket.socketpair()
        zenv = {k: v for k, v in env.items() if k not in (TAG_ENV, RESULT_ENV, KEY_FD_ENV, Worker.FD_ENV, "PYTHONPATH")}
        preload = [a for m in WARM_PRELOAD for a in ("--preload", m)]
        # room for each child's own command line and environment in /proc (``ps``, the marker
        # sweep): empty arguments, a blank variable the zygote drops
        room = [""] * ZYGOTE_ROOM
        zenv[ZYGOTE_ROOM_ENV] = " " * min(ZYGOTE_ROOM + sum(len(k) + len(v) + 2 for k, v in env.items()),
                                          120 * 1024)  # under execve's 128 KiB per string
        self.err = tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen([sys.executable, str(ZYGOTE), "--fd", str(theirs.fileno()), *preload, *room],
                                         env=zenv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.err,
                                         pass_fds=(theirs.fileno(),), start_new_session=True)
        finally:
            theirs.close()
        self.sock = mine
        self.sock.settimeout(ZYGOTE_START_TIMEOUT_S)
        try:
            ready = self.sock.recv(6)
        except OSError:
            ready = b""
        if ready != b"ready\n":
            self.close()
            self.err.seek(0)
            raise OSError(f"the zygote did not start: {' '.join(self.err.read()[-600:].decode(errors='replace').split())}")
        self.sock.settimeout(ZYGOTE_REPLY_TIMEOUT_S)
        self._reply = b""

    def spawn(self, cmd: list[str], how: str, *, env: dict, cwd, stdout: int, stderr: int, pass_fds=(),
              stdin_pipe: bool = False) -> WarmProc:
        """``cmd`` forked from the zygote, held the way ``how`` names; OSError when it cannot be."""
        status_r, status_w = os.pipe()
        if stdin_pipe:
            in_r, in_w = os.pipe()
        else:
            in_r, in_w = os.open(os.devnull, os.O_RDONLY), None
        ignored = [int(s) for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM) if signal.getsignal(s) is signal.SIG_IGN]
        req = {"argv": list(cmd), "env": env, "cwd": None if cwd is None else os.fspath(cwd), "how": how,
               "fds": list(pass_fds), "ignored": ignored}
        try:
            with self.lock:
                try:
                    socket.send_fds(self.sock, [json.dumps(req).encode()], [in_r, stdout, stderr, status_w, *pass_fds])
                except OSError as e:  # nothing was asked of it: the child can start cold
                    raise ZygoteUnavailable(f"the zygote is gone: {e}") from e
                try:
                    line = self._line()
                except OSError as e:
                    line = f"no answer: {e}".encode()
                if not line.endswith(b"\n"):  # it may have forked: never start the child a second time
                    self.close()
                    raise OSError(f"the zygote ended before it answered {cmd[:3]} ({line[:200]!r})")
                reply = json.loads(line)
                if not isinstance(reply, dict) or not isinstance(reply.get("pid"), int):
                    raise ZygoteUnavailable(f"the zygote refused {cmd[:3]}: {str(reply)[:300]}")
        except BaseException:
            os.close(status_r)
            if in_w is not None:
                os.close(in_w)
            raise
        finally:
            os.close(status_w)
            os.close(in_r)
        stdin = open(in_w, "w") if in_w is not None else None  # noqa: SIM115 -- the child's stdin, closed by its owner
        return WarmProc(list(cmd), reply["pid"], status_r, stdin)

    def _line(self) -> bytes:
        while b"\n" not in self._reply:
            chunk = self.sock.recv(4096)
            if not chunk:
                break
            self._reply += chunk
        line, nl, self._reply = self._reply.partition(b"\n")
        return line + nl

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


_ZYGOTE: Zygote | None = None
_ZYGOTE_LOCK = threading.Lock()
_ZYGOTE_WHY = ""  # why there is none (a start that failed), once


def warm_zygote(env: dict) -> Zygote | None:
    """This process's zygote (started the first time) where warm starts are on and it started."""
    global _ZYGOTE, _ZYGOTE_WHY
    if os.environ.get(WARM_ENV, "1") == "0" or env.get(WARM_ENV, "1") == "0":
        return None
    with _ZYGOTE_LOCK:
        if _ZYGOTE is not None and _ZYGOTE.owner != os.getpid():
            _ZYGOTE = None  # a forked copy of this process: the socket is the parent's
        if _ZYGOTE is None and not _ZYGOTE_WHY:
            try:
                _ZYGOTE = Zygote(env)
                atexit.register(_ZYGOTE.close)
            except OSError as e:
                _ZYGOTE_WHY = str(e)
        return _ZYGOTE


def stop_zygote() -> None:
    """End this process's zygote now (it ends at exit anyway): a test session's check for
    processes it left behind runs before ``atexit``."""
    global _ZYGOTE
    with _ZYGOTE_LOCK:
        z, _ZYGOTE = _ZYGOTE, None
    if z is not None and z.owner == os.getpid():
        z.close()


def _spawn(argv: list[str], cmd: list[str], how: str | None, *, env: dict, cwd, stdout: int, stderr: int,
           pass_fds=(), stdin_pipe: bool = False):
    """``argv`` as a fresh interpreter (``subprocess.Popen``), or ``cmd`` forked warm from this
    process's zygote where it can be: held in a PID namespace (``how``), a command the zygote
    starts in place (:func:`warm_eligible`), the zygote's import-time environment; no preload
    shadowed on the child's ``$PYTHONPATH``."""
    z = warm_zygote(env) if how and warm_eligible(cmd) else None
    if z is not None and _import_env(env) == z.import_env and not _shadows_preload(env):
        try:
            return z.spawn(cmd, how, env=env, cwd=cwd, stdout=stdout, stderr=stderr, pass_fds=pass_fds,
                           stdin_pipe=stdin_pipe)
        except ZygoteUnavailable:
            pass  # nothing was started: this child starts cold
    return subprocess.Popen(argv, cwd=cwd, env=env, stdout=stdout, stderr=stderr,
                            stdin=subprocess.PIPE if stdin_pipe else subprocess.DEVNULL, text=stdin_pipe or None,
                            start_new_session=True, pass_fds=pass_fds)


def _shadows_preload(env: dict) -> bool:
    for d in env.get("PYTHONPATH", "").split(os.pathsep):
        if d and any(os.path.exists(os.path.join(d, m.split(".")[0])) or
                     os.path.exists(os.path.join(d, m.split(".")[0] + ".py")) for m in WARM_PRELOAD):
            return True
    return False


_LOG_LOCK = threading.Lock()
_CONTAINED_LOG: dict[Containment, int] = {}


def note_contained(c: Containment) -> None:
    """Count one child held as ``c`` (what :func:`contained_summary` reports)."""
    with _LOG_LOCK:
        _CONTAINED_LOG[c] = _CONTAINED_LOG.get(c, 0) + 1


def reset_contained() -> None:
    """Start a gate run's count afresh (``fp4moe.commands.output.begin``)."""
    with _LOG_LOCK:
        _CONTAINED_LOG.clear()


def renote_contained(old: Containment, new: Containment) -> None:
    """A child's own report corrected how it was held: count it as ``new`` instead of ``old``."""
    with _LOG_LOCK:
        if _CONTAINED_LOG.get(old):
            _CONTAINED_LOG[old] -= 1
            if not _CONTAINED_LOG[old]:
                del _CONTAINED_LOG[old]
        _CONTAINED_LOG[new] = _CONTAINED_LOG.get(new, 0) + 1


def take_confine_report(res: ChildResult, said) -> None:
    """A child's own word on its confinement (``confine.confine_from_env``'s reason, "" when
    confined) into ``res.contained``: a failed Landlock turns its ABI to 0 with the reason; a
    missing metadata filter (``seccomp: ...``) leaves Landlock and names the filter's reason.
    Nothing changes for a child that was not asked to confine, or a reason that is no string."""
    from fp4moe.infra.confine import SECCOMP_PREFIX

    old = getattr(res, "contained", None)
    if not isinstance(old, Containment) or not isinstance(said, str) or old.confine_why == "not asked":
        return
    said = " ".join(said.split())[:300]
    if said.startswith(SECCOMP_PREFIX):  # Landlock held; the metadata filter did not
        new = replace(old, seccomp=said[len(SECCOMP_PREFIX):], confine_why="")
    elif said:
        new = replace(old, confine_why=said, landlock_abi=0, signals_scoped=False)
    else:
        new = old
    if new != old:
        res.contained = new
        renote_contained(old, new)


def contained_summary() -> list[dict]:
    """Every distinct containment the children of this run had, with how many children each
    (:data:`CONTAINMENT_FIELDS`): the ``contained`` field of every gate's record. Empty: the run
    started no child."""
    with _LOG_LOCK:
        items = list(_CONTAINED_LOG.items())
    return [{**c.as_dict(), "children": n} for c, n in items]


def _mac(key: bytes, body: str) -> str:
    return hmac.new(key, body.encode(), hashlib.sha256).hexdigest()


def _read_record(path: Path, key: bytes) -> tuple[dict | None, str | None]:
    try:
        outer = json.loads(read_regular_bytes(path, limit=MAX_RECORD_BYTES).decode("utf-8"))
    except (OSError, ValueError) as e:
        return None, f"unreadable result record: {type(e).__name__}: {e}"
    body = outer.get("body") if isinstance(outer, dict) else None
    mac = outer.get("hmac") if isinstance(outer, dict) else None
    if not isinstance(body, str) or not isinstance(mac, str) or not hmac.compare_digest(mac, _mac(key, body)):
        return None, ("the result record is not authenticated by the gate's harness "
                      "(written or altered by the code under test): no verdict")
    try:
        record = json.loads(body)
    except ValueError as e:
        return None, f"unreadable result record: {type(e).__name__}: {e}"
    if not isinstance(record, dict):
        return None, f"result record is a JSON {type(record).__name__}, not an object"
    return record, None


def run_child(
    cmd: list[str],
    *,
    timeout_s: float,
    env: dict | None = None,
    cwd: str | Path | None = None,
    want_record: bool = True,
    tracked: bool = True,
    namespace: bool = True,
    own_proc: bool = False,
) -> ChildResult:
    """Run ``cmd`` in a new process group, killed after ``timeout_s``; read its JSON record.

    The record file and its key are fresh per run (a stale or forged record is never read as
    this run's). Output is captured, bounded; the child's exit status is reported but is not a
    verdict. When this returns, every process the child started is gone (see :func:`sweep`).
    ``tracked=False`` keeps the child out of :func:`kill_all_children` (its time limit and an
    exception in the caller still kill it): for a background child of the test suite, which the
    tests of that cleanup must not end. ``namespace``: start it in a PID namespace where the
    kernel allows (:func:`containment`); ``own_proc``: only one with its own /proc (a child that
    sweeps its own children through /proc, e.g. a gate under test), else the sweep alone;
    ``ChildResult.contained`` says what was used.
    """
    if not 0 < timeout_s <= MAX_TIMEOUT_S:  # False for nan too
        raise ValueError(f"timeout: {timeout_s} must be > 0 and <= {MAX_TIMEOUT_S:.0f} seconds")
    env, tag = _child_env(env)
    how, why = containment() if namespace else (None, "process group and sweep only (asked)")
    if how and own_proc and not Hold(how).own_proc:
        how, why = None, f"process group and sweep only (it sweeps through /proc, and the namespace here has the host's: {why})"
    contained = containment_of(how, why, env)
    note_contained(contained)
    argv = [sys.executable, "-I", "-S", str(PIDNS_INIT), "--how", how, "--", *cmd] if how else list(cmd)
    with tempfile.TemporaryDirectory(prefix="fp4moe-child-") as tmp:
        record_path = Path(tmp) / "record.json"
        key = secrets.token_bytes(32)
        pass_fds: tuple[int, ...] = ()
        key_r = key_w = None
        if want_record:
            env[RESULT_ENV] = str(record_path)
            key_r, key_w = os.pipe()
            os.write(key_w, key.hex().encode() + b"\n")
            os.close(key_w)
            env[KEY_FD_ENV] = str(key_r)
            pass_fds = (key_r,)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        pipes = {_pipe_inode(out_r), _pipe_inode(err_r)} - {""}
        t0 = time.perf_counter()
        try:
            proc = _spawn(argv, list(cmd), how, cwd=cwd, env=env, stdout=out_w, stderr=err_w, pass_fds=pass_fds)
        except BaseException:
            for fd in (out_r, err_r):
                os.close(fd)
            raise
        finally:
            for fd in (out_w, err_w) + ((key_r,) if key_r is not None else ()):
                os.close(fd)
        if tracked:  # first: a signal to the gate from now on kills this child too
            with _LIVE_LOCK:
                _LIVE.add(proc)
        proc._fp4moe_tag, proc._fp4moe_pipes = tag, pipes
        cap = _Capture({"stdout": out_r, "stderr": err_r})
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
        except BaseException:
            _kill_group(proc, grace_s=1.0)
            cap.finish(0.1)
            raise
        finally:
            with _LIVE_LOCK:
                _LIVE.discard(proc)
        if not timed_out:  # the leader ended: whatever of its group or its marked descendants lives dies now
            _kill_group(proc, grace_s=0)
        texts = cap.finish()
        res = ChildResult(cmd=list(cmd), rc=None if timed_out else proc.returncode, stdout=texts["stdout"],
                          stderr=texts["stderr"], seconds=time.perf_counter() - t0, timed_out=timed_out,
                          swept=getattr(proc, "_fp4moe_swept", 0), contained=contained,
                          warm=getattr(proc, "warm", False))
        if want_record and os.path.lexists(record_path):
            if timed_out:
                res.partial = _read_record(record_path, key)[0]
            else:
                res.record, res.record_error = _read_record(record_path, key)
        return res


# --------------------------------------------------------------------------- child side


def record_writer():
    """Child side, called by the harness **once, before any code under test runs**: takes the
    record key from the inherited pipe (closing it, removing ``$FP4MOE_CHILD_KEY_FD``) and
    returns ``write(record: dict)``, which writes this run's authenticated record to
    ``$FP4MOE_CHILD_RESULT`` (atomically). A second call (code under test trying to get a
    writer of its own) raises."""
    fd = os.environ.pop(KEY_FD_ENV, None)
    path = os.environ.get(RESULT_ENV)
    if not fd or not path:
        raise RuntimeError(f"${KEY_FD_ENV} is not set (already taken, or not running under "
                           "fp4moe.infra.childproc.run_child)")
    try:
        with os.fdopen(int(fd), "rb") as f:
            key = bytes.fromhex(f.read(200).decode().strip())
    except (OSError, ValueError) as e:
        raise RuntimeError(f"cannot read the record key from fd {fd}: {e}") from e

    def write(record: dict) -> None:
        body = json.dumps(record)
        atomic_write_text(path, json.dumps({"body": body, "hmac": _mac(key, body)}), replace=True)

    return write


# --------------------------------------------------------------------------- workers


class WorkerError(RuntimeError):
    """A long-lived worker died, timed out or answered nonsense (the message says which)."""


class Worker:
    """A long-lived child (own process group) answering JSON requests one at a time.

    Requests go to its stdin, one JSON object per line; replies come back on a pipe of their
    own (its fd number in ``$FP4MOE_WORKER_FD``), so whatever the code under test prints on
    stdout/stderr (captured bounded, see ``output_tail``) cannot be read as a reply. Each
    request has a deadline that covers the whole reply line (half a line and silence is cut
    at the deadline like no reply at all); a reply longer than :data:`MAX_REPLY_BYTES` is
    refused. Past the deadline, or when the worker dies, the whole group (and every process
    carrying its marker) is killed and ``WorkerError`` names the request. ``close()`` (or the
    context manager) ends it; the gate's SIGINT/SIGTERM cleanup kills it like any child.
    """

    FD_ENV = "FP4MOE_WORKER_FD"

    def __init__(self, cmd: list[str], *, name: str, env: dict | None = None, cwd: str | Path | None = None,
                 namespace: bool = True, own_proc: bool = False):
        from fp4moe.infra import confine

        self.name = name
        env, tag = _child_env(env)
        # held like every child (run_child): a PID namespace where the kernel gives one, started
        # once per worker, so its cost (~0.1 s) is paid at the start, never per reply;
        # ``own_proc``: only a namespace with its own /proc, else the sweep (as run_child)
        how, why = containment() if namespace else (None, "process group and sweep only (asked)")
        if how and own_proc and not Hold(how).own_proc:
            how, why = None, f"process group and sweep only (a namespace with the host's /proc was refused: {why})"
        self.contained = containment_of(how, why, env)
        note_contained(self.contained)
        if env.get(confine.WRITABLE_ENV):  # the worker runs code the gate does not own: confined before it starts
            cmd = [sys.executable, "-I", "-S", str(CONFINED_EXEC), "--", *cmd]
        argv = [sys.executable, "-I", "-S", str(PIDNS_INIT), "--how", how, "--", *cmd] if how else list(cmd)
        read_fd, write_fd = os.pipe()
        env[self.FD_ENV] = str(write_fd)
        out_r, out_w = os.pipe()
        pipes = {_pipe_inode(out_r), _pipe_inode(read_fd)} - {""}
        try:
            self.proc = _spawn(argv, list(cmd), how, cwd=cwd, env=env, stdout=out_w, stderr=out_w,
                               pass_fds=(write_fd,), stdin_pipe=True)
        except OSError as e:
            for fd in (read_fd, out_r):
                os.close(fd)
            raise WorkerError(f"{name}: cannot start {cmd[0]}: {e}") from e
        finally:
            os.close(write_fd)
            os.close(out_w)
        self.proc._fp4moe_tag, self.proc._fp4moe_pipes = tag, pipes
        self._cap = _Capture({"out": out_r})
        self._fd = read_fd
        os.set_blocking(read_fd, False)
        self._buf = bytearray()
        self._closed = False
        with _LIVE_LOCK:
            _LIVE.add(self.proc)

    def output_tail(self, n: int = 1500) -> str:
        return self._cap.peek("out")[-n:]

    def _read_line(self, deadline: float) -> bytes | None:
        """One reply line by ``deadline`` (monotonic); None past it; b"" at EOF."""
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                line = bytes(self._buf[: nl + 1])
                del self._buf[: nl + 1]
                return line
            if len(self._buf) > MAX_REPLY_BYTES:
                raise ValueError(f"a reply line longer than {MAX_REPLY_BYTES} bytes")
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            sel = selectors.DefaultSelector()
            sel.register(self._fd, selectors.EVENT_READ)
            ready = sel.select(timeout=min(left, 1.0))
            sel.close()
            if not ready:
                continue
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                continue
            if not data:
                return bytes(self._buf)  # EOF: a partial line (or b"")
            self._buf += data

    def request(self, obj: dict, *, timeout_s: float) -> dict:
        """Send one request, wait up to ``timeout_s`` for its whole reply line (a dict). A
        reply with ``"error"`` raises ``WorkerError`` with the worker's message."""
        if not 0 < timeout_s <= MAX_TIMEOUT_S:
            raise ValueError(f"timeout: {timeout_s} must be > 0 and <= {MAX_TIMEOUT_S:.0f} seconds")
        op = obj.get("op")
        try:
            self.proc.stdin.write(json.dumps(obj) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self._fail(f"died before request {op!r}")
        try:
            line = self._read_line(time.monotonic() + timeout_s)
        except ValueError as e:
            self._fail(f"answered {op!r} with {e}")
        if line is None:
            part = f" (a partial reply {bytes(self._buf[:80])!r} and then nothing)" if self._buf else ""
            self._fail(f"request {op!r} took more than {timeout_s:g} s{part} (killed)")
        if not line.endswith(b"\n"):
            self._fail(f"died during request {op!r} (exit {self.proc.poll()})"
                       + (f" after a partial reply {line[:80]!r}" if line else ""))
        try:
            reply = json.loads(line)
        except ValueError:
            self._fail(f"answered {line[:200]!r} to {op!r}, not JSON")
        if not isinstance(reply, dict):
            self._fail(f"answered {reply!r} to {op!r}, not an object")
        if "error" in reply:
            self.close(kill=True)
            raise WorkerError(f"{self.name}: {str(reply['error'])[:500]}")
        return reply

    def _fail(self, what: str):
        self.close(kill=True)
        tail = " | ".join(ln for ln in self.output_tail(600).strip().splitlines()[-4:])
        raise WorkerError(f"{self.name}: {what}" + (f"; last output: {tail}" if tail else ""))

    def close(self, kill: bool = False) -> None:
        """End the worker: EOF on its stdin (a clean exit) unless ``kill``; either way its group
        and every process carrying its marker is killed if still there."""
        if self._closed:
            return
        if self.proc.poll() is None and not kill:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        _kill_group(self.proc, grace_s=2.0 if self.proc.poll() is None else 0)
        with _LIVE_LOCK:
            _LIVE.discard(self.proc)
        self._closed = True
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        self._cap.finish(0.2)
        try:
            os.close(self._fd)
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
