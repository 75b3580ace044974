"""A GPU-bound reference fused MoE: ``fp4moe.reference.moe``'s semantics, organised the way a kernel is.

``fp4moe.reference.moe`` is the judge: readable, exact, and host-bound on a GPU (per expert: a Python
loop, ~110 torch ops and several device syncs; 5-18 ms per call at DeepSeek-V4 shapes on an
H200, far from the ~10 us a decode step's weight bytes need). A perf gate that times it
measures the host. This module computes the same function with the work on the device:

- routing: the (token, slot) pairs are sorted by local expert id (``torch.sort``, stable) and
  cut into groups with ``torch.searchsorted`` (no ``.tolist()``, no sync); group 0 holds the
  pairs routed to other ranks (``expert_mask``), which contribute zeros;
- stage 1 and stage 2 are grouped GEMMs (``fp4moe.reference.grouped_moe_kernels``, Triton): one launch per
  stage for all experts, each program finding its expert from the tile offsets; FP4/e8m0 is
  decoded in registers (small batches: the weight bytes are read once) or by one decode launch
  into bfloat16 first (large batches, where each weight tile is reused by many row tiles);
- the pads are honoured as the kernel contract says: stage 1 computes ``I_p - intermediate_pad``
  channels, stage 2 reduces over them and writes ``H - hidden_pad`` columns; a pad that is not
  propagated makes both stages do the padded channels' work, as on the real kernel;
- the gfx950 layouts are undone once per layer (``FastLayer``, cached per weight tensor and
  invalidated when one is modified in place): a kernel reads the shuffled layout directly, so
  the call's time excludes it;
- small batches (``tokens <= GRAPH_MAX_TOKENS``, a16w4, no expert mask) replay a captured CUDA
  graph so launch overhead does not dominate a decode round (``$FP4MOE_CUDA_GRAPHS=0`` turns
  it off; one graph per input tensor set, so a benchmark's rotating inputs replay without
  copies); ``uses_cuda_graph`` says when.

Semantics, step for step as ``fp4moe.reference.moe.fused_moe_unshuffled`` (and aiter's
``torch_moe_stage1/2``): x in bfloat16 (a8w4: MXFP8 fake-quantized first, ``mxfp8.ACT_SCALE_MODE``); gate/up =
x @ W^T with float32 accumulation; ``doweight_stage1`` multiplies gate and up by the top-k
weight before the activation; ``swiglu_limit`` (0.0/None: no clamp) clamps gate above and up
both ways; a = silu(gate) * up rounded to bfloat16 (a8w4: then MXFP8 fake-quantized);
y = a @ W2^T in float32, times the top-k weight unless ``doweight_stage1``; the slots of a
token summed in float32; output in the input dtype. Equal to the exact reference up to float32
summation order (tests/reference/test_grouped_moe.py states the tolerance).

Inputs are validated like the reference (``fp4moe.reference.moe.check_moe_inputs``, same messages); the
id-range check needs a device sync, so each validated ``topk_ids`` tensor is remembered (by
identity and version) and a round that reuses it pays no sync. 0xFF scales in a region that
is read raise like the reference (checked per expert once per layer and pad; a layer without
any costs nothing per call).

Without Triton or a CUDA GPU, ``impl="torch"`` runs the same grouping with padded batched
matmuls (CPU tests of the orchestration); the backend then uses the exact path instead.
"""

from __future__ import annotations

import os
import weakref
from collections import OrderedDict
from dataclasses import dataclass

import torch

from fp4moe.mx import e8m0, mxfp4
from fp4moe.mx.mxfp4 import BLOCK_SIZE
from fp4moe.reference import layout, moe

