"""aiter-check on real aiter trees of 2026, archived at test time from a git clone of ROCm/aiter
(issue #45 items 1 and 5): every tree gets a verdict (exit 0 or 1, never exit 2 because it
lacks what a later aiter has: those are ``absent`` rows), and the public routing pair is told
apart -- f7531b3d32 picks wrong experts at top-k 6 with > 128 experts (exit 1 naming routing),
5228838e57 (PR #3292) does not.

The clone: ``$FP4MOE_AITER_GIT``, else ``.mirror/ROCm+aiter/repo`` beside ``../shared``; the tests
skip naming it when it is absent. All slow (each tree's children: 15-200 s on a loaded 2-core CPU).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fp4moe.infra.paths import shared_dir
from fp4moe.targets.aiter.kernels import triton_status_light
from fp4moe.targets.aiter.tree import archive_tree


def _aiter_git() -> Path | None:
    env = os.environ.get("FP4MOE_AITER_GIT")
    if env:
        return Path(env)
    return shared_dir().parent / ".mirror" / "ROCm+aiter" / "repo" if shared_dir() else None


GIT = _aiter_git()
HAVE_GIT = GIT is not None and GIT.is_dir() and subprocess.run(
    ["git", "-C", str(GIT), "cat-file", "-e", "f7531b3d32^{commit}"], capture_output=True).returncode == 0
needs_git = pytest.mark.skipif(not HAVE_GIT, reason=f"no git clone of ROCm/aiter holding f7531b3d32 ({GIT}; set FP4MOE_AITER_GIT)")
_OK, _WHY = triton_status_light()
pytestmark = [pytest.mark.slow, needs_git]


def _check(tmp_path: Path, rev: str, *args: str) -> tuple[int, list[dict], str]:
    tree = archive_tree(GIT, rev, tmp_path / rev)
    out = tmp_path / f"{rev}.json"
    p = subprocess.run([sys.executable, "-m", "fp4moe.commands", "aiter-check", "--aiter-src", str(tree), "--json", str(out),
                        *args], capture_output=True, text=True, timeout=900)
    rows = json.loads(out.read_text())["results"] if out.is_file() else []
    return p.returncode, rows, p.stdout + p.stderr


# a tree without aiter's Triton MoE kernels and a fused_moe without gate_mode (January), one
# whose fused_moe predates the Opus MoE common file and gfx_from_cu_num (May), and one whose
# dtypes/mx_types probe aiter's compiled module at import (June)
TREES = ("1aab0bb477", "f7531b3d32", "0124ca4770")


@pytest.mark.parametrize("rev", TREES)
def test_an_older_tree_gets_a_verdict_with_what_it_lacks_absent(tmp_path, rev):
    rc, rows, text = _check(tmp_path, rev, "--no-kernels", "--layout-grid", "reduced")
    assert rc in (0, 1), text[-3000:]
    assert rows and not [r for r in rows if r["result"] == "not judged"], text[-2000:]
    if rev == "1aab0bb477":  # January: no Triton MoE, no gate_mode: absent, never a failure
        absent = {r["check"] for r in rows if r["result"] == "absent"}
        assert "dispatch: aiter fused_moe" in absent and "capability: PR #4130 (interleaved scale K/32=12, inter 384)" in absent
    else:  # the dispatch group ran on the tree's own fused_moe
        assert any(r["check"].startswith("dispatch ") and r["result"] == "pass" for r in rows), text[-2000:]
    for r in rows:  # every FAIL names the tree's file:line
        if r["result"] == "FAIL" and not r["check"].startswith("known defect: "):
            assert "aiter/" in r["detail"] and ".py:" in r["detail"], r


@pytest.mark.skipif(not _OK, reason=_WHY)
def test_the_public_routing_pair_is_told_apart(tmp_path):
    """f7531b3d32: exit 1, its FAILs all routing's (E256 k6 wrong expert sets), the DeepSeek-V4
    routing keywords this tree's routing() lacks ``absent``; 5228838e57 (PR #3292): no routing FAIL."""
    only = ("--kernel-jobs", "routing", "--no-dispatch", "--no-differential", "--layout-grid", "reduced")
    rc, rows, text = _check(tmp_path, "f7531b3d32", *only)
    fails = [r for r in rows if r["result"] == "FAIL"]
    assert rc == 1 and fails, text[-3000:]
    assert all(r["check"].startswith("kernel: routing ") for r in fails), fails
    assert any("E256 k6" in r["check"] and "wrong expert set" in r["detail"] and "moe_routing" in r["detail"] for r in fails)
    assert any(r["result"] == "absent" and "score_mode" in r["detail"] for r in rows)
    rc, rows, text = _check(tmp_path, "5228838e57", *only)
    assert not [r for r in rows if r["result"] == "FAIL" and "routing" in r["check"]], text[-3000:]
    assert rc == 0, text[-3000:]
