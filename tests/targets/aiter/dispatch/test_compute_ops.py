"""The computing stand-ins (fp4moe.targets.aiter.dispatch.compute) against fp4moe.reference.

Each path runs the ops in the order ``aiter/fused_moe.py`` (e4048607) launches them, each given
the argument dict its declaration binds (names as ``aiter/ops/*.py`` declare them; the
allocations sized as ``_moe_sorting_impl``, ``fused_dynamic_mx_quant_moe_sort`` and
``fused_moe_2stages`` size them), with every fresh allocation poisoned (0xFF bytes) and the
layer's pad bytes poisoned (weights 0xA5, e8m0 scales 0xFF): a stage that reads a pad, a
sentinel row or memory nobody wrote gives NaN or wrong values. The end-to-end run through
aiter's real ``fused_moe`` (the dispatch child) is in test_compute_dispatch.py.
"""

from __future__ import annotations

import functools

import pytest
import torch

from fp4moe.mx import e8m0
from fp4moe.reference import kernel_budget, layout, moe
from fp4moe.reference.expert_weights import ShuffledExpertWeights
from fp4moe.reference.inputs import make_raw_layer, make_tokens
from fp4moe.targets.aiter.dispatch import compute as C

E, H, I_REAL, TOPK, T = 4, 512, 384, 2, 16
WEIGHT_PAD_BYTE = 0xA5
SILU = int(C.ActivationType.SILU)
PER_1X32 = 3  # aiter_enum.h QuantType::per_1x32


