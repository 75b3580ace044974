"""What the MX codecs say when handed the wrong thing: each refusal names the tensor the caller
passed (or the default name of the argument), and the dtype it got; the shape rules of the
dequantizers at their boundaries (one element or one block off)."""

import pytest
import torch

from fp4moe.mx import block_scale, e8m0, mxfp4, mxfp8

F32 = torch.ones(4, dtype=torch.float32)


@pytest.mark.parametrize("call, text", [
    (lambda: e8m0.to_torch(F32), r"^scale: expected e8m0 bytes \(uint8, int8 or float8_e8m0fnu\), got torch.float32$"),
    (lambda: e8m0.decode(F32), r"^scale: expected e8m0 bytes"),
    (lambda: e8m0.check_no_nan(F32, "w2_scale"), r"^w2_scale: expected e8m0 bytes"),
    (lambda: mxfp4.to_torch_fp4(F32), r"^packed: expected packed FP4 bytes \(uint8, int8 or float4_e2m1fn_x2\), "
                                      r"got torch.float32$"),
    (lambda: mxfp4.dequantize(F32, torch.zeros(1, dtype=torch.uint8)), r"^packed: expected packed FP4 bytes"),
    (lambda: mxfp4.dequantize(F32, torch.zeros(1, dtype=torch.uint8), name="w13"), r"^w13: expected packed FP4"),
    (lambda: mxfp4.dequantize(torch.zeros(16, dtype=torch.uint8), F32, name="w13"), r"^w13 scale: expected e8m0"),
    (lambda: mxfp8.dequantize(torch.zeros(32).to(torch.float8_e4m3fn), F32), r"^scale: expected e8m0"),
])
def test_wrong_dtypes_are_named(call, text):
    with pytest.raises(TypeError, match=text):
        call()


def test_int8_bytes_are_read_as_the_same_bits():
    b = torch.tensor([0, 1, 0x7F, 0x80, 0xFE], dtype=torch.uint8)
    assert e8m0.as_uint8(b.view(torch.int8), "s").tolist() == b.tolist()
    assert e8m0.as_uint8(b, "s") is b
    p = torch.tensor([0x00, 0x8F, 0xF1], dtype=torch.uint8)
    assert mxfp4.as_packed_uint8(p.view(torch.int8), "p").tolist() == p.tolist()
    assert mxfp4.as_packed_uint8(p, "p") is p
    assert mxfp4.as_packed_uint8(p.view(torch.float4_e2m1fn_x2), "p").tolist() == p.tolist()


def test_fp4_dequantize_shape_rule_one_block_off():
    s = torch.full((2, 3), 0x7F, dtype=torch.uint8)
    ok = torch.zeros(2, 48, dtype=torch.uint8)  # 3 scales x 16 bytes
    assert mxfp4.dequantize(ok, s).shape == (2, 96)
    for bad in (torch.zeros(2, 47, dtype=torch.uint8), torch.zeros(2, 64, dtype=torch.uint8),
                torch.zeros(3, 48, dtype=torch.uint8)):
        with pytest.raises(ValueError, match=r"^w2: packed shape .* does not match scale shape \(2, 3\) "
                                             r"\(expected scale \[\.\.\., packed_last / 16\]\)$"):
            mxfp4.dequantize(bad, s, name="w2")


def test_fp8_dequantize_shape_rule_one_block_off():
    s = torch.full((2, 3), 0x7F, dtype=torch.uint8)
    assert mxfp8.dequantize(torch.zeros(2, 96).to(torch.float8_e4m3fn), s).shape == (2, 96)
    for shape in ((2, 95), (2, 128), (1, 96)):
        with pytest.raises(ValueError, match=rf"^elems shape \({shape[0]}, {shape[1]}\) does not match scale shape \(2, 3\)$"):
            mxfp8.dequantize(torch.zeros(shape).to(torch.float8_e4m3fn), s)
    with pytest.raises(TypeError, match=r"^elems: expected float8_e4m3fn, got torch.float32$"):
        mxfp8.dequantize(torch.zeros(2, 96), s)