GRAPH_ENV = "FP4MOE_CUDA_GRAPHS"
#: batches up to this many tokens replay a captured CUDA graph (decode and small batches)
GRAPH_MAX_TOKENS = 64
#: scale bytes whose exponent arithmetic stays in bfloat16's normal range: the kernels add
#: (s - 127) to the exponent of E2M1 values 0.5..6 (exponents -1..2); outside this range, or
#: with a 0xFF (NaN) byte, they multiply by the float32 scale instead (``fp4moe.reference.grouped_moe_kernels``)
FAST_SCALE_RANGE = (2, 252)
#: average rows per expert from which weights are decoded to bfloat16 once per call instead of
#: in every row tile's registers (each weight tile is then reused by several 128-row tiles)
PREDECODE_MIN_ROWS = 64
MAX_CACHED_LAYERS = 4
MAX_CACHED_GRAPHS = 32
IMPLS = ("auto", "triton", "torch")
#: Triton's CPU interpreter (checks of the kernels without a GPU) needs float32 dot operands
_INTERPRETED = os.environ.get("TRITON_INTERPRET", "") == "1"

# (block_m, stage-1 block_n, stage-2 block_n, block_k, warps, stages)
_CFG_FUSED = (16, 32, 64, 128, 4, 3)
_CFG_PREDECODED = (128, 64, 128, 64, 8, 3)


_AVAILABLE: dict = {}


def fast_path_available(device) -> tuple[bool, str]:
    """(available, why not): Triton importable and ``device`` a CUDA (not ROCm) GPU (cached)."""
    key = str(device)
    if key not in _AVAILABLE:
        _AVAILABLE[key] = _probe(device)
    return _AVAILABLE[key]


def _probe(device) -> tuple[bool, str]:
    dev = torch.device(device)
    if dev.type != "cuda" or not torch.cuda.is_available():
        return False, f"device {dev} is not a CUDA GPU"
    if getattr(torch.version, "hip", None):
        return False, "ROCm: the Triton kernels are written and checked for NVIDIA GPUs only"
    try:
        import triton  # noqa: F401
    except ImportError as e:
        return False, f"triton is not importable ({e})"
    return True, ""


def _limit(swiglu_limit) -> float | None:
    """aiter tests ``if swiglu_limit:``: 0.0 and None both mean no clamp."""
    return float(swiglu_limit) if swiglu_limit else None


