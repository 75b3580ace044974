"""Computing stand-ins for the compiled ops aiter's ``fused_moe`` launches (pure torch, CPU).

Index:

- :data:`COMPUTE` -- op name (the Python name aiter's tree declares it under) -> function. Each
  takes the op's bound arguments as a dict (names exactly as the declaration) and fills the op's
  output tensors in place; it returns what the op returns (``None`` for the void ops).
- :data:`MODELS` -- one line per op: what the stand-in computes and what it assumes.
- :func:`poisoned_allocations` -- ``torch.empty``/``empty_like``/``empty_strided`` filled with
  0xFF bytes (NaN in every float dtype, -1 in the integer ones, e8m0 NaN), for the child.
- The Opus MXFP8 route output: :func:`write_route_out_fp8` (stage 2's store) and
  :func:`read_route_out_fp8` (what the route reduce reads).
- Sorted-position helpers (:func:`decode_sorted`), the sorted e8m0 scale layout
  (:func:`write_sorted_scale` / :func:`read_sorted_scale`), weight decoding per expert.

Every stand-in computes ONLY over what it is told: the valid length ``num_valid_ids[0]``, the
packed sorted ids (``slot << 24 | token``, sentinel token = token count), the expert of each
block of ``block_m`` (the block size the op is given, not the one sorting used), the pads it is
given (none where the op takes none), the gate/up layout it is given (FlyDSL's ``gate_mode``;
the ops with no such argument read :data:`FIXED_LAYOUT`), ``is_shuffled`` where the op takes it.
A dispatch that loses a pad, a block size or a layout gives wrong numbers, not an error.

Stage math is dequantize-then-matmul with the rounding points of ``fp4moe.reference.moe``
(float32 gate/up, ``silu(gate) * up``, the stage-1 output stored in bf16, the per-slot rows
weighted and summed in slot order in float32, rounded once into the output): one expert's
rows form one matmul, in token order, as the reference groups them, so a correct dispatch is
bitwise equal to the reference. Where a path rounds somewhere else the stand-in rounds there
too, and the reference has the matching option: CK-tile split-k stores gate/up in bf16 before
the activation (``gate_up_dtype``); the CK 2-stage path MXFP4-quantizes the bf16 stage-1 output
(``stage2_act="mxfp4"``); Opus's bf16 route output stores each weighted slot in bf16 before the
reduce (``slot_dtype``); its MXFP8 route output (the tuned ``opus_moe2_..._fp8_..._rbn...``
kernels) stores each weighted slot as bf16, then e4m3 with one e8m0 byte per 8 columns in the
row's tail, and the reduce dequantizes and sums in slot order (``slot_quant="mxfp8_route"``;
:func:`write_route_out_fp8`, :func:`read_route_out_fp8`, aiter's kernel lines cited there).
Modelled, for a gfx950 to confirm: the route output's element conversion is round-to-nearest-even
of bf16 / 2^(E-127) (``__builtin_amdgcn_cvt_scalef32_pk_fp8_bf16``; exact scaling, amax lands
in [128, 256): no saturation); the reduce's fp8 -> f32 times the scale then add is exact per
term, so FMA or not gives the same float32 sum; the fused-quant stage-1 outputs
(FlyDSL ``_fp8``/``_fp4``, Opus) round the activation to bf16 before their MX quant, as the
separate quant would; the MX quants ignore ``sorted_weights``; the sorted e8m0 scale layout
is ``shuffle_scale``'s 32x8 tile swizzle over the sorted rows; ops without a gate-mode argument
read :data:`FIXED_LAYOUT`; the CK-tile stage-1 workspace holds gate/up in the weight rows' order.
EP masks are modelled where aiter's ops take them: the sorting's ``local_expert_mask`` and FlyDSL
stage 2's reduce (``expert_mask`` with ``topk_ids``). Not modelled (a named
:class:`StandInError`, the row's numerics n/a): bias, local top-k ids, split-K FlyDSL,
activations other than Silu.

Nothing here imports aiter; enum values are aiter's ``csrc/include/aiter_enum.h``.
"""

from __future__ import annotations

import contextlib
import enum

import torch

from fp4moe.mx import e8m0, mxfp4, mxfp8
from fp4moe.mx.block_scale import BLOCK_SIZE
from fp4moe.reference import layout
from fp4moe.reference.moe import clamp_swiglu

#: packed sorted id: topk slot in the high 8 bits, token index in the low 24
SORTED_TOKEN_BITS = 24
SORTED_TOKEN_MASK = (1 << SORTED_TOKEN_BITS) - 1
#: sorted e8m0 scales: rows padded to 32 (one swizzle tile), columns to 8
SORTED_SCALE_ROW_TILE = 32
SORTED_SCALE_COL_TILE = layout.SCALE_COL_ALIGN
#: aiter's run-time MX quant scale rule (``MX_DEFAULT_ROUND_MODE`` = RoundUp on the f32 quotient)
RUNTIME_SCALE_MODE = mxfp8.ACT_SCALE_MODE
POISON_BYTE = 0xFF
#: rows per gate/up block of the GU-interleaved layout (and columns per block of its stage-1 output)
GU_BLOCK = 16


class ActivationType(enum.IntEnum):
    """aiter_enum.h ``ActivationType``."""

    NO = -1
    SILU = 0
    GELU = 1
    SWIGLU = 2
    SITUV2 = 3


class GateLayout(str, enum.Enum):
    """How w1's gate and up rows are stored (aiter's ``GateMode`` values)."""

    SEPARATED = "separated"
    INTERLEAVE = "interleave"


#: the gate/up layout read by ops that take no gate-mode argument: the DeepSeek-V4 MXFP4 kernels
#: read the GU-interleaved preshuffle (``shuffle_weight(..., is_guinterleave=True)`` /
#: ``shuffle_scale(..., is_guinterleave=True)``, aiter's a16w4 layout). A gfx950 must confirm.
FIXED_LAYOUT = GateLayout.INTERLEAVE


class StandInError(ValueError):
    """An op was given arguments the stand-in does not model; the message names the op and argument."""


# ----------------------------------------------------------------------------- allocations
_EMPTY_FUNCS = ("empty", "empty_like", "empty_strided")


def _poison(t: torch.Tensor) -> torch.Tensor:
    if t.numel() and t.dtype != torch.bool:
        t.view(torch.uint8).fill_(POISON_BYTE) if t.is_contiguous() else t.fill_(float("nan") if t.is_floating_point() else -1)
    return t