@pytest.mark.parametrize("quantize", [mxfp4.quantize, mxfp8.quantize])
def test_quantizers_refuse_an_unknown_mode_naming_the_modes(quantize):
    with pytest.raises(ValueError, match=r"^scale_mode must be one of \('floor', 'round_up', 'even', 'round_up_f32', 'floor_headroom'\), "
                                         r"got 'ceil'$"):
        quantize(torch.ones(32), "ceil")


def test_shared_exponent_refuses_an_unknown_mode():
    with pytest.raises(ValueError, match=r"^scale_mode must be one of .* got 'up'$"):
        block_scale.shared_exponent(torch.ones(2), "up", 2, 6.0)


@pytest.mark.parametrize("bad, exc, text", [
    (torch.ones(32, dtype=torch.int32), TypeError, r"^w: expected a floating-point tensor, got torch.int32$"),
    (torch.tensor(1.0), ValueError, r"^w: last dim must be a multiple of 32, got shape \(\)$"),
    (torch.ones(2, 33), ValueError, r"^w: last dim must be a multiple of 32, got shape \(2, 33\)$"),
    (torch.ones(2, 31), ValueError, r"^w: last dim must be a multiple of 32"),
    (torch.tensor([float("inf")] + [0.0] * 31), ValueError, r"^w: contains NaN or Inf; MX elements cannot encode them$"),
    (torch.tensor([0.0] * 31 + [float("nan")]), ValueError, r"^w: contains NaN or Inf"),
])
def test_block_input_rules(bad, exc, text):
    with pytest.raises(exc, match=text):
        block_scale.check_block_input(bad, "w")


def test_block_input_accepts_whole_blocks_of_any_float_dtype():
    for dt in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        block_scale.check_block_input(torch.ones(3, 64, dtype=dt), "w")
    block_scale.check_block_input(torch.ones(0, 32), "w")


def test_decode_tables_are_made_once_per_device_and_reused():
    e8m0._TABLES_BY_DEVICE.clear()
    mxfp4._TABLES_BY_DEVICE.clear()
    a = e8m0.decode(torch.tensor([0x7F, 0x80], dtype=torch.uint8))
    table = e8m0._TABLES_BY_DEVICE[torch.device("cpu")]
    assert a.tolist() == [1.0, 2.0]
    assert e8m0.decode(torch.tensor([0x7E], dtype=torch.uint8)).item() == 0.5
    assert e8m0._TABLES_BY_DEVICE[torch.device("cpu")] is table and len(e8m0._TABLES_BY_DEVICE) == 1
    assert mxfp4.decode_e2m1(torch.tensor([7, 15], dtype=torch.uint8)).tolist() == [6.0, -6.0]
    t4 = mxfp4._TABLES_BY_DEVICE[torch.device("cpu")]
    assert mxfp4.decode_e2m1(torch.tensor([1], dtype=torch.uint8)).item() == 0.5
    assert mxfp4._TABLES_BY_DEVICE[torch.device("cpu")] is t4


def test_check_no_nan_counts_and_points_at_the_first_bad_byte():
    s = torch.full((3, 4), 0x7F, dtype=torch.uint8)
    s[2, 1] = 0xFF
    with pytest.raises(ValueError, match=r"^w: 1 scale byte\(s\) are 0xFF \(e8m0 NaN\) in real blocks, first at index \[2, 1\]$"):
        e8m0.check_no_nan(s, "w")
    s[0, 3] = 0xFF
    with pytest.raises(ValueError, match=r"^w: 2 scale byte\(s\) .* first at index \[0, 3\]$"):
        e8m0.check_no_nan(s.view(torch.int8), "w")
    e8m0.check_no_nan(torch.full((3,), 0xFE, dtype=torch.uint8), "w")


@pytest.mark.parametrize("block, ok", [(1, True), (16, True), (32, True), (0, False), (-32, False), (3, False), (64, False)])
def test_block_input_block_must_divide_the_mx_block(block, ok):
    x = torch.ones(2, 64)
    if ok:
        block_scale.check_block_input(x, "w", block=block)
    else:
        with pytest.raises(ValueError, match=rf"^w: block {block} must divide the MX block \(32\)$"):
            block_scale.check_block_input(x, "w", block=block)
