"""MXFP8 activations (OCP MX spec v1.0: E4M3 section 5.3.1, emax 8, max normal 448; block 32)."""

from __future__ import annotations

import pytest
import torch

from fp4moe.mx import mxfp8

E4M3_MAX = 448.0  # OCP MX v1.0 table 2: S.1111.110 = 1.75 * 2^8


def _representable_blocks(seed: int, amax: float) -> torch.Tensor:
    """Random E4M3 values (NaN codes excluded) with one element +-amax per block, times 2^s."""
    g = torch.Generator().manual_seed(seed)
    b = torch.randint(0, 256, (64, 32), generator=g, dtype=torch.uint8)
    b[(b & 0x7F) == 0x7F] = 0x38  # E4M3FN NaN encodings -> 1.0
    v = b.view(torch.float8_e4m3fn).to(torch.float32).clamp(-amax, amax)
    v[:, 0] = amax * torch.where(torch.rand(64, generator=g) < 0.5, -1.0, 1.0)
    return torch.ldexp(v, torch.randint(-40, 40, (64, 1), generator=g))


# amax 448 = 1.75 * 2^8 and 256 = 2^8: each listed mode picks scale 2^s, so every element stays
# an E4M3 value. (even mode rounds a 1.75 significand up a binade, so 448 is not exact there.)
EXACT_CASES = [("floor", 448.0), ("round_up", 448.0), ("floor", 256.0), ("round_up", 256.0), ("even", 256.0)]


@pytest.mark.parametrize("mode,amax", EXACT_CASES, ids=[f"{m}-max{int(a)}" for m, a in EXACT_CASES])
def test_representable_blocks_round_trip_exactly(mode, amax):
    x = _representable_blocks(81, amax)
    elems, scale = mxfp8.quantize(x, mode)
    assert elems.dtype == torch.float8_e4m3fn and scale.dtype == torch.uint8
    assert torch.equal(mxfp8.dequantize(elems, scale), x)


def test_round_up_never_saturates_and_floor_does():
    g = torch.Generator().manual_seed(82)
    sig = 1.0 + torch.arange(256, dtype=torch.float32) / 256  # significands over [1, 2)
    x = torch.rand((256, 32), generator=g) * 100.0
    x[:, 0] = sig * 256.0  # amax in [256, 512): above 448 floor mode must clamp
    up_elems, up_scale = mxfp8.quantize(x, "round_up")
    # definition: smallest k with amax <= 448 * 2^k
    k = up_scale.squeeze(1).double() - 127
    amax = x.abs().amax(1).double()
    assert bool((amax <= 448 * 2.0**k).all()) and bool((amax > 448 * 2.0 ** (k - 1)).all())
    assert bool((up_elems.to(torch.float32).abs() <= E4M3_MAX).all())
    # no clamping: every element is within E4M3's half-ulp (2^-4 relative) of its value
    deq = mxfp8.dequantize(up_elems, up_scale)
    big = x.abs() >= 2.0**-6 * 2.0 ** k.float().unsqueeze(1)  # normals of the scaled range
    assert bool(((deq - x).abs()[big] <= x.abs()[big] * 2.0**-4).all())
    f = mxfp8.dequantize(*mxfp8.quantize(x, "floor"))
    above = sig * 256.0 > E4M3_MAX
    assert bool((f[above, 0] == E4M3_MAX).all())
    # clamping 448 < amax < 512 to 448 costs more than half an ulp for the largest of them
    clamp_err = (f[:, 0] - x[:, 0]).abs() > x[:, 0] * 2.0**-4
    assert bool(clamp_err.any()) and not bool(clamp_err[~above].any())
    # at or below 448 both modes pick scale 2^0: identical, nothing clamped
    assert torch.equal(f[~above], deq[~above])


def test_all_zero_block_scale_is_0x00():
    x = torch.zeros((1, 64))
    x[0, 32:] = torch.linspace(-1.0, 1.0, 32)
    _, scale = mxfp8.quantize(x)
    assert scale[0, 0].item() == 0x00 and scale[0, 1].item() != 0x00


def test_fake_quantize_equals_quantize_then_dequantize():
    g = torch.Generator().manual_seed(83)
    x = torch.randn((4, 64), generator=g).to(torch.bfloat16)
    assert torch.equal(mxfp8.fake_quantize(x), mxfp8.dequantize(*mxfp8.quantize(x)))


@pytest.mark.parametrize(
    "bad,exc,pattern",
    [
        (torch.ones(3, 40), ValueError, r"act: last dim must be a multiple of 32"),
        (torch.tensor([2.0] * 31 + [float("nan")]), ValueError, "act: contains NaN or Inf"),
        (torch.tensor([2.0] * 31 + [float("inf")]), ValueError, "act: contains NaN or Inf"),
        (torch.ones(32, dtype=torch.int64), TypeError, "act: expected a floating-point tensor"),
    ],
    ids=["k-not-32", "nan", "inf", "int-dtype"],
)
def test_quantize_rejects_bad_input_naming_the_tensor(bad, exc, pattern):
    before = bad.clone()
    with pytest.raises(exc, match=pattern):
        mxfp8.quantize(bad, name="act")
    assert torch.equal(bad.view(torch.uint8), before.view(torch.uint8))


