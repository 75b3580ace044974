"""E8M0 block scale (OCP MX spec v1.0, section 5.4.1): byte b encodes 2**(b - 127), 0xFF is NaN."""

from __future__ import annotations

import math

import pytest
import torch

from fp4moe.mx import e8m0

ALL_BYTES = torch.arange(256, dtype=torch.uint8)


def test_all_256_bytes_decode_to_spec_values():
    got = e8m0.decode(ALL_BYTES)
    assert got.dtype == torch.float32
    for b in range(255):
        # 2**(b-127) is exact in float32 (2^-127 is a subnormal, 2^127 a normal): compare exactly
        assert got[b].item() == 2.0 ** (b - 127), f"byte {b:#04x}"
    assert math.isnan(got[255].item()), "0xFF must decode to NaN"


def test_decode_agrees_with_torch_float8_e8m0fnu():
    # torch casts float8_e8m0fnu -> float32 on CPU: an independent decoder of the same bytes
    theirs = ALL_BYTES.view(torch.float8_e8m0fnu).to(torch.float32)
    ours = e8m0.decode(ALL_BYTES)
    assert torch.equal(ours[:255], theirs[:255])
    assert math.isnan(theirs[255].item()) and math.isnan(ours[255].item())


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.float8_e8m0fnu], ids=lambda d: str(d).split(".")[-1])
def test_decode_accepts_every_byte_dtype(dtype):
    g = torch.Generator().manual_seed(5)
    b = torch.randint(1, 255, (4, 8), generator=g, dtype=torch.uint8)
    assert torch.equal(e8m0.decode(b.view(dtype)), e8m0.decode(b))


def test_to_torch_is_a_view_of_the_same_bytes():
    g = torch.Generator().manual_seed(6)
    b = torch.randint(0, 255, (3, 5), generator=g, dtype=torch.uint8)
    t = e8m0.to_torch(b)
    assert t.dtype == torch.float8_e8m0fnu
    assert t.data_ptr() == b.data_ptr()
    assert torch.equal(t.view(torch.uint8), b)


def test_wrong_dtype_names_the_tensor():
    with pytest.raises(TypeError, match="w13_scale"):
        e8m0.decode(torch.ones(4, dtype=torch.float32), "w13_scale")


@pytest.mark.parametrize(
    "exp,byte", [(-200, 0x00), (-127, 0x00), (-1, 0x7E), (0, 0x7F), (1, 0x80), (127, 0xFE), (500, 0xFE)]
)
def test_encode_exponent_biases_and_clamps_never_to_nan(exp, byte):
    got = e8m0.encode_exponent(torch.tensor([exp], dtype=torch.int32))
    assert got.dtype == torch.uint8 and got.item() == byte


def test_exponent_of_inverts_encode():
    exps = torch.arange(-127, 128, dtype=torch.int32)
    assert torch.equal(e8m0.exponent_of(e8m0.encode_exponent(exps)), exps)


def test_check_no_nan_names_tensor_and_first_position():
    g = torch.Generator().manual_seed(7)
    s = torch.randint(0, 255, (2, 4, 3), generator=g, dtype=torch.uint8)
    e8m0.check_no_nan(s, "w2_scale")  # 0..254 only: fine
    s[1, 2, 0] = 0xFF
    s[1, 3, 2] = 0xFF
    before = s.clone()
    with pytest.raises(ValueError, match=r"w2_scale: 2 scale byte\(s\) are 0xFF.*\[1, 2, 0\]"):
        e8m0.check_no_nan(s, "w2_scale")
    assert torch.equal(s, before)


def test_constants_match_the_spec():
    assert (e8m0.E8M0_BIAS, e8m0.E8M0_NAN, e8m0.E8M0_ONE) == (127, 0xFF, 0x7F)
    assert e8m0.decode(torch.tensor([e8m0.E8M0_ONE], dtype=torch.uint8)).item() == 1.0
