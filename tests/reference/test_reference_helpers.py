"""The reference's small helpers, each pinned by value:

- ``inputs.device_params`` / ``inputs.scaled_row``: the device parameters every device test
  runs with (the CPU always, the GPU under the ``gpu`` marker) and a catalogue row scaled down;
- ``backend.FusedMoEKeywords.as_dict``: every keyword with its value, in order;
- ``kernel_budget.rel_l2`` / ``cosine_distance``: the formulas in float64, on values float32
  arithmetic would round;
- ``pads``: the rounding rule one below, at and one above each multiple, and the shapes of the
  two scale shuffles.
"""

from __future__ import annotations

import math

import pytest
import torch

from fp4moe.model.catalogue import parallel_config
from fp4moe.reference import inputs, kernel_budget, pads
from fp4moe.reference.backend import KEYWORDS, FusedMoEKeywords


def test_device_params_are_the_cpu_always_and_the_gpu_under_its_marker():
    cpu, gpu = inputs.device_params()
    assert (cpu.values, cpu.id, tuple(cpu.marks)) == (("cpu",), "cpu", ())
    assert (gpu.values, gpu.id) == (("cuda",), "cuda")
    assert [m.name for m in gpu.marks] == ["gpu"]


def test_a_scaled_row_keeps_the_real_intermediate_and_takes_the_rest_as_given():
    pc = parallel_config("dsv4-pro", 8)
    assert inputs.scaled_row(pc) == inputs.ScaledRow(pc.label, 384, 4, 256, 2)
    assert inputs.scaled_row(pc, experts=3, hidden=512, top_k=1) == inputs.ScaledRow(pc.label, 384, 3, 512, 1)


def test_keywords_as_dict_hold_every_keyword_with_its_value_in_order():
    mask = torch.tensor([1, 0, 1])
    d = FusedMoEKeywords(expert_mask=mask, intermediate_pad=128, swiglu_limit=7.0).as_dict()
    assert list(d) == list(KEYWORDS)
    assert torch.equal(d["expert_mask"], mask) and d["intermediate_pad"] == 128 and d["swiglu_limit"] == 7.0
    assert d["activation"] == "silu" and d["gate_mode"] == "interleave" and d["hidden_pad"] == 0


def test_rel_l2_and_cosine_distance_are_their_formulas_in_float64():
    b = torch.tensor([3.0, 4.0, 0.0, 12.0])  # ||b|| = 13
    a = b + torch.tensor([1e-7, 0.0, 0.0, 0.0])  # float32 rounds 3 + 1e-7 to 3 + 2^-22
    d = float(a[0].double() - 3.0)
    assert kernel_budget.rel_l2(a, b) == pytest.approx(d / 13.0, rel=1e-12)
    assert kernel_budget.rel_l2(b, b) == 0.0
    assert kernel_budget.rel_l2(2 * b, b) == pytest.approx(1.0, rel=1e-15)
    # orthogonal: 1; opposite: 2; the same direction at another length: 0
    x, y = torch.tensor([[1.0, 0.0], [0.0, 0.0]]), torch.tensor([[0.0, 2.0], [0.0, 0.0]])
    assert kernel_budget.cosine_distance(x, y) == pytest.approx(1.0, abs=1e-15)
    assert kernel_budget.cosine_distance(x, -3 * x) == pytest.approx(2.0, abs=1e-15)
    assert kernel_budget.cosine_distance(b, 5 * b) == pytest.approx(0.0, abs=1e-15)
    u, v = torch.tensor([1.0, 1.0]), torch.tensor([1.0, 0.0])
    assert kernel_budget.cosine_distance(u, v) == pytest.approx(1 - 1 / math.sqrt(2), rel=1e-12)


def test_the_kernel_budget_figures():
    assert (kernel_budget.KERNEL_REL_L2, kernel_budget.KERNEL_COS_DIST) == (6e-3, 2e-5)


@pytest.mark.parametrize("x, m, want", [(0, 128, 0), (1, 128, 128), (127, 128, 128), (128, 128, 128),
                                        (129, 128, 256), (384, 128, 384), (384, 256, 512), (7, 8, 8), (9, 8, 16)])
