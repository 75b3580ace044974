"""The upgrade verdict (``aiter-check --aiter-src NEW --base-src OLD``) on synthetic rows, on any
machine: every check classified by key (``judge.upgrade.classify``) -- regressed, removed, fixed,
still failing, appeared, not judged, dropped, unchanged -- the exit code with and without
``--strict``, the memo (text, markdown, JSON) naming both revisions and each regression's
file:line, and a base that cannot be judged (exit 2 naming ``--base-src``). No child runs:
``aiter_check.judge_tree`` is replaced by a table of rows per tree."""

from __future__ import annotations

import json
import subprocess

import pytest

from fp4moe.gates import aiter_check as ac
from fp4moe.infra.errors import GateCannotRun
from fp4moe.targets.aiter.judge import upgrade
from fp4moe.targets.aiter.judge.upgrade import Change
from fp4moe.targets.aiter.results import CheckResult as R
from fp4moe.targets.aiter.results import Result

ROUTING = "kernel: routing sqrtsoftplus renorm x1.5 +bias E256 k6 T17: vs the reference top-k"
ROUTING_FAIL = R(ROUTING, Result.FAIL, "17/17 tokens: wrong expert set (aiter/ops/triton/_triton_kernels/moe/moe_routing/topk.py:88)")
BASE = [R("api: fused_moe", Result.PASS, "all 19 keywords present"),
        R("layout: w2_scale (8, 12) gu-interleaved", Result.PASS, "bitwise"),
        R(ROUTING, Result.PASS, "17/17 expert sets a valid top-k"),
        R("kernel: a16w4 plain T4: vs reference (kernel budget)", Result.FAIL, "rel L2 9e-2 (aiter/ops/triton/moe/moe_op_gemm_a16w4.py:276)"),
        R("kernel: a8w4 plain T4: vs reference (kernel budget)", Result.FAIL, "rel L2 8e-2"),
        R("dispatch CK 2-stage + CK 2-stage: pad reaches every stage", Result.PASS, "232 pass row(s)"),
        R("capability: PR #4130", Result.ABSENT, "raises at K/32 = 12")]


def _head(**change) -> list[R]:
    rows = {r.check: R(r.check, r.result, r.detail) for r in BASE}
    for name, row in change.items():
        rows[name] = row
    return [r for r in rows.values() if r is not None]


def _classes(base, head, strict=False) -> dict[str, str]:
    return {c.key: c.change for c in upgrade.classify(base, head, strict)}


def test_each_class_by_key():
    head = _head(**{ROUTING: ROUTING_FAIL,  # held in base, fails in new
                    "layout: w2_scale (8, 12) gu-interleaved": R("layout: w2_scale (8, 12) gu-interleaved", Result.NA, "no shuffle_scale"),
                    "kernel: a16w4 plain T4: vs reference (kernel budget)": R("kernel: a16w4 plain T4: vs reference (kernel budget)", Result.PASS, "rel L2 3e-3"),
                    "dispatch CK 2-stage + CK 2-stage: pad reaches every stage": None,  # no row selects that path any more
                    "capability: PR #4130": R("capability: PR #4130", Result.PRESENT, "16 columns"),
                    "kernel: routing: not judged": R("kernel: routing: not judged", Result.NOT_JUDGED, "routing.py: symbol 'x' missing")})
    head.append(R("kernel: a16w4 cdna4 T4: pad poison (told) == clean", Result.FAIL, "2048/2048 NaN"))  # new in NEW
    got = _classes(BASE, head)
    assert got == {"api: fused_moe": Change.UNCHANGED, "layout: w2_scale (8, 12) gu-interleaved": Change.REMOVED,
                   ROUTING: Change.REGRESSED, "kernel: a16w4 plain T4: vs reference (kernel budget)": Change.FIXED,
                   "kernel: a8w4 plain T4: vs reference (kernel budget)": Change.STILL_FAILING,
                   "capability: PR #4130": Change.APPEARED, "kernel: routing: not judged": Change.NOT_JUDGED,
                   "kernel: a16w4 cdna4 T4: pad poison (told) == clean": Change.APPEARED,
                   "dispatch CK 2-stage + CK 2-stage: pad reaches every stage": Change.DROPPED}
    # the regression's file:line is the one the new tree's row cites
    (reg,) = [c for c in upgrade.classify(BASE, head) if c.change == Change.REGRESSED]
    assert reg.where == ["aiter/ops/triton/_triton_kernels/moe/moe_routing/topk.py:88"] and (reg.base, reg.head) == ("pass", "FAIL")


