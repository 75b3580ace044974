"""The GPU-bound reference (``fp4moe.reference.grouped_moe``) against the exact one (``fp4moe.reference.moe``, the judge).

GPU tier (every catalogue row with its real per-rank I_p, scaled-down hidden and expert count;
a16w4 and a8w4; doweight_stage1, swiglu_limit, expert_mask, hidden_pad; align 128/256, both
gate modes; token counts that take each kernel route: fused decode with split-K, fused, and
weights decoded to bf16 first): the fast path through the reference backend equals the exact
path within ``FAST_REL_L2``, and bitwise where the work is the same (align 256 + pad == align
128, CUDA graph == eager). 0xFF scales and bad ids raise as the exact path does.

CPU tier (tiny): the same grouped orchestration with torch ops (``impl="torch"``) equals the
exact path bitwise (same float32 products, and the same slot-order sum), and the caches
notice in-place changes.
"""

from __future__ import annotations

import pytest
import torch

from fp4moe.model import catalogue
from fp4moe.mx import e8m0
from fp4moe.reference import grouped_moe, inputs, kernel_budget, moe, quant_info, weight_path
from fp4moe.reference.reference_backend import ReferenceBackend

# Both paths multiply the same bf16-exact numbers (E2M1 x 2^k weights, bf16 or MXFP8
# activations) and accumulate in float32; only the summation order differs (tensor-core tiles,
# split-K partials vs one float32 matmul), ~1e-7 relative. That order difference flips the bf16
# rounding of a stage-1 value in a few percent of elements (each flip 2^-8 relative) and, in
# a8w4, can flip one MXFP8 rounding (2^-3 relative in one of n_used terms). Observed on the
# H200 over 504 cases: rel. L2 <= 2.0e-4. The bound is 10x that and still 10x below what a
# semantic slip produces (no bf16 stage-1 rounding: 2.7e-3 a16w4, 2-3e-2 a8w4; doweight after
# the activation: 0.9).
FAST_REL_L2 = 2e-3
HIDDEN = 256
ROWS = catalogue.catalogue_rows()
#: the rows the GPU tier sweeps (the production TP8 EP8 of each model; DeepSeek-V4-Pro TP16 EP8's
#: 192-wide partition): every other catalogue row in the slow step (each case compiles its kernels
#: anew: 120 s of the H100's GPU tier for all 14 rows, with Triton 3.6)
GPU_TIER_ROWS = {"dsv4-pro-tp8-ep8", "dsv4-pro-tp16-ep8", "dsv4-flash-tp8-ep8"}


def _case(pc, tokens, *, align=128, gu=True, experts=None, seed=5, device="cuda", **info_kw):
    e = experts or min(pc.local_experts, 8)
    raw = inputs.layer_on(inputs.make_raw_layer(experts=e, hidden=HIDDEN, intermediate=pc.intermediate_per_partition, seed=seed), device)
    x, w, ids = (t.to(device) for t in inputs.make_tokens(tokens=tokens, hidden=HIDDEN, experts=e, top_k=min(pc.model.top_k, e), seed=seed + 1))
    pw = weight_path.process_fp4_moe_weights(*raw.tensors(), align=align, gu_interleave=gu)
    return (x, w, ids), quant_info.build_quant_info(pw, **info_kw)


def _both(tokens_wi, info, act):
    x, w, ids = tokens_wi
    fast = quant_info.call_fused_moe(ReferenceBackend(path="fast"), x, w, ids, info, act_mode=act)
    exact = quant_info.call_fused_moe(ReferenceBackend(path="exact"), x, w, ids, info, act_mode=act)
    return fast, exact


@pytest.mark.gpu
@pytest.mark.parametrize("act", ["a16w4", "a8w4"])
@pytest.mark.parametrize("tokens", [1, 16, 300], ids=["T1-splitk", "T16", "T300-predecoded"])
@pytest.mark.parametrize("pc", [pc if pc.label in GPU_TIER_ROWS else pytest.param(pc, marks=pytest.mark.slow) for pc in ROWS],
                         ids=[pc.label for pc in ROWS])
def test_fast_equals_exact_on_every_catalogue_row(pc, tokens, act):
    if not grouped_moe.fast_path_available("cuda")[0]:
        pytest.skip(grouped_moe.fast_path_available("cuda")[1])
    for info_kw in ({}, {"doweight_stage1": True}, {"swiglu_limit": 0.05}):
        tok, info = _case(pc, tokens, align=256, **info_kw)
        fast, exact = _both(tok, info, act)
        assert torch.isfinite(fast).all() and exact.abs().max() > 0
        err = kernel_budget.rel_l2(fast.float(), exact.float())
        assert err <= FAST_REL_L2, f"{pc.label} T={tokens} {act} {info_kw}: rel. L2 {err:.3g}"


