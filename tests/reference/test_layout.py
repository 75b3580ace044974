"""gfx950 MoE weight/scale shuffles (``fp4moe.reference.layout``): exact inverses, shapes, padding, errors.

Byte-for-byte agreement with aiter is proved in test_golden_layouts.py; here: the properties
every shape must have, on seeded random bytes.
"""

from __future__ import annotations

import pytest
import torch

from fp4moe.reference import layout


def _bytes(shape, seed, low=0, high=256):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(low, high, shape, generator=g, dtype=torch.uint8)


# ---------------------------------------------------------------- weights
# (E, N, K/2): plain needs N % 16 and K/2 % 32; interleaved needs N(/2) % 16 and K/2 % 64
WEIGHT_CASES = [
    # (shape, is_guinterleave, gate_up)
    ((2, 64, 64), False, False),
    ((3, 48, 96), False, False),
    ((2, 96, 160), False, True),
    ((2, 64, 64), True, False),
    ((1, 80, 192), True, False),
    ((2, 64, 128), True, True),
    ((3, 96, 64), True, True),
]


@pytest.mark.parametrize(
    "shape,itlv,gate_up", WEIGHT_CASES, ids=[f"{'x'.join(map(str, s))}-itlv{int(i)}-gu{int(g)}" for s, i, g in WEIGHT_CASES]
)
def test_unshuffle_weight_inverts_shuffle(shape, itlv, gate_up):
    w = _bytes(shape, seed=sum(shape))
    before = w.clone()
    s = layout.shuffle_weight(w, (16, 16), is_guinterleave=itlv, gate_up=gate_up)
    assert s.shape == w.shape and s.dtype == w.dtype
    assert not torch.equal(s, w), "the shuffle must move bytes"
    assert torch.equal(s.flatten().sort().values, w.flatten().sort().values), "a permutation"
    assert torch.equal(layout.unshuffle_weight(s, (16, 16), is_guinterleave=itlv, gate_up=gate_up), w)
    assert torch.equal(w, before)


def test_shuffle_weight_keeps_each_expert_in_place():
    # experts are permuted independently: expert e's bytes stay in expert e's slab
    w = _bytes((3, 64, 64), seed=9)
    for itlv in (False, True):
        s = layout.shuffle_weight(w, is_guinterleave=itlv, gate_up=True)
        for e in range(3):
            assert torch.equal(s[e], layout.shuffle_weight(w[e : e + 1], is_guinterleave=itlv, gate_up=True)[0])


@pytest.mark.parametrize("dtype", [torch.int8, torch.float4_e2m1fn_x2], ids=["int8", "fp4x2"])
def test_shuffle_weight_keeps_dtype_and_bytes(dtype):
    w = _bytes((2, 32, 64), seed=10)
    s = layout.shuffle_weight(w.view(dtype))
    assert s.dtype == dtype
    assert torch.equal(s.view(torch.uint8), layout.shuffle_weight(w))


WEIGHT_ERRORS = [
    # (shape, itlv, gate_up, what the message must say)
    ((2, 40, 64), False, False, r"\(2, 40, 64\).*N % 16"),  # N % 16 != 0
    ((2, 64, 48), False, False, r"\(2, 64, 48\).*K/2 % 32"),  # K/2 % 32 != 0
    ((2, 64, 96), True, False, r"\(2, 64, 96\).*K/2 % 64"),  # interleaved: K/2 % 64 != 0
    ((2, 48, 64), True, True, r"\(2, 48, 64\).*N/2 % 16"),  # interleaved gate_up: (N/2) % 16 != 0
    ((64, 128), True, True, r"\(64, 128\)"),  # interleaved needs [E, N, K/2]
]


@pytest.mark.parametrize(
    "shape,itlv,gate_up,pattern", WEIGHT_ERRORS, ids=["n16", "k32", "itlv-k64", "itlv-gu-n16", "itlv-2d"]
)
def test_untileable_weight_shapes_raise_naming_the_shape(shape, itlv, gate_up, pattern):
    w = _bytes(shape, seed=11)
    before = w.clone()
    with pytest.raises(ValueError, match=pattern):
        layout.shuffle_weight(w, is_guinterleave=itlv, gate_up=gate_up)
    with pytest.raises(ValueError, match=pattern):
        layout.unshuffle_weight(w, is_guinterleave=itlv, gate_up=gate_up)
    assert torch.equal(w, before)


def test_weight_wrong_dtype_names_the_tensor():
    with pytest.raises(TypeError, match="weight: expected a byte tensor"):
        layout.shuffle_weight(torch.ones((2, 32, 64)))


# ---------------------------------------------------------------- scales
# rows never a multiple of 256; K/32 in {4, 8, 12, 16, 24}
SCALE_CASES = [
    # (rows, cols, experts_cnt, itlv, gate_up)
    (96, 4, None, False, False),
    (160, 12, None, False, False),
    (416, 24, None, False, False),
    (288, 16, 3, False, True),  # plain ignores experts_cnt / gate_up
    (192, 4, 2, True, True),
    (192, 12, 2, True, False),
    (288, 8, 3, True, True),
    (320, 24, 5, True, False),
    (640, 16, 5, True, True),
]


def _scale_id(c):
    rows, cols, e, itlv, gu = c
    return f"{rows}x{cols}-E{e}-itlv{int(itlv)}-gu{int(gu)}"


