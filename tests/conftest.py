"""Shared fixtures for the CPU tier (hardware markers and tier reporting live in ../conftest.py).

The fault-table helpers (every gate's reliability tests, beside each gate): run ``fp4moe-gate``
on a fault and check the contract -- the exit code, one line on stderr naming the culprit,
and no input file changed (sha256 before and after).
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from fp4moe.commands import main as cli
from fp4moe.infra import childproc
from fp4moe.infra.paths import REPO_ROOT
from fp4moe.infra.progress import PROGRESS_RE
from fp4moe.model.checkpoint import write_dsv4_checkpoint


@dataclass(frozen=True)
class DSV4Checkpoint:
    """A small but real DeepSeek-V4-format FP4 expert checkpoint written to a temp dir."""

    path: Path
    originals: dict[str, torch.Tensor]  # float32 weights by key, as write_dsv4_checkpoint returned them
    hidden: int
    intermediate: int
    experts: int
    layers: tuple[int, ...]
    files: int


@pytest.fixture(scope="session")
def dsv4_checkpoint(tmp_path_factory) -> DSV4Checkpoint:
    """3 experts x 2 layers, hidden 128, intermediate 256, split over 2 safetensors files.

    Session-scoped: written once (~0.1 s); tests must treat it as read-only.
    """
    spec = dict(hidden=128, intermediate=256, experts=3, layers=(0, 1), files=2)
    path = tmp_path_factory.mktemp("dsv4_ckpt")
    originals = write_dsv4_checkpoint(path, seed=1234, **spec)
    return DSV4Checkpoint(path=path, originals=originals, **spec)


@pytest.fixture(scope="session")
def aiter_api_runs():
    """aiter-check's groups (a)-(d) child (``aiter_check.run_in_child``), one per tree and options
    for the session (``tests/shared_runs.py``): the gate tests that run the command on the
    e4048607 tree more than once monkeypatch it in; their tests carry its xdist group."""
    from shared_runs import SharedRuns, api_key

    from fp4moe.gates import aiter_check

    return SharedRuns(aiter_check.run_in_child, api_key)


@pytest.fixture(scope="session")
def pyproject() -> dict:
    """pyproject.toml, parsed: ``tomllib`` (Python >= 3.11), else ``tomli`` where installed."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli", reason="Python 3.10 has no tomllib, and tomli is not installed")
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())


@pytest.fixture
def loopback_only(monkeypatch):
    """Refuse any socket connection that is not to loopback (tests against local servers)."""
    import socket

    import loopback_guard  # tests/loopback_guard.py (tests/ is on sys.path: this conftest's folder)

    monkeypatch.setattr(socket.socket, "connect", loopback_guard.guard(socket.socket.connect))

def digest(paths) -> dict[str, str]:
    """sha256 of every file under ``paths`` (files or folders); missing paths map to ''."""
    out = {}
    for p in map(Path, paths):
        files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
        for f in files:
            out[str(f)] = hashlib.sha256(f.read_bytes()).hexdigest() if f.exists() else ""
    return out


_PROGRESS = re.compile(r"\d+%\|")


@dataclass
class GateRun:
    rc: int
    out: str
    err: str

    def lines(self) -> list[str]:
        """stderr lines, without progress bars (tqdm, which lm-eval draws, rewrites one line)
        and the gates' own progress lines (``[gate] ...``, fp4moe.infra.progress)."""
        return [ln for ln in self.err.replace("\r", "\n").splitlines()
                if ln.strip() and not _PROGRESS.search(ln) and not PROGRESS_RE.match(ln)]

    def cannot_run(self, *words: str) -> "GateRun":
        """Exit 2, one stderr line, no traceback, every word in it (case-sensitive)."""
        assert self.rc == 2, f"rc {self.rc}, expected 2\nstdout: {self.out[-2000:]}\nstderr: {self.err[-2000:]}"
        assert "Traceback" not in self.err + self.out, self.err
        assert len(self.lines()) == 1, f"expected one line on stderr, got:\n{self.err}"
        for w in words:
            assert w in self.err, f"{w!r} not in {self.err!r}"
        return self