@contextlib.contextmanager
def poisoned_allocations():
    """Within the block, fresh ``torch.empty*`` tensors hold 0xFF bytes instead of stale memory."""
    originals = {name: getattr(torch, name) for name in _EMPTY_FUNCS}

    def wrap(fn):
        def alloc(*args, **kwargs):
            return _poison(fn(*args, **kwargs))

        return alloc

    try:
        for name, fn in originals.items():
            setattr(torch, name, wrap(fn))
        yield
    finally:
        for name, fn in originals.items():
            setattr(torch, name, fn)


# ----------------------------------------------------------------------------- sorted positions
def decode_sorted(sorted_ids: torch.Tensor, num_valid_ids: torch.Tensor, sorted_expert_ids: torch.Tensor, block: int,
                  token_num: int, n_experts: int | None = None):
    """(positions, tokens, slots, experts) of the real rows among the first ``num_valid_ids[0]``.

    The expert of position i is ``sorted_expert_ids[i // block]``; sentinel rows (token id
    ``>= token_num``) are dropped, and so are rows whose block lies past ``sorted_expert_ids`` or
    names no expert in ``[0, n_experts)`` (a kernel told another block size than sorting used
    reads there): those rows are not computed, as a kernel would compute them from garbage."""
    if block <= 0:
        raise StandInError(f"block size {block}: must be positive")
    n_valid = int(num_valid_ids.view(-1)[0])
    if not 0 <= n_valid <= sorted_ids.numel():
        raise StandInError(f"num_valid_ids[0] = {n_valid} outside [0, {sorted_ids.numel()}] (sorted_token_ids)")
    packed = sorted_ids.view(-1)[:n_valid].to(torch.int64)
    tok = packed & SORTED_TOKEN_MASK
    slot = (packed >> SORTED_TOKEN_BITS) & 0xFF
    pos = torch.arange(n_valid, dtype=torch.int64)
    blocks = pos // block
    ids = sorted_expert_ids.view(-1).to(torch.int64)
    inside = blocks < ids.numel()
    experts = torch.where(inside, ids[blocks.clamp(max=max(ids.numel() - 1, 0))] if ids.numel() else blocks, -1)
    real = (tok < token_num) & (experts >= 0)
    if n_experts is not None:
        real &= experts < n_experts
    return pos[real], tok[real], slot[real], experts[real]


def _groups(pos, tok, slot, experts):
    """Per expert, its rows in token order: one matmul per expert, as the reference groups them."""
    for e in torch.unique(experts).tolist():
        sel = (experts == e).nonzero().flatten()
        order = torch.argsort(tok[sel] * 256 + slot[sel], stable=True)
        sel = sel[order]
        yield e, pos[sel], tok[sel], slot[sel]


# ----------------------------------------------------------------------------- sorted scales
def _scale_bytes(scales: torch.Tensor, name: str) -> torch.Tensor:
    b = e8m0.as_uint8(scales, name)
    if b.ndim != 2 or b.shape[0] % SORTED_SCALE_ROW_TILE or b.shape[1] % SORTED_SCALE_COL_TILE:
        raise StandInError(f"{name}: shape {tuple(b.shape)} is not a sorted scale [32 k, 8 j]")
    return b


def read_sorted_scale(scales: torch.Tensor, name: str) -> torch.Tensor:
    """The swizzled sorted scale -> logical [rows, cols] bytes (row = sorted position)."""
    b = _scale_bytes(scales, name)
    return layout.unshuffle_scale_rows(b, b.shape[1], is_guinterleave=False)


def write_sorted_scale(scales: torch.Tensor, positions: torch.Tensor, rows: torch.Tensor, name: str) -> None:
    """Write logical scale ``rows`` [n, c] at sorted ``positions``; every other byte is left as it was."""
    b = _scale_bytes(scales, name)
    logical = layout.unshuffle_scale_rows(b, b.shape[1], is_guinterleave=False).clone()
    logical[positions, : rows.shape[1]] = rows
    shuffled = layout.shuffle_scale(logical, is_guinterleave=False)[: b.shape[0]]
    b.copy_(shuffled)


# ----------------------------------------------------------------------------- MX codecs (NaN-tolerant)
def _blocks_finite(x: torch.Tensor, block: int = BLOCK_SIZE) -> torch.Tensor:
    return torch.isfinite(x.reshape(*x.shape[:-1], -1, block)).all(-1)


def mx_quantize(x: torch.Tensor, fmt: str):
    """Rows of ``x`` -> (elements, scale bytes) with aiter's run-time rule; a block holding a
    non-finite value (poison read from memory nobody wrote) gets scale 0xFF (NaN)."""
    xf = x.to(torch.float32)
    finite = _blocks_finite(xf)
    clean = torch.where(torch.isfinite(xf), xf, torch.zeros_like(xf))
    if fmt == "fp8":
        elems, scale = mxfp8.quantize(clean, RUNTIME_SCALE_MODE)
    elif fmt == "fp4":
        elems, scale = mxfp4.quantize(clean, RUNTIME_SCALE_MODE)
    else:
        raise StandInError(f"MX quant format {fmt!r}: expected 'fp8' or 'fp4'")
    return elems, torch.where(finite, scale, torch.full_like(scale, e8m0.E8M0_NAN))


def mx_dequantize(elems: torch.Tensor, scale: torch.Tensor, fmt: str) -> torch.Tensor:
    if fmt == "fp8":
        return mxfp8.dequantize(elems.view(torch.float8_e4m3fn), scale)
    if fmt == "fp4":
        return mxfp4.dequantize(elems, scale)
    raise StandInError(f"MX format {fmt!r}: expected 'fp8' or 'fp4'")


def _fmt_of(t: torch.Tensor) -> str:
    if t.dtype in (torch.bfloat16, torch.float16, torch.float32):
        return "float"
    if t.dtype == torch.float8_e4m3fn:
        return "fp8"
    if t.dtype in (torch.uint8, torch.int8, getattr(torch, "float4_e2m1fn_x2", None)):
        return "fp4"
    raise StandInError(f"activation dtype {t.dtype}: not bf16/fp16, fp8 e4m3 or packed fp4")