@pytest.mark.gpu
@pytest.mark.parametrize("gu", [True, False], ids=["gu_itlv", "gu_sep"])
def test_fast_pads_expert_mask_and_gate_modes(gu):
    if not grouped_moe.fast_path_available("cuda")[0]:
        pytest.skip(grouped_moe.fast_path_available("cuda")[1])
    pc = catalogue.parallel_config("dsv4-pro", 8)
    mask = torch.tensor([1, 0, 1, 1, 0, 1, 1, 1], dtype=torch.int32, device="cuda")  # 6 local experts
    tok, info = _case(pc, 40, align=256, gu=gu, experts=6, expert_mask=mask)
    x, w, ids = tok
    ids = torch.tensor([0, 2, 3, 5, 6, 7], device="cuda", dtype=torch.int32)[ids.long()]  # global ids
    ids[::3, 0] = 1  # some slots routed to another rank's expert
    fast, exact = _both((x, w, ids), info, "a16w4")
    assert kernel_budget.rel_l2(fast.float(), exact.float()) <= FAST_REL_L2
    # align 256 with the pad propagated does exactly the align-128 work: bitwise
    tok128, info128 = _case(pc, 40, align=128, gu=gu, experts=6, expert_mask=mask)
    f128 = quant_info.call_fused_moe(ReferenceBackend(path="fast"), x, w, ids, info128)
    assert torch.equal(fast, f128)
    # hidden_pad: the last 32 hidden columns are not computed (zeros out), as in the exact path
    kw = quant_info.fused_moe_kwargs(info128)
    kw["hidden_pad"] = 32
    outs = [ReferenceBackend(path=p).fused_moe(x, info128.w13_weight, info128.w2_weight, w, ids, **kw) for p in ("fast", "exact")]
    assert bool((outs[0][:, -32:] == 0).all()) and kernel_budget.rel_l2(outs[0].float(), outs[1].float()) <= FAST_REL_L2


@pytest.mark.gpu
def test_cuda_graph_replay_equals_eager_and_nan_scales_raise():
    if not grouped_moe.fast_path_available("cuda")[0]:
        pytest.skip(grouped_moe.fast_path_available("cuda")[1])
    pc = catalogue.parallel_config("dsv4-pro", 8)
    (x, w, ids), info = _case(pc, 4, align=256)
    layer = grouped_moe.prepared_layer(info.w13_weight, info.w2_weight, info.w13_scale, info.w2_scale, "interleave")
    kw = dict(intermediate_pad=info.intermediate_pad)
    graphed = grouped_moe.fused_moe_fast(x, layer, w, ids, graphs=True, **kw)
    x2 = x.flip(0).contiguous()  # another batch through the same graph: the inputs are really copied in
    assert torch.equal(grouped_moe.fused_moe_fast(x2, layer, w, ids, graphs=True, **kw), grouped_moe.fused_moe_fast(x2, layer, w, ids, graphs=False, **kw))
    assert torch.equal(graphed, grouped_moe.fused_moe_fast(x, layer, w, ids, graphs=False, **kw))
    # a 0xFF scale in a read region of a routed expert: the exact path's error
    bad = info.w2_scale.clone()
    bad.view(torch.uint8)[0, 0] = e8m0.E8M0_NAN
    with pytest.raises(ValueError, match=r"w2_scale\[expert"):
        ReferenceBackend(path="fast").fused_moe(x, info.w13_weight, info.w2_weight, w, torch.zeros_like(ids),
                                               **{**quant_info.fused_moe_kwargs(info), "w2_scale": bad})
    with pytest.raises(ValueError, match="topk_ids: values must be in"):
        grouped_moe.fused_moe_fast(x, layer, w, ids + 100, **kw)


# ----------------------------------------------------------------------------- CPU tier
def test_torch_grouping_equals_exact_bitwise_on_cpu():
    pc = catalogue.parallel_config("dsv4-pro", 8)
    mask = torch.tensor([1, 0, 1, 1, 1], dtype=torch.int32)
    (x, w, ids), info = _case(pc, 5, align=256, experts=4, device="cpu", expert_mask=mask, doweight_stage1=True, swiglu_limit=0.05)
    ids = torch.tensor([0, 2, 3, 4], dtype=torch.int32)[ids.long()]
    ids[0, 0] = 1  # another rank's expert
    layer = grouped_moe.prepared_layer(info.w13_weight, info.w2_weight, info.w13_scale, info.w2_scale, "interleave")
    for act in ("a16w4", "a8w4"):
        kw = dict(intermediate_pad=info.intermediate_pad, swiglu_limit=0.05, doweight_stage1=True, expert_mask=mask, act_mode=act)
        fast = grouped_moe.fused_moe_fast(x, layer, w, ids, impl="torch", **kw)
        exact = moe.fused_moe_reference(x, layer.ew, w, ids, **kw)
        assert exact.abs().max() > 0 and torch.equal(fast, exact), act


