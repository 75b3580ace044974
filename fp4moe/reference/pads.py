"""The pad rules of the weight path, written once (no torch: the footprint arithmetic and
``--help`` read them without loading it).

- :func:`round_up` -- the one rounding rule every pad below uses;
- :class:`PadPlan`, :data:`DEFAULT_ALIGN`, :data:`LEGACY_ALIGN` -- a rank's intermediate size
  padded to the alignment SGLang uses (128 since PR #31450, 256 before);
- :data:`SCALE_ROW_ALIGN`, :data:`SCALE_COL_ALIGN`, :func:`shuffled_scale_shape` -- the shape of
  aiter's gfx950 ``shuffle_scale`` output: non-interleaved rounds rows to 256 and columns to 8,
  GU-interleaved rounds columns to 8 only.

``fp4moe.reference.layout`` (the shuffles) and ``fp4moe.reference.weight_path`` (the weights)
use these; ``fp4moe.reference.footprint`` counts bytes with them.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_ALIGN = 128  # SGLang PR #31450
LEGACY_ALIGN = 256  # before PR #31450
SCALE_ROW_ALIGN = 256  # non-interleaved scale rows
SCALE_COL_ALIGN = 8  # scale columns (K/32) in both variants


def round_up(x: int, m: int) -> int:
    """Smallest multiple of ``m`` that is >= x."""
    return (x + m - 1) // m * m


@dataclass(frozen=True)
class PadPlan:
    """How one rank's intermediate dim is padded for the kernel."""

    intermediate: int  # I_p, the real per-partition size
    align: int

    @property
    def padded(self) -> int:
        return round_up(self.intermediate, self.align)

    @property
    def intermediate_pad(self) -> int:
        return self.padded - self.intermediate


def shuffled_scale_shape(rows: int, cols: int, is_guinterleave: bool = False) -> tuple[int, int]:
    """Output shape of ``shuffle_scale`` for a [rows, cols] scale."""
    if is_guinterleave:
        return rows, round_up(cols, SCALE_COL_ALIGN)
    return round_up(rows, SCALE_ROW_ALIGN), round_up(cols, SCALE_COL_ALIGN)