def test_dequantize_rejects_bad_input():
    elems = torch.ones((2, 64)).to(torch.float8_e4m3fn)
    with pytest.raises(TypeError, match="elems: expected float8_e4m3fn"):
        mxfp8.dequantize(torch.ones((2, 64)), torch.full((2, 2), 0x7F, dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"elems shape \(2, 64\) does not match scale shape \(2, 3\)"):
        mxfp8.dequantize(elems, torch.full((2, 3), 0x7F, dtype=torch.uint8))


def test_callers_tensor_untouched():
    g = torch.Generator().manual_seed(84)
    x = torch.randn((2, 64), generator=g) * 1000
    before = x.clone()
    elems, scale = mxfp8.quantize(x, "floor")
    assert torch.equal(x, before)
    e_before, s_before = elems.view(torch.uint8).clone(), scale.clone()
    mxfp8.dequantize(elems, scale)
    assert torch.equal(elems.view(torch.uint8), e_before) and torch.equal(scale, s_before)


def test_activation_scale_rule_is_round_up_on_the_float32_quotient():
    """ACT_SCALE_MODE (aiter's run-time rule): ceil of the float32 amax / 448 read from its bit
    pattern. Equal to the exact round_up except where amax / 448 <= 2^-127 (byte 0x01, not the
    clamped 0x00) and where the quotient underflows to 0 (0x00)."""
    g = torch.Generator().manual_seed(84)
    sig = 1.0 + torch.rand(64, generator=g)
    amax = torch.cat([torch.ldexp(sig, torch.randint(-100, 100, (64,), generator=g)),
                      torch.tensor([448 * 2.0**-127, 448 * 2.0**-128, 448 * 2.0**-126 * 1.5, 2.0**-140, 2.0**-149])])
    x = torch.zeros((amax.numel(), 32))
    x[:, 0] = amax
    x[:, 1] = -amax / 3
    _, exact = mxfp8.quantize(x, "round_up")
    _, f32 = mxfp8.quantize(x, mxfp8.ACT_SCALE_MODE)
    assert torch.equal(f32[:64], exact[:64])
    assert f32[64:, 0].tolist() == [0x01, 0x01, 0x02, 0x01, 0x00]
    assert exact[64:, 0].tolist() == [0x00, 0x00, 0x02, 0x00, 0x00]


def test_fake_quantize_uses_the_activation_rule_where_it_differs_from_round_up():
    # amax / 448 below 2^-127: round_up_f32 keeps scale byte 0x01 where round_up clamps to 0x00,
    # and at 1e-40 the dequantized values differ too (the elements lose a bit under 2^-127)
    x = torch.full((1, 32), 1e-40 / 3, dtype=torch.float32)
    x[0, 0], x[0, 5] = 1e-40, 0.37e-40
    assert mxfp8.quantize(x, "round_up_f32")[1].item() == 0x01 and mxfp8.quantize(x, "round_up")[1].item() == 0x00
    want = mxfp8.dequantize(*mxfp8.quantize(x, mxfp8.ACT_SCALE_MODE))
    assert torch.equal(mxfp8.fake_quantize(x), want)
    assert not torch.equal(want, mxfp8.dequantize(*mxfp8.quantize(x, "round_up")))
    assert torch.equal(mxfp8.fake_quantize(x, "round_up"), mxfp8.dequantize(*mxfp8.quantize(x, "round_up")))


def test_headroom_rule_puts_amax_in_the_binade_below_the_e4m3_emax():
    """``floor_headroom`` (aiter's Opus route output): exponent floor(log2(amax)) - 7, so the scaled
    amax is in [128, 256) and never saturates, where the OCP floor rule (- 8) saturates at 448;
    positive blocks have exponent >= -126 (byte 0x01), an all-zero block byte 0x00."""
    x = torch.tensor([[1.9921875] * 8, [1.0] + [0.0] * 7, [0.0] * 8, [2.0 ** -125] * 8])
    elems, scale = mxfp8.quantize(x, "floor_headroom", block=8)
    assert scale.flatten().tolist() == [120, 120, 0, 1]
    assert elems.to(torch.float32)[:, 0].tolist() == [256.0, 128.0, 0.0, 2.0]
    floor_elems, floor_scale = mxfp8.quantize(x[:1], "floor", block=8)
    assert int(floor_scale) == 119 and float(floor_elems[0, 0].float()) == 448.0


def test_a_narrower_block_must_divide_the_mx_block_and_the_row():
    with pytest.raises(ValueError, match="block 12 must divide"):
        mxfp8.quantize(torch.ones(1, 24), block=12)
    with pytest.raises(ValueError, match="multiple of 8"):
        mxfp8.quantize(torch.ones(1, 12), block=8)
    with pytest.raises(ValueError, match="block 8"):
        mxfp8.dequantize(torch.ones(1, 16).to(torch.float8_e4m3fn), torch.zeros(1, 1, dtype=torch.uint8), block=8)


def test_fake_quantize_keeps_a_sub_block_through_both_halves():
    # 16-element blocks: each half of a 32-block gets its own scale; a 32-block scale on either
    # side (quantize or dequantize) would give other values or refuse the scale's shape
    g = torch.Generator().manual_seed(84)
    x = torch.randn((2, 64), generator=g)
    x[:, 16:32] *= 4096.0  # under one 32-block scale the small half would fall to E4M3 subnormals
    elems, scale = mxfp8.quantize(x, "round_up", block=16)
    assert scale.shape == (2, 4)
    assert torch.equal(mxfp8.fake_quantize(x, "round_up", block=16), mxfp8.dequantize(elems, scale, block=16))
    assert not torch.equal(mxfp8.fake_quantize(x, "round_up", block=16), mxfp8.fake_quantize(x, "round_up"))
