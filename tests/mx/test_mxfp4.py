"""MXFP4 codec (OCP MX spec v1.0: E2M1 section 5.3.3, conversion section 6.3; block 32).

Expected values are written from the spec (literal E2M1 table, 2**(b-127) scales, an
independent pure-Python quantizer), never read back from ``fp4moe.mx.mxfp4``.
"""

from __future__ import annotations

import math

import pytest
import torch

from fp4moe.mx import e8m0, mxfp4

# OCP MX v1.0 table for E2M1 (S.EE.M), code = sign << 3 | magnitude index
E2M1_SPEC = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
GRID = E2M1_SPEC[:8]
MODES = ("floor", "round_up", "even")


# ---------------------------------------------------------------- independent reference quantizer
def ref_shared_exponent(amax: float, mode: str) -> int:
    """The block exponent by definition, in exact Python arithmetic (powers of two are exact)."""
    if amax == 0.0:
        return -127
    fl = math.frexp(amax)[1] - 1  # floor(log2(amax)) exactly
    sig = amax / 2.0**fl  # significand in [1, 2)
    if mode == "floor":  # OCP 6.3: floor(log2 amax) - emax_elem
        k = fl - 2
    elif mode == "round_up":  # smallest k with amax <= 6 * 2^k: no element saturates
        k = fl - 3
        while amax > 6.0 * 2.0**k:
            k += 1
    else:  # even: amax rounded to a power of two, significand >= 1.75 rounds up
        k = fl - 2 + (sig >= 1.75)
    return max(-127, min(127, k))


def ref_e2m1(v: float) -> float:
    """Nearest E2M1 value, ties to the even code, saturating at +-6."""
    mag = min(abs(v), 6.0)
    best = min(range(8), key=lambda i: (abs(GRID[i] - mag), i % 2))  # tie: even index wins
    return math.copysign(GRID[best], v)


def ref_quantize_dequantize(block: list[float], mode: str) -> tuple[int, list[float]]:
    k = ref_shared_exponent(max(abs(v) for v in block), mode)
    return k + 127, [ref_e2m1(v / 2.0**k) * 2.0**k for v in block]


# ---------------------------------------------------------------- decode tables
def test_all_16_e2m1_codes_decode_to_spec_values():
    got = mxfp4.decode_e2m1(torch.arange(16, dtype=torch.uint8))
    assert got.tolist() == E2M1_SPEC
    # the sign bit is kept on zero too (code 8 is -0.0)
    assert torch.signbit(got).tolist() == [False] * 8 + [True] * 8