@pytest.fixture
def gate(capsys):
    """``gate(*argv, inputs=[paths])`` runs ``fp4moe-gate`` in-process and checks the inputs
    are unchanged. argparse usage errors (SystemExit 2) come back as rc 2."""

    def run(*argv, inputs=()) -> GateRun:
        before = digest(inputs)
        old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}  # cli installs its cleanup
        try:
            rc = cli.main([str(a) for a in argv])
        except SystemExit as e:
            rc = e.code
        finally:
            for s, h in old.items():
                signal.signal(s, h)
        cap = capsys.readouterr()
        assert digest(inputs) == before, f"fp4moe-gate {' '.join(map(str, argv))} modified its input"
        return GateRun(rc, cap.out, cap.err)

    return run


def run_gate_child(*argv, timeout_s: float = 300, inputs=(), env=None, cwd=None) -> GateRun:
    """``python -m fp4moe.commands.main ARGV`` in a child process (for signals, hangs, real exits);
    ``cwd`` the checkout unless given."""
    before = digest(inputs)
    res = childproc.run_child([sys.executable, "-m", "fp4moe.commands.main", *map(str, argv)], timeout_s=timeout_s,
                              env=env, cwd=cwd or REPO_ROOT, want_record=False)
    assert not res.timed_out, f"fp4moe-gate {argv} ran past {timeout_s} s"
    assert digest(inputs) == before, f"fp4moe-gate {' '.join(map(str, argv))} modified its input"
    return GateRun(res.rc, res.stdout, res.stderr)


@pytest.fixture
def gate_child():
    """``gate_child(*argv, inputs=[paths], timeout_s=, env=)``: :func:`run_gate_child`."""
    return run_gate_child


@pytest.fixture
def file_digest():
    """:func:`digest`, for cases that call a library function rather than the gate."""
    return digest


def _default_signals() -> None:  # runs in the child between fork and exec
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


@pytest.fixture
def default_signals():
    """``preexec_fn`` for a process a test sends signals to: SIGINT, SIGTERM and SIGHUP at
    their defaults whatever this pytest inherited (``nohup bash .ci/run &`` starts it with
    SIGINT and SIGHUP ignored), so the process behaves like a gate in a terminal's foreground."""
    return _default_signals


#: Every process the tests start inherits this variable (the pid of the pytest process that
#: runs them, one per xdist worker); at the session's end any process still carrying it is a
#: leak (found by reading /proc/*/environ: detached and reparented processes included).
OWNER_ENV = "FP4MOE_TEST_OWNER"
os.environ[OWNER_ENV] = str(os.getpid())  # at import: children started during collection carry it too


def _survivors(owner: str) -> list[tuple[int, str]]:
    me, found = os.getpid(), []
    marker = f"{OWNER_ENV}={owner}".encode()
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                if marker not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{d}/stat") as f:
                if f.read().split(") ", 1)[1][0] == "Z":  # exited, waiting to be reaped
                    continue
            with open(f"/proc/{d}/cmdline", "rb") as f:
                found.append((int(d), f.read().replace(b"\0", b" ").decode(errors="replace")[:200]))
        except (OSError, IndexError):
            continue
    return found


@pytest.fixture(scope="session", autouse=True)
def no_process_left_behind():
    """Fail the run if a process started by a test outlives the session (killed, then named)."""
    if not os.path.isdir("/proc"):
        yield
        return
    owner = str(os.getpid())
    os.environ[OWNER_ENV] = owner
    yield
    from fp4moe.infra.childproc import stop_zygote

    stop_zygote()  # this process's warm-start zygote lives for the session, by design
    deadline = time.monotonic() + 3.0  # a group just SIGKILLed may take a moment to vanish
    left = _survivors(owner)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = _survivors(owner)
    for pid, _ in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    if left:
        pytest.fail("processes started by the tests outlived the session (killed now): "
                    + "; ".join(f"{pid} {cmd}" for pid, cmd in left), pytrace=False)


# ---------------------------------------------------------------------------- background children
# A session fixture whose work is one child process (the SGLang drive, the aiter kernel probes)
# names a starter in its module's ``EARLY_CHILDREN = {fixture name: fn(environ) -> result}``.
# When collection ends, the starters of every fixture a selected, not skipped test uses run one
# after another in ONE background thread, in the order the tests will need them: the children run
# on the second core while the CPU tier runs on the first. ``early_child(name, fn)`` in the fixture
# returns the thread's result (re-raising its error on the main thread), waits for a job already
# running, or runs a job not yet started on the spot (nothing started it: -k, a single file).
# The environment is snapshotted on the main thread before the thread starts (tests monkeypatch
# ``os.environ`` meanwhile); a starter passes ``tracked=False`` so the tests of
# ``childproc.kill_all_children`` cannot kill its child; the session's leak check still sees it.
import tempfile  # noqa: E402
import threading  # noqa: E402

