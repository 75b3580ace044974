"""The default ``fp4moe-gate aiter-check --no-kernels --no-differential`` (its dispatch group: the
contracts on the meta-tensor table, then the seeded numerics cases) through the real command, in a
subprocess, on the tree under test.

This file is the killer of ``fp4moe-gate zoo --target aiter-dispatch``: there the zoo's child
pytest sets ``FP4MOE_AITER_DISPATCH_MUTANT`` and the tree under test is the mutated copy, which
must make the run exit 1. Without it: exit 0 with the registry, the CK findings listed as known
(numerics rows included); the run without the registry is in test_dispatch_gate.py."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from dispatch_rows import HAVE_TREE, TREE

from fp4moe.gates.zoo import aiter_dispatch_mutants as dm
from fp4moe.infra.paths import REPO_ROOT

pytestmark = [pytest.mark.shared, pytest.mark.skipif(not HAVE_TREE, reason=f"{TREE} absent")]
REGISTRY = REPO_ROOT / "fp4moe" / "data" / "aiter_known_defects.json"
#: the registry entries the numerics rows of e4048607 reproduce
NUMERICS_KNOWN = {
    "ck2stage-pad-not-passed": "dispatch numerics CK 2-stage a16w4 padded: == reference (bitwise)",
    "ck2stage-swiglu-limit-dropped": "dispatch numerics CK 2-stage a16w4 clamp: == reference (bitwise)",
    "ck2stage-mxfp4-inter-stage": "dispatch numerics CK 2-stage a16w4 unpadded: == reference, bf16 inter-stage (bitwise)",
    "cktile-splitk-activation-unclamped": "dispatch numerics CK-tile split-k a16w4 clamp: == reference (bitwise)",
}
#: the registry entry whose signature is a numerics row on several cases: Opus's MXFP8 route
#: output against the float32-slot reference
ROUTE_OUT_KNOWN = ("opus-route-out-mxfp8-slots", (
    "dispatch numerics tuned FlyDSL fp8 + Opus route-reduce a8w4 padded: == reference, float32 slots (bitwise)",
    "dispatch numerics tuned FlyDSL fp8 + Opus route-reduce a8w4 unpadded: == reference, float32 slots (bitwise)",
    "dispatch numerics tuned Opus + Opus route-reduce a8w4 padded: == reference, float32 slots (bitwise)"))


def default_args(tree, *extra, registry=True) -> list[str]:
    """The default run's ``fp4moe-gate`` arguments on ``tree``."""
    return ["aiter-check", "--aiter-src", str(tree), "--no-kernels", "--no-differential",
            *(["--known-defects", str(REGISTRY)] if registry else []), *extra]


def default_run(tree, *extra, registry=True, timeout=900):
    """The default run as a user runs it: the command in a subprocess of its own."""
    args = [sys.executable, "-m", "fp4moe.commands", *default_args(tree, *extra, registry=registry)]
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT, check=False)


def default_run_here(capsys, tree, *extra, registry=True):
    """The same command line through the CLI in this process (``CompletedProcess``-like): its
    children, where fused_moe.py runs, are the gate's own, with their time limits. For a test that
    runs it many times (test_dispatch_mutants.py, once per mutant): no second interpreter
    importing torch per run."""
    from fp4moe.commands import main as cli

    args = default_args(tree, *extra, registry=registry)
    rc = cli.main(args)
    cap = capsys.readouterr()
    return subprocess.CompletedProcess(["fp4moe-gate", *args], rc, cap.out, cap.err)


def rows(stdout: str, prefix: str) -> dict[str, str]:
    """{check: result} of the text report's rows starting with ``prefix``."""
    out = {}
    for ln in stdout.splitlines():
        if ln.startswith(prefix):
            parts = ln.split("  ")
            name = parts[0].strip()
            res = next((p.strip() for p in parts[1:] if p.strip()), "")
            out[name] = res
    return out


def tree_under_test() -> Path:
    name = os.environ.get(dm.MUTANT_ENV)
    if not name:
        return TREE
    return dm.mutated_tree(TREE, name, Path(tempfile.mkdtemp(prefix="fp4moe-mutant-")) / "tree")


@pytest.mark.slow
def test_default_run_passes_on_the_tree_under_test():
    r = default_run(tree_under_test())
    assert r.returncode == 0, (r.stdout[-4000:], r.stderr[-1000:])
    num = rows(r.stdout, "dispatch numerics ")
    assert len(num) >= 30 and not [k for k, v in num.items() if v not in ("pass", "info", "known")], num
    for d, check in [*NUMERICS_KNOWN.items(), *((ROUTE_OUT_KNOWN[0], c) for c in ROUTE_OUT_KNOWN[1])]:
        assert num[check] == "known", (check, num.get(check))
        assert rows(r.stdout, f"known defect: {d}")[f"known defect: {d}"] == "known"
