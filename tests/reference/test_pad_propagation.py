"""The pad-propagation contract (SGLang PR #27858): the pad the weight path records must be
the pad that reaches the kernel's ``fused_moe`` as a keyword argument.

A spy backend records every ``fused_moe`` call made through the one call site
(``quant_info.call_fused_moe``); the test fails when the keywords disagree with the layer's
record, or the record disagrees with the catalogue arithmetic ``ceil(I_p/align)*align - I_p``.
"""

from __future__ import annotations

import math

import pytest

from fp4moe.model import catalogue
from fp4moe.reference import inputs, quant_info, weight_path
from fp4moe.reference.inputs import SpyBackend


def assert_pads_reached_kernel(spy: SpyBackend, pw: weight_path.ProcessedMoEWeights) -> None:
    assert spy.calls, "fused_moe was never called"
    for call in spy.calls:
        assert call["intermediate_pad"] == pw.intermediate_pad, (
            f"intermediate_pad {call['intermediate_pad']} reached fused_moe, layer recorded {pw.intermediate_pad}"
        )
        assert call["hidden_pad"] == pw.hidden_pad, f"hidden_pad {call['hidden_pad']} != recorded {pw.hidden_pad}"
        assert call["w1"] is pw.w13 and call["w2"] is pw.w2
        assert call["w1_scale"] is pw.w13_scale and call["w2_scale"] is pw.w2_scale


ROWS = catalogue.catalogue_rows()


@pytest.mark.parametrize("align", [128, 256])
@pytest.mark.parametrize("pc", ROWS, ids=[pc.label for pc in ROWS])
def test_recorded_pad_reaches_fused_moe(pc, align):
    i_p = pc.model.moe_intermediate // (pc.tp // pc.ep)  # the catalogue arithmetic, by hand
    expected_pad = math.ceil(i_p / align) * align - i_p
    raw = inputs.make_raw_layer(experts=2, hidden=128, intermediate=i_p, seed=21)
    pw = weight_path.process_fp4_moe_weights(*raw.tensors(), align=align)
    assert pw.intermediate_pad == expected_pad and pw.hidden_pad == 0
    info = quant_info.build_quant_info(pw)
    assert info.intermediate_pad == expected_pad and info.hidden_pad == 0
    spy = SpyBackend()
    x, w, ids = inputs.make_tokens(tokens=2, hidden=128, experts=2, top_k=1, seed=22)
    quant_info.call_fused_moe(spy, x, w, ids, info)
    assert_pads_reached_kernel(spy, pw)


def test_spy_catches_a_dropped_pad():
    """The check itself must fail when the pad is lost between record and kernel (#27858)."""
    raw = inputs.make_raw_layer(experts=2, hidden=128, intermediate=384, seed=23)
    pw = weight_path.process_fp4_moe_weights(*raw.tensors(), align=256)
    assert pw.intermediate_pad == 128
    info = quant_info.build_quant_info(pw)
    info.intermediate_pad = 0  # what SGLang did before PR #27858
    spy = SpyBackend()
    x, w, ids = inputs.make_tokens(tokens=2, hidden=128, experts=2, top_k=1, seed=24)
    quant_info.call_fused_moe(spy, x, w, ids, info)
    with pytest.raises(AssertionError, match="intermediate_pad 0 reached fused_moe"):
        assert_pads_reached_kernel(spy, pw)


def test_a_recorded_hidden_pad_reaches_fused_moe_too():
    """The weight path records hidden_pad = 0 today; the contract must still carry any value."""
    raw = inputs.make_raw_layer(experts=2, hidden=128, intermediate=384, seed=28)
    pw = weight_path.process_fp4_moe_weights(*raw.tensors(), align=256)
    pw.hidden_pad = 32
    spy = SpyBackend()
    x, w, ids = inputs.make_tokens(tokens=2, hidden=128, experts=2, top_k=1, seed=29)
    quant_info.call_fused_moe(spy, x, w, ids, quant_info.build_quant_info(pw))
    assert_pads_reached_kernel(spy, pw)
    assert spy.calls[0]["hidden_pad"] == 32


def test_quant_info_has_sglang_fields():
    fields = set(quant_info.AiterMoeQuantInfo.__dataclass_fields__)
    sglang = {"w13_weight", "w2_weight", "quant_type", "w13_scale", "w2_scale", "a13_scale", "a2_scale", "b13",
              "b2", "expert_mask", "doweight_stage1", "hidden_pad", "intermediate_pad", "swiglu_limit"}
    assert sglang <= fields