_EARLY_LOCK = threading.Lock()
_EARLY_JOBS: dict = {}  # fixture name -> {"fn", "state": pending|running|done, "result"|"error", "event"}


def _skipped_at_collection(item) -> bool:
    if item.get_closest_marker("skip") is not None:
        return True
    return any(m.args and all(isinstance(a, bool) and a for a in m.args) for m in item.iter_markers("skipif"))


def _early_starters(items) -> dict:
    found: dict = {}
    for item in items:
        if _skipped_at_collection(item):
            continue
        info = getattr(item, "_fixtureinfo", None)
        for name in getattr(item, "fixturenames", ()):
            defs = info.name2fixturedefs.get(name) if info is not None else None
            if name in found or not defs:
                continue
            fn = getattr(defs[-1].func, "__globals__", {}).get("EARLY_CHILDREN", {}).get(name)
            if fn is not None:
                found[name] = fn
    return found


def _run_early(name: str, job: dict, environ: dict) -> None:
    try:
        job["result"] = job["fn"](environ)
    except BaseException as e:  # re-raised by early_child, on the main thread
        job["error"] = e
    finally:
        job["state"] = "done"
        job["event"].set()


def _early_thread(order: list, environ: dict) -> None:
    for name in order:
        with _EARLY_LOCK:
            job = _EARLY_JOBS[name]
            if job["state"] != "pending":
                continue  # the main thread took it
            job["state"] = "running"
        _run_early(name, job, environ)


def _uses_early_child(item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        defs = info.name2fixturedefs.get(name) if info is not None else None
        if defs and name in getattr(defs[-1].func, "__globals__", {}).get("EARLY_CHILDREN", {}):
            return True
    return False


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """The tests that read a background child's result run last (in their own order), so the
    children have the whole rest of the session to finish on the second core."""
    if hasattr(config, "workerinput"):  # an xdist worker (a test's child pytest inherits its PYTEST_XDIST_WORKER)
        return
    late = [i for i in items if _uses_early_child(i)]
    if late:
        ids = set(map(id, late))
        items[:] = [i for i in items if id(i) not in ids] + late


def pytest_collection_finish(session):
    if session.config.getoption("collectonly") or hasattr(session.config, "workerinput"):
        return  # under xdist every worker collects every test: each fixture then runs where it is used
    if session.config.getoption("maxfail"):
        return  # -x (the zoo's runs): the session may end at any test; nothing starts that it would not use
    starters = _early_starters(session.items)
    if not starters:
        return
    for name, fn in starters.items():
        _EARLY_JOBS[name] = {"fn": fn, "state": "pending", "event": threading.Event()}
    _pin_early_tempdir()
    threading.Thread(target=_early_thread, args=(list(starters), dict(os.environ)), name=_EARLY_THREAD,
                     daemon=True).start()


_EARLY_THREAD = "early-children"


def _pin_early_tempdir() -> None:
    """The background thread's temporary folders (``tempfile``'s default folder: the children's
    work, record and scratch folders) stay where the session started, whatever a test on the main
    thread points ``tempfile`` at meanwhile: the tests that set ``$TMPDIR`` and reset
    ``tempfile.tempdir`` to see what the code under test leaves there found the background
    SGLang drive's ``fp4moe-sglang-*`` folder in theirs once (CI, a loaded machine)."""
    session_dir, own = tempfile.gettempdir(), tempfile.gettempdir

    def gettempdir():
        return session_dir if threading.current_thread().name == _EARLY_THREAD else own()

    tempfile.gettempdir = gettempdir


def early_child(name: str, fn):
    """The result of ``fn(environ)`` for session fixture ``name``: from the background thread when
    it was started there, else computed now (with this process's environment)."""
    with _EARLY_LOCK:
        job = _EARLY_JOBS.get(name)
        if job is None or job["state"] == "pending":
            job = _EARLY_JOBS[name] = {"fn": fn, "state": "running", "event": threading.Event()}
            mine = True
        else:
            mine = False
    if mine:
        _run_early(name, job, dict(os.environ))
    job["event"].wait()
    if "error" in job:
        raise job["error"]
    return job["result"]


@pytest.fixture(scope="session")
def early():
    """``early(name, fn)``: see ``early_child``."""
    return early_child