@pytest.mark.parametrize("rows,cols,experts,itlv,gate_up", SCALE_CASES, ids=[_scale_id(c) for c in SCALE_CASES])
def test_unshuffle_scale_inverts_shuffle(rows, cols, experts, itlv, gate_up):
    s = _bytes((rows, cols), seed=rows + cols, high=255)  # real scales: never 0xFF
    before = s.clone()
    out = layout.shuffle_scale(s, experts_cnt=experts, is_guinterleave=itlv, gate_up=gate_up)
    assert torch.equal(layout.unshuffle_scale(out, rows, cols, experts, itlv, gate_up), s)
    assert torch.equal(s, before)


def _round_up(x, m):
    return -(-x // m) * m


@pytest.mark.parametrize("rows,cols,experts,itlv,gate_up", SCALE_CASES, ids=[_scale_id(c) for c in SCALE_CASES])
def test_shuffled_scale_shape_and_padding_fill(rows, cols, experts, itlv, gate_up):
    # input bytes avoid both fill values, so the padding can be counted independently of the code
    g = torch.Generator().manual_seed(rows * cols)
    s = torch.randint(1, 254, (rows, cols), generator=g, dtype=torch.uint8)
    s[s == 0x7F] = 0x80
    out = layout.shuffle_scale(s, experts_cnt=experts, is_guinterleave=itlv, gate_up=gate_up)
    # plain: rows to a multiple of 256, cols to 8; interleaved: cols to 8 only
    want = (rows, _round_up(cols, 8)) if itlv else (_round_up(rows, 256), _round_up(cols, 8))
    assert tuple(out.shape) == want == layout.shuffled_scale_shape(rows, cols, itlv)
    fill = 0x7F if itlv else 0x00  # aiter's e8m0 1.0 / our deterministic 2^-127 for aiter's torch.empty
    pads = out == fill
    assert int(pads.sum()) == out.numel() - s.numel()
    assert torch.equal(out[~pads].sort().values, s.flatten().sort().values)
    assert not bool((out == 0xFF).any())
    mask = layout.scale_padding_mask(rows, cols, experts, itlv, gate_up)
    assert torch.equal(mask, pads)


def test_hand_checked_scale_shapes():
    assert layout.shuffled_scale_shape(96, 12) == (256, 16)
    assert layout.shuffled_scale_shape(257, 4) == (512, 8)
    assert layout.shuffled_scale_shape(256, 16) == (256, 16)
    assert layout.shuffled_scale_shape(768, 12, is_guinterleave=True) == (768, 16)
    assert layout.shuffled_scale_shape(768, 24, is_guinterleave=True) == (768, 24)


@pytest.mark.parametrize(
    "itlv,gate_up,experts,n", [(False, False, 4, 64), (True, True, 3, 64), (True, False, 3, 96)], ids=["plain", "itlv-gu", "itlv-w2"]
)
def test_unshuffle_scale_rows_of_one_expert_equals_slice_of_full_inverse(itlv, gate_up, experts, n):
    cols = 12
    s = _bytes((experts * n, cols), seed=n + experts, high=255)
    out = layout.shuffle_scale(s, experts_cnt=experts, is_guinterleave=itlv, gate_up=gate_up)
    full = layout.unshuffle_scale(out, experts * n, cols, experts, itlv, gate_up)
    for e in range(experts):
        block = out[e * n : (e + 1) * n]
        one = layout.unshuffle_scale_rows(block, cols, is_guinterleave=itlv, gate_up=gate_up)
        assert torch.equal(one, full[e * n : (e + 1) * n]), f"expert {e}"
        assert torch.equal(one, s[e * n : (e + 1) * n])


SCALE_ERRORS = [
    # (shape, experts_cnt, itlv, gate_up, message)
    ((2, 64, 8), None, False, False, r"scale: must be a 2-D tensor.*\(2, 64, 8\)"),
    ((128,), 2, True, True, r"scale: must be a 2-D tensor.*\(128,\)"),
    ((128, 8), None, True, True, r"scale \(128, 8\): experts_cnt is required when is_guinterleave=True"),
    ((129, 8), 2, True, True, r"rows 129 not divisible by experts_cnt 2"),
    ((96, 8), 2, True, False, r"per-expert rows 48 \(shape \[96, \.\.\.\]\) must be a multiple of 32"),
]


@pytest.mark.parametrize(
    "shape,experts,itlv,gate_up,pattern", SCALE_ERRORS, ids=["3d", "1d", "itlv-no-experts", "rows-vs-experts", "rows-32"]
)
def test_bad_scale_shapes_raise(shape, experts, itlv, gate_up, pattern):
    s = _bytes(shape, seed=12, high=255)
    before = s.clone()
    with pytest.raises(ValueError, match=pattern):
        layout.shuffle_scale(s, experts_cnt=experts, is_guinterleave=itlv, gate_up=gate_up)
    assert torch.equal(s, before)


def test_unshuffle_scale_rejects_wrong_shape():
    out = layout.shuffle_scale(_bytes((96, 12), seed=13, high=255))
    with pytest.raises(ValueError, match=r"shuffled scale: shape \(256, 16\) != \(256, 8\)"):
        layout.unshuffle_scale(out, 96, 4)
