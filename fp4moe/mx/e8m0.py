"""E8M0: the shared block scale of the OCP Microscaling formats.

OCP Microscaling Formats (MX) Specification v1.0, section 5.4.1 ("E8M0"): an unsigned 8-bit
exponent with bias 127 and no mantissa. Byte ``b`` encodes ``2**(b - 127)`` for ``b`` in
0..254, so 0x00 is 2^-127 (the format has **no zero**) and 0xFF is NaN. A block whose scale is
0xFF decodes to NaN whatever its elements are: that is why padding must never hold 0xFF.
"""

from __future__ import annotations

import torch

E8M0_BIAS = 127
E8M0_NAN = 0xFF
E8M0_MIN_EXP = -127  # byte 0x00
E8M0_MAX_EXP = 127  # byte 0xFE
E8M0_ONE = 0x7F  # 2^0: the fill aiter uses for interleaved scale padding

# 2**(b-127) computed in float64 (exact) and rounded to float32 (still exact: 2^-127 is a
# float32 subnormal, 2^127 a normal); index 255 is NaN.
_E8M0_TABLE = torch.tensor(
    [2.0 ** (b - E8M0_BIAS) for b in range(255)] + [float("nan")], dtype=torch.float32
)


_TABLES_BY_DEVICE: dict = {}


def as_uint8(t: torch.Tensor, name: str) -> torch.Tensor:
    """View an e8m0 tensor (uint8, int8 or torch.float8_e8m0fnu) as uint8 bytes, without copying."""
    if t.dtype == torch.uint8:
        return t
    if t.dtype == torch.int8 or t.dtype == getattr(torch, "float8_e8m0fnu", None):
        return t.view(torch.uint8)
    raise TypeError(f"{name}: expected e8m0 bytes (uint8, int8 or float8_e8m0fnu), got {t.dtype}")


def decode(scale: torch.Tensor, name: str = "scale") -> torch.Tensor:
    """E8M0 bytes -> float32 (exact). 0xFF -> NaN, per the spec."""
    b = as_uint8(scale, name)
    table = _TABLES_BY_DEVICE.get(b.device)
    if table is None:  # one copy per device, not one host->device copy per call
        table = _TABLES_BY_DEVICE[b.device] = _E8M0_TABLE.to(b.device)
    return table[b.long()]


def encode_exponent(exp: torch.Tensor) -> torch.Tensor:
    """Unbiased integer exponent -> E8M0 byte, clamped to the representable range [-127, 127]."""
    return (exp.clamp(E8M0_MIN_EXP, E8M0_MAX_EXP) + E8M0_BIAS).to(torch.uint8)


def exponent_of(byte: torch.Tensor) -> torch.Tensor:
    """E8M0 byte -> unbiased exponent (int32). Callers must reject 0xFF first."""
    return byte.to(torch.int32) - E8M0_BIAS


def check_no_nan(scale: torch.Tensor, name: str) -> None:
    """Raise ValueError naming the tensor and the first position holding 0xFF (NaN)."""
    b = as_uint8(scale, name)
    bad = b == E8M0_NAN
    if bool(bad.any()):
        first = [int(i) for i in bad.nonzero()[0].tolist()]
        raise ValueError(
            f"{name}: {int(bad.sum())} scale byte(s) are 0xFF (e8m0 NaN) in real blocks, "
            f"first at index {first}"
        )


def to_torch(scale: torch.Tensor) -> torch.Tensor:
    """uint8 bytes -> a torch.float8_e8m0fnu view (same storage)."""
    return as_uint8(scale, "scale").view(torch.float8_e8m0fnu)
