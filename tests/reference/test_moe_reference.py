"""The reference fused MoE against a naive float64 implementation written here, token by
token, from the definition aiter's reference functions give (decode table -> [gate | up] ->
optional top-k weight -> optional swiglu clamp -> SiLU-and-mul -> rounded to bf16 -> down ->
weighted sum). Also: routing, activation-mode bounds, the a8w4 guards, and bad input."""

from __future__ import annotations

import math

import pytest
import torch

from fp4moe.mx import e8m0, mxfp8
from fp4moe.reference import inputs, kernel_budget, moe, weight_path
from fp4moe.reference.reference_backend import ReferenceBackend

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
H, I, E = 128, 96, 3


def naive_dequant(packed: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """float64 decode written from the spec: low nibble first, scale 2^(byte-127) per 32."""
    rows, half = packed.shape
    out = torch.empty((rows, half * 2), dtype=torch.float64)
    for r in range(rows):
        for j in range(half):
            b = int(packed[r, j])
            out[r, 2 * j] = E2M1[b & 0xF]
            out[r, 2 * j + 1] = E2M1[b >> 4]
    factors = torch.tensor([[2.0 ** (int(s) - 127) for s in row] for row in scale], dtype=torch.float64)
    return out * factors.repeat_interleave(32, dim=1)


def naive_mxfp8(v: torch.Tensor) -> torch.Tensor:
    """MXFP8 round_up fake-quantization written from the definition, per block of 32 along
    the last dim: e = the smallest integer with amax <= 448 * 2^e; elements x / 2^e cast to
    e4m3 (torch's RNE cast); an all-zero block stays zero."""
    out = torch.empty_like(v, dtype=torch.float64)
    flat, res = v.reshape(-1, 32).to(torch.float64), out.view(-1, 32)
    for b in range(flat.shape[0]):
        amax = float(flat[b].abs().max())
        if amax == 0:
            res[b] = 0
            continue
        e = math.ceil(math.log2(amax / 448.0))
        while amax > 448.0 * 2.0 ** e:  # guard log2 rounding
            e += 1
        while amax <= 448.0 * 2.0 ** (e - 1):
            e -= 1
        res[b] = (flat[b] / 2.0 ** e).to(torch.float32).to(torch.float8_e4m3fn).to(torch.float64) * 2.0 ** e
    return out


_DEQUANT_CACHE: dict = {}


def _naive_expert(raw, e):
    """The naive float64 decode of one expert, once per layer object (the python loops are slow)."""
    key = (id(raw), e)
    if key not in _DEQUANT_CACHE:
        _DEQUANT_CACHE[key] = (raw, naive_dequant(raw.w13[e], raw.w13_scale[e]), naive_dequant(raw.w2[e], raw.w2_scale[e]))
    return _DEQUANT_CACHE[key][1:]


def naive_moe(x, raw, w, ids, limit=None, inter_used=None, a8=False, hidden_used=None, doweight_stage1=False, round_stage1=True):
    """aiter's torch_moe_stage1/2: doweight_stage1 scales gate and up BEFORE the activation;
    ``if swiglu_limit:`` (0.0 = no clamp); the stage-1 output is stored in bf16 (the input
    dtype) and, in a8w4, MXFP8-quantized from there."""
    i = raw.w13.shape[1] // 2
    n = inter_used or i
    h = hidden_used or x.shape[1]
    out = torch.zeros((x.shape[0], x.shape[1]), dtype=torch.float64)
    for e in range(raw.w13.shape[0]):
        w13, w2 = _naive_expert(raw, e)
        for t in range(x.shape[0]):
            for k in range(ids.shape[1]):
                if int(ids[t, k]) != e:
                    continue
                xt = x[t, :h].double()
                if a8:
                    xt = naive_mxfp8(xt)
                g, u = w13[:n, :h] @ xt, w13[i : i + n, :h] @ xt
                if doweight_stage1:
                    g, u = g * float(w[t, k]), u * float(w[t, k])
                if limit:
                    g, u = g.clamp(max=limit), u.clamp(-limit, limit)
                a = g / (1 + torch.exp(-g)) * u
                if round_stage1:
                    a = a.to(torch.bfloat16).double()
                if a8:
                    a = naive_mxfp8(a.to(torch.float32))
                out[t, :h] += (1.0 if doweight_stage1 else float(w[t, k])) * (w2[:h, :n] @ a)
    return out


@pytest.fixture(scope="module")
def layer():
    return inputs.make_raw_layer(experts=E, hidden=H, intermediate=I, seed=41)


@pytest.fixture(scope="module")
def tokens():
    return inputs.make_tokens(tokens=5, hidden=H, experts=E, top_k=2, seed=42)


# float32 accumulation over K <= 128 vs float64: ~1e-7; 1e-6 leaves room, any real bug is >> 1e-3
REL = 1e-6


@pytest.mark.parametrize("act", ["a16w4", "a8w4"])
@pytest.mark.parametrize("limit", [None, 0.05], ids=["no_limit", "swiglu_limit"])
def test_reference_matches_naive_float64(layer, tokens, limit, act):
    """a8w4 included: a reference that skipped swiglu_limit in a8w4 fails here (0.05 bites)."""
    x, w, ids = tokens
    ref = moe.fused_moe_unshuffled(x, moe.ExpertWeights(*layer.tensors()), w, ids, swiglu_limit=limit, act_mode=act)
    assert kernel_budget.rel_l2(ref, naive_moe(x, layer, w, ids, limit, a8=act == "a8w4")) <= REL


def test_a8w4_activation_quant_is_aiters_run_time_rule():
    """The reference's a8w4 activations use aiter's run-time scale rule (mxfp8.ACT_SCALE_MODE):
    on a block with amax / 448 <= 2^-127 it differs from the OCP-exact round_up (scale 2^-126,
    not 2^-127), elsewhere it is the same."""
    g = torch.Generator().manual_seed(49)
    x = torch.randn((2, 64), generator=g)
    x[1, :32] = x[1, :32] * 2.0**-134  # a tiny block
    q = moe._act_quant(x, "a8w4")
    assert torch.equal(q, mxfp8.fake_quantize(x, "round_up_f32"))
    ocp = mxfp8.fake_quantize(x, "round_up")
    assert not torch.equal(q[1, :32], ocp[1, :32]) and torch.equal(q[:, 32:], ocp[:, 32:]) and torch.equal(q[0], ocp[0])


def test_a8w4_outlier_token_leaves_the_other_tokens_alone(layer, tokens):
    """MXFP8 scales are per token per 32 channels: one token 2^14 larger must not change any
    other token's output (bitwise), and the whole result still matches the definition. A
    per-tensor activation scale would crush the other tokens' blocks."""
    x, w, ids = tokens
    ew = moe.ExpertWeights(*layer.tensors())
    loud = x.clone()
    loud[2] = loud[2] * 2.0**14
    base = moe.fused_moe_unshuffled(x, ew, w, ids, act_mode="a8w4")
    out = moe.fused_moe_unshuffled(loud, ew, w, ids, act_mode="a8w4")
    others = [t for t in range(x.shape[0]) if t != 2]
    assert torch.equal(out[others], base[others])
    assert not torch.equal(out[2], base[2])
    assert kernel_budget.rel_l2(out, naive_moe(loud, layer, w, ids, a8=True)) <= REL


def test_a8w4_matches_naive_mxfp8_activations(layer, tokens):
    """a8w4 quantizes the activations to MXFP8 (round_up) before both stages: checked against
    the definition, so a wrong scale rule (e.g. floor) or a skipped stage fails."""
    x, w, ids = tokens
    ref = moe.fused_moe_unshuffled(x, moe.ExpertWeights(*layer.tensors()), w, ids, act_mode="a8w4")
    assert kernel_budget.rel_l2(ref, naive_moe(x, layer, w, ids, a8=True)) <= REL


def test_hidden_pad_reads_only_real_hidden_channels(layer, tokens):
    """hidden_pad: the last channels of H are padding: not read from x or the weights, and the
    output's padded columns are zero."""
    x, w, ids = tokens
    ref = moe.fused_moe_unshuffled(x, moe.ExpertWeights(*layer.tensors()), w, ids, hidden_pad=32)
    assert torch.count_nonzero(ref[:, H - 32 :]) == 0
    assert kernel_budget.rel_l2(ref, naive_moe(x, layer, w, ids, hidden_used=H - 32)) <= REL


def test_swiglu_limit_changes_the_result(layer, tokens):
    """0.05 is inside the range of gate/up values here, so the clamp must bite."""
    x, w, ids = tokens
    ew = moe.ExpertWeights(*layer.tensors())
    assert kernel_budget.rel_l2(moe.fused_moe_unshuffled(x, ew, w, ids, swiglu_limit=0.05), moe.fused_moe_unshuffled(x, ew, w, ids)) > 1e-3


def test_intermediate_pad_reads_only_real_channels(layer, tokens):
    x, w, ids = tokens
    ref = moe.fused_moe_unshuffled(x, moe.ExpertWeights(*layer.tensors()), w, ids, intermediate_pad=32)
    assert kernel_budget.rel_l2(ref, naive_moe(x, layer, w, ids, inter_used=I - 32)) <= REL


@pytest.mark.parametrize("act", ["a16w4", "a8w4"])
def test_doweight_stage1_weights_the_activation_input(layer, tokens, act):
    """aiter's torch_moe_stage1 multiplies gate and up by the top-k weight before
    act(gate) * up: silu(w g) * (w u) is not w * silu(g) * u, so doweight_stage1 is a
    different function (measured rel. L2 ~0.9 here), equal to the definition."""
    x, w, ids = tokens
    ew = moe.ExpertWeights(*layer.tensors())
    ref = moe.fused_moe_unshuffled(x, ew, w, ids, doweight_stage1=True, act_mode=act)
    assert kernel_budget.rel_l2(ref, naive_moe(x, layer, w, ids, doweight_stage1=True, a8=act == "a8w4")) <= REL
    assert kernel_budget.rel_l2(ref, moe.fused_moe_unshuffled(x, ew, w, ids, act_mode=act)) > 0.1


@pytest.mark.parametrize("act", ["a16w4", "a8w4"])
def test_swiglu_limit_zero_means_no_clamp(layer, tokens, act):
    """aiter tests ``if swiglu_limit:`` and AiterMoeQuantInfo defaults to 0.0: no clamp."""
    x, w, ids = tokens
    ew = moe.ExpertWeights(*layer.tensors())
    none = moe.fused_moe_unshuffled(x, ew, w, ids, act_mode=act)
    assert none.abs().max() > 0
    assert torch.equal(moe.fused_moe_unshuffled(x, ew, w, ids, swiglu_limit=0.0, act_mode=act), none)


@pytest.mark.parametrize("act", ["a16w4", "a8w4"])
def test_stage1_output_is_rounded_to_the_activation_dtype(layer, tokens, act):
    """aiter's stage-1 buffer is bf16 (torch_moe_stage1 ends with ``out.to(dtype)``); a8w4
    quantizes that bf16 buffer. Against the definition with and without the rounding: the
    reference must match the rounded one and be measurably away from the float one (bf16
    keeps 8 significant bits: relative error up to 2^-9 per element, ~1e-3 after stage 2)."""
    x, w, ids = tokens
    ew = moe.ExpertWeights(*layer.tensors())
    a8 = act == "a8w4"
    ref = moe.fused_moe_unshuffled(x, ew, w, ids, act_mode=act)
    assert kernel_budget.rel_l2(ref, naive_moe(x, layer, w, ids, a8=a8)) <= REL
    assert kernel_budget.rel_l2(ref, naive_moe(x, layer, w, ids, a8=a8, round_stage1=False)) > 1e-4
    # float semantics on request (stage1_dtype=None), as aiter's single-function torch_moe
    flt = moe.fused_moe_unshuffled(x, ew, w, ids, act_mode=act, stage1_dtype=None)
    assert kernel_budget.rel_l2(flt, naive_moe(x, layer, w, ids, a8=a8, round_stage1=False)) <= REL


def test_expert_mask_drops_remote_experts(layer, tokens):
    """EP: with a mask over 2*E global experts where this rank holds the odd ones, tokens routed
    to even (remote) experts contribute nothing."""
    x, w, ids = tokens
    ew = moe.ExpertWeights(*layer.tensors())
    mask = torch.tensor([0, 1] * E, dtype=torch.int32)
    global_ids = ids * 2 + 1  # every local expert e is global 2e+1
    full = moe.fused_moe_unshuffled(x, ew, w, global_ids, expert_mask=mask)
    assert torch.equal(full, moe.fused_moe_unshuffled(x, ew, w, ids))
    half = global_ids.clone()
    half[:, 1] = 0  # second choice goes to a remote expert
    only_first = moe.fused_moe_unshuffled(x, ew, w[:, :1].contiguous(), ids[:, :1].contiguous())
    assert torch.allclose(moe.fused_moe_unshuffled(x, ew, w, half, expert_mask=mask), only_first, rtol=0, atol=0)


def test_expert_mask_through_the_call_site(layer, tokens):
    """EP through ``quant_info.call_fused_moe``: the info's expert_mask (global ids, this rank
    holds the odd ones) must reach the backend; routes to remote experts contribute nothing."""
    from fp4moe.reference import quant_info

    x, w, ids = tokens
    pw = weight_path.process_fp4_moe_weights(*layer.tensors(), align=128)  # I 96 -> 128, pad 32
    mask = torch.tensor([0, 1] * E, dtype=torch.int32)
    gids = ids * 2 + 1
    gids[:, 1] = 0  # every second choice goes to a remote expert
    info = quant_info.build_quant_info(pw, expert_mask=mask)
    got = quant_info.call_fused_moe(ReferenceBackend(), x, w, gids, info, act_mode="a8w4")
    ew = moe.ExpertWeights(*layer.tensors())
    want = moe.fused_moe_reference(x, ew, w[:, :1].contiguous(), ids[:, :1].contiguous(), act_mode="a8w4")
    assert torch.equal(got, want)


def test_a8w4_differs_from_a16w4_by_activation_quantization(layer, tokens):
    """MXFP8 e4m3 keeps 3 mantissa bits: per-element relative error up to 2^-4, ~3% RMS after
    the matmuls (measured 4.7e-2 on these shapes); it must be neither 0 (quantization skipped)
    nor above 0.1 (wrong scale)."""
    x, w, ids = tokens
    ew = moe.ExpertWeights(*layer.tensors())
    d = kernel_budget.rel_l2(moe.fused_moe_unshuffled(x, ew, w, ids, act_mode="a8w4"), moe.fused_moe_oracle(x, ew, w, ids))
    assert 1e-3 < d < 0.1


def test_route_is_softmax_topk():
    g = torch.Generator().manual_seed(43)
    logits = torch.randn((7, 16), generator=g)
    w, ids = moe.route(logits, 6)
    p = torch.softmax(logits.double(), -1)
    for t in range(7):
        order = sorted(range(16), key=lambda j: -float(p[t, j]))[:6]
        assert ids[t].tolist() == order
        expect = p[t, order] / p[t, order].sum()
        assert torch.allclose(w[t].double(), expect, rtol=1e-6, atol=0)
    assert ids.dtype == torch.int32


# ------------------------------------------------------------------ bad input
@pytest.fixture()
def processed():
    raw = inputs.make_raw_layer(experts=2, hidden=H, intermediate=I, seed=44)
    return weight_path.process_fp4_moe_weights(*raw.tensors(), align=128)


def _call(pw, x, w, ids, **kw):
    args = dict(w1_scale=pw.w13_scale, w2_scale=pw.w2_scale, intermediate_pad=pw.intermediate_pad)
    args.update(kw)
    return ReferenceBackend().fused_moe(x, pw.w13, pw.w2, w, ids, **args)


def test_bad_inputs_raise_clear_errors_and_leave_inputs_untouched(processed):
    x, w, ids = inputs.make_tokens(tokens=3, hidden=H, experts=2, top_k=2, seed=45)
    before = [t.clone() for t in (x, w, ids, processed.w13, processed.w13_scale, processed.w2, processed.w2_scale)]
    with pytest.raises(ValueError, match="hidden_states"):
        _call(processed, x[:, :64], w, ids)
    with pytest.raises(ValueError, match="topk_ids"):
        _call(processed, x, w, ids + 5)
    with pytest.raises(ValueError, match="topk_ids"):
        _call(processed, x, w[:2], ids)
    with pytest.raises(ValueError, match="intermediate_pad"):
        _call(processed, x, w, ids, intermediate_pad=processed.padded_intermediate)
    with pytest.raises(ValueError, match="hidden_pad"):
        _call(processed, x, w, ids, hidden_pad=H + 32)
    with pytest.raises(ValueError, match="intermediate_pad"):
        _call(processed, x, w, ids, intermediate_pad=16)  # not a whole MXFP4 block
    with pytest.raises(ValueError, match="w2"):
        ReferenceBackend().fused_moe(x, processed.w13, processed.w2[:, :, :16], w, ids, w1_scale=processed.w13_scale, w2_scale=processed.w2_scale)
    with pytest.raises(ValueError, match="w1_scale"):
        _call(processed, x, w, ids, w1_scale=processed.w13_scale[:-32])
    after = (x, w, ids, processed.w13, processed.w13_scale, processed.w2, processed.w2_scale)
    assert all(torch.equal(a, b) for a, b in zip(before, after))


def test_nan_in_real_scales_is_an_error(processed):
    x, w, ids = inputs.make_tokens(tokens=3, hidden=H, experts=2, top_k=2, seed=46)
    s = processed.w2_scale.clone()
    s[0, 0] = e8m0.E8M0_NAN  # row 0 of expert 0 holds a real block (I = 96 = 3 blocks)
    with pytest.raises(ValueError, match=r"w2_scale\[expert 0\].*0xFF"):
        _call(processed, x, w, torch.zeros_like(ids), w2_scale=s)


def test_kernel_budget_premises():
    """The premises of kernel_budget.KERNEL_REL_L2 (the gfx950 kernel budget), re-measured at a reduced
    DeepSeek-V4-like shape (top-k 6): a correct kernel's worst combine -- top-k partials added in
    bf16 -- stays inside it; a kernel that skips the bf16 stage-1 buffer in a8w4 lands outside."""
    raw = inputs.make_raw_layer(experts=8, hidden=512, intermediate=256, seed=47)
    x, w, ids = inputs.make_tokens(tokens=32, hidden=512, experts=8, top_k=6, seed=48)
    ew = moe.ExpertWeights(*raw.tensors())
    ref = moe.fused_moe_reference(x, ew, w, ids, act_mode="a8w4").float()
    acc = torch.zeros_like(x)
    for s in range(6):  # a kernel that atomically adds each slot's bf16 partial
        acc = (acc.float() + moe.fused_moe_unshuffled(x, ew, w[:, s : s + 1].contiguous(), ids[:, s : s + 1].contiguous(), act_mode="a8w4")).to(torch.bfloat16)
    noise = kernel_budget.rel_l2(acc.float(), ref)
    assert noise <= kernel_budget.KERNEL_REL_L2 / 1.2 and kernel_budget.cosine_distance(acc.float(), ref) <= kernel_budget.KERNEL_COS_DIST
    no_buffer = moe.fused_moe_unshuffled(x, ew, w, ids, act_mode="a8w4", stage1_dtype=None).to(torch.bfloat16).float()
    assert kernel_budget.rel_l2(no_buffer, ref) >= 2 * kernel_budget.KERNEL_REL_L2


def test_slot_dtype_rounds_each_slot_row_before_the_sum():
    """``slot_dtype=bf16`` (aiter's Triton path, docs/reference.md 3d) == rounding each slot's
    single-slot result to bf16 and summing in float32; default None == no rounding."""
    import torch

    from fp4moe.reference import weight_path
    from fp4moe.reference.inputs import make_raw_layer, make_tokens
    from fp4moe.reference.moe import ExpertWeights, fused_moe_unshuffled

    raw = make_raw_layer(experts=4, hidden=128, intermediate=64, seed=3)
    pw = weight_path.process_fp4_moe_weights(*raw.tensors(), align=128, shuffle=False)
    ew = ExpertWeights(pw.w13, pw.w13_scale, pw.w2, pw.w2_scale)
    x, w, ids = make_tokens(tokens=6, hidden=128, experts=4, top_k=3, seed=5)
    kw = dict(intermediate_pad=pw.intermediate_pad)
    plain = fused_moe_unshuffled(x, ew, w, ids, **kw)
    slot = fused_moe_unshuffled(x, ew, w, ids, slot_dtype=torch.bfloat16, **kw)
    manual = sum(fused_moe_unshuffled(x, ew, w[:, s:s + 1], ids[:, s:s + 1], **kw).to(torch.bfloat16).float() for s in range(3))
    assert torch.equal(fused_moe_unshuffled(x, ew, w, ids, slot_dtype=None, **kw), plain)
    assert not torch.equal(slot, plain)
    assert torch.allclose(slot, manual, rtol=0, atol=1e-6)  # float32 order of 3 adds only
    assert float((slot - plain).norm() / plain.norm()) < 6e-3
