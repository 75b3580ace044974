"""The dispatch numerics of the aiter-check group (fp4moe.targets.aiter.dispatch.numerics), without
a child: the token counts read from the tree, the borrowed tuned rows, the check functions on
made-up records, and the registry entries that name its rows. The run through the gate (one
child for every case) is in test_default_run.py."""

from __future__ import annotations

import pytest
import torch
from dispatch_rows import HAVE_TREE, TREE

from fp4moe.infra.paths import REPO_ROOT
from fp4moe.targets.aiter.dispatch import group
from fp4moe.targets.aiter.dispatch import numerics as N
from fp4moe.targets.aiter.kernels import defects
from fp4moe.targets.aiter.results import TreeLacks

needs_tree = pytest.mark.skipif(not HAVE_TREE, reason=f"{TREE} absent")
REGISTRY = REPO_ROOT / "fp4moe" / "data" / "aiter_known_defects.json"


def test_check_names_are_the_registrys():
    names = {c for c, _ in N.CHECKS} | {k for c in N.CASES for k in c.also}
    assert names == set(defects.NUMERICS_CHECK_NAMES)


def test_every_path_is_judged_a16w4_and_a8w4_padded_and_not():
    paths = {c.path for c in N.CASES}
    assert {N.CK, N.CKT, N.FLY, N.OPUS} <= paths
    assert {c.act for c in N.CASES if c.path == N.CK} == {"a16w4", "a8w4"}
    for p in (N.CKT, N.FLY, N.OPUS):
        assert {c.layer for c in N.CASES if c.path == p} >= {N.Layer.PADDED, N.Layer.UNPADDED}, p
    assert any(c.tokens == "split_quant" for c in N.CASES) and all(c.env == {} for c in N.CASES if c.act == "a16w4")
    assert len({c.id for c in N.CASES}) == len(N.CASES)


@needs_tree
def test_token_counts_come_from_the_tree():
    t = N.switch_tokens(TREE)
    assert t["splitk"] * N.TOPK <= N.E < N.DECODE_TOKENS * N.TOPK  # get_ksplit: split only while token*topk <= expert
    assert t["split_quant"] == 8 * 256 // N.TOPK + 1  # aiter/ops/quant.py: stage-1 cut at 8 * 256 / topk
    assert t["decode"] < N.A16W4_BOUND and len(set(t.values())) == len(t)


def test_a_tree_without_the_split_quant_cut_cannot_place_its_case(tmp_path):
    (tmp_path / "aiter" / "ops").mkdir(parents=True)
    (tmp_path / "aiter" / "fused_moe.py").write_text("def get_ksplit(token, topk, expert):\n"
                                                     "    if token * topk > expert:\n        return 0\n")
    (tmp_path / "aiter" / "ops" / "quant.py").write_text("CUT = 2048\n")
    with pytest.raises(TreeLacks, match=r"aiter/ops/quant.py: the stage-1 split-quant cut"):
        N.switch_tokens(tmp_path)


@needs_tree
def test_tuned_rows_are_the_trees_own_with_the_small_shape_keys():
    header, rows, where = N.small_tuned_rows(group.tuned_sources(TREE), N.switch_tokens(TREE))
    assert set(where) == {t.value for t in N.Tuned} and len(rows) == len(N.Tuned)
    for r in rows:
        assert (r["model_dim"], r["inter_dim"], r["expert"], r["topk"]) == (N.H, N.P, N.E, N.TOPK)
        assert r["kernelName1"] and r["kernelName2"] and set(r) == set(header)
    by = {t: r for t, r in zip(N.Tuned, rows)}
    assert by[N.Tuned.OPUS]["kernelName1"].startswith("opus_moe1_") and by[N.Tuned.FLYDSL_FP8]["kernelName1"].endswith("_fp8")
    assert by[N.Tuned.FLYDSL_CKTILE]["kernelName2"].startswith("cktile_")
    assert all("dsv4_fp8fp4_tuned_fmoe.csv:" in w for w in where.values()), where


def _seen(ops, out, tokens=16):
    return {"ops": ops, "out": out, "tokens": tokens}


def _op(name, **args):
    return {"op": name, "args": args}


CASE = next(c for c in N.CASES if c.id == "FlyDSL a8w4 padded clamp")


def test_path_check_names_what_ran_instead():
    ok = _seen([_op("flydsl_moe_stage1"), _op("flydsl_moe_stage2")], None)
    assert N.path_reached(CASE, ok, None)[0] == N.PASS
    res, det = N.path_reached(CASE, _seen([_op("ck_moe_stage1", a_dtype="bf16"), _op("ck_moe_stage2")], None), None)
    assert res == N.FAIL and "reached ck_moe_stage1 + ck_moe_stage2" in det and "flydsl_moe_stage1" in det


def test_pad_check_wants_the_pad_at_every_stage_that_takes_one():
    told = _seen([_op("flydsl_moe_stage1", inter_dim_pad=128), _op("flydsl_moe_stage2", inter_dim_pad=128)], None)
    assert N.pad_told(CASE, told, None)[0] == N.PASS
    lost = _seen([_op("flydsl_moe_stage1", inter_dim_pad=128), _op("flydsl_moe_stage2", inter_dim_pad=0)], None)
    res, det = N.pad_told(CASE, lost, None)
    assert res == N.FAIL and "flydsl_moe_stage2.inter_dim_pad=0 (want 128)" in det
    ck = next(c for c in N.CASES if c.path == N.CK and c.layer is N.Layer.PADDED)
    assert N.pad_told(ck, _seen([_op("ck_moe_stage1"), _op("ck_moe_stage2")], None), None)[0] == N.INFO


def test_reference_check_counts_differing_and_nan_values():
    g = torch.Generator().manual_seed(3)
    want = torch.randn(4, 8, generator=g).to(torch.bfloat16)
    got = want.clone()
    assert N.equals_reference(CASE, _seen([], got), {"main": want, "what": "a8w4"})[0] == N.PASS
    got[0, :3] = float("nan")
    res, det = N.equals_reference(CASE, _seen([], got), {"main": want, "what": "a8w4"})
    assert res == N.FAIL and det.startswith("3/32 values differ, 3/32 NaN")
    assert defects.row_signature(det) == {"differ": "some", "nan": "some"}


def test_a_case_the_child_could_not_finish_is_na_on_every_check():
    rows = N.judge_case(CASE, {"error": "StandInError: x"}, {})
    assert {r["result"] for r in rows} == {N.NA} and len(rows) == len(N.CHECKS)


def test_the_registry_names_existing_numerics_rows_with_signatures():
    reg = [d for d in defects.load_registry(REGISTRY) if all(c.startswith("dispatch ") for c in d.checks)]
    names = {f"dispatch numerics {c.id}: {k}" for c in N.CASES for k in [*(n for n, _ in N.CHECKS), *c.also]}
    numeric = [(d, p) for d in reg for p in d.checks if p.startswith("dispatch numerics ")]
    assert len(numeric) == 7
    for d, p in numeric:
        assert p in names, p
        assert defects.signature_for(d, p), d.id
