"""A signal at every moment ends the gate (issue #48 item 1), and one ``--timeout`` stops the
gate's own work too (item 2). ``test_signals.py`` holds the zoo child hanging at import; here the
other moments, each a fault-table row (slow tier: each waits for its moment):

- aiter-check's kernel child hanging inside a kernel of the tree (SIGINT to the process group, as
  Ctrl-C sends it): the gate was still running after 240 s, its worker thread re-running the
  child the signal had killed;
- ``perf ab`` with the head worker hanging in its setup (SIGTERM, SIGHUP): a scratch folder was
  left behind;
- the parent hanging in its own judging: a known-defects regular expression that backtracks for
  ever (SIGINT, SIGHUP); and the same moment under ``--timeout`` (``Deadline.watch``);
- ``sglang-check --sglang-wheel W --timeout`` whose unpacking outlasts the deadline (into a fresh
  cache it ran 18.4 s with ``--timeout 6``).

Each: exit 2 within seconds, one line ("interrupted", or naming ``--timeout``), no child left (the
hung code starts ``sleep TAG``, found by its unique argument), no scratch folder left in TMPDIR."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from proc_search import live_with_arg, unique_tag

from fp4moe.infra import deadline, runner
from fp4moe.infra.paths import REPO_ROOT, shared_dir

pytestmark = [pytest.mark.reliability, pytest.mark.slow]

#: seconds a gate may take to end after the signal (children first: 1 s grace each, then the sweep)
ENDS_WITHIN_S = 15
SHIM = "from fp4moe.reference.layout import shuffle_weight, shuffle_scale  # a test shim, not aiter code\n"
#: what hung code does at its moment: a child of its own (found by TAG), a marker, a long sleep
HANG = "import pathlib, subprocess, time\nsubprocess.Popen(['sleep', {tag!r}])\npathlib.Path({marker!r}).write_text('up')\ntime.sleep(600)\n"


def _start(argv, tmp_path, default_signals, *, script=None):
    """The gate in a process group of its own (``setpgrp``: a killpg reaches it as Ctrl-C would),
    TMPDIR a folder of this test's."""
    scratch = tmp_path / "tmpdir"
    scratch.mkdir()

    def pre():
        default_signals()
        os.setpgrp()

    cmd = [sys.executable, str(script)] if script else [sys.executable, "-m", "fp4moe"]
    return subprocess.Popen([*cmd, *map(str, argv)], cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=pre, env=dict(os.environ, TMPDIR=str(scratch))), scratch


def _signal_at_marker(p, marker, sig, *, wait_s=300, group=False):
    t0 = time.monotonic()
    while not marker.exists():
        if p.poll() is not None or time.monotonic() - t0 > wait_s:
            p.kill()
            out, err = p.communicate()
            pytest.fail(f"the hang was never reached (rc {p.returncode}): {err[-2000:]}")
        time.sleep(0.05)
    (os.killpg if group else os.kill)(p.pid, sig)
    t1 = time.monotonic()
    try:
        _, err = p.communicate(timeout=120)
    finally:
        p.kill()
    return err, time.monotonic() - t1


def _gone(tag: str, seconds: float = 5.0) -> bool:
    t0 = time.monotonic()
    while live_with_arg(tag) and time.monotonic() - t0 < seconds:
        time.sleep(0.05)
    return not live_with_arg(tag)


def _ended_interrupted(p, err, took, tag, scratch):
    lines = err.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and "interrupted" in lines[0], (p.returncode, err[-2000:])
    assert took < ENDS_WITHIN_S, f"the gate took {took:.1f} s to end after the signal"
    assert _gone(tag), "the hung code's own child outlived the gate"
    assert not [n for n in os.listdir(scratch) if n.startswith("fp4moe-")], os.listdir(scratch)


# ----------------------------------------------------------------- aiter-check: a kernel that hangs
TREE_ROOT = (shared_dir() / "aiter" / "e4048607") if shared_dir() else None
KERNEL_FILE = "ops/triton/moe/moe_op_gemm_a16w4.py"


