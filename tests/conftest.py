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
from typing import TYPE_CHECKING

import pytest

from fp4moe.commands import main as cli
from fp4moe.infra import runner
from fp4moe.infra.paths import REPO_ROOT
from fp4moe.infra.progress import PROGRESS_RE


def _parser_built_once(build):
    """``fp4moe-gate``'s parser, built once for the listed subcommand modules and their ``register``
    functions: the suite runs the gate in-process a few hundred times, and each build is ~10 ms
    (3 CPU-s of the CPU tier). A test that lists other modules or patches a ``register`` gets its
    own; one that replaces ``build_parser`` itself (monkeypatch) replaces this too."""
    import importlib.util

    built = {}

    def build_parser():
        key = tuple((n, getattr(importlib.import_module(n), "register", None)) for n in cli.SUBCOMMAND_MODULES
                    if importlib.util.find_spec(n) is not None)
        if built.get("key") != key:
            built.update(key=key, parser=build())
        return built["parser"]

    return build_parser


cli.build_parser = _parser_built_once(cli.build_parser)

if TYPE_CHECKING:  # the xdist controller loads this file and runs no test: torch only where one runs
    import torch


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
    from fp4moe.model.checkpoint import write_dsv4_checkpoint  # torch: not in the xdist controller

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
    path = REPO_ROOT / "pyproject.toml"
    if not path.is_file():
        pytest.skip(f"no {path}: an installed package (its checkout's pyproject.toml is not shipped)")
    return tomllib.loads(path.read_text())


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
    res = runner.run_child([sys.executable, "-m", "fp4moe.commands.main", *map(str, argv)], timeout_s=timeout_s,
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


# ---------------------------------------------------------------------------- shared child runs
# A session fixture whose work is one child process (the SGLang drive, the aiter kernel probes)
# names its starter in its module's ``EARLY_CHILDREN = {fixture name: fn(environ) -> result}`` and
# returns ``early(name, fn)``: the starter runs once per session (per xdist worker), where the
# first test needs it; every test that reads that child's run shares it.
_EARLY_RESULTS: dict = {}


def early_child(name: str, fn):
    """The result of ``fn(environ)`` for session fixture ``name``, computed once."""
    if name not in _EARLY_RESULTS:
        try:
            _EARLY_RESULTS[name] = ("result", fn(dict(os.environ)))
        except Exception as e:  # noqa: BLE001 -- every test that reads it fails with the same error
            _EARLY_RESULTS[name] = ("error", e)
    kind, value = _EARLY_RESULTS[name]
    if kind == "error":
        raise value
    return value


@pytest.fixture(scope="session")
def early():
    """``early(name, fn)``: see ``early_child``."""
    return early_child
