"""``fp4moe-gate aiter-check --timeout``: ONE deadline for the whole run, and nothing a child
leaves behind holds the gate.

A fault table. CPU tier (children replaced by recorders, or refused before any child starts):
every child gets what the one deadline has left -- the (a)-(d) child, the kernel child, the
``--base-src`` side -- and a deadline spent before a child starts is exit 2 naming
``--timeout``; a bad ``--base-src`` (missing, a file, empty) is named as ``--base-src``, not
``--aiter-src``. Slow tier (real children): a kernel file that hangs is killed at the run's
deadline, the whole run inside ``--timeout`` plus the kill grace; aiter code that stops its
parent with SIGSTOP and leaves FIFOs at its record and progress paths ends the check with exit 2
naming its file, within its limit.
"""

from __future__ import annotations

import shutil
import time

import pytest

from fp4moe.gates import aiter_check as ac
from fp4moe.infra import runner
from fp4moe.infra.paths import shared_dir
from fp4moe.targets.aiter.kernels import triton_status_light

pytestmark = pytest.mark.reliability
#: the gate refuses the kernel group on a CPU before any child where triton is too old (< 3.8) or absent
_KERNELS_OK, _KERNELS_WHY = triton_status_light()
needs_kernel_triton = pytest.mark.skipif(not _KERNELS_OK, reason=_KERNELS_WHY)

SHIM = "from fp4moe.reference.layout import shuffle_weight, shuffle_scale  # a test shim, not aiter code\n"


def _tree(root, shuffle: str = SHIM, kernels: bool = True):
    (root / "aiter" / "ops").mkdir(parents=True)
    (root / "aiter" / "ops" / "shuffle.py").write_text(shuffle)
    if kernels:
        (root / "aiter" / ac.KERNEL_MOE_DIR.removeprefix("aiter/")).mkdir(parents=True)
    return root


def _harness_outputs(env: dict, rows: list) -> dict:
    """The output file the (a)-(d) child leaves (its rows; fp4moe.infra.runner), written here."""
    import hashlib
    import json
    from pathlib import Path

    from fp4moe.infra import runner

    out = Path(env[runner.OUTPUT_DIR_ENV])
    (out / "rows").write_text(json.dumps(rows))
    return {"rows": {"sha256": hashlib.sha256((out / "rows").read_bytes()).hexdigest(), "bytes": (out / "rows").stat().st_size}}


class _Recorder:
    """Stands in for ``runner.run_python`` for aiter-check's two child modules: records each
    child's limit, takes ``cost_s``. Any other child (the suite's background children run in a
    thread meanwhile) goes to the real one."""

    def __init__(self, cost_s: float):
        self.cost_s, self.calls = cost_s, []
        self.real = runner.run_python

    def __call__(self, args, *, timeout_s, env=None, cwd=None, **kw):
        if len(args) < 2 or args[1] not in (ac.CHILD_MODULE, ac.KERNEL_CHILD):
            # another child of this process (the suite's background children): the real thing
            return self.real(args, timeout_s=timeout_s, env=env, cwd=cwd, **kw)
        self.calls.append((args[1], timeout_s))
        time.sleep(self.cost_s)
        if args[1] == ac.CHILD_MODULE:  # the rows of a tree that has no aiter/ops/shuffle.py
            rec = {"source": "test", "version": "0", "writes_confined": True, "unconfined": None,
                   "schema": ac.CHILD_SCHEMA.name, "schema_version": ac.CHILD_SCHEMA.version,
                   "outputs": _harness_outputs(env, [{"check": "layout: load aiter/ops/shuffle.py", "result": "absent",
                                                      "detail": "not supported by this aiter: no aiter/ops/shuffle.py"}])}
        else:  # a kernel child whose every job was skipped (no outputs to judge)
            from fp4moe.targets.aiter.kernels import cases

            schema = cases.record_schema()
            jobs = [{"kind": j.kind.value, "key": j.key, "component": j.component, "skipped": True}
                    for j in cases.plan_from_args(ac.kernel_plan_args(list(args[2:])))]
            rec = {"tree": args[args.index("--aiter-src") + 1], "arch": "gfx950", "triton": "test", "device": "cpu",
                   "shapes": "tiny", "shims_active": False, "interp_fastpath": "off: not interpreted", "gpu": None, "interpreter": True, "unjudged": {},
                   "patches": [], "shims": None, "jobs": jobs, "seconds": self.cost_s, "writes_confined": True,
                   "unconfined": None, "schema": schema.name, "schema_version": schema.version, "outputs": {}}
        return runner.ChildResult(cmd=list(args), rc=0, stdout="", stderr="", seconds=self.cost_s, record=rec)


@pytest.mark.slow
@needs_kernel_triton
def test_every_child_gets_what_the_one_deadline_has_left(tmp_path, monkeypatch):
    head, base = _tree(tmp_path / "head"), _tree(tmp_path / "base")
    rec = _Recorder(cost_s=0.4)
    monkeypatch.setattr(runner, "run_python", rec)
    ac.check_aiter(ac.AiterCheckOptions(str(head), timeout_s=30, differential=False, known_defects_file=None, base_src=str(base)))
    # both trees judged in full, the base first: its (a)-(d) child, its kernel checks (two children
    # side by side, ac.KERNEL_CHILD_GROUPS), then the head's
    n = len(ac.KERNEL_CHILD_GROUPS)
    assert [m for m, _ in rec.calls] == ([ac.CHILD_MODULE] + [ac.KERNEL_CHILD] * n) * 2
    limits = [t for _, t in rec.calls]
    first, base, head_first, head = limits[0], limits[1:1 + n], limits[1 + n], limits[2 + n:]
    assert first <= 30 and max(base) <= first - 0.4 and head_first <= min(base) - 0.4 and max(head) <= head_first - 0.4, limits


