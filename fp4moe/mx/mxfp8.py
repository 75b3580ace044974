"""MXFP8 (E4M3 elements, E8M0 scale per 32), used for activations on the a8w4 path.

OCP Microscaling Formats (MX) Specification v1.0, section 5.3.1 (FP8 E4M3: emax 8, max
normal 448) and table 1 (MXFP8: block 32). aiter's a8w4 MoE quantizes activations per 1x32
with the ``round_up`` rule (scale = 2^ceil(log2(amax / 448))), so no element saturates,
computed on the float32 quotient (``ACT_SCALE_MODE`` = ``round_up_f32``, see fp4moe.mx.mxfp4:
byte 0x01 instead of 0x00 for blocks with amax / 448 <= 2^-127).
Element rounding is torch's float32 -> float8_e4m3fn cast (round to nearest even); values are
clamped to +-448 first so that ``floor`` mode saturates instead of producing NaN.
``block`` (default 32) narrows the scale block: aiter's Opus MXFP8 route output is e4m3 with one
e8m0 byte per 8 columns (``ROUTE_OUT_BLOCK``, scale rule ``floor_headroom``).
"""

from __future__ import annotations

import torch

from fp4moe.mx import e8m0
from fp4moe.mx.block_scale import BLOCK_SIZE, SCALE_MODES, check_block_input, shared_exponent

E4M3_EMAX = 8
E4M3_MAX = 448.0
#: the scale rule of aiter's run-time MXFP8 activation quant (a8w4), emulated bit for bit
ACT_SCALE_MODE = "round_up_f32"
#: aiter's Opus stage-2 MXFP8 route output: one e8m0 scale byte per 8 columns, the headroom rule
#: (opus_moe_pipeline_stage2_a8w4_decode_main_gfx950.cuh:1033-1035 in e4048607)
ROUTE_OUT_BLOCK = 8
ROUTE_OUT_SCALE_MODE = "floor_headroom"


def quantize(x: torch.Tensor, scale_mode: str = "round_up", name: str = "x", block: int = BLOCK_SIZE) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., K] -> (elements float8_e4m3fn [..., K], scale uint8 [..., K/block])."""
    if scale_mode not in SCALE_MODES:
        raise ValueError(f"scale_mode must be one of {SCALE_MODES}, got {scale_mode!r}")
    check_block_input(x, name, block)
    xf = x.to(torch.float32)
    blocks = xf.reshape(*xf.shape[:-1], xf.shape[-1] // block, block)
    amax = blocks.abs().amax(dim=-1)
    exp = shared_exponent(amax, scale_mode, E4M3_EMAX, E4M3_MAX).clamp(e8m0.E8M0_MIN_EXP, e8m0.E8M0_MAX_EXP)
    scaled = torch.ldexp(blocks, -exp.unsqueeze(-1)).clamp(-E4M3_MAX, E4M3_MAX)
    elems = scaled.to(torch.float8_e4m3fn).reshape(xf.shape)
    return elems, e8m0.encode_exponent(exp)


def dequantize(elems: torch.Tensor, scale: torch.Tensor, block: int = BLOCK_SIZE) -> torch.Tensor:
    """MXFP8 -> float32 (exact)."""
    if elems.dtype != torch.float8_e4m3fn:
        raise TypeError(f"elems: expected float8_e4m3fn, got {elems.dtype}")
    s = e8m0.as_uint8(scale, "scale")
    if elems.shape[:-1] != s.shape[:-1] or elems.shape[-1] != s.shape[-1] * block:
        per = "" if block == BLOCK_SIZE else f" (block {block})"
        raise ValueError(f"elems shape {tuple(elems.shape)} does not match scale shape {tuple(s.shape)}{per}")
    return elems.to(torch.float32) * e8m0.decode(s).repeat_interleave(block, dim=-1)


def fake_quantize(x: torch.Tensor, scale_mode: str = ACT_SCALE_MODE, block: int = BLOCK_SIZE) -> torch.Tensor:
    """Quantize then dequantize: the float32 values an a8w4 kernel actually multiplies."""
    return dequantize(*quantize(x, scale_mode, block=block), block=block)
