"""The MX shared-exponent rule: one power-of-two scale per block of 32 elements (or a narrower block).

OCP Microscaling Formats (MX) Specification v1.0, section 6.3: shared_exp = floor(log2(amax))
- emax_elem; the elements are then x / 2^shared_exp, rounded and saturated by the element
format (``fp4moe.mx.mxfp4``: E2M1, emax 2; ``fp4moe.mx.mxfp8``: E4M3, emax 8). The scale is
stored as E8M0 (``fp4moe.mx.e8m0``).

- ``BLOCK_SIZE``: 32 elements per scale (table 1); the quantizers also take a narrower ``block``
  (aiter's Opus route output scales 8 columns per byte).
- ``ScaleMode``: how amax becomes the exponent; the spec's rule and the variants aiter uses.
- ``shared_exponent``: the rule itself; ``check_block_input``: what every quantizer accepts.
"""

from __future__ import annotations

import enum

import torch

from fp4moe.mx import e8m0

BLOCK_SIZE = 32
F32_MANTISSA_BITS = 23
#: the smallest exponent ``floor_headroom`` gives a positive block (the kernel's ``E < 1 -> 1``)
HEADROOM_MIN_EXP = 1 - e8m0.E8M0_BIAS


class ScaleMode(str, enum.Enum):
    """How a block's amax becomes its shared exponent (a ``str``: ``"round_up"`` compares equal).

    - ``floor``: the OCP rule above.
    - ``round_up``: scale = 2^ceil(log2(amax / 6)), so no element saturates (aiter's default for
      weights). It differs from ``floor`` exactly when amax's significand exceeds 1.5.
    - ``even``: aiter's dynamic MXFP4 quant: amax is rounded to a power of two by adding 2^21
      to its float32 bit pattern and truncating the mantissa (significand >= 1.75 rounds up),
      then shared_exp = log2(rounded) - 2. For amax >= 1.75 * 2^127 the rounding carries past
      the float32 exponent range; the exponent is still read as 128 (scale byte 0xFD, as
      torchao), where aiter's torch helper returns 0xFF (NaN) and its Triton kernel 0xFE.
    - ``round_up_f32``: ``round_up`` computed the way aiter's run-time quant kernels and their
      torch reference (``fp4_utils.f32_to_mx_e8m0_scale``, RoundUp) compute it: the float32
      quotient q = amax / elem_max, its biased exponent field plus one when any mantissa bit is
      set. Identical to ``round_up`` except where q <= 2^-127 (q subnormal): byte 0x01 there
      instead of the clamped 0x00 (0x00 again when q underflows to zero).
    - ``floor_headroom``: the OCP rule one binade lower, shared_exp = floor(log2(amax)) -
      (emax_elem - 1), so amax / 2^shared_exp lies in [2^(emax-1), 2^emax) and no element
      saturates; a positive block's exponent is at least -126 (byte 0x01). aiter's Opus MXFP8
      route-output store (``csrc/opus_moe/include/gfx950/a8w4/opus_moe_pipeline_stage2_a8w4_decode_main_gfx950.cuh``
      :1070-1075 in e4048607: ``E = bf16 exponent of amax - 7``, ``E < 1 -> 1``).
    An all-zero block gets scale byte 0x00 (2^-127) in every mode.
    """

    FLOOR = "floor"
    ROUND_UP = "round_up"
    EVEN = "even"
    ROUND_UP_F32 = "round_up_f32"
    FLOOR_HEADROOM = "floor_headroom"


SCALE_MODES = tuple(m.value for m in ScaleMode)


def _floor_log2(amax: torch.Tensor) -> torch.Tensor:
    """Exact floor(log2(a)) for positive finite float32 a (frexp: a = m * 2^e, m in [0.5, 1))."""
    _, e = torch.frexp(amax)
    return e.to(torch.int32) - 1


def shared_exponent(amax: torch.Tensor, scale_mode: str, elem_emax: int, elem_max: float) -> torch.Tensor:
    """The unbiased block exponent for each block max (float32), before E8M0 clamping."""
    positive = amax > 0
    safe = torch.where(positive, amax, torch.ones_like(amax))
    if scale_mode == "floor":
        exp = _floor_log2(safe) - elem_emax
    elif scale_mode == "round_up":
        # smallest e with amax / 2^e <= elem_max, computed exactly: start from floor and fix up.
        exp = _floor_log2(safe) - elem_emax
        exp = exp - 1
        for _ in range(3):
            too_small = safe > elem_max * torch.ldexp(torch.ones_like(safe), exp)
            exp = exp + too_small.to(torch.int32)
    elif scale_mode == "even":
        # read the exponent straight from the rounded bit pattern: correct also when the
        # rounding carries into Inf (amax near float32 max) or amax is subnormal
        bits = safe.view(torch.int32)
        exp = (((bits + 0x200000) >> 23) & 0xFF) - 127 - elem_emax
    elif scale_mode == "round_up_f32":
        q = (safe.to(torch.float32) / elem_max).view(torch.int32)
        biased = (q >> F32_MANTISSA_BITS) & 0xFF
        exp = biased + ((q & ((1 << F32_MANTISSA_BITS) - 1)) != 0).to(torch.int32) - e8m0.E8M0_BIAS
    elif scale_mode == "floor_headroom":
        exp = (_floor_log2(safe) - (elem_emax - 1)).clamp(min=HEADROOM_MIN_EXP)
    else:
        raise ValueError(f"scale_mode must be one of {SCALE_MODES}, got {scale_mode!r}")
    return torch.where(positive, exp, torch.full_like(exp, e8m0.E8M0_MIN_EXP))


def check_block_input(x: torch.Tensor, name: str, block: int = BLOCK_SIZE) -> None:
    """A float tensor whose last dim is whole blocks, with no NaN/Inf (MX elements cannot encode them)."""
    if not torch.is_floating_point(x):
        raise TypeError(f"{name}: expected a floating-point tensor, got {x.dtype}")
    if block <= 0 or BLOCK_SIZE % block:
        raise ValueError(f"{name}: block {block} must divide the MX block ({BLOCK_SIZE})")
    if x.ndim == 0 or x.shape[-1] % block:
        raise ValueError(f"{name}: last dim must be a multiple of {block}, got shape {tuple(x.shape)}")
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name}: contains NaN or Inf; MX elements cannot encode them")