def test_dequantize_matches_spec_formula_elementwise():
    g = torch.Generator().manual_seed(21)
    packed = torch.randint(0, 256, (3, 32), generator=g, dtype=torch.uint8)  # K = 64
    scale = torch.randint(100, 155, (3, 2), generator=g, dtype=torch.uint8)
    got = mxfp4.dequantize(packed, scale)
    for r in range(3):
        for k in range(64):
            byte = packed[r, k // 2].item()
            code = byte & 0xF if k % 2 == 0 else byte >> 4  # element 2i in the LOW nibble
            want = E2M1_SPEC[code] * 2.0 ** (scale[r, k // 32].item() - 127)
            assert got[r, k].item() == want, (r, k)


# ---------------------------------------------------------------- element rounding
TIES = [(0.25, 0.0), (0.75, 1.0), (1.25, 1.0), (1.75, 2.0), (2.5, 2.0), (3.5, 4.0), (5.0, 4.0)]
NEAR = [(0.2, 0.0), (0.3, 0.5), (1.3, 1.5), (2.4, 2.0), (2.6, 3.0), (4.9, 4.0), (5.1, 6.0)]
SATURATE = [(6.0, 6.0), (7.0, 6.0), (100.0, 6.0)]


@pytest.mark.parametrize("value,want", TIES + NEAR + SATURATE, ids=lambda v: str(v))
@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["pos", "neg"])
def test_encode_e2m1_rounds_half_to_even_and_saturates(value, want, sign):
    code = mxfp4.encode_e2m1(torch.tensor([sign * value]))
    assert E2M1_SPEC[code.item()] == sign * want


@pytest.mark.parametrize("mode", ["floor", "round_up"])
def test_ties_through_quantize_at_unit_scale(mode):
    # a block holding +6 has scale 2^0 in floor and round_up mode, so elements are rounded as given
    vals = [6.0] + [s * v for v, _ in TIES for s in (1.0, -1.0)]
    x = torch.tensor(vals + [0.5] * (32 - len(vals)))
    packed, scale = mxfp4.quantize(x, mode)
    assert scale.tolist() == [0x7F]
    want = [6.0] + [s * w for _, w in TIES for s in (1.0, -1.0)] + [0.5] * (32 - len(vals))
    assert mxfp4.dequantize(packed, scale).tolist() == want


def test_floor_mode_saturates_where_round_up_does_not():
    x = torch.full((2, 32), 0.5)
    x[0, 0], x[1, 0] = 7.0, 100.0  # significands 1.75 and 1.5625 * 2^6 -> 6.25 at scale 2^4
    f = mxfp4.dequantize(*mxfp4.quantize(x, "floor"))
    assert f[0, 0].item() == 6.0  # 7 / 2^0 saturates to 6
    assert f[1, 0].item() == 96.0  # 100 / 2^4 = 6.25 saturates to 6, times 16
    r = mxfp4.dequantize(*mxfp4.quantize(x, "round_up"))
    assert r[0, 0].item() == 8.0  # 7 / 2^1 = 3.5 -> tie -> 4
    assert r[1, 0].item() == 96.0  # 100 / 2^5 = 3.125 -> 3


# ---------------------------------------------------------------- scale rules
def _sweep_blocks():
    """Blocks whose max is m * 2^e for significands m on a fine grid (incl. 1.5, 1.75 and their
    float32 neighbours) and exponents across the normal range; other elements are smaller."""
    sig = torch.cat([
        1.0 + torch.arange(512, dtype=torch.float32) / 512,
        torch.tensor([1.5, 1.75]),
        torch.nextafter(torch.tensor([1.5, 1.5, 1.75, 1.75, 2.0]), torch.tensor([2.0, 1.0, 2.0, 1.0, 1.0])),
    ])
    exps = torch.tensor([-124, -60, -7, -1, 0, 1, 3, 20, 90, 125], dtype=torch.int32)
    m = sig.repeat(len(exps))
    e = exps.repeat_interleave(len(sig))
    g = torch.Generator().manual_seed(31)
    x = torch.rand((len(m), 32), generator=g) * 0.9 * torch.ldexp(m, e).unsqueeze(1)
    x[:, 0] = -torch.ldexp(m, e)  # the max, negative: amax must use |x|
    return m, e, x


def test_floor_and_round_up_differ_exactly_when_significand_above_1_5():
    m, e, x = _sweep_blocks()
    _, s_floor = mxfp4.quantize(x, "floor")
    _, s_up = mxfp4.quantize(x, "round_up")
    s_floor, s_up = s_floor.squeeze(1).long(), s_up.squeeze(1).long()
    assert torch.equal(s_floor, e.long() - 2 + 127)  # floor(log2 amax) - emax(E2M1)
    above = m > 1.5
    assert torch.equal(s_up != s_floor, above)
    assert torch.equal(s_up - s_floor, above.long())  # when they differ, by exactly one binade
    # round_up's definition: smallest k with amax <= 6 * 2^k
    amax = x.abs().amax(1).double()
    k = (s_up - 127).double()
    assert bool((amax <= 6 * 2.0**k).all()) and bool((amax > 6 * 2.0 ** (k - 1)).all())


def test_even_mode_rounds_scale_up_from_significand_1_75():
    m, e, x = _sweep_blocks()
    _, s_even = mxfp4.quantize(x, "even")
    assert torch.equal(s_even.squeeze(1).long(), e.long() - 2 + 127 + (m >= 1.75).long())


@pytest.mark.parametrize("mode", MODES)
def test_quantize_matches_independent_reference(mode):
    g = torch.Generator().manual_seed(41)
    x = torch.randn((6, 64), generator=g) * torch.ldexp(torch.ones(6, 1), torch.randint(-12, 12, (6, 1), generator=g))
    packed, scale = mxfp4.quantize(x, mode)
    got = mxfp4.dequantize(packed, scale)
    for r in range(6):
        for b in range(2):
            block = x[r, 32 * b : 32 * (b + 1)].tolist()
            byte, vals = ref_quantize_dequantize(block, mode)
            assert scale[r, b].item() == byte, (mode, r, b)
            assert got[r, 32 * b : 32 * (b + 1)].tolist() == vals, (mode, r, b)


@pytest.mark.parametrize("mode", MODES)
def test_all_zero_block_gets_scale_byte_0x00(mode):
    x = torch.zeros((2, 64))
    x[1, :32] = torch.linspace(-3.0, 3.0, 32)  # the other blocks are real
    packed, scale = mxfp4.quantize(x, mode)
    assert scale[0].tolist() == [0x00, 0x00] and scale[1, 1].item() == 0x00
    assert scale[1, 0].item() != 0x00
    assert torch.equal(mxfp4.dequantize(packed, scale)[0], torch.zeros(64))


@pytest.mark.parametrize("amax,byte", [(2.0**-140, 0x00), (1.8 * 2.0**127, 126 + 127)], ids=["subnormal", "top-binade"])
def test_even_mode_at_float32_range_edges(amax, byte):
    # definition: round amax to a power of two (2^-140 stays, 1.8*2^127 -> 2^128), exp = log2 - 2,
    # clamped to E8M0's [-127, 127]
    x = torch.full((1, 32), amax / 4)
    x[0, 0] = amax
    _, scale = mxfp4.quantize(x, "even")
    assert scale.item() == byte


# ---------------------------------------------------------------- exact round trips
@pytest.mark.parametrize("mode", MODES)
def test_representable_blocks_round_trip_exactly(mode):
    # blocks of E2M1 values times a common 2^s are exactly representable; every mode picks a
    # scale at which they stay on the grid (floor/even put amax in [4, 8), round_up in (3, 6])
    g = torch.Generator().manual_seed(51)
    codes = torch.randint(0, 16, (128, 32), generator=g, dtype=torch.uint8)
    codes[:, 0] = torch.randint(1, 8, (128,), generator=g, dtype=torch.uint8)  # never an all-zero block
    exps = torch.randint(-30, 30, (128, 1), generator=g)
    x = torch.ldexp(torch.tensor(E2M1_SPEC)[codes.long()], exps)
    assert torch.equal(mxfp4.dequantize(*mxfp4.quantize(x, mode)), x)


# ---------------------------------------------------------------- packing and torch interop
def test_element_2i_goes_in_the_low_nibble():
    x = torch.zeros(32)
    x[:4] = torch.tensor([1.0, 6.0, -0.5, 3.0])  # codes 0x2, 0x7, 0x9, 0x5
    packed, scale = mxfp4.quantize(x, "floor")
    assert scale.tolist() == [0x7F]
    assert packed[:2].tolist() == [0x72, 0x59]  # hand-built: (code[2i+1] << 4) | code[2i]
    assert packed[2:].tolist() == [0] * 14
    assert mxfp4.unpack_nibbles(torch.tensor([0x72, 0x59], dtype=torch.uint8)).tolist() == [2, 7, 9, 5]


def test_torch_fp4_and_e8m0_views_share_the_bytes():
    g = torch.Generator().manual_seed(61)
    x = torch.randn((4, 64), generator=g)
    packed, scale = mxfp4.quantize(x)
    fp4 = mxfp4.to_torch_fp4(packed)
    s8 = e8m0.to_torch(scale)
    assert fp4.dtype == torch.float4_e2m1fn_x2 and s8.dtype == torch.float8_e8m0fnu
    assert fp4.shape == packed.shape and fp4.data_ptr() == packed.data_ptr()
    assert torch.equal(fp4.view(torch.uint8), packed)
    # torch cannot cast fp4 to float on CPU: decode the torch-typed tensors through our table
    assert torch.equal(mxfp4.dequantize(fp4, s8), mxfp4.dequantize(packed, scale))
    assert torch.equal(mxfp4.dequantize(packed.view(torch.int8), scale), mxfp4.dequantize(packed, scale))
    # and torch's own e8m0 -> float cast agrees with the scale factors we apply
    assert torch.equal(s8.to(torch.float32), e8m0.decode(scale))


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "bad,exc,pattern",
    [
        (torch.ones(2, 48), ValueError, r"w_gate: last dim must be a multiple of 32.*\(2, 48\)"),
        (torch.tensor([1.0] * 31 + [float("nan")]), ValueError, "w_gate: contains NaN or Inf"),
        (torch.tensor([1.0] * 31 + [float("-inf")]), ValueError, "w_gate: contains NaN or Inf"),
        (torch.ones(2, 32, dtype=torch.int32), TypeError, "w_gate: expected a floating-point tensor"),
    ],
    ids=["k-not-32", "nan", "inf", "int-dtype"],
)
def test_quantize_rejects_bad_input_naming_the_tensor(bad, exc, pattern):
    before = bad.clone()
    with pytest.raises(exc, match=pattern):
        mxfp4.quantize(bad, name="w_gate")
    assert torch.equal(bad.view(torch.uint8), before.view(torch.uint8))  # bytes: NaN != NaN as floats


def test_quantize_rejects_unknown_scale_mode():
    with pytest.raises(ValueError, match="scale_mode must be one of.*floor.*round_up.*even"):
        mxfp4.quantize(torch.ones(32), "nearest")


def test_dequantize_rejects_bad_input_naming_the_tensor():
    packed = torch.full((2, 16), 0x21, dtype=torch.uint8)
    with pytest.raises(ValueError, match=r"w2: packed shape \(2, 16\) does not match scale shape \(2, 2\)"):
        mxfp4.dequantize(packed, torch.full((2, 2), 0x7F, dtype=torch.uint8), name="w2")
    with pytest.raises(TypeError, match="w2: expected packed FP4 bytes"):
        mxfp4.dequantize(packed.float(), torch.full((2, 1), 0x7F, dtype=torch.uint8), name="w2")
    with pytest.raises(TypeError, match="w2 scale: expected e8m0 bytes"):
        mxfp4.dequantize(packed, torch.ones((2, 1)), name="w2")


@pytest.mark.parametrize("mode", MODES)
def test_callers_tensors_untouched(mode):
    g = torch.Generator().manual_seed(71)
    x = torch.randn((3, 96), generator=g).to(torch.bfloat16)
    x_before = x.clone()
    packed, scale = mxfp4.quantize(x, mode)
    assert torch.equal(x, x_before)
    p_before, s_before = packed.clone(), scale.clone()
    mxfp4.dequantize(packed, scale)
    assert torch.equal(packed, p_before) and torch.equal(scale, s_before)
