"""Edges of the layouts, the weight path and the exact MoE that the main tests pass over:

- the layouts' defaults (plain variant, no gate/up) round-trip, the padding mask's default is
  the plain layout, and errors name the tensor the caller passed;
- ``unshuffled_views`` on a layer whose w2 scale rows (E * H = 384) are no multiple of 256, where
  the two scale layouts differ in shape, so reading it with the wrong one cannot pass;
- ``ExpertWeights.validate`` names the tensor and the shape it expected, in integers;
- the MoE's optional quant points against their definitions on values where the scale rules
  differ, and the float64 oracle computes in float64.
"""

from __future__ import annotations

import pytest
import torch

from fp4moe.mx import mxfp4, mxfp8
from fp4moe.reference import inputs, layout, moe, pads, weight_path


def _bytes(*shape, seed=0, high=255):
    return torch.randint(0, high, shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def test_the_scale_shuffles_default_to_the_plain_layout_without_gate_up():
    s = _bytes(64, 12, seed=1)
    plain = layout.shuffle_scale(s)
    assert plain.shape == (256, 16)
    assert torch.equal(layout.unshuffle_scale(plain, 64, 12), s)
    mask = layout.scale_padding_mask(64, 12)
    assert mask.shape == (256, 16) and int(mask.sum()) == 256 * 16 - 64 * 12
    assert torch.equal(plain[mask], torch.zeros(int(mask.sum()), dtype=torch.uint8))
    # one expert's rows: the plain layout by default
    assert torch.equal(layout.unshuffle_scale_rows(plain[:64], 12), s)
    # the interleaved layout read back with gate_up left at its default (False)
    itlv = layout.shuffle_scale(s, experts_cnt=2, is_guinterleave=True, gate_up=False)
    assert torch.equal(layout.unshuffle_scale(itlv, 64, 12, experts_cnt=2, is_guinterleave=True), s)
    assert torch.equal(layout.unshuffle_scale_rows(itlv[:32], 12, is_guinterleave=True), s[:32])


def test_scale_inverse_errors_name_the_tensor():
    with pytest.raises(TypeError, match=r"^shuffled scale: expected a byte tensor"):
        layout.unshuffle_scale(torch.zeros(256, 16), 64, 12)
    with pytest.raises(TypeError, match=r"^scale block: expected a byte tensor"):
        layout.unshuffle_scale_rows(torch.zeros(64, 16), 12)
    with pytest.raises(ValueError, match=r"^shuffled scale: experts_cnt is required when is_guinterleave=True"):
        layout.unshuffle_scale(_bytes(64, 16), 64, 12, is_guinterleave=True)
    with pytest.raises(ValueError, match=r"^scale block: 12 columns, expected 16 for K/32 = 12$"):
        layout.unshuffle_scale_rows(_bytes(64, 12), 12)


@pytest.mark.parametrize("gu", [True, False])
def test_unshuffled_views_read_each_layout_back_where_the_layouts_differ_in_shape(gu):
    raw = inputs.make_raw_layer(experts=1, hidden=384, intermediate=64, seed=5)
    pw = weight_path.process_fp4_moe_weights(raw.w13, raw.w13_scale, raw.w2, raw.w2_scale, gu_interleave=gu)
    plain = weight_path.process_fp4_moe_weights(raw.w13, raw.w13_scale, raw.w2, raw.w2_scale, shuffle=False)
    assert pw.w2_scale.shape == ((384, 8) if gu else (512, 8))
    for got, want in zip(weight_path.unshuffled_views(pw), (plain.w13, plain.w13_scale, plain.w2, plain.w2_scale)):
        assert torch.equal(got, want)


def test_pad_table_defaults_to_one_expert_parallel_rank():
    assert weight_path.pad_table("dsv4-pro", 8) == pads.PadPlan(384, 128)
    assert weight_path.pad_table("dsv4-pro", 8, 2) == pads.PadPlan(768, 128)


@pytest.mark.parametrize("name, shape, want", [
    ("w1_scale", (1, 256, 4), "(1, 256, 8)"),
    ("w2", (1, 256, 32), "(1, 256, 64)"),
    ("w2_scale", (1, 256, 2), "(1, 256, 4)"),
])
def test_expert_weights_validate_names_the_tensor_and_the_shape_it_expected(name, shape, want):
    good = {"w13": _bytes(1, 256, 128), "w13_scale": _bytes(1, 256, 8), "w2": _bytes(1, 256, 64),
            "w2_scale": _bytes(1, 256, 4)}
    key = {"w1_scale": "w13_scale"}.get(name, name)
    ew = moe.ExpertWeights(**{**good, key: _bytes(*shape)})
    msg = f"{name}: shape {shape} does not match w1 (1, 256, 128); expected {want}"
    with pytest.raises(ValueError, match="^" + msg.replace("(", r"\(").replace(")", r"\)") + "$"):
        ew.validate()


def test_the_mxfp8_route_rule_is_the_headroom_rule_on_the_bf16_row():
    y = torch.randn((16, 256), generator=torch.Generator().manual_seed(3)) * 0.01
    # a block whose small element falls into e4m3's subnormals one binade apart under the two
    # rules: the headroom rule (scale 2^-7) keeps more of it than round_up (scale 2^-8)
    y[0, :8] = torch.tensor([1.0, 1.3 * 2**-15, 0, 0, 0, 0, 0, 0])
    got = moe.SLOT_QUANT_FUNCS["mxfp8_route"](y)
    staged = y.to(torch.bfloat16).float()
    want = mxfp8.dequantize(*mxfp8.quantize(staged, mxfp8.ROUTE_OUT_SCALE_MODE, block=8), block=8)
    assert got.dtype == torch.float32 and torch.equal(got, want)
    assert got[0, 1] != mxfp8.fake_quantize(staged, mxfp8.ACT_SCALE_MODE, block=8)[0, 1]


def test_the_stage_2_mxfp4_quant_is_the_run_time_rule_down_to_subnormal_blocks():
    # amax / 6 <= 2^-127: aiter's float32 rule gives scale byte 0x01 where round_up clamps to 0x00
    a = torch.full((1, 32), 2.0**-128)
    a[0, 0] = 1.5 * 2**-127
    got = moe._stage2_quant(a.to(torch.bfloat16), "mxfp4")
    assert torch.equal(got, mxfp4.dequantize(*mxfp4.quantize(a, mxfp8.ACT_SCALE_MODE)))
    assert not torch.equal(got, mxfp4.dequantize(*mxfp4.quantize(a, "round_up")))


def _layer():
    raw = inputs.make_raw_layer(experts=2, hidden=128, intermediate=64, seed=11)
    ew = moe.ExpertWeights(raw.w13, raw.w13_scale, raw.w2, raw.w2_scale)
    x, w, ids = inputs.make_tokens(tokens=4, hidden=128, experts=2, top_k=1, seed=12)
    return ew, x, w, ids


def test_the_oracle_accumulates_in_float64():
    ew, x, w, ids = _layer()
    out = moe.fused_moe_oracle(x, ew, w, ids)
    assert out.dtype == torch.float64
    assert moe.fused_moe_reference(x, ew, w, ids).dtype == torch.bfloat16


def test_a_stage_2_input_that_cannot_be_quantized_is_named():
    ew, x, w, ids = _layer()
    big = torch.full_like(x, 3e38)  # gate and up overflow: the stage-1 buffer holds inf
    with pytest.raises(ValueError, match=r"^stage-2 input: contains NaN or Inf"):
        moe.fused_moe_unshuffled(big, ew, w, ids, stage2_act="mxfp4")


def test_a_scale_block_of_a_partial_row_group_is_refused():
    with pytest.raises(ValueError, match=r"^scale block: rows 48 must be a multiple of 32$"):
        layout.unshuffle_scale_rows(_bytes(48, 16), 12)


def test_the_pad_builders_allocate_on_the_weights_device():
    # the meta device holds no data: a buffer made elsewhere could not take the weights' rows
    w13, w2 = torch.zeros((1, 192, 64), dtype=torch.uint8, device="meta"), torch.zeros((1, 128, 48), dtype=torch.uint8, device="meta")
    p13, p2 = weight_path.pad_weights(w13, w2, 96, 128)
    assert (p13.device.type, tuple(p13.shape), p2.device.type, tuple(p2.shape)) == ("meta", (1, 256, 64), "meta", (1, 128, 64))
    raw = inputs.make_raw_layer(experts=1, hidden=128, intermediate=64, seed=2)
    moved = inputs.layer_on(raw, "meta")
    assert moved.expert_ids == raw.expert_ids and all(t.device.type == "meta" for t in moved.tensors())


@pytest.mark.parametrize("gu", [True, False])
def test_scale_pad_masks_mark_exactly_the_padded_channels(gu):
    e, h, i, p = 2, 128, 96, 128
    raw = inputs.make_raw_layer(experts=e, hidden=h, intermediate=i, seed=8)
    want13 = torch.zeros((e, 2 * p, h // 32), dtype=torch.bool)
    want13[:, i:p] = True
    want13[:, p + i :] = True
    want2 = torch.zeros((e, h, p // 32), dtype=torch.bool)
    want2[:, :, i // 32 :] = True
    plain = weight_path.process_fp4_moe_weights(*raw.tensors(), shuffle=False)
    m13, m2 = inputs.scale_pad_masks(plain)
    assert torch.equal(m13, want13) and torch.equal(m2, want2)
    pw = weight_path.process_fp4_moe_weights(*raw.tensors(), gu_interleave=gu)
    s13, s2 = inputs.scale_pad_masks(pw)
    assert s13.shape == pw.w13_scale.shape and s2.shape == pw.w2_scale.shape
    back13 = layout.unshuffle_scale(s13.to(torch.uint8), e * 2 * p, h // 32, e, gu, gate_up=True)
    back2 = layout.unshuffle_scale(s2.to(torch.uint8), e * h, p // 32, e, gu, gate_up=False)
    assert torch.equal(back13.bool(), want13.reshape(e * 2 * p, -1)) and torch.equal(back2.bool(), want2.reshape(e * h, -1))
    assert int(s13.sum()) == int(want13.sum()) and int(s2.sum()) == int(want2.sum())  # no shuffle growth marked


def test_raw_weight_checks_name_the_tensor_and_the_shape_in_integers():
    raw = inputs.make_raw_layer(experts=2, hidden=128, intermediate=64, seed=13)
    w13, s13, w2, s2 = raw.tensors()  # [2, 128, 64], [2, 128, 4], [2, 128, 32], [2, 128, 2]
    cases = [
        ((w13, s13[:, :, :2], w2, s2), "w13_scale: shape (2, 128, 2) does not match w13 (2, 128, 64); expected (2, 128, 4)"),
        ((w13, s13, w2[:, :, :16], s2), "w2: shape (2, 128, 16) does not match w13 (2, 128, 64); expected (2, 128, 32)"),
        ((w13, s13, w2, s2[:, :, :1]), "w2_scale: shape (2, 128, 1) does not match w13 (2, 128, 64); expected (2, 128, 2)"),
    ]
    for args, message in cases:
        with pytest.raises(ValueError) as e:
            weight_path.check_raw_moe_weights(*args)
        assert str(e.value) == message
    nan = s2.clone()
    nan[1, 5, 1] = 0xFF
    with pytest.raises(ValueError, match=r"^w2_scale"):
        weight_path.check_raw_moe_weights(w13, s13, w2, nan)