def activation_rows(x: torch.Tensor, rows: torch.Tensor, scale: torch.Tensor | None, positions: torch.Tensor, k_used: int, name: str) -> torch.Tensor:
    """float32 values of ``x`` rows (flattened leading dims), the first ``k_used`` columns; MX
    inputs are decoded with the sorted scale rows at ``positions``."""
    fmt = _fmt_of(x)
    flat = (x.view(torch.uint8) if fmt == "fp4" else x).reshape(-1, x.shape[-1])
    if fmt == "float":
        return flat[rows, :k_used].to(torch.float32)
    if scale is None:
        raise StandInError(f"{name}: {x.dtype} activations without a scale")
    s = read_sorted_scale(scale, f"{name} scale")[positions, : k_used // BLOCK_SIZE]
    el = flat[rows, : (k_used // 2 if fmt == "fp4" else k_used)]
    return mx_dequantize(el, s, fmt)


# ----------------------------------------------------------------------------- weights
class ExpertDecoder:
    """Dequantizes one expert's weight rows from the layout an op is told (each expert once per call)."""

    def __init__(self, w: torch.Tensor, w_scale: torch.Tensor, gate_up: bool, gate_layout: GateLayout, shuffled: bool):
        self.w = mxfp4.as_packed_uint8(w, "weight")
        self.s = e8m0.as_uint8(w_scale, "weight scale")
        self.gate_up, self.itlv, self.shuffled = gate_up, gate_layout == GateLayout.INTERLEAVE, shuffled
        self.rows, self.cols = self.w.shape[1], self.w.shape[2] * 2

    def _bytes(self, e: int):
        w = self.w[e : e + 1]
        n, kb = self.rows, self.cols // BLOCK_SIZE
        if not self.shuffled:
            return w[0], self.s.reshape(-1, self.s.shape[-1])[e * n : (e + 1) * n, :kb]
        w = layout.unshuffle_weight(w, is_guinterleave=self.itlv, gate_up=self.gate_up)[0]
        s = layout.unshuffle_scale_rows(self.s[e * n : (e + 1) * n], kb, self.itlv, gate_up=self.gate_up)
        return w, s

    def dense(self, e: int) -> torch.Tensor:
        """[rows, cols] float32 (NaN where a 0xFF scale byte is read)."""
        w, s = self._bytes(e)
        return mxfp4.dequantize(w, s)

    def gate_up_rows(self, e: int, n_used: int, k_used: int) -> torch.Tensor:
        """[gate rows 0..n_used; up rows 0..n_used] over the first k_used columns: [2 n_used, k_used]."""
        d, half = self.dense(e), self.rows // 2
        return torch.cat((d[:n_used, :k_used], d[half : half + n_used, :k_used]))


# ----------------------------------------------------------------------------- stage math
def gated_activation(gate_up: torch.Tensor, n_used: int, act: ActivationType, swiglu_limit) -> torch.Tensor:
    if act != ActivationType.SILU:
        raise StandInError(f"activation {act.name}: only Silu (DeepSeek-V4) is modelled")
    gate, up = clamp_swiglu(gate_up[:, :n_used], gate_up[:, n_used:], swiglu_limit)
    return torch.nn.functional.silu(gate) * up


def _act(value) -> ActivationType:
    if isinstance(value, str):
        return ActivationType[value.upper()]
    return ActivationType(int(getattr(value, "value", value)))


def _pad(value, total: int, name: str) -> int:
    v = int(value or 0)
    if not 0 <= v < total or v % BLOCK_SIZE:
        raise StandInError(f"{name} = {v}: must be a multiple of {BLOCK_SIZE} in [0, {total})")
    return v


def stage1_rows(a, a_scale, w1: ExpertDecoder, pos, tok, e, n_used, k_used, weights, act, swiglu_limit, *, gate_up_dtype=None):
    """One expert's stage-1 rows: float32 [n, n_used] (``gate_up_dtype``: where gate/up is stored)."""
    x = activation_rows(a, tok, a_scale, pos, k_used, "stage-1 input")
    gate_up = x @ w1.gate_up_rows(e, n_used, k_used).T
    if weights is not None:
        gate_up = gate_up * weights.view(-1)[pos].to(torch.float32).unsqueeze(1)
    if gate_up_dtype is not None:
        return gate_up.to(gate_up_dtype)
    return gated_activation(gate_up, n_used, act, swiglu_limit)


def stage2_slots(a, a_scale, w2: ExpertDecoder, groups, h_used, k_used, sorted_weights, token_num, topk):
    """Per-(token, slot) weighted rows float32 [T, topk, H] (zeros where nothing was routed)."""
    per_slot = torch.zeros((token_num, topk, w2.rows), dtype=torch.float32)
    for e, pos, tok, slot in groups:
        x = activation_rows(a, tok * topk + slot, a_scale, pos, k_used, "stage-2 input")
        y = x @ w2.dense(e)[:h_used, :k_used].T
        if sorted_weights is not None:
            y = y * sorted_weights.view(-1)[pos].to(torch.float32).unsqueeze(1)
        per_slot[tok, slot, :h_used] = y
    return per_slot


def accumulate(out: torch.Tensor, per_slot: torch.Tensor) -> None:
    """The slots summed in slot order in float32, added into ``out`` once (one rounding)."""
    out.copy_((out.to(torch.float32) + per_slot.sum(1)).to(out.dtype))


# ============================================================================= the ops
def _unsupported(op: str, args: dict, *names: str) -> None:
    for n in names:
        if args.get(n) is not None:
            raise StandInError(f"{op}: argument {n} is not modelled (got a value)")


def _topk_ids_local(topk_ids: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    ids = topk_ids.to(torch.int64)
    if mask is None:
        return ids
    m = mask.view(-1).to(torch.bool)
    local = torch.where(m, torch.cumsum(m.long(), 0) - 1, torch.full_like(m, -1, dtype=torch.int64))
    return local[ids]


def moe_sorting(args: dict, op: str = "moe_sorting_fwd"):
    """Tokens grouped by expert (token order within), each expert padded to ``unit_size`` rows."""
    _unsupported(op, args, "local_topk_ids", "m_indices", "reverse_sorted", "num_local_tokens")
    topk_ids, unit = args["topk_ids"], int(args["unit_size"])
    m, topk = topk_ids.shape
    ids = _topk_ids_local(topk_ids, args.get("local_expert_mask"))
    sentinel = (topk << SORTED_TOKEN_BITS) | m
    n_local = int(args["num_experts"]) if args.get("local_expert_mask") is None else int(args["local_expert_mask"].sum())
    st, sw, se = args["sorted_token_ids"], args["sorted_weights"], args["sorted_expert_ids"]
    flat_w = args["topk_weights"].reshape(-1).to(torch.float32)
    n = 0
    for e in range(n_local):
        tok, slot = (ids == e).nonzero(as_tuple=True)
        if not tok.numel():
            continue
        count = (tok.numel() + unit - 1) // unit * unit
        if n + count > st.numel() or (n + count) // unit > se.numel():
            raise StandInError(f"{op}: sorted buffers ({st.numel()} ids, {se.numel()} blocks) too small at expert {e}")
        st[n : n + count] = sentinel
        st[n : n + tok.numel()] = ((slot << SORTED_TOKEN_BITS) | tok).to(st.dtype)
        sw[n : n + count] = 0
        sw[n : n + tok.numel()] = flat_w[tok * topk + slot]
        se[n // unit : (n + count) // unit] = e
        n += count
    args["num_valid_ids"].view(-1)[0] = n
    if args["num_valid_ids"].numel() > 1:
        args["num_valid_ids"].view(-1)[1] = m
    if args["moe_buf"].numel():
        args["moe_buf"].zero_()


def moe_sorting_opus_fwd(args: dict):
    """Opus sorting: the same grouping as ``moe_sorting_fwd`` (dispatch_policy not modelled)."""
    return moe_sorting(args, "moe_sorting_opus_fwd")


def moe_sorting_opus_get_workspace_size(args: dict) -> int:
    """The stand-in sort needs no workspace."""
    return 0


def _quant_rows_sorted(op, out, scales, inp, sorted_ids, num_valid_ids, token_num):
    """Quantize every input row into ``out`` (row order kept) and write each valid sorted
    position's scale row into the sorted, swizzled ``scales``."""
    fmt = "fp8" if out.dtype == torch.float8_e4m3fn else "fp4"
    x = inp.reshape(-1, inp.shape[-1])
    if x.shape[0] % token_num:
        raise StandInError(f"{op}: input rows {x.shape[0]} not a multiple of token_num {token_num}")
    topk = x.shape[0] // token_num
    elems, scale = mx_quantize(x, fmt)
    out.view(torch.uint8).view(-1).copy_(elems.contiguous().view(torch.uint8).view(-1))
    packed = sorted_ids.view(-1)[: int(num_valid_ids.view(-1)[0])].to(torch.int64)
    tok, slot = packed & SORTED_TOKEN_MASK, packed >> SORTED_TOKEN_BITS
    real = (tok < token_num).nonzero().flatten()
    rows = tok[real] if topk == 1 else tok[real] * topk + slot[real]
    write_sorted_scale(scales, real, scale[rows], f"{op} scales")


def fused_dynamic_mx_quant_moe_sort_hip(args: dict):
    """Fused MX quant (fp8 or fp4 from ``out``'s dtype) + sorted scale; ``sorted_weights`` unused."""
    if int(args.get("group_size", BLOCK_SIZE)) != BLOCK_SIZE:
        raise StandInError(f"fused_dynamic_mx_quant_moe_sort_hip: group_size {args['group_size']} (only 32)")
    _quant_rows_sorted("fused_dynamic_mx_quant_moe_sort_hip", args["out"], args["scales"], args["input"],
                       args["sorted_ids"], args["num_valid_ids"], int(args["token_num"]))


def dynamic_per_group_scaled_quant(args: dict):
    """The large-token split path's per-row quant: unswizzled e8m0 scale [m, n/32]."""
    out, scales = args["out"], args["scales"]
    if int(args.get("group_size", BLOCK_SIZE)) != BLOCK_SIZE or args.get("shuffle_scale"):
        raise StandInError("dynamic_per_group_scaled_quant: only group 32, unshuffled e8m0 scales are modelled")
    if scales.element_size() != 1:
        raise StandInError(f"dynamic_per_group_scaled_quant: {scales.dtype} scales (only e8m0)")
    _unsupported("dynamic_per_group_scaled_quant", args, "num_rows")
    fmt = "fp8" if out.dtype == torch.float8_e4m3fn else "fp4"
    elems, scale = mx_quantize(args["input"].reshape(-1, args["input"].shape[-1]), fmt)
    out.view(torch.uint8).view(-1).copy_(elems.contiguous().view(torch.uint8).view(-1))
    e8m0.as_uint8(scales, "scales").view(scale.shape).copy_(scale)


def mxfp4_moe_sort_hip(args: dict):
    """The split path's scale sort: per-row scales -> sorted, swizzled ``out_scale``."""
    scale = e8m0.as_uint8(args["scale"], "scale")
    scale = scale.reshape(-1, scale.shape[-1])
    token_num = int(args["token_num"])
    topk = scale.shape[0] // token_num
    packed = args["sorted_ids"].view(-1)[: int(args["num_valid_ids"].view(-1)[0])].to(torch.int64)
    tok, slot = packed & SORTED_TOKEN_MASK, packed >> SORTED_TOKEN_BITS
    real = (tok < token_num).nonzero().flatten()
    rows = tok[real] if topk == 1 else tok[real] * topk + slot[real]
    cols = int(args["cols"]) // BLOCK_SIZE
    write_sorted_scale(args["out_scale"], real, scale[rows, :cols], "mxfp4_moe_sort_hip out_scale")


# ----------------------------------------------------------------------------- stage 1 family
def _stage1(op, *, a, a_scale, w1, w1_scale, sorted_ids, expert_ids, num_valid, block, topk, weights,
            act, swiglu_limit, inter_pad, model_pad, gate_layout, shuffled, write):
    """Shared stage-1 loop; ``write(pos, tok, slot, rows)`` stores one expert's float32 rows."""
    token_num = a.shape[0]
    dec = ExpertDecoder(w1, w1_scale, True, gate_layout, shuffled)
    p, h = dec.rows // 2, dec.cols
    n_used, k_used = p - _pad(inter_pad, p, f"{op} intermediate pad"), h - _pad(model_pad, h, f"{op} hidden pad")
    for e, pos, tok, slot in _groups(*decode_sorted(sorted_ids, num_valid, expert_ids, block, token_num, dec.w.shape[0])):
        write(pos, tok, slot, n_used, stage1_rows(a, a_scale, dec, pos, tok, e, n_used, k_used, weights, act, swiglu_limit))
    return n_used


def _to_tokens(out: torch.Tensor, topk: int):
    """Writer into a [T, topk, P] (or [T*topk, P]) buffer in its own dtype (bf16 stage-1 buffer)."""
    view = out.view(-1, topk, out.shape[-1])

    def write(pos, tok, slot, n_used, rows):
        view[tok, slot, :n_used] = rows.to(out.dtype)

    return write


def _to_tokens_quantized(out_shape, topk, fmt, sorted_len, scale_cols):
    """Writer for fused-quant stage-1 outputs: bf16 rows, then MX-quantized; the scale sorted."""
    rows_buf = torch.full(out_shape, float("nan"), dtype=torch.bfloat16).view(-1, topk, out_shape[-1])
    written = []

    def write(pos, tok, slot, n_used, rows):
        rows_buf[tok, slot, :n_used] = rows.to(torch.bfloat16)
        written.append((pos, tok * topk + slot))

    def finish(out, out_scale):
        flat = rows_buf.reshape(-1, out_shape[-1])
        elems, scale = mx_quantize(flat, fmt)
        out.view(torch.uint8).view(-1)[: elems.numel() * elems.element_size()].copy_(elems.contiguous().view(torch.uint8).view(-1))
        if written:
            pos = torch.cat([w[0] for w in written])
            rows = torch.cat([w[1] for w in written])
            write_sorted_scale(out_scale, pos, scale[rows], "stage-1 out_scale")

    return write, finish


def ck_moe_stage1(args: dict):
    """CK 2-stage stage 1: no pad argument (the whole padded intermediate and hidden are computed)."""
    _unsupported("ck_moe_stage1", args, "bias")
    if int(args.get("splitk") or 0) > 1:
        raise StandInError("ck_moe_stage1: splitk > 1 (per_1x128 workspace) is not modelled")
    _stage1("ck_moe_stage1", a=args["hidden_states"], a_scale=args["a1_scale"], w1=args["w1"], w1_scale=args["w1_scale"],
            sorted_ids=args["sorted_token_ids"], expert_ids=args["sorted_expert_ids"], num_valid=args["num_valid_ids"],
            block=int(args["block_m"]), topk=int(args["topk"]), weights=args.get("sorted_weights"),
            act=_act(args["activation"]), swiglu_limit=None, inter_pad=0, model_pad=0,
            gate_layout=FIXED_LAYOUT, shuffled=bool(args.get("is_shuffled", True)), write=_to_tokens(args["out"], int(args["topk"])))


def moe_cktile2stages_gemm1_ck(args: dict):
    """CK-tile stage 1. split_k > 1: raw gate/up into Y [T*topk, 2P] in Y's dtype (bf16), the
    activation comes after (``silu_and_mul``); split_k 1: fused activation into Y [T, topk, P].
    n_padded_zeros counts the pad of gate and up together (aiter passes 2x the intermediate pad)."""
    _unsupported("moe_cktile2stages_gemm1_ck", args, "exp_bias")
    y, topk, split = args["Y"], int(args["topk"]), int(args.get("split_k") or 1)
    w = mxfp4.as_packed_uint8(args["WQ"], "WQ")
    n_pad = int(args.get("n_padded_zeros") or 0)
    if n_pad % 2:
        raise StandInError(f"moe_cktile2stages_gemm1_ck: n_padded_zeros {n_pad} is not split between gate and up")
    common = {"a": args["XQ"], "a_scale": args["x_scale"], "w1": w, "w1_scale": args["w_scale"], "sorted_ids": args["sorted_ids"],
                  "expert_ids": args["sorted_expert_ids"], "num_valid": args["max_token_ids"], "block": int(args["block_m"]), "topk": topk,
                  "weights": args.get("topk_weight"), "swiglu_limit": None, "inter_pad": n_pad // 2,
                  "model_pad": int(args.get("k_padded_zeros") or 0), "gate_layout": FIXED_LAYOUT, "shuffled": True}
    if split <= 1:
        _stage1("moe_cktile2stages_gemm1_ck", act=_act(args["activation"]), write=_to_tokens(y, topk), **common)
        return y
    p = w.shape[1] // 2
    flat = y.view(-1, y.shape[-1])

    def write_raw(pos, tok, slot, n_used, rows):
        # columns in the weight rows' storage order: 16-column gate/up blocks when GU-interleaved
        r = tok * topk + slot
        gate, up = rows[:, :n_used], rows[:, n_used:]
        if FIXED_LAYOUT == GateLayout.INTERLEAVE:
            flat[r, : 2 * n_used] = interleave_columns(gate, up).to(y.dtype)
        else:
            flat[r, :n_used], flat[r, p : p + n_used] = gate.to(y.dtype), up.to(y.dtype)

    _stage1_raw(common, write_raw)
    return y


def _stage1_raw(common: dict, write):
    """Stage 1 without the activation: gate/up rows stored as they are (float32 -> the buffer)."""
    a, dec = common["a"], ExpertDecoder(common["w1"], common["w1_scale"], True, common["gate_layout"], common["shuffled"])
    p, h = dec.rows // 2, dec.cols
    n_used, k_used = p - _pad(common["inter_pad"], p, "intermediate pad"), h - _pad(common["model_pad"], h, "hidden pad")
    decoded = decode_sorted(common["sorted_ids"], common["num_valid"], common["expert_ids"], common["block"], a.shape[0],
                            dec.w.shape[0])
    for e, pos, tok, slot in _groups(*decoded):
        rows = stage1_rows(a, common["a_scale"], dec, pos, tok, e, n_used, k_used, common["weights"], None, None,
                           gate_up_dtype=torch.float32)
        write(pos, tok, slot, n_used, rows)


def silu_and_mul(args: dict):
    """out = silu(input[..., :P]) * input[..., P:] in float32, stored in out's dtype; ``limit``
    (truthy) clamps as aiter's swiglu_limit. Reads every column it is given (no pad argument)."""
    out, x = args["out"], args["input"].to(torch.float32)
    p = x.shape[-1] // 2
    a = gated_activation(x.reshape(-1, 2 * p), p, ActivationType.SILU, args.get("limit") or None)
    out.view(-1, p).copy_(a.to(out.dtype))


def interleave_columns(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """[n, c] gate and up -> [n, 2c] in 16-column blocks g0 u0 g1 u1 ... (the GU-interleaved order)."""
    n, c = gate.shape
    return torch.stack((gate.reshape(n, c // GU_BLOCK, GU_BLOCK), up.reshape(n, c // GU_BLOCK, GU_BLOCK)), 2).reshape(n, 2 * c)


def deinterleave_columns(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    n, c2 = x.shape
    v = x.reshape(n, c2 // (2 * GU_BLOCK), 2, GU_BLOCK)
    return v[:, :, 0].reshape(n, -1), v[:, :, 1].reshape(n, -1)


def flydsl_silu_and_mul_interleaved(args: dict):
    """The CK-tile split-k post-activation on GU-interleaved columns (16-column gate/up blocks):
    rows tok*topk+slot of the valid sorted positions only; every column it is given (no pad)."""
    if str(args.get("quant_mode") or "none") != "none" or not args.get("gui_layout", True):
        raise StandInError("flydsl_silu_and_mul_interleaved: only quant_mode 'none', gui_layout True are modelled")
    x, out, topk, token_num = args["input"], args["out"], int(args["topk"]), int(args["token_num"])
    packed = args["sorted_token_ids"].view(-1)[: int(args["num_valid_ids"].view(-1)[0])].to(torch.int64)
    tok, slot = packed & SORTED_TOKEN_MASK, packed >> SORTED_TOKEN_BITS
    real = tok < token_num
    rows = tok[real] * topk + slot[real]
    gate, up = deinterleave_columns(x.reshape(-1, x.shape[-1])[rows].to(torch.float32))
    a = gated_activation(torch.cat((gate, up), 1), gate.shape[1], ActivationType.SILU, None)
    out.reshape(-1, out.shape[-1])[rows] = a.to(out.dtype)


# ----------------------------------------------------------------------------- stage 2 family
def _stage2(op, *, a, a_scale, w2, w2_scale, sorted_ids, expert_ids, num_valid, block, topk, token_num, weights,
            inter_pad, model_pad, gate_layout, shuffled):
    dec = ExpertDecoder(w2, w2_scale, False, gate_layout, shuffled)
    h, p = dec.rows, dec.cols
    k_used, h_used = p - _pad(inter_pad, p, f"{op} intermediate pad"), h - _pad(model_pad, h, f"{op} hidden pad")
    groups = _groups(*decode_sorted(sorted_ids, num_valid, expert_ids, block, token_num, dec.w.shape[0]))
    return stage2_slots(a, a_scale, dec, groups, h_used, k_used, weights, token_num, topk)


def ck_moe_stage2(args: dict):
    """CK 2-stage stage 2: no pad argument; atomically accumulates the weighted slots into out."""
    out, topk = args["out"], int(args["topk"])
    per_slot = _stage2("ck_moe_stage2", a=args["inter_states"], a_scale=args["a2_scale"], w2=args["w2"], w2_scale=args["w2_scale"],
                       sorted_ids=args["sorted_token_ids"], expert_ids=args["sorted_expert_ids"], num_valid=args["num_valid_ids"],
                       block=int(args["block_m"]), topk=topk, token_num=out.shape[0], weights=args.get("sorted_weights"),
                       inter_pad=0, model_pad=0, gate_layout=FIXED_LAYOUT, shuffled=bool(args.get("is_shuffled", True)))
    accumulate(out, per_slot)


def moe_cktile2stages_gemm2_ck(args: dict):
    """CK-tile stage 2: n_padded_zeros = hidden pad, k_padded_zeros = intermediate pad."""
    _unsupported("moe_cktile2stages_gemm2_ck", args, "exp_bias")
    out, topk = args["Y"], int(args["topk"])
    per_slot = _stage2("moe_cktile2stages_gemm2_ck", a=args["XQ"], a_scale=args["x_scale"], w2=args["WQ"], w2_scale=args["w_scale"],
                       sorted_ids=args["sorted_ids"], expert_ids=args["sorted_expert_ids"], num_valid=args["max_token_ids"],
                       block=int(args["block_m"]), topk=topk, token_num=out.shape[0], weights=args.get("topk_weight"),
                       inter_pad=int(args.get("k_padded_zeros") or 0), model_pad=int(args.get("n_padded_zeros") or 0),
                       gate_layout=FIXED_LAYOUT, shuffled=True)
    accumulate(out, per_slot)
    return out


# ----------------------------------------------------------------------------- FlyDSL
_MX_OUT = {"fp8": "fp8", "fp4": "fp4"}


def flydsl_moe_stage1(args: dict):
    """FlyDSL stage 1: block = tile_m; pads inter_dim_pad / model_dim_pad; layout = gate_mode.
    out_dtype fp8/fp4: the bf16 rows MX-quantized, returns (out, sorted scale)."""
    _unsupported("flydsl_moe_stage1", args, "bias")
    if int(args.get("k_batch") or 1) != 1:
        raise StandInError(f"flydsl_moe_stage1: k_batch {args['k_batch']} (split-K) is not modelled")
    a, topk, out_dtype = args["a"], int(args["topk"]), str(args["out_dtype"])
    w1 = mxfp4.as_packed_uint8(args["w1"], "w1")
    p = w1.shape[1] // 2
    common = {"a": a, "a_scale": args.get("a1_scale"), "w1": w1, "w1_scale": args["w1_scale"], "sorted_ids": args["sorted_token_ids"],
                  "expert_ids": args["sorted_expert_ids"], "num_valid": args["num_valid_ids"], "block": int(args["tile_m"]), "topk": topk,
                  "weights": args.get("sorted_weights"), "act": _act(args["act"]), "swiglu_limit": args.get("swiglu_limit"),
                  "inter_pad": args.get("inter_dim_pad"), "model_pad": args.get("model_dim_pad"),
                  "gate_layout": GateLayout(args.get("gate_mode") or "separated"), "shuffled": True}
    if out_dtype not in _MX_OUT:
        out = args["out"]
        if out is None:
            out = torch.empty((a.shape[0], topk, p), dtype=torch.bfloat16)
        _stage1("flydsl_moe_stage1", write=_to_tokens(out, topk), **common)
        return out
    fmt = _MX_OUT[out_dtype]
    cols = p if fmt == "fp8" else p // 2
    n_sorted = args["sorted_token_ids"].numel()
    if args.get("_returns"):  # the caller allocated the pair the launch returns
        out, out_scale = args["_returns"]
    else:
        out = torch.empty((a.shape[0] * topk, cols), dtype=torch.float8_e4m3fn if fmt == "fp8" else torch.uint8)
        out_scale = torch.empty(((n_sorted + 31) // 32 * 32, ((p // BLOCK_SIZE) + 7) // 8 * 8), dtype=torch.uint8)
    write, finish = _to_tokens_quantized((a.shape[0] * topk, p), topk, fmt, n_sorted, p // BLOCK_SIZE)
    _stage1("flydsl_moe_stage1", write=write, **common)
    finish(out, out_scale)
    return out, e8m0.to_torch(e8m0.as_uint8(out_scale, "out_scale"))


def flydsl_moe_stage2(args: dict):
    """FlyDSL stage 2: block = sort_block_m or tile_m; pads inter_dim_pad / model_dim_pad;
    atomic mode accumulates into out, reduce mode sums the slots into out; with ``expert_mask``
    and ``topk_ids`` the reduce sums only the slots whose expert is local
    (``expert_mask[topk_ids] != 0``, ``aiter/ops/flydsl/moe_kernels.py`` flydsl_moe_stage2's
    docstring); atomic mode ignores the mask (the sorting already left the slots out)."""
    _unsupported("flydsl_moe_stage2", args, "bias")
    if args.get("return_per_slot"):
        raise StandInError("flydsl_moe_stage2: return_per_slot is not modelled")
    a, topk, out = args["inter_states"], int(args["topk"]), args["out"]
    token_num = a.shape[0] if a.ndim == 3 else a.shape[0] // topk
    w2 = mxfp4.as_packed_uint8(args["w2"], "w2")
    if out is None:
        out = torch.zeros((token_num, w2.shape[1]), dtype=torch.bfloat16)
    block = int(args.get("sort_block_m") or 0) or int(args["tile_m"])
    per_slot = _stage2("flydsl_moe_stage2", a=a, a_scale=args.get("a2_scale"), w2=w2, w2_scale=args["w2_scale"],
                       sorted_ids=args["sorted_token_ids"], expert_ids=args["sorted_expert_ids"], num_valid=args["num_valid_ids"],
                       block=block, topk=topk, token_num=token_num, weights=args.get("sorted_weights"),
                       inter_pad=args.get("inter_dim_pad"), model_pad=args.get("model_dim_pad"), gate_layout=FIXED_LAYOUT, shuffled=True)
    if str(args.get("mode") or "atomic") == "reduce":
        mask, ids = args.get("expert_mask"), args.get("topk_ids")
        if mask is not None and ids is not None:
            valid = (mask.view(-1)[ids.to(torch.int64)] != 0).unsqueeze(-1)
            per_slot = torch.where(valid, per_slot, torch.zeros((), dtype=per_slot.dtype))
        out.copy_(per_slot.sum(1).to(out.dtype))
    else:
        accumulate(out, per_slot)
    return out


# ----------------------------------------------------------------------------- Opus
def _opus_moe_stage1_a8w4_fwd_raw(args: dict):
    """Opus a8w4 stage 1: fp8 input with its sorted scale, pad inter_dim_pad (no hidden pad),
    the clamp ``swiglu_limit`` (+inf: none), output fp8 [T, topk, P] + sorted scale ``out_scale``."""
    _unsupported("_opus_moe_stage1_a8w4_fwd_raw", args, "bias")
    out, out_scale, topk = args["out"], args["out_scale"], int(args["topk"])
    a = args["hidden_states"]
    limit = float(args["swiglu_limit"])
    limit = None if limit == float("inf") else limit
    if out.dim() != 3:
        raise StandInError(f"_opus_moe_stage1_a8w4_fwd_raw: sorted-row output {tuple(out.shape)} is not modelled")
    p = out.shape[-1]
    write, finish = _to_tokens_quantized((a.shape[0] * topk, p), topk, "fp8", args["sorted_token_ids"].numel(), p // BLOCK_SIZE)
    _stage1("_opus_moe_stage1_a8w4_fwd_raw", a=a, a_scale=args["hidden_scale"], w1=args["w1"], w1_scale=args["w1_scale"],
            sorted_ids=args["sorted_token_ids"], expert_ids=args["sorted_expert_ids"], num_valid=args["num_valid_ids"],
            block=int(args["block_m"]), topk=topk, weights=None, act=_act(args["activation"]), swiglu_limit=limit,
            inter_pad=args["inter_dim_pad"], model_pad=0, gate_layout=FIXED_LAYOUT, shuffled=True, write=write)
    finish(out, out_scale)
    return out


def _opus_moe_stage2_a8w4_decode_fwd_raw(args: dict):
    """Opus a8w4 stage 2: pad inter_dim_pad; out [T, H] accumulated, [T, topk, H] per slot (bf16
    route output) or uint8 [T*topk, H + H/8] (the MXFP8 route output, :func:`write_route_out_fp8`)."""
    out, topk, token_num = args["out"], int(args["topk"]), int(args["token_num"])
    common = {"a": args["inter_states"], "a_scale": args["a2_scale"], "w2": args["w2"], "w2_scale": args["w2_scale"],
              "sorted_ids": args["sorted_token_ids"], "expert_ids": args["sorted_expert_ids"], "num_valid": args["num_valid_ids"],
              "block": int(args["block_m"]), "topk": topk, "token_num": token_num, "weights": args.get("sorted_weights"),
              "inter_pad": args["inter_dim_pad"], "model_pad": 0, "gate_layout": FIXED_LAYOUT, "shuffled": True}
    per_slot = _stage2("_opus_moe_stage2_a8w4_decode_fwd_raw", **common)
    if out.dtype == torch.uint8:
        write_route_out_fp8(out, per_slot, routed_slots(common))
    elif out.dim() == 3:
        out.copy_(per_slot.to(out.dtype))
    else:
        accumulate(out, per_slot)
    return out


# ----------------------------------------------------------------------------- Opus MXFP8 route output
#: aiter's MXFP8 route-output row: H e4m3 bytes, then one e8m0 byte per ROUTE_OUT_BLOCK columns
#: (aiter/ops/opus/moe_stage2_a8w4.py:252-255, :313-318; the store
#: csrc/opus_moe/include/gfx950/a8w4/opus_moe_pipeline_stage2_a8w4_decode_main_gfx950.cuh:1033-1097)
ROUTE_OUT_BLOCK = mxfp8.ROUTE_OUT_BLOCK


def _route_hidden(route_out: torch.Tensor, name: str) -> int:
    cols = route_out.shape[-1]
    if route_out.dim() != 2 or cols % (ROUTE_OUT_BLOCK + 1):
        raise StandInError(f"{name}: MXFP8 route output {tuple(route_out.shape)} is not [T*topk, H + H/{ROUTE_OUT_BLOCK}]")
    return cols * ROUTE_OUT_BLOCK // (ROUTE_OUT_BLOCK + 1)


def routed_slots(common: dict) -> torch.Tensor:
    """bool [T, topk]: the (token, slot) rows stage 2 computes (valid sorted rows of real experts)."""
    n_experts = mxfp4.as_packed_uint8(common["w2"], "w2").shape[0]
    _, tok, slot, _ = decode_sorted(common["sorted_ids"], common["num_valid"], common["expert_ids"], common["block"],
                                    common["token_num"], n_experts)
    mask = torch.zeros((common["token_num"], common["topk"]), dtype=torch.bool)
    mask[tok, slot] = True
    return mask


def write_route_out_fp8(out: torch.Tensor, per_slot: torch.Tensor, routed: torch.Tensor, *,
                        scale_mode: str = mxfp8.ROUTE_OUT_SCALE_MODE, staged_dtype: torch.dtype | None = torch.bfloat16) -> None:
    """The routed rows ``tok * topk + slot`` of the uint8 route output: each weighted float32 row
    rounded to bf16 (the store stages it in bf16, gfx950.cuh:928-931), then e4m3 with one e8m0
    byte per 8 columns, exponent = the bf16 amax's - 7, at least 1; 0x00 for an all-zero group
    (``floor_headroom``, :1062-1088); a group holding a non-finite value gets scale 0xFF. Rows
    nothing was routed to are not written. ``scale_mode`` / ``staged_dtype``: aiter's by default
    (another value models a different store: the tests' planted roundings)."""
    h = _route_hidden(out, "_opus_moe_stage2_a8w4_decode_fwd_raw out")
    t, topk = routed.shape
    if out.shape[0] != t * topk or per_slot.shape[-1] != h:
        raise StandInError(f"_opus_moe_stage2_a8w4_decode_fwd_raw: route output {tuple(out.shape)} does not hold "
                           f"{t} tokens x top-{topk} rows of hidden {per_slot.shape[-1]}")
    tok, slot = routed.nonzero(as_tuple=True)
    staged = per_slot[tok, slot]
    staged = staged if staged_dtype is None else staged.to(staged_dtype).to(torch.float32)
    finite = _blocks_finite(staged, ROUTE_OUT_BLOCK)
    clean = torch.where(torch.isfinite(staged), staged, torch.zeros_like(staged))
    elems, scale = mxfp8.quantize(clean, scale_mode, name="route output", block=ROUTE_OUT_BLOCK)
    rows = tok * topk + slot
    out[rows, :h] = elems.view(torch.uint8)
    out[rows, h:] = torch.where(finite, scale, torch.full_like(scale, e8m0.E8M0_NAN))


def read_route_out_fp8(route_out: torch.Tensor, topk: int) -> torch.Tensor:
    """float32 [T, topk, H]: every row of the uint8 route output dequantized (its e4m3 bytes times
    the e8m0 of its 8-column group; 0xFF: NaN, as the kernel's 0xFF << 23 is +Inf times a NaN or
    finite element, never a finite value)."""
    h = _route_hidden(route_out, "route_out")
    if topk <= 0 or route_out.shape[0] % topk:
        raise StandInError(f"route_out: {route_out.shape[0]} rows are not whole tokens of top-{topk}")
    vals = mxfp8.dequantize(route_out[:, :h].contiguous().view(torch.float8_e4m3fn), route_out[:, h:], block=ROUTE_OUT_BLOCK)
    return vals.view(route_out.shape[0] // topk, topk, h)


def _opus_moe_stage2_reduce_token_slot_route_output_fwd_raw(args: dict):
    """The route output's slots summed in slot order (float32), rounded into out; a uint8 route
    output is the MXFP8 one (dequantized per 8 columns, route_output_reduce_gfx950.cuh:97-113)."""
    out, route_out = args["out"], args["route_out"]
    if route_out.dtype == torch.uint8:
        slots = read_route_out_fp8(route_out, int(args["topk"]))
    else:
        slots = route_out.to(torch.float32)
    acc = torch.zeros(slots.shape[0], slots.shape[2], dtype=torch.float32)
    for k in range(slots.shape[1]):
        acc = acc + slots[:, k]
    out.copy_(acc.to(out.dtype))
    return out


# ============================================================================= the table
COMPUTE: dict = {
    "moe_sorting_fwd": moe_sorting,
    "moe_sorting_opus_fwd": moe_sorting_opus_fwd,
    "moe_sorting_opus_get_workspace_size": moe_sorting_opus_get_workspace_size,
    "fused_dynamic_mx_quant_moe_sort_hip": fused_dynamic_mx_quant_moe_sort_hip,
    "dynamic_per_group_scaled_quant": dynamic_per_group_scaled_quant,
    "dynamic_per_group_scaled_quant_fp4": dynamic_per_group_scaled_quant,
    "mxfp4_moe_sort_hip": mxfp4_moe_sort_hip,
    "ck_moe_stage1": ck_moe_stage1,
    "ck_moe_stage2": ck_moe_stage2,
    "moe_cktile2stages_gemm1_ck": moe_cktile2stages_gemm1_ck,
    "moe_cktile2stages_gemm2_ck": moe_cktile2stages_gemm2_ck,
    "silu_and_mul": silu_and_mul,
    "flydsl_silu_and_mul_interleaved": flydsl_silu_and_mul_interleaved,
    "flydsl_moe_stage1": flydsl_moe_stage1,
    "flydsl_moe_stage2": flydsl_moe_stage2,
    "_opus_moe_stage1_a8w4_fwd_raw": _opus_moe_stage1_a8w4_fwd_raw,
    "_opus_moe_stage2_a8w4_decode_fwd_raw": _opus_moe_stage2_a8w4_decode_fwd_raw,
    "_opus_moe_stage2_reduce_token_slot_route_output_fwd_raw": _opus_moe_stage2_reduce_token_slot_route_output_fwd_raw,
}

#: what each stand-in models, in one line (the first line of its docstring)
MODELS: dict = {name: (fn.__doc__ or "").strip().splitlines()[0] for name, fn in COMPUTE.items()}


def _holds_values(args: dict) -> bool:
    """False when a tensor argument is on the meta device (shapes only: nothing to compute)."""
    for v in list(args.values()) + list(args.get("_returns") or ()):
        if isinstance(v, torch.Tensor) and v.is_meta:
            return False
    return True


def _values_only(fn):
    """The dispatch table runs on meta tensors: there the stand-in computes nothing."""

    def run(args: dict):
        return fn(args) if _holds_values(args) else None

    run.__doc__, run.__name__, run.__wrapped__ = fn.__doc__, fn.__name__, fn
    return run


COMPUTE = {name: _values_only(fn) for name, fn in COMPUTE.items()}
