"""MXFP4: E2M1 elements in blocks of 32 sharing one E8M0 scale.

OCP Microscaling Formats (MX) Specification v1.0:
- section 5.3.3 ("FP4 (E2M1)"): 1 sign bit (bit 3), 2 exponent bits, 1 mantissa bit; the
  magnitudes are {0, 0.5, 1, 1.5, 2, 3, 4, 6}; no Inf or NaN.
- section 5.2 / table 1: MXFP4 = block size 32, element E2M1, scale E8M0.
- section 6.3 ("conversion"): shared_exp = floor(log2(amax)) - emax_elem (emax_elem = 2 for
  E2M1); elements are x / 2^shared_exp rounded to nearest, ties to even, saturating to +-6.

Packing (aiter, torchao and triton agree): two elements per byte, element 2i in the LOW
nibble, element 2i+1 in the high nibble. Blocks run along the last dimension.

Scale modes: ``fp4moe.mx.block_scale.ScaleMode`` (the shared-exponent rule, shared with MXFP8).

Which mode where (docs/reference.md, "Semantics"): weights this project quantizes use the
OCP-exact rules (``round_up`` / ``floor``); ``round_up_f32`` is used only where the reference
emulates what aiter computes at run time (the a8w4 MXFP8 activation quant).
"""

from __future__ import annotations

import torch

from fp4moe.mx import e8m0
from fp4moe.mx.block_scale import BLOCK_SIZE, SCALE_MODES, check_block_input, shared_exponent  # noqa: F401  (BLOCK_SIZE, SCALE_MODES: part of this format's vocabulary)

E2M1_EMAX = 2  # exponent of the largest normal, 6 = 1.5 * 2^2
E2M1_MAX = 6.0
E2M1_SIGN_BIT = 0x8
#: decoded value of each 4-bit code (sign in bit 3).
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
_E2M1_TABLE = torch.tensor(E2M1_VALUES, dtype=torch.float32)

# Rounding boundaries between consecutive magnitude codes i and i+1 (midpoints). At a tie,
# round-half-to-even picks the even code: the lower one when i is even, the upper when odd.
_MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)



def as_packed_uint8(t: torch.Tensor, name: str) -> torch.Tensor:
    """View packed FP4 (uint8, int8 as stored in checkpoints, or torch.float4_e2m1fn_x2) as uint8."""
    if t.dtype == torch.uint8:
        return t
    if t.dtype == torch.int8 or t.dtype == getattr(torch, "float4_e2m1fn_x2", None):
        return t.view(torch.uint8)
    raise TypeError(f"{name}: expected packed FP4 bytes (uint8, int8 or float4_e2m1fn_x2), got {t.dtype}")


def encode_e2m1(v: torch.Tensor) -> torch.Tensor:
    """float32 values (already divided by the block scale) -> 4-bit codes (uint8), RNE, saturating."""
    mag = v.abs()
    code = torch.zeros(v.shape, dtype=torch.uint8, device=v.device)
    for i, m in enumerate(_MIDPOINTS):
        code += (mag >= m if i % 2 else mag > m).to(torch.uint8)
    sign = torch.signbit(v).to(torch.uint8) * E2M1_SIGN_BIT
    return code | sign


_TABLES_BY_DEVICE: dict = {}


def _table_on(device) -> torch.Tensor:
    # one copy per device: a host->device copy per call would cost a sync on every expert
    t = _TABLES_BY_DEVICE.get(device)
    if t is None:
        t = _TABLES_BY_DEVICE[device] = _E2M1_TABLE.to(device)
    return t


def decode_e2m1(codes: torch.Tensor) -> torch.Tensor:
    """4-bit codes -> float32 (exact)."""
    return _table_on(codes.device)[codes.long()]


def pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """[..., K] codes -> [..., K/2] bytes, element 2i in the low nibble."""
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    """[..., K/2] bytes -> [..., K] codes."""
    lo = packed & 0x0F
    hi = packed >> 4
    return torch.stack((lo, hi), dim=-1).flatten(-2)


def quantize(x: torch.Tensor, scale_mode: str = "round_up", name: str = "x") -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``x`` [..., K] to MXFP4: (packed uint8 [..., K/2], scale uint8 [..., K/32])."""
    if scale_mode not in SCALE_MODES:
        raise ValueError(f"scale_mode must be one of {SCALE_MODES}, got {scale_mode!r}")
    check_block_input(x, name)
    xf = x.to(torch.float32)
    blocks = xf.reshape(*xf.shape[:-1], xf.shape[-1] // BLOCK_SIZE, BLOCK_SIZE)
    amax = blocks.abs().amax(dim=-1)
    exp = shared_exponent(amax, scale_mode, E2M1_EMAX, E2M1_MAX).clamp(e8m0.E8M0_MIN_EXP, e8m0.E8M0_MAX_EXP)
    scale_byte = e8m0.encode_exponent(exp)
    # x / 2^exp is exact in float32 (a power-of-two scaling of a normal value)
    scaled = torch.ldexp(blocks, -exp.unsqueeze(-1))
    codes = encode_e2m1(scaled).reshape(xf.shape)
    return pack_nibbles(codes), scale_byte


def dequantize(packed: torch.Tensor, scale: torch.Tensor, name: str = "packed") -> torch.Tensor:
    """MXFP4 -> float32, exact. packed [..., K/2] (uint8 / int8 / float4_e2m1fn_x2), scale [..., K/32]."""
    p = as_packed_uint8(packed, name)
    s = e8m0.as_uint8(scale, f"{name} scale")
    if p.shape[:-1] != s.shape[:-1] or p.shape[-1] != s.shape[-1] * (BLOCK_SIZE // 2):
        raise ValueError(
            f"{name}: packed shape {tuple(p.shape)} does not match scale shape {tuple(s.shape)} "
            f"(expected scale [..., packed_last / {BLOCK_SIZE // 2}])"
        )
    values = decode_e2m1(unpack_nibbles(p))
    factors = e8m0.decode(s).repeat_interleave(BLOCK_SIZE, dim=-1)
    return values * factors


def to_torch_fp4(packed: torch.Tensor) -> torch.Tensor:
    """uint8 packed bytes -> torch.float4_e2m1fn_x2 view (same storage, same bit layout)."""
    return as_packed_uint8(packed, "packed").view(torch.float4_e2m1fn_x2)