@pytest.mark.parametrize(("change", "plain", "strict"), [
    ({}, 0, 1),  # the base's own a8w4 FAIL still fails: shown, blocks only with --strict
    ({ROUTING: ROUTING_FAIL}, 1, 1),
    ({"api: fused_moe": R("api: fused_moe", Result.NA, "no fused_moe")}, 1, 1),  # removed
    ({"api: fused_moe": R("api: fused_moe", "absent", "no fused_moe")}, 1, 1),  # the absent word reads as n/a
    ({k: R(k, Result.PASS, "") for k in ("kernel: a8w4 plain T4: vs reference (kernel budget)",
                                         "kernel: a16w4 plain T4: vs reference (kernel budget)")}, 0, 0),  # both fixed
    ({"api: fused_moe": R("api: fused_moe", Result.WARN, "gate_mode absent (conditional)")}, 0, 1),  # warn: bad only with --strict
    ({"kernel: a16w4: not judged": R("kernel: a16w4: not judged", Result.NOT_JUDGED, "moe_op_gemm_a16w4.py: symbol 'x' missing")}, 2, 1),
    ({ROUTING: ROUTING_FAIL, "kernel: x: not judged": R("kernel: x: not judged", Result.NOT_JUDGED, "")}, 1, 1),  # 1 outranks 2
])
def test_exit_codes_and_strict(change, plain, strict):
    head = _head(**change)
    for s, want in ((False, plain), (True, strict)):
        assert upgrade.upgrade_exit(upgrade.classify(BASE, head, s), s) == want, (s, upgrade.classify(BASE, head, s))


def test_a_check_the_base_could_not_judge_that_fails_in_new_is_exit_2_naming_base_src():
    base = [R(ROUTING, Result.NOT_JUDGED, "routing.py: symbol 'routing' missing")]
    changes = upgrade.classify(base, [ROUTING_FAIL])
    assert [c.change for c in changes] == [Change.NOT_JUDGED] and upgrade.upgrade_exit(changes) == 2
    line = upgrade.cannot_judge_line(changes, "/t/old")
    assert line.startswith(f"--base-src /t/old: {ROUTING}: not judged in the base tree") and "topk.py:88" in line
    # ... and one that holds in the new tree appeared
    assert [c.change for c in upgrade.classify(base, [R(ROUTING, Result.PASS, "")])] == [Change.APPEARED]


def test_a_known_defect_that_appears_regresses_and_a_stale_entry_reads_fixed():
    known = R("known defect: d1", Result.KNOWN, "reproduces (2 check(s))")
    stale = R("known defect: d1", Result.FAIL, "stale: no longer reproduces (its checks ran and passed)")
    ok = R("known defect: d1", Result.INFO, "not judged: none of its checks ran")
    assert _classes([known], [stale]) == {"known defect: d1": Change.FIXED}
    assert _classes([R("kernel: c", Result.PASS, "")], [R("kernel: c", Result.KNOWN, "2048/2048 NaN [known defect d1]")]) == \
        {"kernel: c": Change.REGRESSED}  # the registry accepts it in one tree; the upgrade brings it
    assert _classes([ok], [known]) == {"known defect: d1": Change.APPEARED}


def test_repeated_names_are_keyed_in_order_and_comparison_rows_are_no_checks():
    base = [R("c", Result.PASS, ""), R("c", Result.PASS, ""), R("base: kernel: routing", Result.FAIL, ""),
            R("upgrade: routing E8", Result.DIFFER, "")]
    head = [R("c", Result.PASS, ""), R("c", Result.FAIL, ""), R("upgrade dispatch: dsv4-pro", Result.INFO, "")]
    assert _classes(base, head) == {"c": Change.UNCHANGED, "c #2": Change.REGRESSED}


def test_tree_revision_git_checkout_else_date_else_path(tmp_path):
    git = tmp_path / "git"
    (git / "aiter" / "ops" / "triton" / "moe").mkdir(parents=True)
    (git / "aiter" / "ops" / "triton" / "moe" / "a.py").write_text("x = 1\n")
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "GIT_COMMITTER_DATE": "2026-05-25T10:00:00Z", "GIT_AUTHOR_DATE": "2026-05-25T10:00:00Z", "HOME": str(tmp_path)}
    for cmd in (["init", "-q"], ["add", "."], ["commit", "-qm", "Fix routing (#3292)"]):
        subprocess.run(["git", "-C", str(git), *cmd], check=True, env=env)
    rev = upgrade.tree_revision(git / "aiter")  # the package folder: its checkout is the parent
    assert rev["date"] == "2026-05-25" and rev["subject"] == "Fix routing (#3292)" and len(rev["rev"]) == 40
    assert upgrade.revision_label(rev) == f"{rev['rev'][:10]} (2026-05-25, Fix routing (#3292))"
    copy = tmp_path / "copy"
    subprocess.run(f"git -C {git} archive HEAD | tar -x -C {tmp_path} --one-top-level=copy", shell=True, check=True)
    assert upgrade.tree_revision(copy)["rev"] is None and upgrade.tree_revision(copy)["date"] == "2026-05-25"
    assert upgrade.revision_label(upgrade.tree_revision(copy)) == f"{copy} (tree dated 2026-05-25)"
    (tmp_path / "bare" / "aiter").mkdir(parents=True)
    assert upgrade.revision_label(upgrade.tree_revision(tmp_path / "bare")) == str(tmp_path / "bare")


