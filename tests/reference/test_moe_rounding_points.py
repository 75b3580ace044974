"""The reference's optional rounding points of aiter's other paths: ``gate_up_dtype`` (CK-tile
split-k's bf16 gate/up workspace) and ``stage2_act="mxfp4"`` (the CK 2-stage MXFP4 inter-stage)."""

import pytest
import torch

from fp4moe.mx import mxfp4, mxfp8
from fp4moe.reference import kernel_budget, moe
from fp4moe.reference.inputs import make_raw_layer, make_tokens

E, H, I = 4, 256, 128


def _case():
    raw = make_raw_layer(experts=E, hidden=H, intermediate=I, seed=31)
    ew = moe.ExpertWeights(raw.w13, raw.w13_scale, raw.w2, raw.w2_scale)
    x, w, ids = make_tokens(tokens=8, hidden=H, experts=E, top_k=2, seed=32)
    return ew, x, w, ids


def test_gate_up_dtype_rounds_gate_and_up_before_the_activation():
    ew, x, w, ids = _case()
    trace: dict = {}
    moe.fused_moe_unshuffled(x, ew, w, ids, gate_up_dtype=torch.bfloat16, trace=trace)
    tok, slot = 3, 1
    e = int(ids[tok, slot])
    gw, gs, uw, us = ew.gate_up(e, I, H)
    w13 = torch.cat((mxfp4.dequantize(gw, gs), mxfp4.dequantize(uw, us)))
    gu = (x[tok : tok + 1].float() @ w13.T).to(torch.bfloat16).float()
    want = (torch.nn.functional.silu(gu[:, :I]) * gu[:, I:]).to(torch.bfloat16)
    assert torch.equal(trace["stage1"][tok, slot], want[0])
    plain = moe.fused_moe_reference(x, ew, w, ids)
    rounded = moe.fused_moe_reference(x, ew, w, ids, gate_up_dtype=torch.bfloat16)
    assert 0 < kernel_budget.rel_l2(rounded, plain) < kernel_budget.KERNEL_REL_L2


def test_stage2_act_mxfp4_quantizes_what_stage_2_reads():
    ew, x, w, ids = _case()
    trace: dict = {}
    got = moe.fused_moe_unshuffled(x, ew, w, ids, stage2_act="mxfp4", trace=trace)
    a = trace["stage1"]  # the bf16 stage-1 buffer
    q = mxfp4.dequantize(*mxfp4.quantize(a.float(), mxfp8.ACT_SCALE_MODE))
    want = torch.zeros((x.shape[0], H))
    for t in range(x.shape[0]):
        for k in range(2):
            e = int(ids[t, k])
            dw, ds = ew.down(e, H, I)
            want[t] += (q[t, k : k + 1] @ mxfp4.dequantize(dw, ds).T)[0] * w[t, k]
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(got, moe.fused_moe_unshuffled(x, ew, w, ids), rtol=1e-3, atol=0)


def test_an_unknown_stage2_act_is_refused_by_name():
    ew, x, w, ids = _case()
    with pytest.raises(ValueError, match="stage2_act must be one of"):
        moe.fused_moe_unshuffled(x, ew, w, ids, stage2_act="mxfp6")


def test_slot_quant_mxfp8_route_stores_each_weighted_slot_row_as_the_route_output():
    """``slot_quant="mxfp8_route"``: each weighted slot row, bf16-rounded, is what the MXFP8 route
    output holds (e4m3, one e8m0 per 8 columns by the headroom rule), dequantized, then summed."""
    ew, x, w, ids = _case()
    plain_trace: dict = {}
    trace: dict = {}
    plain = moe.fused_moe_unshuffled(x, ew, w, ids, trace=plain_trace)
    got = moe.fused_moe_unshuffled(x, ew, w, ids, slot_quant="mxfp8_route", trace=trace)
    staged = plain_trace["slots"].to(torch.bfloat16).float()
    elems, scale = mxfp8.quantize(staged, "floor_headroom", block=8)
    assert scale.shape[-1] == H // 8
    want = mxfp8.dequantize(elems, scale, block=8)
    assert torch.equal(trace["slots"], want)
    assert torch.equal(got, want.sum(1))
    bf16_slots = moe.fused_moe_unshuffled(x, ew, w, ids, slot_dtype=torch.bfloat16)
    assert 0 < kernel_budget.rel_l2(got, plain) and not torch.equal(got, bf16_slots)


def test_an_unknown_slot_quant_is_refused_naming_the_option():
    ew, x, w, ids = _case()
    with pytest.raises(ValueError, match="slot_quant must be one of .'mxfp8_route',. or None, got 'mxfp8'"):
        moe.fused_moe_unshuffled(x, ew, w, ids, slot_quant="mxfp8")