def _kernels_ok() -> bool:
    from fp4moe.targets.aiter.kernels import triton_status_light

    return triton_status_light()[0]


@pytest.mark.skipif(TREE_ROOT is None or not (TREE_ROOT / "aiter" / KERNEL_FILE).is_file() or not _kernels_ok(),
                    reason="../shared/aiter/e4048607 absent, or no triton >= 3.8 for the kernel child")
def test_sigint_while_a_kernel_of_the_tree_hangs_in_the_kernel_child(tmp_path, default_signals):
    tag, marker = unique_tag(), tmp_path / "up"
    root = tmp_path / "t"
    shutil.copytree(TREE_ROOT / "aiter", root / "aiter")
    (root / "aiter" / "ops" / "shuffle.py").write_text(SHIM)  # (a)-(d) quick: the kernel child is reached
    f = root / "aiter" / KERNEL_FILE
    body = textwrap.indent(HANG.format(tag=tag, marker=str(marker)), "    ")
    f.write_text(f.read_text() + f"\nimport functools as _ft\n_real = moe_gemm_a16w4\n\n\n@_ft.wraps(_real)\n"
                 f"def moe_gemm_a16w4(*a, **k):  # hangs when the kernel child calls it\n{body}")
    p, scratch = _start(["aiter-check", "--aiter-src", root, "--no-differential", "--no-dispatch", "--layout-grid",
                         "reduced", "--kernel-jobs", "a16w4,a8w4", "--timeout", "600"], tmp_path, default_signals)
    err, took = _signal_at_marker(p, marker, signal.SIGINT, group=True)
    _ended_interrupted(p, err, took, tag, scratch)


# ------------------------------------------------------------------ perf ab: the head's setup hangs
WORKLOAD = """
import os, pathlib, subprocess, time
def registry(device):
    if {hang}:
{hang_body}
    return {{"b": lambda: (lambda x: None, [1, 2], {{"shape": "s"}})}}
"""


def _checkout(root, hang: str = ""):
    """A fake checkout whose perf workload (the gate's worker imports it) hangs in setup when told."""
    pkg = root / "fp4moe" / "gates" / "perf" / "child"
    pkg.mkdir(parents=True)
    for d in (root / "fp4moe", root / "fp4moe" / "gates", root / "fp4moe" / "gates" / "perf"):
        (d / "__init__.py").write_text("")
    (pkg / "ab_worker.py").write_text(WORKLOAD.format(hang=bool(hang), hang_body=textwrap.indent(hang or "pass\n", " " * 8)))
    return root


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_signal_while_the_head_worker_hangs_in_setup(tmp_path, default_signals, sig):
    tag, marker = unique_tag(), tmp_path / "up"
    base = _checkout(tmp_path / "base")
    head = _checkout(tmp_path / "head", HANG.format(tag=tag, marker=str(marker)))
    p, scratch = _start(["perf", "ab", "--device", "cpu", "--base", base, "--head", head, "--workers", "separate"],
                        tmp_path, default_signals)
    err, took = _signal_at_marker(p, marker, sig)
    _ended_interrupted(p, err, took, tag, scratch)


