"""The gfx950 layouts' contracts that the golden maps and the equivalence tests pass over
(mutation survivors of ``fp4moe/reference/layout.py``, ci/mutation-triage.toml):

- the byte dtypes torch names (``float4_e2m1fn_x2``, ``float8_e8m0fnu``) are shuffled as bytes
  and come back in their own dtype;
- a 2-D weight [N, K/2] is one expert of the plain layout (the GU-interleaved layout needs
  [E, N, K/2]), and the inverse restores a batch of experts whose count differs from N/16;
- the interleaved scale layout's ``gate_up`` defaults to False, where the two differ (64 rows per
  expert: with 32 the two orders coincide);
- errors name the tensor and give the remainders that make a shape untileable.
"""

from __future__ import annotations

import pytest
import torch

from fp4moe.reference import layout


def _bytes(*shape, seed=0):
    return torch.randint(0, 255, shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def test_torch_byte_dtypes_are_shuffled_as_bytes_and_keep_their_dtype():
    w = _bytes(2, 32, 64, seed=1)
    s = _bytes(64, 12, seed=2)
    w4 = layout.shuffle_weight(w.view(torch.float4_e2m1fn_x2))
    s8 = layout.shuffle_scale(s.view(torch.float8_e8m0fnu))
    assert w4.dtype == torch.float4_e2m1fn_x2 and s8.dtype == torch.float8_e8m0fnu
    assert torch.equal(w4.view(torch.uint8), layout.shuffle_weight(w))
    assert torch.equal(s8.view(torch.uint8), layout.shuffle_scale(s))
    back = layout.unshuffle_scale(s8, 64, 12)
    assert back.dtype == torch.float8_e8m0fnu and torch.equal(back.view(torch.uint8), s)


def test_a_2d_weight_is_one_expert_of_the_plain_layout():
    w = _bytes(3, 32, 32, seed=3)  # K/2 = 32: plain-tileable, not GU-interleave-tileable (needs 64)
    one = layout.shuffle_weight(w[1])
    assert one.shape == (32, 32) and not torch.equal(one, w[1])
    assert torch.equal(one, layout.shuffle_weight(w)[1])
    assert torch.equal(layout.unshuffle_weight(one), w[1])


def test_the_inverse_restores_a_batch_whose_expert_count_differs_from_the_row_tiles():
    w = _bytes(3, 32, 64, seed=4)  # E = 3, N/16 = 2
    sh = layout.shuffle_weight(w)
    assert not torch.equal(sh, w)
    assert torch.equal(layout.unshuffle_weight(sh), w)


def test_the_interleaved_scale_layout_defaults_to_no_gate_up_where_the_two_differ():
    s = _bytes(128, 12, seed=5)  # 2 experts x 64 rows
    plain = layout.shuffle_scale(s, 2, is_guinterleave=True, gate_up=False)
    gu = layout.shuffle_scale(s, 2, is_guinterleave=True, gate_up=True)
    assert not torch.equal(plain, gu)
    assert torch.equal(layout.shuffle_scale(s, 2, is_guinterleave=True), plain)
    assert torch.equal(layout.unshuffle_scale(plain, 128, 12, 2, is_guinterleave=True), s)
    assert not torch.equal(layout.unshuffle_scale(gu, 128, 12, 2, is_guinterleave=True), s)


def test_weight_errors_name_the_tensor_and_what_is_wrong():
    with pytest.raises(ValueError, match=r"^weight: only layout=\(16, 16\) is implemented \(gfx950 MXFP4\), got \(32, 16\)$"):
        layout.shuffle_weight(_bytes(1, 32, 64), layout=(32, 16))
    with pytest.raises(ValueError, match=r"^w13: expected \[\.\.\., N, K/2\], got shape \(64,\)$"):
        layout.shuffle_weight(_bytes(64), name="w13")
    with pytest.raises(ValueError, match=r"^w2: shape \(1, 24, 64\) not tileable for the GU-interleaved layout "
                                         r"\(need N % 16 == 0 and K/2 % 64 == 0\)$"):
        layout.shuffle_weight(_bytes(1, 24, 64), is_guinterleave=True, name="w2")
    with pytest.raises(ValueError, match=r"\(need N/2 % 16 == 0 and K/2 % 64 == 0\)$"):
        layout.shuffle_weight(_bytes(1, 48, 64), is_guinterleave=True, gate_up=True)
    with pytest.raises(ValueError, match=r"^weight: shape \(1, 24, 48\) not tileable: need N % 16 == 0 \(got 8\) "
                                         r"and K/2 % 32 == 0 \(got 16\)$"):
        layout.shuffle_weight(_bytes(1, 24, 48))


def test_the_weight_inverse_names_the_shuffled_weight():
    with pytest.raises(TypeError, match=r"^shuffled weight: expected a byte tensor"):
        layout.unshuffle_weight(torch.zeros(1, 32, 64))
    with pytest.raises(ValueError, match=r"^shuffled weight: shape \(1, 24, 64\) not tileable"):
        layout.unshuffle_weight(_bytes(1, 24, 64))


def test_scale_errors_name_the_tensor():
    with pytest.raises(TypeError, match=r"^w2_scale: expected a byte tensor"):
        layout.shuffle_scale(torch.zeros(64, 8), name="w2_scale")
    with pytest.raises(ValueError, match=r"rows 64 not divisible by experts_cnt 0$"):
        layout.shuffle_scale(_bytes(64, 8), experts_cnt=0, is_guinterleave=True)
