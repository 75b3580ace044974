"""The post-load processing SGLang applies to FP4 routed experts on aiter.

Mirrors ``Fp8MoEMethod.process_weights_after_loading_block_quant`` for MXFP4 experts on
gfx950:

1. ``padded = ceil(I_p / align) * align`` with ``align`` = fp4_k_align (128 since SGLang PR
   #31450; 256 before it). ``intermediate_pad = padded - I_p`` and ``hidden_pad = 0`` are
   ALWAYS recorded, also when nothing is padded: the pads are the contract with the kernel.
2. When ``padded != I_p``: new zero buffers. In w13 the gate rows go to [0, I_p) and the up
   rows to [padded, padded + I_p): each half is padded on its own (padding them as one block
   would put up rows inside the gate half). w2's packed K (I_p/2 bytes) is padded at its end.
   Both scales are padded the same way with byte 0x00 (e8m0 2^-127, never 0xFF = NaN), so
   weight and scale pad dims always agree (SGLang PR #33090 shipped weights at raw dims with
   scales at padded dims; GSM8K fell from 0.99 to 0.54).
3. The gfx950 shuffles (``fp4moe.reference.layout``), selected by the gate/up-interleave flag
   (SGLANG_USE_AITER_MOE_GU_ITLV, default true).

The caller's tensors are never modified: padding allocates new buffers and the shuffles
return new tensors.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fp4moe.mx import e8m0
from fp4moe.mx.mxfp4 import BLOCK_SIZE, as_packed_uint8
from fp4moe.reference import layout
from fp4moe.reference.pads import DEFAULT_ALIGN, PadPlan

SCALE_PAD_BYTE = 0x00  # e8m0 2^-127: finite, never NaN


@dataclass
class ProcessedMoEWeights:
    """One layer's routed experts as the kernel receives them, plus the pads it must be told."""

    w13: torch.Tensor  # uint8 [E, 2*padded, H/2], shuffled when `shuffled`
    w13_scale: torch.Tensor  # uint8; [E, 2*padded, H/32] unshuffled, 2-D [E*2*padded(+), ...] shuffled
    w2: torch.Tensor  # uint8 [E, H, padded/2]
    w2_scale: torch.Tensor  # uint8; [E, H, padded/32] unshuffled, 2-D when shuffled
    experts: int
    hidden: int
    intermediate: int  # I_p (real)
    padded_intermediate: int
    intermediate_pad: int
    hidden_pad: int
    align: int
    gu_interleave: bool
    shuffled: bool