# ---------------------------------------------------------------- the parent, in its own judging
#: a known-defects entry's regular expression that backtracks for ever on a row's detail: the
#: registry applier is where aiter-check's parent hangs (a test wraps it; nothing else changes)
JUDGING_HANGS = """
import pathlib, sys
from fp4moe.gates import aiter_check
from fp4moe.targets.aiter.kernels import defects

real = aiter_check.apply_registry

def hangs(*a, **k):
    pathlib.Path({marker!r}).write_text("judging")
    d = defects.Defect("x", "s", ("aiter/x.py:1",), ("c",), "abcdef0", signature={{"detail": "(a+)+$"}})
    defects.signature_mismatch(d, "a" * 64 + "b")
    return real(*a, **k)

aiter_check.apply_registry = hangs
sys.argv = ["fp4moe-gate", *sys.argv[1:]]
from fp4moe.commands.entry import run
run()
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
def test_a_signal_while_the_parent_hangs_in_its_judging(tmp_path, default_signals, sig):
    marker = tmp_path / "up"
    script = tmp_path / "gate.py"
    script.write_text(JUDGING_HANGS.format(marker=str(marker)))
    (tmp_path / "t" / "aiter" / "ops").mkdir(parents=True)
    (tmp_path / "t" / "aiter" / "ops" / "shuffle.py").write_text(SHIM)
    p, scratch = _start(["aiter-check", "--aiter-src", tmp_path / "t", "--no-differential", "--no-kernels", "--no-dispatch",
                         "--layout-grid", "reduced"], tmp_path, default_signals, script=script)
    err, took = _signal_at_marker(p, marker, sig)
    _ended_interrupted(p, err, took, unique_tag(), scratch)


def test_the_run_deadline_stops_the_parents_own_judging():
    """A backtracking registry pattern in the parent, no child alive: stopped at the deadline,
    naming the option and the line of the package it was at."""
    from fp4moe.targets.aiter.kernels import defects

    d = defects.Defect("x", "s", ("aiter/x.py:1",), ("c",), "abcdef0", signature={"detail": "(a+)+$"})
    t0 = time.monotonic()
    with pytest.raises(runner.DeadlineSpent) as e, deadline.Deadline(0.5, "--timeout").watch():
        defects.signature_mismatch(d, "a" * 64 + "b")
    assert time.monotonic() - t0 < 5
    assert str(e.value).startswith("--timeout 0.5: timed out, the deadline for the whole run passed") and \
        "fp4moe/targets/aiter/kernels/defects.py:" in str(e.value) and "(signature_mismatch)" in str(e.value), str(e.value)
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # disarmed after the run


def test_a_child_alive_at_the_deadline_is_named_by_its_own_limit(tmp_path):
    """While a child runs, its own limit (what the deadline had left) ends it and names its stage;
    the watch's alarm waits its grace instead of stopping the gate first."""
    tag = unique_tag()
    script = tmp_path / "sleeper.py"
    script.write_text(f"import time\ntime.sleep(float({tag.split('.')[0]}))  # {tag}\n")
    with deadline.Deadline(1.0, "--timeout").watch() as dl, pytest.raises(runner.GateCannotRun) as e:
        runner.run_judged(str(script), [tag], label="sleeper", timeout_s=600, deadline=dl)
    assert "sleeper: timed out, killed at the deadline (--timeout 1 s, for the whole run)" in str(e.value), str(e.value)
    assert not live_with_arg(tag)


# -------------------------------------------------------- sglang-check: the deadline covers unpacking
def test_sglang_check_timeout_bounds_the_wheels_unpacking(tmp_path, monkeypatch, gate):
    """``--sglang-wheel W --timeout 6`` into a fresh cache ran 18.4 s: hashing and unpacking ran in
    the gate, outside the deadline. Here unpacking is slowed (the wheel's files fed slowly): the
    run stops at ``--timeout``, naming it and where it was; no half-unpacked folder is left."""
    import zipfile

    from fp4moe.targets.sglang import source

    whl = tmp_path / "sglang-0.5.23-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("sglang-0.5.23.dist-info/METADATA", "Name: sglang\nVersion: 0.5.23\n\n")
        z.writestr(source.FP8_FILE, "x = 1\n")
        for i in range(50):
            z.writestr(f"sglang/m{i}.py", "y = 2\n")
    monkeypatch.setattr(source, "WHEEL_DIR", tmp_path / "cache")
    real = zipfile.ZipFile._extract_member

    def slow(self, *a, **k):
        time.sleep(0.5)
        return real(self, *a, **k)

    monkeypatch.setattr(zipfile.ZipFile, "_extract_member", slow)
    t0 = time.monotonic()
    r = gate("sglang-check", "--sglang-wheel", whl, "--timeout", "2", "-q", inputs=[whl])
    r.cannot_run("--timeout 2", "the whole run", "_unpack_into_cache")
    assert time.monotonic() - t0 < 10
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.name.startswith(".unpack-")]