def test_round_up_at_and_either_side_of_a_multiple(x, m, want):
    assert pads.round_up(x, m) == want


@pytest.mark.parametrize("intermediate, align, padded, pad", [(384, 128, 384, 0), (384, 256, 512, 128),
                                                              (96, 128, 128, 32), (129, 128, 256, 127)])
def test_a_pad_plan_pads_to_its_alignment(intermediate, align, padded, pad):
    plan = pads.PadPlan(intermediate, align)
    assert (plan.padded, plan.intermediate_pad) == (padded, pad)


def test_the_scale_shuffle_shapes():
    assert (pads.DEFAULT_ALIGN, pads.LEGACY_ALIGN, pads.SCALE_ROW_ALIGN, pads.SCALE_COL_ALIGN) == (128, 256, 256, 8)
    assert pads.shuffled_scale_shape(257, 12) == (512, 16)
    assert pads.shuffled_scale_shape(256, 8) == (256, 8)
    assert pads.shuffled_scale_shape(257, 12, is_guinterleave=True) == (257, 16)
    assert pads.shuffled_scale_shape(257, 12, False) == (512, 16)


def test_a_raw_layer_is_seeded_and_has_the_spread_asked_for():
    from fp4moe.mx import mxfp4

    a = inputs.make_raw_layer(experts=2, hidden=128, intermediate=64, seed=1)
    b = inputs.make_raw_layer(experts=2, hidden=128, intermediate=64, seed=1)
    c = inputs.make_raw_layer(experts=2, hidden=128, intermediate=64, seed=2)
    assert all(torch.equal(x, y) for x, y in zip(a.tensors(), b.tensors()))
    assert not torch.equal(a.w13, c.w13) and not torch.equal(a.w2, c.w2)
    for packed, scale in ((a.w13, a.w13_scale), (a.w2, a.w2_scale)):
        std = float(mxfp4.dequantize(packed, scale).std())
        assert 0.018 < std < 0.022, std  # the default std 0.02, through MXFP4's round_up scales
    wide = inputs.make_raw_layer(experts=2, hidden=128, intermediate=64, seed=1, std=0.5)
    assert 0.45 < float(mxfp4.dequantize(wide.w2, wide.w2_scale).std()) < 0.55
    with pytest.raises(ValueError, match=r"^w13: last dim must be a multiple of 32"):
        inputs.make_raw_layer(experts=1, hidden=48, intermediate=64, seed=1)
    with pytest.raises(ValueError, match=r"^w2: last dim must be a multiple of 32"):
        inputs.make_raw_layer(experts=1, hidden=64, intermediate=48, seed=1)


def test_tokens_are_seeded_bf16_with_float32_weights_and_int32_ids():
    a = inputs.make_tokens(tokens=5, hidden=64, experts=4, top_k=2, seed=3)
    b = inputs.make_tokens(tokens=5, hidden=64, experts=4, top_k=2, seed=3)
    c = inputs.make_tokens(tokens=5, hidden=64, experts=4, top_k=2, seed=4)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a[0], c[0]) and not torch.equal(a[1], c[1])
    x, w, ids = a
    assert (x.dtype, w.dtype, ids.dtype) == (torch.bfloat16, torch.float32, torch.int32)
    assert (tuple(x.shape), tuple(w.shape), tuple(ids.shape)) == ((5, 64), (5, 2), (5, 2))
    assert float(x.float().std()) > 0.5 and torch.allclose(w.sum(-1), torch.ones(5))


def test_inputs_are_built_on_the_device_asked_for():
    raw = inputs.make_raw_layer(experts=2, hidden=64, intermediate=32, seed=1, device="meta")
    assert [t.device.type for t in raw.tensors()] == ["meta"] * 4 and raw.expert_ids == (0, 1)
    assert [t.device.type for t in inputs.make_tokens(tokens=2, hidden=64, experts=2, top_k=1, seed=1, device="meta")] == ["meta"] * 3