# ---------------------------------------------------------------------- the command, children replaced
def _tree(root):
    (root / "aiter" / "ops").mkdir(parents=True)
    (root / "aiter" / "ops" / "shuffle.py").write_text("# a stand-in tree: judge_tree is replaced\n")
    return root


@pytest.fixture
def trees(tmp_path, monkeypatch):
    """Two trees whose rows are ``rows[side]``; ``judge_tree`` raises ``rows[side]`` when it is an exception."""
    old, new = _tree(tmp_path / "old"), _tree(tmp_path / "new")
    rows = {"old": BASE, "new": _head()}

    def judge(opts, src, registry, deadline, keep=None):
        side = "old" if src.location[1] == str(old) else "new"
        if isinstance(rows[side], Exception):
            raise rows[side]
        return ac.AiterCheckResult(f"source tree {src.location[1]}", None, list(rows[side]), ac.verdict(rows[side]))

    monkeypatch.setattr(ac, "judge_tree", judge)
    return old, new, rows


def test_rejected_memo_names_both_revisions_and_the_regression(trees, gate, tmp_path):
    old, new, rows = trees
    rows["new"] = _head(**{ROUTING: ROUTING_FAIL,
                           "kernel: a8w4 plain T4: vs reference (kernel budget)": R("kernel: a8w4 plain T4: vs reference (kernel budget)", Result.PASS, "")})
    out = tmp_path / "up.json"
    r = gate("aiter-check", "--aiter-src", new, "--base-src", old, "--no-kernels", "--json", out, inputs=[old, new])
    assert r.rc == 1, r.err
    last = r.out.splitlines()[-1]
    assert last.startswith(f"Rejected: aiter {new} over {old}: 1 regressed, 1 fixed"), last
    assert f"  {ROUTING}: pass -> FAIL [aiter/ops/triton/_triton_kernels/moe/moe_routing/topk.py:88]" in r.out
    assert "fixed: 1\n  kernel: a8w4 plain T4" in r.out
    rec = json.loads(out.read_text())
    assert rec["status"] == "regression" and rec["upgrade"]["verdict"] == "Rejected"
    assert rec["upgrade"]["counts"]["regressed"] == 1 and rec["upgrade"]["base"]["path"] == str(old)
    md = gate("aiter-check", "--aiter-src", new, "--base-src", old, "--no-kernels", "--format", "markdown", inputs=[old, new])
    assert "### aiter upgrade: Rejected" in md.out and "#### regressed (blocks): 1" in md.out
    assert md.out.rstrip().endswith("**") and "**Rejected: aiter" in md.out


def test_the_reverse_is_accepted_with_the_fix(trees, gate):
    old, new, rows = trees
    rows["old"], rows["new"] = _head(**{ROUTING: ROUTING_FAIL}), BASE
    r = gate("aiter-check", "--aiter-src", new, "--base-src", old, "--no-kernels", inputs=[old, new])
    assert r.rc == 0, r.err
    assert r.out.splitlines()[-1].startswith(f"Accepted: aiter {new} over {old}: 1 fixed, 2 still failing")
    strict = gate("aiter-check", "--aiter-src", new, "--base-src", old, "--no-kernels", "--strict", inputs=[old, new])
    assert strict.rc == 1 and "still failing (blocks): 2" in strict.out


def test_a_base_that_cannot_be_judged_is_exit_2_naming_base_src(trees, gate):
    old, new, rows = trees
    rows["old"] = GateCannotRun("csrc/opus_moe/opus_moe_common.py: no such file (aiter/fused_moe.py needs it at import)")
    gate("aiter-check", "--aiter-src", new, "--base-src", old, "--no-kernels",
         inputs=[old, new]).cannot_run(f"--base-src {old}: the base tree cannot be judged: csrc/opus_moe/opus_moe_common.py")


def test_a_new_tree_component_not_judged_is_exit_2_with_its_line(trees, gate):
    old, new, rows = trees
    rows["new"] = _head(**{"kernel: a16w4: not judged": R("kernel: a16w4: not judged", Result.NOT_JUDGED, "moe_op_gemm_a16w4.py: symbol 'x' missing")})
    gate("aiter-check", "--aiter-src", new, "--base-src", old, "--no-kernels",
         inputs=[old, new]).cannot_run("not judged in the new tree: kernel: a16w4: not judged: moe_op_gemm_a16w4.py: symbol 'x' missing")


def test_where_names_the_trees_files_never_the_gates():
    assert upgrade.tree_lines("diff: moe", "raised [aiter torch_moe_stage1 (aiter/fused_moe.py:1900)]") == ["aiter/fused_moe.py:1900"]
    # the gate's own frame is no file of the tree; a kernel row that cites no line names its component's module
    assert upgrade.tree_lines(ROUTING, "routing() raised: /x/fp4moe/targets/aiter/kernels/compute.py:165: TypeError") == \
        ["aiter/ops/triton/moe/moe_routing/routing.py (the component; the row cites no line)"]
    assert upgrade.tree_lines("layout: w2", "n/a") == []