# --------------------------------------------------------------------------- the layer
class FastLayer:
    """One layer's experts, unshuffled once: w13 [E, 2P, H/2], s13 [E, 2P, H/32], w2 [E, H, P/2],
    s2 [E, H, P/32] (uint8), plus what the kernels need to know about the scales."""

    def __init__(self, w1, w2, w1_scale, w2_scale, gate_mode: str):
        from fp4moe.reference.expert_weights import ShuffledExpertWeights

        sw = ShuffledExpertWeights(w1, w2, w1_scale, w2_scale, gate_mode)
        sw.validate()
        e, p, h = sw.experts, sw.padded, sw.hidden
        itlv = gate_mode == "interleave"
        self.experts, self.padded, self.hidden = e, p, h
        self.w13 = layout.unshuffle_weight(sw.w13, is_guinterleave=itlv, gate_up=True).contiguous()
        self.w2 = layout.unshuffle_weight(sw.w2, is_guinterleave=itlv, gate_up=False).contiguous()
        self.s13 = layout.unshuffle_scale(sw.w13_scale, e * 2 * p, h // BLOCK_SIZE, e, itlv, gate_up=True).reshape(e, 2 * p, -1).contiguous()
        self.s2 = layout.unshuffle_scale(sw.w2_scale, e * h, p // BLOCK_SIZE, e, itlv, gate_up=False).reshape(e, h, -1).contiguous()
        self.ew = moe.ExpertWeights(self.w13, self.s13, self.w2, self.s2)
        self._scale_info: dict[tuple[int, int], tuple[list[int], bool]] = {}

    def _read_regions(self, n_used: int, h_used: int):
        p, kh, kn = self.padded, h_used // BLOCK_SIZE, n_used // BLOCK_SIZE
        return self.s13[:, :n_used, :kh], self.s13[:, p : p + n_used, :kh], self.s2[:, :h_used, :kn]

    def scale_info(self, n_used: int, h_used: int) -> tuple[list[int], bool]:
        """(experts with a 0xFF scale byte in a region this (n_used, h_used) reads, whether any
        read scale byte is outside ``FAST_SCALE_RANGE``); one sync per layer and pad, cached."""
        key = (n_used, h_used)
        if key not in self._scale_info:
            regions = self._read_regions(n_used, h_used)
            bad = torch.zeros(self.experts, dtype=torch.bool, device=self.w13.device)
            lo, hi = FAST_SCALE_RANGE
            outside = torch.zeros((), dtype=torch.bool, device=self.w13.device)
            for reg in regions:
                bad |= (reg == e8m0.E8M0_NAN).flatten(1).any(1)
                outside |= ((reg < lo) | (reg > hi)).any()
            flags = torch.cat([bad, outside.reshape(1)]).tolist()
            self._scale_info[key] = ([e for e, b in enumerate(flags[:-1]) if b], bool(flags[-1]))
        return self._scale_info[key]

    def nan_experts(self, n_used: int, h_used: int) -> list[int]:
        return self.scale_info(n_used, h_used)[0]

    def check_nan_scales(self, local: torch.Tensor, n_used: int, h_used: int) -> None:
        """Raise as the reference does when a routed expert reads a 0xFF scale (sync only when
        the layer has such an expert)."""
        flagged = self.nan_experts(n_used, h_used)
        if not flagged:
            return
        routed = set(torch.unique(local).tolist())
        for e in sorted(set(flagged) & routed):
            _, gs, _, us = self.ew.gate_up(e, n_used, h_used)
            e8m0.check_no_nan(gs, f"w1_scale[expert {e}, gate]")
            e8m0.check_no_nan(us, f"w1_scale[expert {e}, up]")
            e8m0.check_no_nan(self.ew.down(e, h_used, n_used)[1], f"w2_scale[expert {e}]")

    def dequantized(self, n_used: int, h_used: int):
        """float32 (gate [E, n, h], up [E, n, h], down [E, h, n]) through ``fp4moe.mx.mxfp4``."""
        p, kb, ks = self.padded, h_used // 2, h_used // BLOCK_SIZE
        gate = mxfp4.dequantize(self.w13[:, :n_used, :kb], self.s13[:, :n_used, :ks])
        up = mxfp4.dequantize(self.w13[:, p : p + n_used, :kb], self.s13[:, p : p + n_used, :ks])
        down = mxfp4.dequantize(self.w2[:, :h_used, : n_used // 2], self.s2[:, :h_used, : n_used // BLOCK_SIZE])
        return gate, up, down


class _IdentityCache:
    """LRU of values keyed by tensor identity + in-place version (weak: a freed tensor whose id
    is reused never hits)."""

    def __init__(self, size: int):
        self.size = size
        self.entries: OrderedDict = OrderedDict()

    def get(self, tensors, extra=()):
        key = (tuple(id(t) for t in tensors), extra)
        hit = self.entries.get(key)
        if hit is None:
            return key, None
        refs, versions, value = hit
        if all(r() is t for r, t in zip(refs, tensors)) and versions == tuple(t._version for t in tensors):
            self.entries.move_to_end(key)
            return key, value
        del self.entries[key]
        return key, None

    def put(self, key, tensors, value):
        self.entries[key] = ([weakref.ref(t) for t in tensors], tuple(t._version for t in tensors), value)
        while len(self.entries) > self.size:
            self.entries.popitem(last=False)


_LAYERS = _IdentityCache(MAX_CACHED_LAYERS)
_VALIDATED = _IdentityCache(64)


def prepared_layer(w1, w2, w1_scale, w2_scale, gate_mode: str) -> FastLayer:
    """The ``FastLayer`` of these (shuffled) tensors, built once per layer."""
    tensors = (w1, w2, w1_scale, w2_scale)
    key, layer = _LAYERS.get(tensors, (gate_mode,))
    if layer is None:
        layer = FastLayer(w1, w2, w1_scale, w2_scale, gate_mode)
        _LAYERS.put(key, tensors, layer)
    return layer


def clear_caches() -> None:
    _LAYERS.entries.clear()
    _VALIDATED.entries.clear()
    _GRAPHS.clear()


# --------------------------------------------------------------------------- routing
@dataclass
class Routing:
    """(token, slot) pairs sorted by group (0: other ranks, 1 + e: local expert e)."""

    order: torch.Tensor  # int32 [T*k]: flat position t*k + slot of sorted row r
    row_start: torch.Tensor  # int32 [G+1]: first sorted row of each group
    tile_start: torch.Tensor  # int32 [G+1]: first M tile of each group
    groups: int  # G = experts + 1
    max_tiles: int  # upper bound on the M tiles (launch grid); extra programs exit at once


#: the one-program routing kernel handles up to this many (rows x groups) elements
ROUTE_KERNEL_MAX = 1 << 14


def group_by_expert(local_ids: torch.Tensor, experts: int, block_m: int, *, use_kernel: bool = False) -> Routing:
    """Sort the routed pairs by expert on the device; no host sync. ``use_kernel``: one Triton
    launch (``moe_fast_kernels.route_kernel``) when the batch is small enough, else torch ops."""
    dev = local_ids.device
    rows, groups = local_ids.numel(), experts + 1
    max_tiles = -(-rows // block_m) + groups
    if use_kernel and triton_next_pow2(rows) * triton_next_pow2(groups + 1) <= ROUTE_KERNEL_MAX:
        from fp4moe.reference import grouped_moe_kernels as K

        order = torch.empty(rows, dtype=torch.int32, device=dev)
        row_start = torch.empty(groups + 1, dtype=torch.int32, device=dev)
        tile_start = torch.empty(groups + 1, dtype=torch.int32, device=dev)
        K.route_kernel[(1,)](local_ids, order, row_start, tile_start, rows, groups, block_m,
                             R_P2=triton_next_pow2(rows), G_P2=triton_next_pow2(groups + 1))
        return Routing(order, row_start, tile_start, groups, max_tiles)
    flat = local_ids.reshape(-1).to(torch.int32) + 1
    sorted_groups, order = torch.sort(flat, stable=True)
    bounds = torch.arange(experts + 2, dtype=torch.int32, device=dev)
    row_start = torch.searchsorted(sorted_groups, bounds, out_int32=True)
    tiles = (row_start[1:] - row_start[:-1] + (block_m - 1)) // block_m
    tile_start = torch.nn.functional.pad(torch.cumsum(tiles, 0, dtype=torch.int32), (1, 0))
    return Routing(order.to(torch.int32), row_start, tile_start, groups, max_tiles)


# --------------------------------------------------------------------------- the call
def _validate(hidden_states, layer: FastLayer, topk_weights, topk_ids, hidden_pad, intermediate_pad, act_mode, expert_mask):
    extra = (tuple(hidden_states.shape), hidden_states.dtype, tuple(topk_weights.shape), id(layer), hidden_pad,
             intermediate_pad, act_mode, None if expert_mask is None else expert_mask.numel())
    key, ok = _VALIDATED.get((topk_ids,), extra)
    if ok is None:
        moe.check_moe_inputs(hidden_states, layer.ew, topk_weights, topk_ids, hidden_pad, intermediate_pad, act_mode, expert_mask)
        _VALIDATED.put(key, (topk_ids,), True)


def _quant_act(x: torch.Tensor, act_mode: str) -> torch.Tensor:
    """bfloat16 values the GEMMs multiply: for a8w4 the reference's run-time MXFP8 quant
    (``fp4moe.reference.moe._act_quant``; exact in bfloat16: 4 significant bits)."""
    return moe._act_quant(x.float(), act_mode).to(torch.bfloat16) if act_mode == "a8w4" else x.to(torch.bfloat16)


def uses_cuda_graph(hidden_states: torch.Tensor, act_mode: str, expert_mask=None, impl: str = "auto") -> bool:
    """Whether a call with these arguments replays a captured CUDA graph."""
    if os.environ.get(GRAPH_ENV, "1").strip() in ("0", "false", "no"):
        return False
    if impl == "torch" or not hidden_states.is_cuda or not fast_path_available(hidden_states.device)[0]:
        return False
    return hidden_states.shape[0] <= GRAPH_MAX_TOKENS and act_mode == "a16w4" and expert_mask is None


def fused_moe_fast(
    hidden_states: torch.Tensor,
    layer: FastLayer,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    *,
    hidden_pad: int = 0,
    intermediate_pad: int = 0,
    swiglu_limit: float | None = None,
    act_mode: str = "a16w4",
    doweight_stage1: bool = False,
    expert_mask: torch.Tensor | None = None,
    check_scales: bool = True,
    impl: str = "auto",
    graphs: bool | None = None,
) -> torch.Tensor:
    """The reference MoE on a prepared layer (see the module docstring); bf16 hidden states."""
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    if hidden_states.dtype != torch.bfloat16:
        raise TypeError(f"hidden_states: the fast path takes bfloat16 activations, got {hidden_states.dtype}")
    _validate(hidden_states, layer, topk_weights, topk_ids, hidden_pad, intermediate_pad, act_mode, expert_mask)
    if impl == "auto":
        impl = "triton" if fast_path_available(hidden_states.device)[0] else "torch"
    n_used, h_used = layer.padded - intermediate_pad, layer.hidden - hidden_pad
    limit = _limit(swiglu_limit)
    nan_experts = check_scales and bool(layer.nan_experts(n_used, h_used))
    opts = (n_used, h_used, limit, bool(doweight_stage1), act_mode, impl)

    def compute(x, w, ids):
        local = ids if expert_mask is None and ids.dtype == torch.int32 else moe._local_ids(ids, expert_mask)
        if nan_experts:
            layer.check_nan_scales(local, n_used, h_used)
        run = _stages_triton if impl == "triton" else _stages_torch
        return run(x, layer, w, local, *opts[:5])

    use_graph = uses_cuda_graph(hidden_states, act_mode, expert_mask, impl) if graphs is None else bool(graphs)
    if use_graph and not nan_experts and not torch.cuda.is_current_stream_capturing():
        return _graph_call(compute, (id(layer), opts, tuple(hidden_states.shape), tuple(topk_ids.shape), topk_ids.dtype,
                                     topk_weights.dtype), layer, hidden_states, topk_weights, topk_ids)
    return compute(hidden_states, topk_weights, topk_ids)


def _stages_triton(x, layer: FastLayer, topk_w, local, n_used, h_used, limit, doweight, act_mode):
    from fp4moe.reference import grouped_moe_kernels as K

    t, k = local.shape
    e, p, h = layer.experts, layer.padded, layer.hidden
    exact = layer.scale_info(n_used, h_used)[1]
    predecode = t * k >= PREDECODE_MIN_ROWS * e
    bm, bn1, bn2, bk, warps, stages = _CFG_PREDECODED if predecode else _CFG_FUSED
    r = group_by_expert(local.contiguous(), e, bm, use_kernel=not predecode)
    num_g = triton_next_pow2(r.groups + 1)
    xq = _quant_act(x[:, :h_used], act_mode)
    topw = topk_w.reshape(-1).to(torch.float32)
    dev = x.device
    if predecode:
        w13 = torch.empty((e, 2 * p, h), dtype=torch.bfloat16, device=dev)
        w2 = torch.empty((e, h, p), dtype=torch.bfloat16, device=dev)
        for src, s, dst, rows, half, used_rows, used_k in (
            (layer.w13, layer.s13, w13, 2 * p, p, n_used, h_used),
            (layer.w2, layer.s2, w2, h, h, h_used, n_used),
        ):
            blk = 1024
            K.decode_rows_kernel[(e * rows, triton_cdiv(used_k // 2, blk))](
                src, s, dst, rows, half, used_rows, used_k // 2,
                src.stride(1), s.stride(1), dst.stride(1), BLOCK=blk, EXACT_SCALE=exact, UPCAST=_INTERPRETED,
            )
        w1_args = (w13, w13, w13.stride(0), w13.stride(1), 0, 0)
        w2_args = (w2, w2, w2.stride(0), w2.stride(1), 0, 0)
    else:
        w1_args = (layer.w13, layer.s13, layer.w13.stride(0), layer.w13.stride(1), layer.s13.stride(0), layer.s13.stride(1))
        w2_args = (layer.w2, layer.s2, layer.w2.stride(0), layer.w2.stride(1), layer.s2.stride(0), layer.s2.stride(1))
    rows = t * k
    alloc = torch.zeros if act_mode == "a8w4" else torch.empty  # a8w4 quantizes every row, read or not
    a = alloc((rows, n_used), dtype=torch.bfloat16, device=dev)
    n_blocks = triton_cdiv(n_used, bn1)
    splits, k_chunk = _split_k(rows, e, bm, n_blocks, h_used, bk)
    lim = limit if limit is not None else 0.0
    part = torch.empty((splits, rows, 2 * n_used), dtype=torch.float32, device=dev) if splits > 1 else a
    K.stage1_kernel[(r.max_tiles, n_blocks, splits)](
        xq, w1_args[0], w1_args[1], r.order, r.row_start, r.tile_start, topw, part,
        n_used, h_used, k_chunk, p, k, r.groups, lim,
        xq.stride(0), w1_args[2], w1_args[3], w1_args[4], w1_args[5], part.stride(-2), part.stride(0),
        NUM_G=num_g, BM=bm, BN=bn1, BK=bk, SPLIT=splits > 1, HAS_LIMIT=limit is not None, DOWEIGHT=doweight,
        PREDECODED=predecode, EXACT_SCALE=exact, UPCAST=_INTERPRETED, num_warps=warps, num_stages=stages,
    )
    if splits > 1:
        blk = 256
        K.swiglu_kernel[(rows, triton_cdiv(n_used, blk))](
            part, r.order, r.row_start, topw, a, n_used, splits, lim, part.stride(0), part.stride(1), a.stride(0),
            BLOCK=blk, HAS_LIMIT=limit is not None, DOWEIGHT=doweight, UPCAST=_INTERPRETED,
        )
    if act_mode == "a8w4":
        a = _quant_act(a, act_mode)
    y = torch.empty((rows, h), dtype=torch.float32, device=dev)
    K.stage2_kernel[(r.max_tiles, triton_cdiv(h, bn2))](
        a, w2_args[0], w2_args[1], r.order, r.row_start, r.tile_start, topw, y,
        n_used, h_used, h, r.groups,
        a.stride(0), w2_args[2], w2_args[3], w2_args[4], w2_args[5], y.stride(0),
        NUM_G=num_g, BM=bm, BN=bn2, BK=bk, DOWEIGHT=doweight, PREDECODED=predecode,
        EXACT_SCALE=exact, UPCAST=_INTERPRETED, num_warps=warps, num_stages=stages,
    )
    return y.view(t, k, h).sum(1).to(x.dtype)


#: programs a launch should have in flight: ~4 per SM of an H200 (132 SMs)
TARGET_PROGRAMS = 528
MAX_SPLIT_K = 16


def _split_k(rows: int, experts: int, block_m: int, n_blocks: int, k_used: int, block_k: int) -> tuple[int, int]:
    """(splits, K per split) for stage 1: small batches have few (tile, n block) programs, each
    walking all of H; splitting K keeps enough weight bytes in flight to be memory-bound."""
    tiles = min(triton_cdiv(rows, block_m) + min(experts, rows), rows)
    splits = max(1, min(MAX_SPLIT_K, TARGET_PROGRAMS // max(1, tiles * n_blocks), k_used // block_k))
    chunk = triton_cdiv(triton_cdiv(k_used, splits), block_k) * block_k
    return triton_cdiv(k_used, chunk), chunk


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


def triton_next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _stages_torch(x, layer: FastLayer, topk_w, local, n_used, h_used, limit, doweight, act_mode):
    """The same grouped computation with torch ops: groups padded to the largest one and run
    as batched matmuls (float32, weights dequantized by ``fp4moe.mx.mxfp4``). One host sync."""
    t, k = local.shape
    e, h = layer.experts, layer.hidden
    r = group_by_expert(local, e, 1)
    y = torch.zeros((t * k, h), dtype=torch.float32, device=x.device)
    counts = r.row_start[2:] - r.row_start[1:-1]  # rows of local experts 0..E-1
    cap = int(counts.max()) if counts.numel() else 0
    if cap:
        j = torch.arange(cap, device=x.device)
        valid = j[None, :] < counts[:, None]
        srow = (r.row_start[1:-1, None] + j[None, :]).clamp(max=t * k - 1)
        pos = r.order[srow].long()  # [E, cap] flat (token, slot) positions
        xs = _quant_act(x[:, :h_used], act_mode).float()[pos // k] * valid[..., None]
        tw = topk_w.reshape(-1).float()[pos][..., None]
        wg, wu, wd = layer.dequantized(n_used, h_used)
        gate, up = xs @ wg.transpose(1, 2), xs @ wu.transpose(1, 2)
        if doweight:
            gate, up = gate * tw, up * tw
        if limit is not None:
            gate, up = gate.clamp(max=limit), up.clamp(-limit, limit)
        a = _quant_act((torch.nn.functional.silu(gate) * up).to(torch.bfloat16), act_mode).float()
        yv = a @ wd.transpose(1, 2)
        if not doweight:
            yv = yv * tw
        y[pos[valid], :h_used] = yv[valid]
    return y.view(t, k, h).sum(1).to(x.dtype)


# --------------------------------------------------------------------------- CUDA graphs
_GRAPHS: OrderedDict = OrderedDict()


def _graph_call(compute, key, layer, x, w, ids):
    """Replay a graph captured for this layer, shape, options AND these input tensors (by
    identity, checked through weak references and in-place versions are irrelevant: the graph
    reads the tensors' current contents). A new input tensor is captured once; a rotation of a
    few input sets (the benchmarks' four) then costs one replay and one output copy per call
    (the next replay of the same graph overwrites its static output)."""
    full = (key, id(x), id(w), id(ids))
    entry = _GRAPHS.get(full)
    if entry is not None and not all(r() is t for r, t in zip(entry[2], (x, w, ids))):
        del _GRAPHS[full]
        entry = None
    if entry is None:
        side = torch.cuda.Stream(device=x.device)
        side.wait_stream(torch.cuda.current_stream(x.device))
        with torch.cuda.stream(side):
            compute(x, w, ids)  # compiles the kernels and warms the allocator outside the capture
        torch.cuda.current_stream(x.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = compute(x, w, ids)
        # the layer lives as long as its graph (the graph reads its tensors)
        entry = _GRAPHS[full] = (graph, out, [weakref.ref(t) for t in (x, w, ids)], layer)
        while len(_GRAPHS) > MAX_CACHED_GRAPHS:
            _GRAPHS.popitem(last=False)
    _GRAPHS.move_to_end(full)
    graph, out = entry[0], entry[1]
    graph.replay()
    return out.clone()