@pytest.mark.slow
@needs_kernel_triton
def test_a_deadline_spent_before_the_base_side_is_exit_2_naming_timeout(tmp_path, monkeypatch, gate):
    head, base = _tree(tmp_path / "head"), _tree(tmp_path / "base")
    monkeypatch.setattr(runner, "run_python", _Recorder(cost_s=0.6))
    r = gate("aiter-check", "--aiter-src", head, "--no-differential", "--timeout", "1", "--base-src", base,
             inputs=[head, base]).cannot_run("--timeout 1")
    # the stand-in children are no processes: the deadline may pass in the gate's own wait (Deadline.watch)
    assert "spent before" in r.err or "the deadline for the whole run passed" in r.err, r.err


@needs_kernel_triton
def test_without_timeout_each_child_keeps_its_own_default(tmp_path, monkeypatch):
    rec = _Recorder(cost_s=0.0)
    monkeypatch.setattr(runner, "run_python", rec)
    ac.check_aiter(ac.AiterCheckOptions(str(_tree(tmp_path / "h")), differential=False))
    assert [m for m, _ in rec.calls] == [ac.CHILD_MODULE] + [ac.KERNEL_CHILD] * len(ac.KERNEL_CHILD_GROUPS)
    # each its own default (the kernel children's, counted from their start: within a second of it)
    assert rec.calls[0][1] == ac.DEFAULT_TIMEOUT_S
    assert all(ac.DEFAULT_KERNEL_TIMEOUT_S - 1 < t <= ac.DEFAULT_KERNEL_TIMEOUT_S for _, t in rec.calls[1:]), rec.calls


@pytest.mark.parametrize("what", ["missing", "a file", "empty"])
def test_a_bad_base_src_is_named_as_base_src_before_any_child(tmp_path, monkeypatch, gate, what):
    head = _tree(tmp_path / "head")
    base = tmp_path / "base"
    if what == "a file":
        base.write_text("not a tree")
    elif what == "empty":
        base.mkdir()
    rec = _Recorder(cost_s=0.0)
    monkeypatch.setattr(runner, "run_python", rec)
    r = gate("aiter-check", "--aiter-src", head, "--base-src", base, inputs=[head]).cannot_run(f"--base-src {base}")
    assert "--aiter-src" not in r.err and rec.calls == []


# --------------------------------------------------------------------------- real children (slow)

TREE_ROOT = (shared_dir() / "aiter" / "e4048607") if shared_dir() else None
HANG_FILE = "ops/triton/moe/moe_op_gemm_a16w4.py"


@pytest.mark.slow
@pytest.mark.skipif(TREE_ROOT is None or not (TREE_ROOT / "aiter" / HANG_FILE).is_file(),
                    reason="../shared/aiter/e4048607 absent")
def test_a_hung_kernel_file_is_killed_at_the_runs_deadline(tmp_path, gate_child):
    """Probe "--timeout 25 ran 52.9 s": the kernel child got a fresh full limit. Now the (a)-(d)
    child and the kernel child share one deadline; the kernel file hangs at import; the run ends
    within --timeout plus the kill grace and startup, naming --timeout for the whole run."""
    root = tmp_path / "t"
    shutil.copytree(TREE_ROOT / "aiter", root / "aiter")
    f = root / "aiter" / HANG_FILE
    f.write_text("import time\ntime.sleep(3600)\n" + f.read_text())
    (root / "aiter" / "ops" / "shuffle.py").write_text(SHIM)  # (a)-(d) quick: the kernel child is reached
    limit = 60
    t0 = time.monotonic()
    # on a loaded runner the (a)-(d) part may take the whole deadline: then the kernel child is never
    # started ("spent before"); else it is killed at the deadline. Either way: the whole run, one line
    r = gate_child("aiter-check", "--aiter-src", root, "--no-differential", "--no-dispatch", "--timeout", limit,
                   "--base-src", root, timeout_s=300, inputs=[root]).cannot_run(f"--timeout {limit}")
    assert f"--timeout {limit} s, for the whole run" in r.err or "spent before kernel checks" in r.err, r.err
    took = time.monotonic() - t0
    assert took < limit + runner.KILL_GRACE_S + 15, f"the run took {took:.1f} s with --timeout {limit}"


STOP_AND_FIFOS = """
import os
for var in ("FP4MOE_CHILD_RESULT", "FP4MOE_AITER_CHECK_PROGRESS"):
    p = os.environ[var]
    if os.path.lexists(p):
        os.unlink(p)
    os.mkfifo(p)
os._exit(0)
"""


@pytest.mark.slow
def test_fifos_left_behind_do_not_hold_the_gate(tmp_path, gate_child):
    """Probe "a child that leaves a FIFO at its record or progress path blocks the gate despite
    --timeout" (a child stopping its parent on purpose was the PID namespace's case: an attack,
    out of scope)."""
    root = _tree(tmp_path / "t", STOP_AND_FIFOS + SHIM, kernels=False)
    t0 = time.monotonic()
    gate_child("aiter-check", "--aiter-src", root, "--no-differential", "--no-kernels", "--timeout", "60",
               timeout_s=120, inputs=[root]).cannot_run("unreadable result record", "a FIFO")
    assert time.monotonic() - t0 < 60