# ----------------------------------------------------------------------------- the layer
@functools.cache
def _layer(padded: bool, gate_mode: str):
    """Shuffled weights [E, 2P, H/2] / [E, H, P/2] (P = 512), pads poisoned, as SGLang hands them over."""
    i = I_REAL if padded else 512
    raw = make_raw_layer(experts=E, hidden=H, intermediate=i, seed=26)
    p = 512
    w13 = torch.full((E, 2 * p, H // 2), WEIGHT_PAD_BYTE, dtype=torch.uint8)
    s13 = torch.full((E, 2 * p, H // 32), e8m0.E8M0_NAN, dtype=torch.uint8)
    w13[:, :i], w13[:, p : p + i] = raw.w13[:, :i], raw.w13[:, i:]
    s13[:, :i], s13[:, p : p + i] = raw.w13_scale[:, :i], raw.w13_scale[:, i:]
    w2 = torch.full((E, H, p // 2), WEIGHT_PAD_BYTE, dtype=torch.uint8)
    s2 = torch.full((E, H, p // 32), e8m0.E8M0_NAN, dtype=torch.uint8)
    w2[..., : i // 2], s2[..., : i // 32] = raw.w2, raw.w2_scale
    itlv = gate_mode == "interleave"
    return {
        "w1": layout.shuffle_weight(w13, is_guinterleave=itlv, gate_up=True),
        "w2": layout.shuffle_weight(w2, is_guinterleave=itlv, gate_up=False),
        "w1_scale": layout.shuffle_scale(s13.reshape(E * 2 * p, -1), E, itlv, True).view(torch.float8_e8m0fnu),
        "w2_scale": layout.shuffle_scale(s2.reshape(E * H, -1), E, itlv, False).view(torch.float8_e8m0fnu),
        "pad": p - i,
        "gate_mode": gate_mode,
    }


def _tokens(t: int = T):
    return make_tokens(tokens=t, hidden=H, experts=E, top_k=TOPK, seed=7)


def _reference(L, x, w, ids, *, act_mode, swiglu_limit=None, pad=None, **kw):
    ew = ShuffledExpertWeights(L["w1"], L["w2"], L["w1_scale"], L["w2_scale"], L["gate_mode"])
    return moe.fused_moe_reference(x, ew, w, ids, intermediate_pad=L["pad"] if pad is None else pad,
                                   act_mode=act_mode, swiglu_limit=swiglu_limit, **kw)


# ----------------------------------------------------------------------------- aiter's sequence
def _sort(ids, w, block_m, *, op="moe_sorting_opus_fwd"):
    """_moe_sorting_impl's buffers and call (accumulate: moe_buf [M, model_dim])."""
    m, topk = ids.shape
    max_pad = ids.numel() + E * block_m - topk
    args = {"topk_ids": ids, "topk_weights": w,
                "sorted_token_ids": torch.empty(max_pad, dtype=torch.int32),
                "sorted_weights": torch.empty(max_pad, dtype=torch.float32),
                "sorted_expert_ids": torch.empty((max_pad + block_m - 1) // block_m, dtype=torch.int32),
                "num_valid_ids": torch.empty(2, dtype=torch.int32),
                "moe_buf": torch.empty((m, H), dtype=torch.bfloat16),
                "num_experts": E, "unit_size": block_m, "local_expert_mask": None, "num_local_tokens": None,
                "workspace": None, "dispatch_policy": 0, "local_topk_ids": None, "m_indices": None, "reverse_sorted": None}
    C.COMPUTE[op](args)
    return args


def _mx_quant_sort(inp, s, token_num, block_m, dtype):
    """fused_dynamic_mx_quant_moe_sort's fused branch: out [M, N or N/2], scale [pad32(sorted), pad8(N/32)]."""
    x = inp.reshape(-1, inp.shape[-1])
    n = x.shape[1]
    out = torch.empty((x.shape[0], n if dtype == torch.float8_e4m3fn else n // 2), dtype=dtype)
    scale = torch.empty(((s["sorted_token_ids"].numel() + 31) // 32 * 32, (n // 32 + 7) // 8 * 8), dtype=torch.uint8)
    C.COMPUTE["fused_dynamic_mx_quant_moe_sort_hip"]({
        "out": out, "scales": scale.view(torch.float8_e8m0fnu), "input": inp, "sorted_ids": s["sorted_token_ids"],
        "num_valid_ids": s["num_valid_ids"], "token_num": token_num, "block_m": block_m, "group_size": 32,
        "sorted_weights": s["sorted_weights"]})
    return out, scale.view(torch.float8_e8m0fnu)


def _sorted(s):
    return {"sorted_token_ids": s["sorted_token_ids"], "sorted_expert_ids": s["sorted_expert_ids"], "num_valid_ids": s["num_valid_ids"]}


def _flydsl_s1(L, a, a_scale, s, *, tile_m, out, out_dtype, pad, swiglu_limit, gate_mode=None):
    return C.COMPUTE["flydsl_moe_stage1"](dict(
        a=a, w1=L["w1"], **_sorted(s), out=out, topk=TOPK, tile_m=tile_m, tile_n=128, tile_k=256,
        a_dtype="fp8", b_dtype="fp4", out_dtype=out_dtype, act="silu", w1_scale=L["w1_scale"], a1_scale=a_scale,
        sorted_weights=None, k_batch=1, gate_mode=gate_mode or L["gate_mode"], model_dim_pad=0, inter_dim_pad=pad,
        bias=None, topk_ids=None, swiglu_limit=swiglu_limit))


def _flydsl_s2(L, a2, a2_scale, s, *, tile_m, pad, sort_block_m=0):
    return C.COMPUTE["flydsl_moe_stage2"](dict(
        inter_states=a2, w2=L["w2"], **_sorted(s), out=s["moe_buf"], topk=TOPK, tile_m=tile_m, tile_n=128, tile_k=256,
        a_dtype="fp8", b_dtype="fp4", out_dtype="bf16", mode="atomic", w2_scale=L["w2_scale"], a2_scale=a2_scale,
        sorted_weights=s["sorted_weights"], sort_block_m=sort_block_m, model_dim_pad=0, inter_dim_pad=pad, bias=None,
        return_per_slot=False, expert_mask=None, topk_ids=None))


def run_flydsl(L, x, w, ids, *, block_m=32, pad=None, swiglu_limit=None, stage1_fp8=False, tile_m=None, s2_pad=None):
    """Heuristic FlyDSL a8w4 (fp8 quant+sort, stage 1 bf16, fp8 quant+sort, stage 2), or with
    ``stage1_fp8`` the tuned ``..._fp8`` stage 1 that quantizes its own output."""
    pad = L["pad"] if pad is None else pad
    s = _sort(ids, w, block_m)
    a1, a1s = _mx_quant_sort(x, s, T, block_m, torch.float8_e4m3fn)
    tile = tile_m or block_m
    if stage1_fp8:
        a2, a2s = _flydsl_s1(L, a1, a1s, s, tile_m=tile, out=None, out_dtype="fp8", pad=pad, swiglu_limit=swiglu_limit)
        a2 = a2.view(T, TOPK, -1)
    else:
        out = torch.empty((T, TOPK, 512), dtype=torch.bfloat16)
        _flydsl_s1(L, a1, a1s, s, tile_m=tile, out=out, out_dtype="bf16", pad=pad, swiglu_limit=swiglu_limit)
        a2, a2s = _mx_quant_sort(out.view(-1, 512), s, T, block_m, torch.float8_e4m3fn)
        a2 = a2.view(T, TOPK, -1)
    return _flydsl_s2(L, a2, a2s, s, tile_m=tile, pad=pad if s2_pad is None else s2_pad)


def run_opus(L, x, w, ids, *, block_m=32, pad=None, swiglu_limit=None, route_out=None):
    """Tuned Opus + Opus: fp8 quant+sort, Opus stage 1 (fp8 out + sorted scale), Opus stage 2
    (``route_out`` "bf16": [T, topk, H] rows, "mxfp8": uint8 [T*topk, H + H/8], then the reduce)."""
    pad = L["pad"] if pad is None else pad
    s = _sort(ids, w, block_m)
    a1, a1s = _mx_quant_sort(x, s, T, block_m, torch.float8_e4m3fn)
    out = torch.empty((T, TOPK, 512), dtype=torch.float8_e4m3fn)
    rows = max(s["sorted_token_ids"].numel(), s["sorted_expert_ids"].numel() * block_m)
    out_scale = torch.zeros(((rows + 255) // 256 * 256, (512 // 32 + 7) // 8 * 8), dtype=torch.float8_e8m0fnu)
    limit = float(swiglu_limit) if swiglu_limit else float("inf")
    C.COMPUTE["_opus_moe_stage1_a8w4_fwd_raw"](dict(
        hidden_states=a1, w1=L["w1"], hidden_scale=a1s, w1_scale=L["w1_scale"], bias=None, **_sorted(s), out=out,
        out_scale=out_scale, topk=TOPK, block_m=block_m, kernelName="opus_moe1", inter_dim_pad=pad, activation=SILU,
        swiglu_limit=limit, situ_beta=4.0, situ_linear_beta=25.0))
    dest = {None: s["moe_buf"], "bf16": torch.empty((T, TOPK, H), dtype=torch.bfloat16),
            "mxfp8": torch.empty((T * TOPK, H + H // 8), dtype=torch.uint8)}[route_out]
    C.COMPUTE["_opus_moe_stage2_a8w4_decode_fwd_raw"]({
        "inter_states": out, "w2": L["w2"], "a2_scale": out_scale, "w2_scale": L["w2_scale"], "sorted_token_ids": s["sorted_token_ids"],
        "sorted_weights": s["sorted_weights"], "sorted_expert_ids": s["sorted_expert_ids"], "num_valid_ids": s["num_valid_ids"],
        "out": dest, "token_num": T, "topk": TOPK, "block_m": block_m, "kernel_id": 0, "inter_dim_pad": pad})
    if route_out:
        C.COMPUTE["_opus_moe_stage2_reduce_token_slot_route_output_fwd_raw"]({"route_out": dest, "out": s["moe_buf"], "topk": TOPK, "block_n": -1})
    return s["moe_buf"]


def run_ck(L, x, w, ids, *, block_m=32, is_shuffled=True):
    """Heuristic CK 2-stage a16w4: bf16 into stage 1 (no pad argument), the bf16 stage-1 output
    MXFP4-quantized + sorted, CK stage 2 (no pad argument)."""
    s = _sort(ids, w, block_m)
    out = torch.empty((T, TOPK, 512), dtype=torch.bfloat16)
    common = dict(**_sorted(s), topk=TOPK, kernelName="module_moe_ck2stages_b16_fp4x2_preshuffle_on", block_m=block_m,
                  quant_type=PER_1X32, activation=SILU, splitk=0, use_non_temporal_load=False, dst_type="b16",
                  is_shuffled=is_shuffled)
    C.COMPUTE["ck_moe_stage1"](dict(hidden_states=x, w1=L["w1"], w2=L["w2"], out=out, w1_scale=L["w1_scale"], a1_scale=None,
                                    sorted_weights=None, **common))
    a2, a2s = _mx_quant_sort(out.view(-1, 512), s, T, block_m, torch.uint8)
    C.COMPUTE["ck_moe_stage2"](dict(inter_states=a2.view(T, TOPK, -1), w1=L["w1"], w2=L["w2"], out=s["moe_buf"],
                                    w2_scale=L["w2_scale"], a2_scale=a2s, sorted_weights=s["sorted_weights"], **common))
    return s["moe_buf"]


def run_cktile(L, x, w, ids, *, block_m=16, split_k=2, pad=None):
    """CK-tile split-k a16w4: gate/up into a zeroed bf16 workspace (GU-interleaved
    columns), the interleaved post-activation, CK-tile stage 2."""
    pad = L["pad"] if pad is None else pad
    s = _sort(ids, w, block_m)
    tmp = torch.zeros((T * TOPK, 2 * 512), dtype=torch.bfloat16)
    sorted_args = {"sorted_ids": s["sorted_token_ids"], "sorted_expert_ids": s["sorted_expert_ids"],
                       "max_token_ids": s["num_valid_ids"], "topk": TOPK}
    C.COMPUTE["moe_cktile2stages_gemm1_ck"](dict(
        XQ=x, WQ=L["w1"], Y=tmp, **sorted_args, n_padded_zeros=pad // 64 * 64 * 2, k_padded_zeros=0, topk_weight=None,
        x_scale=None, w_scale=L["w1_scale"], exp_bias=None, activation=SILU, block_m=block_m, split_k=split_k, kernel_name=""))
    out = torch.empty((T, TOPK, 512), dtype=torch.bfloat16)
    # post_activation_layout "auto" with float4_e2m1fn_x2 weights: the interleaved post-activation
    C.COMPUTE["flydsl_silu_and_mul_interleaved"]({"input": tmp[: T * TOPK], "out": out.view(-1, 512), **_sorted(s),
                                                  "token_num": T, "topk": TOPK, "quant_mode": "none", "gui_layout": True})
    C.COMPUTE["moe_cktile2stages_gemm2_ck"](dict(
        XQ=out, WQ=L["w2"], Y=s["moe_buf"], **sorted_args, n_padded_zeros=0, k_padded_zeros=pad // 128 * 128,
        topk_weight=s["sorted_weights"], x_scale=None, w_scale=L["w2_scale"], exp_bias=None, activation=SILU,
        block_m=block_m, split_k=1, kernel_name=""))
    return s["moe_buf"]


def _poisoned(fn, *args, **kw):
    with C.poisoned_allocations():
        return fn(*args, **kw)


def _wrong(got, want) -> int:
    return int((~(got == want)).sum())


# ----------------------------------------------------------------------------- sorting and quants
def test_sorting_groups_tokens_by_expert_and_pads_each_to_the_unit():
    _x, w, ids = _tokens()
    s = _poisoned(_sort, ids, w, 16)
    n = int(s["num_valid_ids"][0])
    assert int(s["num_valid_ids"][1]) == T
    assert n % 16 == 0
    packed = s["sorted_token_ids"][:n].long()
    tok, slot = packed & C.SORTED_TOKEN_MASK, packed >> C.SORTED_TOKEN_BITS
    real = tok < T
    assert int(real.sum()) == T * TOPK
    experts = s["sorted_expert_ids"][(torch.arange(n) // 16)].long()
    assert torch.equal(ids.long()[tok[real], slot[real]], experts[real])
    assert torch.equal(s["sorted_weights"][:n][real], w[tok[real], slot[real]])
    assert bool((packed[~real] == ((TOPK << 24) | T)).all())
    assert bool((s["sorted_weights"][:n][~real] == 0).all())
    assert bool((s["moe_buf"] == 0).all())


def test_fused_and_split_quant_paths_give_the_same_bytes():
    """The large-token split path (per-row quant + scale sort) equals the fused quant+sort."""
    x, w, ids = _tokens()
    s = _sort(ids, w, 32)
    fused, fused_scale = _poisoned(_mx_quant_sort, x, s, T, 32, torch.float8_e4m3fn)
    with C.poisoned_allocations():
        out = torch.empty((T, H), dtype=torch.float8_e4m3fn)
        per_row = torch.empty((T, H // 32), dtype=torch.uint8)
        C.COMPUTE["dynamic_per_group_scaled_quant"]({"out": out, "input": x, "scales": per_row.view(torch.float8_e8m0fnu),
                                                         "group_size": 32, "shuffle_scale": False, "num_rows": None, "num_rows_factor": 1})
        sorted_scale = torch.empty_like(fused_scale.view(torch.uint8))
        C.COMPUTE["mxfp4_moe_sort_hip"]({"out_scale": sorted_scale.view(torch.float8_e8m0fnu), "scale": per_row,
                                             "sorted_ids": s["sorted_token_ids"], "num_valid_ids": s["num_valid_ids"], "token_num": T, "cols": H})
    assert torch.equal(out.view(torch.uint8), fused.view(torch.uint8))
    real = C.read_sorted_scale(fused_scale, "fused")[:, : H // 32]
    assert torch.equal(C.read_sorted_scale(sorted_scale, "split")[:, : H // 32][:, :], real)


def test_quant_of_a_poisoned_block_is_nan_and_its_neighbours_exact():
    x = torch.randn((2, 64), generator=torch.Generator().manual_seed(3))
    x[0, 32:] = float("nan")
    elems, scale = C.mx_quantize(x, "fp8")
    assert int(scale[0, 1]) == e8m0.E8M0_NAN
    back = C.mx_dequantize(elems, scale, "fp8")
    assert torch.isnan(back[0, 32:]).all()
    assert torch.equal(back[0, :32], C.mx_dequantize(*C.mx_quantize(x[:1, :32], "fp8"), "fp8")[0])


def test_poisoned_allocations_fill_every_fresh_tensor_and_restore_torch():
    with C.poisoned_allocations():
        f = torch.empty(4, dtype=torch.bfloat16)
        i = torch.empty_like(torch.zeros(3, dtype=torch.int32))
    assert torch.isnan(f).all() and bool((i == -1).all())
    assert torch.empty.__module__ != C.__name__


# ----------------------------------------------------------------------------- one path each, against the reference
PATHS = {
    # name: (runner, act_mode, reference keywords)
    "flydsl": (run_flydsl, "a8w4", {}),
    "flydsl_fp8_stage1": (functools.partial(run_flydsl, stage1_fp8=True), "a8w4", {}),
    "opus": (run_opus, "a8w4", {}),
    # the route output stores each weighted slot in bf16 before the reduce (reference slot_dtype)
    "opus_route_output": (functools.partial(run_opus, route_out="bf16"), "a8w4", {"slot_dtype": torch.bfloat16}),
    # the MXFP8 route output: bf16, then e4m3 + e8m0 per 8 columns, dequantized by the reduce
    "opus_mxfp8_route_output": (functools.partial(run_opus, route_out="mxfp8"), "a8w4", {"slot_quant": "mxfp8_route"}),
    "cktile_splitk": (run_cktile, "a16w4", {"gate_up_dtype": torch.bfloat16}),
}


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
@pytest.mark.parametrize("path", list(PATHS))
def test_path_equals_the_reference_bitwise(path, padded):
    runner, act_mode, ref_kw = PATHS[path]
    L = _layer(padded, "interleave")
    x, w, ids = _tokens()
    got = _poisoned(runner, L, x, w, ids)
    want = _reference(L, x, w, ids, act_mode=act_mode, **ref_kw)
    assert _wrong(got, want) == 0, f"{path}: {_wrong(got, want)} of {want.numel()} values differ"


def test_cktile_bf16_gate_up_is_inside_the_kernel_budget():
    """Against the plain reference (float32 gate/up) the CK-tile workspace rounding is a
    rounding-point difference a correct kernel may have: inside KERNEL_REL_L2."""
    L = _layer(True, "interleave")
    x, w, ids = _tokens()
    got = _poisoned(run_cktile, L, x, w, ids)
    plain = _reference(L, x, w, ids, act_mode="a16w4")
    err = kernel_budget.rel_l2(got, plain)
    assert 0 < err < kernel_budget.KERNEL_REL_L2


def test_ck_unpadded_equals_the_reference_with_mxfp4_inter_stage():
    L = _layer(False, "interleave")
    x, w, ids = _tokens()
    got = _poisoned(run_ck, L, x, w, ids)
    want = _reference(L, x, w, ids, act_mode="a16w4", stage2_act="mxfp4")
    assert _wrong(got, want) == 0
    assert _wrong(got, _reference(L, x, w, ids, act_mode="a16w4")) > want.numel() // 2


def test_ck_padded_reads_the_pads_it_is_never_told():
    """CK 2-stage takes no pad argument: on a padded layer it multiplies the poisoned pad."""
    L = _layer(True, "interleave")
    x, w, ids = _tokens()
    got = _poisoned(run_ck, L, x, w, ids)
    assert bool(torch.isnan(got).all())


# ----------------------------------------------------------------------------- what a lost argument does
LOSSES = {
    # name: (runner keywords, reference keywords): the stand-ins must see what was lost
    "flydsl pad dropped at both stages": ({"pad": 0}, {}),
    "flydsl pad dropped at stage 2": ({"s2_pad": 0}, {}),
    "flydsl swiglu_limit not forwarded": ({"swiglu_limit": None}, {"swiglu_limit": 0.01}),
    "flydsl tile_m != sorting unit": ({"block_m": 16, "tile_m": 32}, {}),
    "opus pad dropped": ({"pad": 0}, {}),
}


@pytest.mark.parametrize("loss", list(LOSSES))
def test_a_lost_argument_gives_wrong_values(loss):
    run_kw, ref_kw = LOSSES[loss]
    runner = run_opus if loss.startswith("opus") else run_flydsl
    L = _layer(True, "interleave")
    x, w, ids = _tokens()
    got = _poisoned(runner, L, x, w, ids, **run_kw)
    want = _reference(L, x, w, ids, act_mode="a8w4", **ref_kw)
    assert _wrong(got, want) > want.numel() // 8, f"{loss}: only {_wrong(got, want)} wrong"


def test_flydsl_clamp_applied_when_forwarded():
    L = _layer(True, "interleave")
    x, w, ids = _tokens()
    got = _poisoned(run_flydsl, L, x, w, ids, swiglu_limit=0.01)
    assert _wrong(got, _reference(L, x, w, ids, act_mode="a8w4", swiglu_limit=0.01)) == 0
    assert _wrong(got, _reference(L, x, w, ids, act_mode="a8w4")) > 0


def test_flydsl_gate_mode_is_the_layout_it_reads():
    L = _layer(False, "interleave")
    x, w, ids = _tokens()

    def run(**kw):
        s = _sort(ids, w, 32)
        a1, a1s = _mx_quant_sort(x, s, T, 32, torch.float8_e4m3fn)
        out = torch.empty((T, TOPK, 512), dtype=torch.bfloat16)
        _flydsl_s1(L, a1, a1s, s, tile_m=32, out=out, out_dtype="bf16", pad=0, swiglu_limit=None, **kw)
        return out

    told = _poisoned(run)
    wrong = _poisoned(run, gate_mode="separated")
    assert _wrong(told, wrong) > told.numel() // 2


def test_ck_is_shuffled_ignored_reads_the_wrong_bytes():
    L = _layer(False, "interleave")
    x, w, ids = _tokens()
    got = _poisoned(run_ck, L, x, w, ids, is_shuffled=False)
    want = _reference(L, x, w, ids, act_mode="a16w4", stage2_act="mxfp4")
    assert _wrong(got, want) > want.numel() // 2


def test_a_stand_in_refuses_what_it_does_not_model():
    L = _layer(False, "interleave")
    x, w, ids = _tokens()
    s = _sort(ids, w, 32)
    with pytest.raises(C.StandInError, match="bias"):
        C.COMPUTE["flydsl_moe_stage1"](dict(a=x, w1=L["w1"], **_sorted(s), out=None, topk=TOPK, tile_m=32,
                                            out_dtype="bf16", act="silu", w1_scale=L["w1_scale"], bias=torch.ones(1)))


def test_every_stand_in_says_what_it_models():
    assert set(C.MODELS) == set(C.COMPUTE)
    assert all(C.MODELS.values())


def test_rows_past_the_expert_blocks_are_not_computed():
    """A kernel told a smaller block than sorting used runs past sorted_expert_ids: those rows
    (and rows naming no expert) are dropped, never read out of range."""
    st = torch.tensor([0, 1, 2, 3], dtype=torch.int32)
    pos, tok, _, experts = C.decode_sorted(st, torch.tensor([4, 4], dtype=torch.int32), torch.tensor([1, 7]), 1, 4, n_experts=4)
    assert pos.tolist() == [0] and tok.tolist() == [0] and experts.tolist() == [1]


# ----------------------------------------------------------------------------- the Opus MXFP8 route output
def test_route_out_fp8_row_bytes_follow_the_headroom_rule():
    """One row, hidden 32 (four 8-column groups), bytes worked by hand from the kernel's rule
    (exponent = bf16 amax's - 7, at least 1; 0x00 for an all-zero group): amax 1.0 -> scale byte
    120 (2^-7), 1.0 -> 128; amax 1.9921875 -> 255 rounds to 256 (the OCP floor rule would
    saturate it at 448 / 2); all zero -> byte 0; amax 2^-125 -> byte 1 (2^-126), element 2."""
    row = torch.zeros(1, 1, 32)
    row[0, 0, :8] = torch.tensor([1.0, -0.5, 0.25, 0.0, 0.75, 1.0, -1.0, 0.125])
    row[0, 0, 8:16] = 1.9921875
    row[0, 0, 24:] = 2.0 ** -125
    out = torch.full((1, 32 + 4), 0xFF, dtype=torch.uint8)
    C.write_route_out_fp8(out, row, torch.ones(1, 1, dtype=torch.bool))
    assert out[0, 32:].tolist() == [120, 120, 0, 1]
    elems = out[0, :32].view(torch.float8_e4m3fn).to(torch.float32)
    assert elems[:8].tolist() == [128.0, -64.0, 32.0, 0.0, 96.0, 128.0, -128.0, 16.0]
    assert elems[8:16].tolist() == [256.0] * 8 and elems[16:24].tolist() == [0.0] * 8 and elems[24:].tolist() == [2.0] * 8
    back = C.read_route_out_fp8(out, 1)
    assert back[0, 0, 8] == 2.0 and torch.equal(back[0, 0, :8], row[0, 0, :8]) and torch.equal(back[0, 0, 24:], row[0, 0, 24:])


def test_route_out_fp8_leaves_unrouted_rows_poisoned_and_the_reduce_reads_them_as_nan():
    per_slot = torch.randn((2, 2, 32), generator=torch.Generator().manual_seed(4))
    routed = torch.tensor([[True, True], [True, False]])
    out = torch.full((4, 36), 0xFF, dtype=torch.uint8)
    C.write_route_out_fp8(out, per_slot, routed)
    assert bool((out[3] == 0xFF).all()) and not bool((out[:3, 32:] == 0xFF).any())
    red = torch.empty((2, 32), dtype=torch.bfloat16)
    C.COMPUTE["_opus_moe_stage2_reduce_token_slot_route_output_fwd_raw"]({"route_out": out, "out": red, "topk": 2, "block_n": -1})
    assert not torch.isnan(red[0]).any() and torch.isnan(red[1]).all()


def _scale_dropped(route_out, topk):
    ro = route_out.clone()
    ro[:, ro.shape[1] * 8 // 9:] = e8m0.E8M0_ONE
    return ROUTE_READ(ro, topk)


ROUTE_WRITE, ROUTE_READ = C.write_route_out_fp8, C.read_route_out_fp8
#: planted wrong roundings of the MXFP8 route output: (module attribute, replacement)
ROUTE_MUTANTS = {
    "scale dropped by the reduce": ("read_route_out_fp8", _scale_dropped),
    "OCP floor rule in the store": ("write_route_out_fp8", functools.partial(ROUTE_WRITE, scale_mode="floor")),
    "float32 rows quantized (no bf16 staging)": ("write_route_out_fp8", functools.partial(ROUTE_WRITE, staged_dtype=None)),
}


@pytest.mark.parametrize("mutant", [*ROUTE_MUTANTS, "slot weight applied twice"])
def test_a_planted_route_out_rounding_breaks_equality_with_the_reference(mutant, monkeypatch):
    L = _layer(True, "interleave")
    x, w, ids = _tokens()
    if mutant == "slot weight applied twice":
        def twice(out, per_slot, routed, **kw):
            ROUTE_WRITE(out, per_slot * w.to(torch.float32).unsqueeze(-1), routed, **kw)

        monkeypatch.setattr(C, "write_route_out_fp8", twice)
    else:
        monkeypatch.setattr(C, *ROUTE_MUTANTS[mutant])
    got = _poisoned(run_opus, L, x, w, ids, route_out="mxfp8")
    want = _reference(L, x, w, ids, act_mode="a8w4", slot_quant="mxfp8_route")
    assert _wrong(got, want) > 0, f"{mutant}: still bitwise equal to the reference"


def test_the_mxfp8_route_output_is_not_the_bf16_one():
    """The MXFP8 store is a rounding point of its own: the bf16-slot reference differs."""
    L = _layer(False, "interleave")
    x, w, ids = _tokens()
    got = _poisoned(run_opus, L, x, w, ids, route_out="mxfp8")
    assert _wrong(got, _reference(L, x, w, ids, act_mode="a8w4", slot_dtype=torch.bfloat16)) > got.numel() // 4