def check_raw_moe_weights(w13, w13_scale, w2, w2_scale) -> tuple[int, int, int]:
    """Validate raw stacked expert tensors; return (E, I_p, H). Errors name the tensor."""
    tensors = {"w13": w13, "w13_scale": w13_scale, "w2": w2, "w2_scale": w2_scale}
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.ndim != 3:
            raise ValueError(f"{name}: expected 3 dims [E, rows, cols], got shape {tuple(t.shape)}")
    for name in ("w13", "w2"):
        as_packed_uint8(tensors[name], name)
    for name in ("w13_scale", "w2_scale"):
        e8m0.as_uint8(tensors[name], name)
    e, two_i, h_half = w13.shape
    if two_i % 2:
        raise ValueError(f"w13: rows {two_i} must be even (gate rows then up rows), shape {tuple(w13.shape)}")
    i_p, h = two_i // 2, h_half * 2
    if h % BLOCK_SIZE:
        raise ValueError(f"w13: K = hidden = {h} (packed {h_half}) is not a multiple of {BLOCK_SIZE}")
    if i_p % BLOCK_SIZE:
        raise ValueError(f"w13: intermediate {i_p} is not a multiple of {BLOCK_SIZE} (w2's K)")
    expect = {
        "w13_scale": (e, two_i, h // BLOCK_SIZE),
        "w2": (e, h, i_p // 2),
        "w2_scale": (e, h, i_p // BLOCK_SIZE),
    }
    for name, shape in expect.items():
        if tuple(tensors[name].shape) != shape:
            raise ValueError(
                f"{name}: shape {tuple(tensors[name].shape)} does not match w13 {tuple(w13.shape)}; expected {shape}"
            )
    e8m0.check_no_nan(w13_scale, "w13_scale")
    e8m0.check_no_nan(w2_scale, "w2_scale")
    return e, i_p, h


def pad_gate_up(t: torch.Tensor, intermediate: int, padded: int, fill: int) -> torch.Tensor:
    """[E, 2*I_p, C] -> [E, 2*padded, C]: gate rows at [0, I_p), up rows at [padded, padded+I_p)."""
    e, _, c = t.shape
    out = torch.full((e, 2 * padded, c), fill, dtype=torch.uint8, device=t.device)
    out[:, :intermediate] = t[:, :intermediate]
    out[:, padded : padded + intermediate] = t[:, intermediate:]
    return out


def pad_last(t: torch.Tensor, new_cols: int, fill: int) -> torch.Tensor:
    """[..., C] -> [..., new_cols], real columns first."""
    out = torch.full((*t.shape[:-1], new_cols), fill, dtype=torch.uint8, device=t.device)
    out[..., : t.shape[-1]] = t
    return out


def pad_weights(w13: torch.Tensor, w2: torch.Tensor, intermediate: int, padded: int):
    """Packed weights to the padded intermediate: zero bytes (FP4 +0) in the pad channels."""
    return pad_gate_up(w13, intermediate, padded, 0), pad_last(w2, padded // 2, 0)


def pad_scales(w13_scale: torch.Tensor, w2_scale: torch.Tensor, intermediate: int, padded: int):
    """e8m0 scales padded exactly like their weights, with SCALE_PAD_BYTE (0x00, never 0xFF)."""
    return (
        pad_gate_up(w13_scale, intermediate, padded, SCALE_PAD_BYTE),
        pad_last(w2_scale, padded // BLOCK_SIZE, SCALE_PAD_BYTE),
    )


def process_fp4_moe_weights(
    w13: torch.Tensor,
    w13_scale: torch.Tensor,
    w2: torch.Tensor,
    w2_scale: torch.Tensor,
    *,
    align: int = DEFAULT_ALIGN,
    gu_interleave: bool = True,
    shuffle: bool = True,
) -> ProcessedMoEWeights:
    """Pad to ``align``, record the pads, and (``shuffle``) apply the gfx950 layouts."""
    if align <= 0 or align % BLOCK_SIZE:
        raise ValueError(f"align: must be a positive multiple of {BLOCK_SIZE}, got {align}")
    e, i_p, h = check_raw_moe_weights(w13, w13_scale, w2, w2_scale)
    w13, w2 = as_packed_uint8(w13, "w13"), as_packed_uint8(w2, "w2")
    w13_scale, w2_scale = e8m0.as_uint8(w13_scale, "w13_scale"), e8m0.as_uint8(w2_scale, "w2_scale")
    plan = PadPlan(i_p, align)
    p = plan.padded
    if p != i_p:
        w13, w2 = pad_weights(w13, w2, i_p, p)
        w13_scale, w2_scale = pad_scales(w13_scale, w2_scale, i_p, p)
    if shuffle:
        w13 = layout.shuffle_weight(w13, (16, 16), is_guinterleave=gu_interleave, gate_up=True, name="w13")
        w2 = layout.shuffle_weight(w2, (16, 16), is_guinterleave=gu_interleave, gate_up=False, name="w2")
        w13_scale = layout.shuffle_scale(
            w13_scale.reshape(e * 2 * p, -1), experts_cnt=e, is_guinterleave=gu_interleave, gate_up=True, name="w13_scale"
        )
        w2_scale = layout.shuffle_scale(
            w2_scale.reshape(e * h, -1), experts_cnt=e, is_guinterleave=gu_interleave, gate_up=False, name="w2_scale"
        )
    else:
        # keep the caller's tensors untouched even when nothing had to be padded
        w13, w13_scale, w2, w2_scale = (t.clone() if p == i_p else t for t in (w13, w13_scale, w2, w2_scale))
    return ProcessedMoEWeights(
        w13=w13,
        w13_scale=w13_scale,
        w2=w2,
        w2_scale=w2_scale,
        experts=e,
        hidden=h,
        intermediate=i_p,
        padded_intermediate=p,
        intermediate_pad=plan.intermediate_pad,
        hidden_pad=0,
        align=align,
        gu_interleave=gu_interleave,
        shuffled=shuffle,
    )


def unshuffled_views(pw: ProcessedMoEWeights) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The processed (padded) tensors in plain row-major order: w13, w13_scale, w2, w2_scale as 3-D."""
    if not pw.shuffled:
        return pw.w13, pw.w13_scale, pw.w2, pw.w2_scale
    e, h, p = pw.experts, pw.hidden, pw.padded_intermediate
    gi = pw.gu_interleave
    w13 = layout.unshuffle_weight(pw.w13, is_guinterleave=gi, gate_up=True)
    w2 = layout.unshuffle_weight(pw.w2, is_guinterleave=gi, gate_up=False)
    s13 = layout.unshuffle_scale(pw.w13_scale, e * 2 * p, h // BLOCK_SIZE, e, gi, gate_up=True)
    s2 = layout.unshuffle_scale(pw.w2_scale, e * h, p // BLOCK_SIZE, e, gi, gate_up=False)
    return w13, s13.view(e, 2 * p, -1), w2, s2.view(e, h, -1)


def pad_table(model, tp: int, ep: int = 1, align: int = DEFAULT_ALIGN) -> PadPlan:
    """The pad plan for a catalogue row: I_p from (model, tp, ep), padded to ``align``."""
    from fp4moe.model.catalogue import parallel_config

    pc = parallel_config(model, tp, ep)
    return PadPlan(pc.intermediate_per_partition, align)