def test_builder_rejects_unshuffled_weights():
    raw = inputs.make_raw_layer(experts=1, hidden=128, intermediate=64, seed=25)
    pw = weight_path.process_fp4_moe_weights(*raw.tensors(), shuffle=False)
    with pytest.raises(ValueError, match="shuffled"):
        quant_info.build_quant_info(pw)


def test_swiglu_limit_and_gate_mode_reach_the_kernel():
    raw = inputs.make_raw_layer(experts=2, hidden=128, intermediate=64, seed=26)
    for gu, mode in ((True, "interleave"), (False, "separated")):
        pw = weight_path.process_fp4_moe_weights(*raw.tensors(), gu_interleave=gu)
        spy = SpyBackend()
        x, w, ids = inputs.make_tokens(tokens=2, hidden=128, experts=2, top_k=1, seed=27)
        quant_info.call_fused_moe(spy, x, w, ids, quant_info.build_quant_info(pw, swiglu_limit=7.0), act_mode="a8w4")
        assert spy.calls[0]["swiglu_limit"] == 7.0
        assert spy.calls[0]["gate_mode"] == mode
        assert spy.calls[0]["act_mode"] == "a8w4"
        assert spy.calls[0]["quant_type"] == "per_1x32"


#: every AiterMoeQuantInfo field -> the fused_moe keyword that must carry it
FIELD_TO_KEYWORD = {
    "w13_weight": "w1", "w2_weight": "w2", "quant_type": "quant_type", "w13_scale": "w1_scale", "w2_scale": "w2_scale",
    "a13_scale": "a1_scale", "a2_scale": "a2_scale", "b13": "bias1", "b2": "bias2", "expert_mask": "expert_mask",
    "doweight_stage1": "doweight_stage1", "hidden_pad": "hidden_pad", "intermediate_pad": "intermediate_pad",
    "swiglu_limit": "swiglu_limit", "gu_interleave": "gate_mode",
}


@pytest.mark.parametrize("act", ["a16w4", "a8w4"])
def test_every_quant_info_field_reaches_its_fused_moe_keyword(act):
    """Field by field, each set to a value no default has (tensors by identity, the EP mask
    over global expert ids included): a call site that drops or swaps any one fails."""
    import torch

    assert set(FIELD_TO_KEYWORD) == set(quant_info.AiterMoeQuantInfo.__dataclass_fields__), "a field without a keyword"
    raw = inputs.make_raw_layer(experts=2, hidden=128, intermediate=64, seed=30)
    pw = weight_path.process_fp4_moe_weights(*raw.tensors(), align=128, gu_interleave=False)
    mask = torch.tensor([0, 1, 0, 1], dtype=torch.int32)  # 4 global experts, this rank holds 1 and 3
    info = quant_info.build_quant_info(pw, swiglu_limit=7.0, expert_mask=mask, doweight_stage1=True)
    info.a13_scale, info.a2_scale = torch.ones(1), torch.ones(2)
    info.b13, info.b2 = torch.zeros(3), torch.zeros(4)
    info.hidden_pad = 32
    calls = []

    class Recorder:  # records only: the reference backend rejects the static scales and biases set here
        def fused_moe(self, hidden_states, w1, w2, topk_weight, topk_ids, **kw):
            calls.append(dict(kw, w1=w1, w2=w2, topk_ids=topk_ids))
            return hidden_states

    x, w, ids = inputs.make_tokens(tokens=2, hidden=128, experts=2, top_k=1, seed=31)
    quant_info.call_fused_moe(Recorder(), x, w, ids * 2 + 1, info, act_mode=act)
    call = calls[0]
    for field, kw in FIELD_TO_KEYWORD.items():
        value = getattr(info, field)
        if field == "gu_interleave":
            assert call[kw] == ("interleave" if value else "separated")
        elif isinstance(value, torch.Tensor):
            assert call[kw] is value, f"{field} did not reach fused_moe({kw}=...)"
        else:
            assert call[kw] == value and type(call[kw]) is type(value), f"{field}={value!r} reached {kw}={call[kw]!r}"
    assert call["act_mode"] == act
    assert torch.equal(call["topk_ids"], ids * 2 + 1)  # global ids go through unchanged
