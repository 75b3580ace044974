"""The reference MoE's input contract and read precision (mutation survivors of
``fp4moe/reference/moe.py``, ci/mutation-triage.toml):

- every refusal names the tensor or option, with the bound it broke, exactly at the bound;
- a NaN (0xFF) scale byte of the *up* half is refused by default, naming the half;
- activations and top-k weights are read at float32 whatever dtype they arrive in (the kernel's
  precision; the stage-1 buffer's dtype, the input's by default, held fixed), so the float64
  oracle measures accumulation, not a wider input;
- the local expert id of an expert off this rank is -1 (``grouped_moe``'s routing adds 1 and
  keeps group 0 for them);
- routing refuses top_k = 0 and a logits tensor that is not [T, E].
"""

from __future__ import annotations

import pytest
import torch

from fp4moe.reference import inputs, moe

E, H, P = 2, 128, 64


def _layer(seed=21):
    raw = inputs.make_raw_layer(experts=E, hidden=H, intermediate=P, seed=seed)
    ew = moe.ExpertWeights(raw.w13, raw.w13_scale.clone(), raw.w2, raw.w2_scale)
    x, w, ids = inputs.make_tokens(tokens=5, hidden=H, experts=E, top_k=2, seed=seed + 1)
    return ew, x, w, ids


def _check(ew, x, w, ids, hidden_pad=0, intermediate_pad=0, act_mode="a16w4", expert_mask=None):
    return moe.check_moe_inputs(x, ew, w, ids, hidden_pad, intermediate_pad, act_mode, expert_mask)


def test_input_refusals_name_the_tensor_and_the_bound():
    ew, x, w, ids = _layer()
    assert _check(ew, x, w, ids, hidden_pad=H - 32, intermediate_pad=P - 32) == (5, 2)
    cases = [
        (ValueError, r"^act_mode must be one of \('a16w4', 'a8w4'\), got 'a4w4'$", dict(act_mode="a4w4")),
        (ValueError, r"^hidden_states: expected \[T, H\], got shape \(1, 5, 128\)$", dict(x=x[None])),
        (TypeError, r"^hidden_states: expected a floating dtype, got torch\.int32$", dict(x=x.to(torch.int32))),
        (ValueError, r"^topk_ids \(4, 2\) / topk_weight \(4, 2\): expected both \[T=5, k\]$", dict(w=w[:4], ids=ids[:4])),
        (TypeError, r"^topk_ids: expected int32/int64, got torch\.float32$", dict(ids=ids.float())),
        (ValueError, r"^topk_ids: values must be in \[0, 2\), got \[0, 2\]$", dict(ids=torch.where(ids == 1, 2, ids))),
        (ValueError, r"^hidden_pad: 128 must be in \[0, 128\) \(hidden 128\)$", dict(hidden_pad=H)),
        (ValueError, r"^intermediate_pad: 16 must be a multiple of the MXFP4 block \(32\)$", dict(intermediate_pad=16)),
        (ValueError, r"^hidden_pad: 16 must be a multiple of the MXFP4 block \(32\)$", dict(hidden_pad=16)),
    ]
    for exc, match, kw in cases:
        args = dict(x=x, w=w, ids=ids)
        args.update({k: kw.pop(k) for k in ("x", "w", "ids") if k in kw})
        with pytest.raises(exc, match=match):
            _check(ew, args["x"], args["w"], args["ids"], **kw)


def test_a_nan_scale_byte_of_the_up_half_is_refused_by_default_naming_the_half():
    ew, x, w, ids = _layer()
    ids = torch.zeros_like(ids)  # every slot on expert 0
    ew.w13_scale[0, P + 3, 1] = 0xFF  # up row 3
    with pytest.raises(ValueError, match=r"^w1_scale\[expert 0, up\]: 1 scale byte\(s\) are 0xFF"):
        moe.fused_moe_unshuffled(x, ew, w, ids)
    out = moe.fused_moe_unshuffled(x, ew, w, ids, check_scales=False)
    assert torch.isnan(out).any()


def test_inputs_are_read_at_float32_whatever_they_arrive_in():
    ew, x, w, ids = _layer()
    g = torch.Generator().manual_seed(23)
    x64 = x.double() + torch.randn(x.shape, generator=g, dtype=torch.float64) * 1e-9  # not float32-representable
    w64 = w.double() / 3
    assert not torch.equal(x64.float().double(), x64) and not torch.equal(w64.float().double(), w64)
    # (the stage-1 buffer's dtype is the input's by default: no rounding here for both, which
    # would also round the difference away)
    oracle = [moe.fused_moe_oracle(xi, ew, w, ids, stage1_dtype=None) for xi in (x64, x64.float())]
    assert torch.equal(*oracle)
    assert torch.equal(moe.fused_moe_unshuffled(x, ew, w64, ids), moe.fused_moe_unshuffled(x, ew, w64.float(), ids))


def test_the_reference_accumulates_in_float32_only():
    ew, x, w, ids = _layer()
    with pytest.raises(TypeError, match="compute_dtype"):
        moe.fused_moe_reference(x, ew, w, ids, compute_dtype=torch.float64)


def test_an_expert_off_this_rank_has_local_id_minus_one():
    mask = torch.tensor([0, 1, 1, 0, 1], dtype=torch.int32)
    ids = torch.tensor([[0, 1], [2, 3], [4, 0]], dtype=torch.int32)
    assert moe._local_ids(ids, mask).tolist() == [[-1, 0], [1, -1], [2, -1]]
    assert moe._local_ids(ids, None).dtype == torch.int64


def test_routing_refuses_what_it_cannot_route():
    logits = torch.randn((4, 8), generator=torch.Generator().manual_seed(24))
    with pytest.raises(ValueError, match=r"^router_logits: expected \[T, E\], got shape \(1, 4, 8\)$"):
        moe.route(logits[None], 2)
    for k in (0, 9):
        with pytest.raises(ValueError, match=rf"^top_k: {k} must be in \[1, 8\]$"):
            moe.route(logits, k)
    w, ids = moe.route(logits, 8)
    assert ids.dtype == torch.int32 and torch.allclose(w.sum(-1), torch.ones(4))
