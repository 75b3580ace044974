"""MX quantizers at the edges a mutation run found unprobed: the float32-quotient scale rule
when the quotient is an exact power of two, exponents clamped at the bottom of E8M0, E4M3
saturation in both directions, half-precision inputs, and batched (3-d) tensors, checked row by
row against the 2-d path."""

import pytest
import torch

from fp4moe.mx import block_scale, e8m0, mxfp4, mxfp8


@pytest.mark.parametrize("elem_max, emax", [(6.0, 2), (448.0, 8)])
@pytest.mark.parametrize("k", [-3, 0, 5])
def test_round_up_f32_adds_nothing_when_the_quotient_is_a_power_of_two(elem_max, emax, k):
    amax = torch.tensor([elem_max * 2.0 ** k], dtype=torch.float32)
    assert block_scale.shared_exponent(amax, "round_up_f32", emax, elem_max).item() == k
    above = torch.nextafter(amax, torch.tensor(float("inf")))
    assert block_scale.shared_exponent(above, "round_up_f32", emax, elem_max).item() == k + 1
    assert block_scale.shared_exponent(amax, "round_up", emax, elem_max).item() == k


def test_fp8_activation_scale_of_an_exact_448_block_is_one():
    x = torch.zeros(1, 32)
    x[0, 3] = 448.0
    elems, scale = mxfp8.quantize(x, mxfp8.ACT_SCALE_MODE)
    assert scale.item() == e8m0.E8M0_ONE and elems.to(torch.float32)[0, 3].item() == 448.0


def test_fp4_exponent_is_clamped_at_the_bottom_of_e8m0_before_scaling():
    # floor(log2(1e-40)) - 2 = -135: below E8M0's -127, so the block is scaled by 2^127 only and
    # every element rounds to zero; without the clamp they would be scaled by 2^135 (code 4)
    x = torch.zeros(1, 32)
    x[0, 0] = 1e-40
    for mode in ("floor", "round_up"):
        packed, scale = mxfp4.quantize(x, mode)
        assert scale.item() == 0x00 and int(packed.max()) == 0, mode


def test_fp8_saturates_at_448_in_both_directions_in_floor_mode():
    x = torch.zeros(1, 32)
    x[0, 0], x[0, 1] = 1.9 * 256, -1.9 * 256  # significand 1.9 > 1.75: floor keeps scale 2^0
    elems, scale = mxfp8.quantize(x, "floor")
    got = mxfp8.dequantize(elems, scale)
    assert scale.item() == e8m0.E8M0_ONE
    assert got[0, 0].item() == 448.0 and got[0, 1].item() == -448.0


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("mode", ["even", "round_up_f32", "floor"])
def test_half_precision_inputs_quantize_like_their_float32_values(dtype, mode):
    g = torch.Generator().manual_seed(41)
    x = (torch.randn(3, 64, generator=g) * 3).to(dtype)
    for q in (mxfp8.quantize, mxfp4.quantize):
        a, sa = q(x, mode)
        b, sb = q(x.to(torch.float32), mode)
        assert torch.equal(sa, sb) and torch.equal(a.view(torch.uint8), b.view(torch.uint8)), (q.__module__, mode)


@pytest.mark.parametrize("codec", [mxfp4, mxfp8])
def test_batched_tensors_are_quantized_row_by_row(codec):
    g = torch.Generator().manual_seed(42)
    x = torch.randn(2, 3, 96, generator=g) * torch.logspace(-3, 3, 3).view(1, 3, 1)
    q, s = codec.quantize(x, "round_up")
    assert s.shape == (2, 3, 3)
    flat_q, flat_s = codec.quantize(x.reshape(6, 96), "round_up")
    assert torch.equal(s.reshape(6, 3), flat_s)
    assert torch.equal(q.view(torch.uint8).reshape(6, -1), flat_q.view(torch.uint8))
    back = codec.dequantize(q, s)
    assert back.shape == (2, 3, 96) and torch.equal(back.reshape(6, 96), codec.dequantize(flat_q, flat_s))


def test_fp8_dequantize_refuses_3d_shapes_that_differ_in_a_leading_dim():
    s = torch.full((2, 3, 2), 0x7F, dtype=torch.uint8)
    mxfp8.dequantize(torch.zeros(2, 3, 64).to(torch.float8_e4m3fn), s)
    for shape in ((2, 4, 64), (3, 3, 64), (2, 3, 96)):
        with pytest.raises(ValueError, match="does not match scale shape"):
            mxfp8.dequantize(torch.zeros(shape).to(torch.float8_e4m3fn), s)


@pytest.mark.parametrize("codec", [mxfp4, mxfp8])
def test_default_tensor_name_is_x(codec):
    with pytest.raises(ValueError, match=r"^x: last dim must be a multiple of 32"):
        codec.quantize(torch.ones(31))


def test_fp8_exponent_is_clamped_at_the_bottom_of_e8m0_before_scaling():
    # floor(log2(1e-40)) - 8 = -141: clamped to -127, the block is scaled by 2^127 and its elements
    # land in E4M3's subnormals; unclamped they would be scaled by 2^141 and decode 2^14 too large
    x = torch.zeros(1, 32)
    x[0, 0] = 1e-40
    elems, scale = mxfp8.quantize(x, "floor")
    back = mxfp8.dequantize(elems, scale)
    assert scale.item() == 0x00 and abs(back[0, 0].item() - 1e-40) < 2e-41
