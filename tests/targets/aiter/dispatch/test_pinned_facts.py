"""The facts the SGLang gate pins by hand (fp4moe/targets/sglang/modes.py, target.py ROW_TOKENS,
fp4moe/targets/aiter/tensor_attrs.py) checked against aiter e4048607's executed dispatch (the
bound and the mode rule, the k-split and use_nt switches the rows sit beside, is_shuffled and
w1.dtype as fused_moe reads them), or against the tree's own source where no executed row
reaches the reader (tensor_attrs.KNOWN's file:lines vs tensor_attrs.scan of the tree), and
SGLang's ``quant_dtype_a`` keyword driven into it."""

from __future__ import annotations

import pytest
from dispatch_rows import HAVE_TREE, TREE

from fp4moe.targets.aiter import tensor_attrs
from fp4moe.targets.aiter.dispatch import contracts, table
from fp4moe.targets.sglang import modes
from fp4moe.targets.sglang import target as sg

pytestmark = pytest.mark.skipif(not HAVE_TREE, reason=f"{TREE} absent")


def _s1(f):
    return next(s for s in f["stages"] if s["stage"] == 1)


@pytest.mark.slow
def test_the_pinned_bound_is_the_executed_switch(executed):
    b = modes.AITER_DEFAULT_BOUND
    below, at = executed[f"bound M={b - 1}"], executed[f"bound M={b}"]
    assert _s1(below)["act_dtype"] == "torch.bfloat16" and _s1(at)["act_dtype"] == "torch.float8_e4m3fn"
    for M, f in ((b - 1, below), (b, at)):  # the SGLang gate's own rule says the same
        want = modes.effective_act_mode({"gate_mode": "interleave"}, M)
        assert contracts.MODE_ACT_DTYPE[want] == _s1(f)["act_dtype"]
    assert table.tree_switches(TREE, []).bound_default == b


@pytest.mark.slow
def test_separated_weights_run_fp4_activations_which_the_mode_rule_answers_as_a16w4(executed):
    """The executed dispatch quantizes Silu activations to MXFP4 for separated gate/up (a4w4,
    fused_moe.py's ``else: q_dtype_a = dtypes.fp4x2``); modes.effective_act_mode answers a16w4
    there (fp4moe.reference has no a4w4 mode). DeepSeek-V4 on gfx950 passes interleave, so no
    default row is affected; the test fails when either side changes."""
    b = modes.AITER_DEFAULT_BOUND
    assert _s1(executed[f"separated M={b}"])["act_dtype"] == "torch.float4_e2m1fn_x2"
    assert modes.effective_act_mode({"gate_mode": "separated"}, b) == "a16w4"


@pytest.mark.slow
def test_row_tokens_at_the_bound_are_the_executed_sides_of_it(executed):
    b = modes.AITER_DEFAULT_BOUND
    assert (sg.ROW_TOKENS["dsv4-flash-tp16-ep2-ip96"], sg.ROW_TOKENS["dsv4-pro-tp8"]) == (b - 1, b)
    assert _s1(executed[f"bound M={b - 1}"])["act_dtype"] != _s1(executed[f"bound M={b}"])["act_dtype"]


@pytest.mark.slow
def test_row_tokens_sit_on_the_sides_of_the_executed_ksplit_switch(executed):
    assert executed[f"dsv4-pro-tp16 M={sg.ROW_TOKENS['dsv4-pro-tp16']}"]["ksplit"] > 0  # P <= experts: k-split
    assert executed[f"dsv4-flash-tp8 M={sg.ROW_TOKENS['dsv4-flash-tp8']}"]["ksplit"] == 0  # P > experts: none


@pytest.fixture(scope="module")
def nt_switch(executed):
    """use_non_temporal_load as ck_moe_stage1 receives it, around the token count ROW_TOKENS pins."""
    out = {}
    for M in (64, 65, 127, 128):
        s = next(s for s in executed[f"nt M={M}"]["stages"] if s["op"] == "ck_moe_stage1")
        out[M] = s["nt"]
    return out


@pytest.mark.slow
def test_use_nt_switches_on_the_padded_token_count(nt_switch):
    # get_2stage_cfgs is asked with get_padded_M(M): use_nt(P / experts < 64) flips between 64 and 65 tokens
    assert nt_switch[64] is True and nt_switch[65] is False and nt_switch[127] is nt_switch[128] is False


@pytest.mark.slow
def test_row_tokens_sit_on_the_sides_of_the_executed_nt_switch(nt_switch):
    assert nt_switch[sg.ROW_TOKENS["dsv4-flash-tp8-ip320"]] is True
    assert nt_switch[sg.ROW_TOKENS["dsv4-pro-tp8-ep2-ip160"]] is False


@pytest.mark.slow
def test_tensor_attrs_is_shuffled_is_read_where_the_table_says_and_changes_the_kernels(executed):
    on, off = executed["bound M=255"], executed["unshuffled M=32"]
    assert on["is_shuffled_read"] is True and off["is_shuffled_read"] is False
    assert "preshuffle_off" in (_s1(off)["module"] or "") and "preshuffle_on" in (_s1(on)["module"] or "")
    cited = contracts.cited_lines(TREE)["is_shuffled read and honoured"]
    assert cited in tensor_attrs.KNOWN[("w1", "is_shuffled")].where


@pytest.mark.slow
def test_tensor_attrs_w1_dtype_is_the_executed_weight_dtype_key(executed):
    # get_2stage_cfgs' q_dtype_w (its 8th argument) is w1.dtype; fused_moe.py's fp4x2 test reads it there
    for f in executed.values():
        if f["cfg_key"]:
            assert f["cfg_key"][7] == "torch.float4_e2m1fn_x2", f["id"]
    assert tensor_attrs.KNOWN[("w1", "dtype")].meaning == "fp4x2"


def test_tensor_attrs_table_is_every_read_of_the_tree():
    """KNOWN's file:lines are what the tree's source reads (w2.inter_real's reader is on no
    executed DeepSeek-V4 row: it is checked here, against the source, only)."""
    got = tensor_attrs.scan(TREE)
    assert {k: set(v.where) for k, v in tensor_attrs.KNOWN.items()} == {k: set(v) for k, v in got.items()}


@pytest.mark.slow
def test_sglang_quant_dtype_a_keyword_is_refused_by_this_fused_moe(executed):
    f = executed["quant_dtype_a M=32"]
    assert f["error"] and "quant_dtype_a" in f["error"] and "TypeError" in f["error"]
    assert {r for _, r, _ in contracts.judge_row(f)} == {contracts.NA}
