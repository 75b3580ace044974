"""One MoE forward through aiter's Triton kernels, as aiter's ``fused_moe`` semantics define it.

routing -> GEMM1 (gather by expert, SwiGLU fused) -> [a8w4: MXFP8 quant of the bf16 stage-1
buffer] -> GEMM2 (top-k weight ``gammas`` applied in the kernel, scatter) -> ``reduce_grouped``
(inside the GEMM2 wrapper). a8w4 quantizes the input with the tree's ``downcast_to_mxfp``
(e4m3, axis -1) before GEMM1 as well.

SwiGLU is called with ``limit=None, swiglu_add_residual=False`` (silu(gate) * up): the
wrappers' defaults (``limit=1.0``, ``swiglu_add_residual=True``) are gpt-oss's variant and
would silently compute something else than aiter's ``fused_moe``.

:func:`gate_routing` builds the wrappers' routing structures from top-k ids and weights the
gate chose itself (tie-proof logits, float64 top-k), written from the ``ExptData`` /
``RoutingData`` field definitions in ``moe_routing/routing.py``: the GEMMs are judged on it, so
a routing bug cannot hide a GEMM bug or the reverse. aiter's own ``routing()`` is judged on
its own (``checks.judge_routing``, on what ``compute`` returns).
"""

from __future__ import annotations

import contextlib

import torch

from fp4moe.targets.aiter.kernels.cases import mxfp4_act

BF16 = torch.bfloat16
#: aiter's fused_moe SwiGLU: silu(gate) * up, no clamp, no residual
SWIGLU = dict(apply_swiglu=True, alpha=1.0, limit=None, swiglu_add_residual=False)
#: The residual switch has two names in aiter's history: ``add_residual`` (up to 24a53c6d87,
#: 2026-05-21, and 6646e699d5) and ``swiglu_add_residual`` (2520c3da3d on). Same parameter, same
#: meaning: both wrappers pass it straight to the kernel's constexpr (24a53c6d87
#: ``moe/moe_op_gemm_a16w4.py:156,257`` -> ``_triton_kernels/moe/moe_op_gemm_a16w4.py:139,350``
#: ``ADD_RESIDUAL``; e4048607 ``moe/moe_op_gemm_a16w4.py:215,369`` ->
#: ``_triton_kernels/moe/moe_op_gemm_a16w4.py:140,351`` ``SWIGLU_ADD_RESIDUAL``), which both trees
#: hand to the identical ``_swiglu(..., ADD_RESIDUAL)`` (``_triton_kernels/moe/activations.py:14-29``:
#: ``s * (linear + 1)`` if set, else ``s * linear``); and to ``reduce_grouped`` (24a53c6d87
#: ``moe/reduce.py:16`` ``add_residual``, e4048607 ``moe/reduce.py:28`` ``swiglu_add_residual``).
#: The loader reads which name a tree's wrapper takes (``loader.wrapper_keywords``).
RESIDUAL_KEYWORDS = ("swiglu_add_residual", "add_residual")


def _swiglu(mod, limit: float | None = None) -> dict:
    """SWIGLU with the residual switch under the name this tree's wrapper takes, clamped at
    ``limit`` (the model's ``swiglu_limit``: gate <= limit, up in [-limit, limit]) when given."""
    name = getattr(mod, "__fp4moe_keywords__", {}).get("swiglu_add_residual", "swiglu_add_residual")
    kw = {k: v for k, v in SWIGLU.items() if k != "swiglu_add_residual"}
    kw[name] = SWIGLU["swiglu_add_residual"]
    if limit:
        kw["limit"] = float(limit)
    return kw
#: routing.py's block_m bounds (tokens per expert rounded to a power of two, clamped)
BLOCK_M_MIN, BLOCK_M_MAX = 16, 128