def test_group_by_expert_sorts_on_the_device_side():
    local = torch.tensor([[2, 0], [-1, 2], [0, 1]])
    r = grouped_moe.group_by_expert(local, experts=3, block_m=2)
    # groups: 0 = other ranks, 1 + e = expert e; stable sort of flat positions
    assert r.order.tolist() == [2, 1, 4, 5, 0, 3]
    assert r.row_start.tolist() == [0, 1, 3, 4, 6] and r.tile_start.tolist() == [0, 1, 2, 3, 4]
    assert r.groups == 4 and r.max_tiles >= 4


def test_caches_notice_in_place_changes():
    pc = catalogue.parallel_config("dsv4-pro", 8)
    (x, w, ids), info = _case(pc, 3, experts=4, device="cpu")
    args = (info.w13_weight, info.w2_weight, info.w13_scale, info.w2_scale, "interleave")
    layer = grouped_moe.prepared_layer(*args)
    assert grouped_moe.prepared_layer(*args) is layer
    info.w2_weight.view(torch.uint8)[0, 0, 0] ^= 0x11  # a checkpoint reload in place
    assert grouped_moe.prepared_layer(*args) is not layer
    grouped_moe.fused_moe_fast(x, grouped_moe.prepared_layer(*args), w, ids, impl="torch")
    ids[0, 0] = 99  # validated once, then modified in place: checked again
    with pytest.raises(ValueError, match="topk_ids: values must be in"):
        grouped_moe.fused_moe_fast(x, grouped_moe.prepared_layer(*args), w, ids, impl="torch")
    with pytest.raises(TypeError, match="bfloat16"):
        grouped_moe.fused_moe_fast(x.float(), layer, w, ids, impl="torch")


_INTERPRETER_CHECK = """
import torch
from fp4moe.model import catalogue
from fp4moe.reference import moe, grouped_moe, quant_info, inputs, kernel_budget, weight_path
pc = catalogue.parallel_config("dsv4-pro", 8)
raw = inputs.make_raw_layer(experts=4, hidden=256, intermediate=pc.intermediate_per_partition, seed=5)
mask = torch.tensor([1, 0, 1, 1, 1], dtype=torch.int32)
worst = 0
for tokens in (3, 140):  # split-K decode route; decode-to-bf16 route (140 * 2 rows >= 64 per expert)
    x, w, ids = inputs.make_tokens(tokens=tokens, hidden=256, experts=4, top_k=2, seed=6)
    ids = torch.tensor([0, 2, 3, 4], dtype=torch.int32)[ids.long()]
    ids[0, 0] = 1
    pw = weight_path.process_fp4_moe_weights(*raw.tensors(), align=256)
    info = quant_info.build_quant_info(pw, expert_mask=mask, doweight_stage1=True, swiglu_limit=0.05)
    layer = grouped_moe.prepared_layer(info.w13_weight, info.w2_weight, info.w13_scale, info.w2_scale, "interleave")
    for act in ("a16w4", "a8w4"):
        kw = dict(intermediate_pad=info.intermediate_pad, expert_mask=mask, doweight_stage1=True, swiglu_limit=0.05, act_mode=act)
        fast = grouped_moe.fused_moe_fast(x, layer, w, ids, impl="triton", graphs=False, **kw)
        exact = moe.fused_moe_reference(x, layer.ew, w, ids, **kw)
        worst = max(worst, kernel_budget.rel_l2(fast.float(), exact.float()))
print("WORST", worst)
"""


@pytest.mark.slow
@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="the grouped-MoE Triton kernels fail in Triton 3.9's interpreter ('mask has unsupported "
                          "dtype' in a masked load, fp4moe/reference/grouped_moe_kernels.py); compiled on the H200 "
                          "they pass the GPU tier. Seen once triton 3.9 was installed for aiter's kernels")
def test_triton_kernels_under_the_interpreter_on_cpu():
    """The Triton kernels themselves on a CPU, through Triton's interpreter (skipped where Triton
    is not installed; it is no dependency). Same tolerance as on the GPU."""
    pytest.importorskip("triton", reason="triton is not installed: the kernels can only be interpreted where it is")
    import os
    import sys

    from fp4moe.infra.paths import REPO_ROOT
    from fp4moe.infra.runner import run_child

    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    res = run_child([sys.executable, "-c", _INTERPRETER_CHECK], timeout_s=900, env=env, want_record=False)
    assert res.rc == 0, res.tail
    worst = float(res.stdout.split("WORST")[-1])
    assert worst <= FAST_REL_L2, worst