def block_m_for(tokens: int, top_k: int, experts: int) -> int:
    """The block_m aiter's ``routing()`` derives for this batch (routing.py, ``routing``)."""
    per_expert = max(1, tokens * top_k // experts)
    return max(BLOCK_M_MIN, min(1 << (per_expert - 1).bit_length(), BLOCK_M_MAX))


def block_m_switches(top_k: int, experts: int, up_to: int = 4096) -> list[tuple[int, int]]:
    """Token counts T where ``block_m_for(T)`` differs from ``block_m_for(T - 1)``: (T, block_m)."""
    out = []
    for t in range(2, up_to + 1):
        if block_m_for(t, top_k, experts) != block_m_for(t - 1, top_k, experts):
            out.append((t, block_m_for(t, top_k, experts)))
    return out


def tieproof_logits(tokens: int, experts: int, seed: int) -> torch.Tensor:
    """float32 [T, E]: each row a random permutation of (j - E/2)/64: pairwise distinct and
    exact in fp16 and fp32, so the top-k set has no ties and every correct top-k agrees."""
    g = torch.Generator().manual_seed(seed)
    rows = torch.stack([torch.randperm(experts, generator=g) for _ in range(tokens)]).float()
    return (rows - experts / 2) / 64


def exact_topk(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights float64 [T, k], ids int64 [T, k]), each token's slots sorted by expert id:
    float64 top-k, softmax over the selected logits (= renormalized softmax)."""
    top = torch.topk(logits.double(), k, dim=-1)
    ids, order = torch.sort(top.indices, dim=-1)
    w = torch.gather(torch.softmax(top.values, dim=-1), 1, order)
    return w, ids


def routing_tables(ids: torch.Tensor, experts: int, block_m: int) -> dict:
    """The routing structures of a top-k (CPU int tensors), as :func:`gate_routing` builds them:
    gather/scatter, hist, token_offs_raw/pad and block_pid_map. Reads no aiter type."""
    ids = ids.cpu()
    t, k = ids.shape
    n = t * k
    bm = block_m
    flat = ids.reshape(-1).long()
    gather = torch.argsort(flat, stable=True)
    scatter = torch.argsort(gather, stable=True)
    hist = torch.bincount(flat, minlength=experts).to(torch.int32)
    zero = torch.zeros(1, dtype=torch.int64)
    offs_raw = torch.cat((zero, torch.cumsum(hist.long(), 0))).to(torch.int32)
    tiles = (hist.long() + bm - 1) // bm
    offs_pad = torch.cat((zero, torch.cumsum(tiles, 0))).to(torch.int32)
    max_tiles = n if n <= experts else experts - 1 + -(-(n - experts + 1) // bm)
    pid_map = torch.full((max_tiles,), -1, dtype=torch.int32)
    for e in range(experts):
        for b in range(int(tiles[e])):
            pid_map[int(offs_pad[e]) + b] = (b << 16) + e
    return {"gather": gather, "scatter": scatter, "hist": hist, "token_offs_raw": offs_raw,
            "token_offs_pad": offs_pad, "block_pid_map": pid_map}


def gate_routing(am, ids: torch.Tensor, weights: torch.Tensor, experts: int, block_m: int | None = None, device=None):
    """(RoutingData, gather_indx, scatter_indx) for the wrappers, from the gate's own top-k.

    Slots are flattened token-major (t * k + s) and stably sorted by expert: ``gather[j]`` is the
    slot at sorted position j, ``scatter`` its inverse. ``ExptData``: the histogram, the expert
    offsets raw and in ``block_m`` tiles, and ``block_pid_map`` (one int32 per launched tile,
    ``(tile << 16) | expert``, -1 for the slack up to the largest tile count any routing of
    this many slots could need). Built on the CPU, then moved to ``device`` (default: where
    ``ids`` lives)."""
    dev = ids.device if device is None else torch.device(device)
    ids, weights = ids.cpu(), weights.cpu()
    t, k = ids.shape
    bm = block_m or block_m_for(t, k, experts)
    tb = routing_tables(ids, experts, bm)
    gather, scatter = tb["gather"], tb["scatter"]
    hist, offs_raw, offs_pad, pid_map = tb["hist"], tb["token_offs_raw"], tb["token_offs_pad"], tb["block_pid_map"]
    mod = am.modules["routing_types"]  # RoutingData/ExptData: the tree's own types (loader)
    hist, offs_raw, offs_pad, pid_map = (x.to(dev) for x in (hist, offs_raw, offs_pad, pid_map))
    expt = mod.ExptData(hist=hist, token_offs_raw=offs_raw, token_offs_pad=offs_pad, block_pid_map=pid_map)
    gate_scal = weights.reshape(-1).to(torch.float32)[gather].to(dev)
    rdata = mod.RoutingData(block_m=bm, gate_scal=gate_scal, expt_hist=hist, n_expts_tot=experts, n_expts_act=k,
                            expt_data=expt)
    return rdata, gather.to(torch.int32).to(dev), scatter.to(torch.int32).to(dev)


def topk_from_routing(rdata, gather, scatter, tokens: int, k: int):
    """Per-token (weights float32 [T, k], ids int64 [T, k]) in the routing's slot order."""
    hist = rdata.expt_hist.long()
    expert_of_sorted = torch.repeat_interleave(torch.arange(hist.numel()), hist)
    pos = scatter.long().view(tokens, k)
    return rdata.gate_scal.float()[pos], expert_of_sorted[pos]


def _told(W, pad: int, tell_pad: bool) -> tuple[int | None, int | None]:
    """(unpadded_N for GEMM1, unpadded_K for GEMM2): None when the pad is not told."""
    used = W.w2.shape[1] * 2 - pad
    return (2 * used, used) if (tell_pad and pad) else (None, None)


def stage1(am, x: torch.Tensor, W, rd, act_mode: str, *, pad: int, tell_pad: bool = True, limit: float | None = None,
           out_mx_quant: bool = False):
    """GEMM1 + SwiGLU (a8w4: the input quantized to MXFP8 first; a4w4: to MXFP4 by the gate's own
    codec, ``cases.mxfp4_act``): the bf16 stage-1 buffer (a8w4
    with ``out_mx_quant``: aiter's fused MXFP8 output, ``(fp8 [M, N], e8m0 [M, N/32])``)."""
    rdata, gather, _ = rd
    un_n, _ = _told(W, pad, tell_pad)
    common = dict(routing_data=rdata, swizzle_mx_scale=W.swizzle, out_dtype=BF16)
    if act_mode == "a16w4":
        return am.a16w4.moe_gemm_a16w4(x, W.w1, None, W.s1, gather_indx=gather, unpadded_N=un_n,
                                       **_swiglu(am.a16w4, limit), **common)
    if act_mode == "a8w4":
        xq, xs = am.quant.downcast_to_mxfp(x, torch.float8_e4m3fn, axis=-1)
        mx = dict(out_mx_quant=True) if out_mx_quant else {}
        return am.a8w4.moe_gemm_a8w4(xq, W.w1, xs, W.s1, gather_indx=gather, unpadded_N=un_n,
                                     **_swiglu(am.a8w4, limit), **common, **mx)
    if act_mode == "a4w4":
        xq, xs = mxfp4_act(x)
        return am.a4w4.moe_gemm_a4w4(xq, W.w1, xs, W.s1, gather_indx=gather, unpadded_N=un_n,
                                     **_swiglu(am.a4w4, limit), **common)
    raise ValueError(f"act_mode must be a16w4, a8w4 or a4w4, got {act_mode!r}")


def stage2(am, h: torch.Tensor, W, rd, act_mode: str, *, pad: int, tell_pad: bool = True) -> torch.Tensor:
    """GEMM2 with the top-k weights, scatter and reduce (a8w4: ``h`` quantized to MXFP8 first, or
    given as its ``(e4m3, e8m0)`` pair; a4w4: ``h`` quantized to MXFP4 by the gate, its pad columns
    zeroed first, or given as its ``(e2m1 packed, e8m0)`` pair)."""
    rdata, _, scatter = rd
    _, un_k = _told(W, pad, tell_pad)
    common = dict(routing_data=rdata, swizzle_mx_scale=W.swizzle, out_dtype=BF16)
    if act_mode == "a16w4":
        return am.a16w4.moe_gemm_a16w4(h, W.w2, None, W.s2, scatter_indx=scatter, gammas=rdata.gate_scal,
                                       unpadded_K=un_k, **common)
    if act_mode == "a8w4":
        hq, hs = h if isinstance(h, tuple) else am.quant.downcast_to_mxfp(h, torch.float8_e4m3fn, axis=-1)
        return am.a8w4.moe_gemm_a8w4(hq, W.w2, hs, W.s2, scatter_indx=scatter, gammas=rdata.gate_scal,
                                     unpadded_K=un_k, **common)
    if act_mode == "a4w4":
        if not isinstance(h, tuple) and tell_pad and pad:  # told pad columns were never computed: the gate zeroes them
            h = h.clone()
            h[..., W.w2.shape[1] * 2 - pad:] = 0
        hq, hs = h if isinstance(h, tuple) else mxfp4_act(h)
        return am.a4w4.moe_gemm_a4w4(hq, W.w2, hs, W.s2, scatter_indx=scatter, gammas=rdata.gate_scal,
                                     unpadded_K=un_k, **common)
    raise ValueError(f"act_mode must be a16w4, a8w4 or a4w4, got {act_mode!r}")


def forward(am, x: torch.Tensor, W, rd, act_mode: str, *, pad: int, tell_pad: bool = True, limit: float | None = None):
    """(output bf16 [T, H], stage-1 buffer). ``W``: ``layout.TritonWeights``; ``rd``: (RoutingData,
    gather, scatter); ``pad``: intermediate pad P - I, told to the kernels when ``tell_pad``;
    ``limit``: the SwiGLU clamp (None: none)."""
    h = stage1(am, x, W, rd, act_mode, pad=pad, tell_pad=tell_pad, limit=limit)
    return stage2(am, h, W, rd, act_mode, pad=pad, tell_pad=tell_pad), h


def _poison_fill(t: torch.Tensor) -> torch.Tensor:
    if t.is_floating_point():
        t.fill_(float("nan"))
    elif t.dtype != torch.bool and t.numel():
        t.view(torch.uint8).fill_(0x55)
    return t


@contextlib.contextmanager
def poisoned_allocations(am):
    """Every buffer the wrappers allocate starts as NaN (floats) or 0x55 bytes (ints).

    Patches the allocator they call, not their code: ``torch.empty`` as seen from the a16w4,
    a8w4, a4w4, reduce and quant modules (each module's ``torch`` name is swapped for a proxy), and
    ``Tensor.new_empty`` (quant_moe allocates with ``src.new_empty``). An unwritten tail tile
    then shows as NaN in the output."""
    real_empty, real_new_empty = torch.empty, torch.Tensor.new_empty

    class _TorchProxy:
        def __getattr__(self, name):
            return getattr(torch, name)

        @staticmethod
        def empty(*a, **kw):
            return _poison_fill(real_empty(*a, **kw))

    def new_empty(self, *a, **kw):
        return _poison_fill(real_new_empty(self, *a, **kw))

    mods = [am.modules[n] for n in ("a16w4", "a8w4", "a4w4", "reduce", "quant") if n in am.modules]
    saved = [m.torch for m in mods]
    for m in mods:
        m.torch = _TorchProxy()
    torch.Tensor.new_empty = new_empty
    try:
        yield
    finally:
        for m, t in zip(mods, saved):
            m.torch = t
        torch.Tensor.new_empty = real_new_empty
