"""aiter's gfx950 byte layouts for MXFP4 MoE weights and scales, with exact inverses.

Drop-in equivalents of ``aiter.ops.shuffle.shuffle_weight`` / ``shuffle_scale`` on gfx950
(the non-gfx1250 branch), written from the layouts they produce, which
``../shared/golden/aiter-layouts`` records as index maps:

- ``shuffle_weight`` (packed FP4 bytes [E, N, K/2]) tiles each expert into 16 rows x 32 bytes:
  order (N/16, K/32-byte-tiles, 2 half-tiles of 16 bytes, 16 rows, 16 bytes). The
  GU-interleaved variant (``is_guinterleave=True``, the a16w4/a8w4 DeepSeek-V4 kernels) uses the
  same order for a plain matrix (64-byte K groups split into 4 lanes of 16 bytes give the same
  byte order), and with ``gate_up=True`` first interleaves the gate and up halves in 16-row
  blocks (G0 U0 G1 U1 ...).
- ``shuffle_scale`` (e8m0 bytes, 2-D [rows, K/32]):
  * non-interleaved: pads rows to a multiple of 256 and columns to a multiple of 8, then
    permutes 32x8 tiles (view (rows/32, 2, 16, cols/8, 2, 4) -> order (0, 3, 5, 2, 4, 1)).
    aiter leaves this padding uninitialised (``torch.empty``); here it is filled with byte
    0x00 (e8m0 2^-127): deterministic, and never NaN, so a kernel that reads it by mistake
    multiplies by a tiny number instead of poisoning the output.
  * interleaved: per expert, pads columns to a multiple of 8 with 0x7F (e8m0 1.0, as aiter does
    since PR #4130; older aiter raised on K/32 = 12), then views (E, [2 gate/up,] N/32, ...,
    K/8, 2, 4) and orders lanes as the kernel loads them.

Shapes that aiter's assertions or views reject raise ValueError naming the shape.
"""

from __future__ import annotations

import torch

from fp4moe.mx.e8m0 import E8M0_ONE
from fp4moe.reference.pads import SCALE_COL_ALIGN, SCALE_ROW_ALIGN, round_up, shuffled_scale_shape  # noqa: F401 (the shuffles' shape rule)

NONINTERLEAVED_SCALE_FILL = 0x00  # our deterministic fill for aiter's uninitialised padding
INTERLEAVED_SCALE_FILL = E8M0_ONE  # what aiter writes

_N_LANE = 16  # rows per tile
_K_PACK = 16  # bytes per lane


def _as_bytes(x: torch.Tensor, name: str) -> tuple[torch.Tensor, torch.dtype]:
    if x.dtype in (torch.uint8, torch.int8) or x.dtype in (
        getattr(torch, "float4_e2m1fn_x2", None),
        getattr(torch, "float8_e8m0fnu", None),
    ):
        return x.view(torch.uint8), x.dtype
    raise TypeError(f"{name}: expected a byte tensor (uint8/int8/float4_e2m1fn_x2/float8_e8m0fnu), got {x.dtype}")


# ---------------------------------------------------------------------------- weights
def _weight_view(x: torch.Tensor, layout, is_guinterleave: bool, gate_up: bool, name: str):
    n_lane, k_pack = layout
    if (n_lane, k_pack) != (16, 16):
        raise ValueError(f"{name}: only layout=(16, 16) is implemented (gfx950 MXFP4), got {layout}")
    if x.ndim < 2:
        raise ValueError(f"{name}: expected [..., N, K/2], got shape {tuple(x.shape)}")
    n, kb = x.shape[-2], x.shape[-1]
    if is_guinterleave:
        if x.ndim != 3:
            raise ValueError(f"{name}: GU-interleaved shuffle needs [E, N, K/2], got shape {tuple(x.shape)}")
        half = n // 2 if gate_up else n
        if (gate_up and n % 2) or half % _N_LANE or kb % (4 * k_pack):
            raise ValueError(
                f"{name}: shape {tuple(x.shape)} not tileable for the GU-interleaved layout "
                f"(need N{'/2' if gate_up else ''} % 16 == 0 and K/2 % 64 == 0)"
            )
        e = x.shape[0]
        if gate_up:
            # (E, gate/up, N0, 16 rows, K/32 tiles, 2, 16) -> (E, N0, gate/up, tiles, 2, rows, 16)
            shape = (e, 2, half // _N_LANE, _N_LANE, kb // 32, 2, k_pack)
            perm = (0, 2, 1, 4, 5, 3, 6)
        else:
            shape = (e, n // _N_LANE, _N_LANE, kb // 32, 2, k_pack)
            perm = (0, 1, 3, 4, 2, 5)
        return shape, perm
    if n % _N_LANE or kb % (2 * k_pack):
        raise ValueError(
            f"{name}: shape {tuple(x.shape)} not tileable: need N % 16 == 0 (got {n % _N_LANE}) "
            f"and K/2 % 32 == 0 (got {kb % 32})"
        )
    shape = (-1, n // _N_LANE, _N_LANE, kb // 32, 2, k_pack)
    perm = (0, 1, 3, 4, 2, 5)
    return shape, perm


def _inverse(perm):
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


def shuffle_weight(
    x: torch.Tensor, layout=(16, 16), is_guinterleave: bool = False, gate_up: bool = False, name: str = "weight"
) -> torch.Tensor:
    """Packed FP4 weight [E, N, K/2] -> aiter gfx950 byte order (same shape and dtype).
    ``name`` (not in aiter's signature) only labels errors."""
    b, dtype = _as_bytes(x, name)
    shape, perm = _weight_view(b, layout, is_guinterleave, gate_up, name)
    out = b.reshape(shape).permute(perm).contiguous().view(b.shape)
    return out.view(dtype)


def unshuffle_weight(x: torch.Tensor, layout=(16, 16), is_guinterleave: bool = False, gate_up: bool = False) -> torch.Tensor:
    """Exact inverse of ``shuffle_weight``."""
    b, dtype = _as_bytes(x, "shuffled weight")
    shape, perm = _weight_view(b, layout, is_guinterleave, gate_up, "shuffled weight")
    permuted_shape = [shape[p] for p in perm]
    if permuted_shape[0] == -1:
        permuted_shape[0] = b.numel() // int(torch.tensor([s for s in shape[1:]]).prod())
    out = b.reshape(permuted_shape).permute(_inverse(perm)).contiguous().view(b.shape)
    return out.view(dtype)


# ---------------------------------------------------------------------------- scales
def _scale_view(rows: int, cols_padded: int, experts_cnt, is_guinterleave: bool, gate_up: bool, name: str):
    if not is_guinterleave:
        shape = (rows // 32, 2, 16, cols_padded // 8, 2, 4)
        return shape, (0, 3, 5, 2, 4, 1)
    if experts_cnt is None:
        raise ValueError(f"{name}: experts_cnt is required when is_guinterleave=True (scale rows {rows})")
    if experts_cnt <= 0 or rows % experts_cnt:
        raise ValueError(f"{name}: rows {rows} not divisible by experts_cnt {experts_cnt}")
    n = rows // experts_cnt
    if n % 32:
        raise ValueError(f"{name}: per-expert rows {n} (shape [{rows}, ...]) must be a multiple of 32")
    k1 = cols_padded // 8
    if gate_up:
        # (E, gate/up, N/32, 16 lanes, K/8, 2, 4) -> (E, N/32, K/8, 4, 16, 2, gate/up)
        return (experts_cnt, 2, n // 32, 16, k1, 2, 4), (0, 2, 4, 6, 3, 5, 1)
    # (E, N/32, 2, 16 lanes, K/8, 2, 4) -> (E, N/32, K/8, 4, 16, 2, 2)
    return (experts_cnt, n // 32, 2, 16, k1, 2, 4), (0, 1, 4, 6, 3, 5, 2)


def shuffle_scale(
    src: torch.Tensor, experts_cnt: int | None = None, is_guinterleave: bool = False, gate_up: bool = False, name: str = "scale"
) -> torch.Tensor:
    """e8m0 scale [rows, K/32] -> aiter gfx950 order, padded as ``shuffled_scale_shape`` says.
    ``name`` (not in aiter's signature) only labels errors."""
    b, dtype = _as_bytes(src, name)
    if b.ndim != 2:
        raise ValueError(f"{name}: must be a 2-D tensor [rows, K/32], got shape {tuple(b.shape)}")
    rows, cols = b.shape
    out_rows, out_cols = shuffled_scale_shape(rows, cols, is_guinterleave)
    fill = INTERLEAVED_SCALE_FILL if is_guinterleave else NONINTERLEAVED_SCALE_FILL
    shape, perm = _scale_view(out_rows, out_cols, experts_cnt, is_guinterleave, gate_up, f"{name} {tuple(b.shape)}")
    padded = torch.full((out_rows, out_cols), fill, dtype=torch.uint8, device=b.device)
    padded[:rows, :cols] = b
    out = padded.view(shape).permute(perm).contiguous().view(out_rows, out_cols)
    return out.view(dtype)


def unshuffle_scale(
    shuffled: torch.Tensor,
    rows: int,
    cols: int,
    experts_cnt: int | None = None,
    is_guinterleave: bool = False,
    gate_up: bool = False,
) -> torch.Tensor:
    """Exact inverse of ``shuffle_scale``: returns the original [rows, cols] (padding dropped)."""
    b, dtype = _as_bytes(shuffled, "shuffled scale")
    expected = shuffled_scale_shape(rows, cols, is_guinterleave)
    if tuple(b.shape) != expected:
        raise ValueError(f"shuffled scale: shape {tuple(b.shape)} != {expected} expected for [{rows}, {cols}]")
    shape, perm = _scale_view(expected[0], expected[1], experts_cnt, is_guinterleave, gate_up, "shuffled scale")
    permuted_shape = [shape[p] for p in perm]
    full = b.reshape(permuted_shape).permute(_inverse(perm)).contiguous().view(expected)
    return full[:rows, :cols].contiguous().view(dtype)


def scale_padding_mask(rows: int, cols: int, experts_cnt: int | None = None, is_guinterleave: bool = False, gate_up: bool = False) -> torch.Tensor:
    """Bool mask over the shuffled scale: True where the byte is shuffle padding, not input."""
    src = torch.zeros((rows, cols), dtype=torch.uint8)
    marker = shuffle_scale(src + 1, experts_cnt, is_guinterleave, gate_up)
    return marker != 1


def unshuffle_scale_rows(block: torch.Tensor, cols: int, is_guinterleave: bool = False, gate_up: bool = False) -> torch.Tensor:
    """Inverse shuffle of one expert's rows of a shuffled scale, [N, cols_padded] -> [N, cols].

    Both variants permute within whole experts (interleaved) or 32-row groups (plain), so an
    expert whose row count N is a multiple of 32 occupies the same rows before and after the
    shuffle: a kernel (and the reference) can read one routed expert without touching the rest.
    """
    b, dtype = _as_bytes(block, "scale block")
    n, cols_p = b.shape
    if cols_p != round_up(cols, SCALE_COL_ALIGN):
        raise ValueError(f"scale block: {cols_p} columns, expected {round_up(cols, SCALE_COL_ALIGN)} for K/32 = {cols}")
    if n % 32:
        raise ValueError(f"scale block: rows {n} must be a multiple of 32")
    shape, perm = _scale_view(n, cols_p, 1, is_guinterleave, gate_up, "scale block")
    permuted_shape = [shape[p] for p in perm]
    full = b.reshape(permuted_shape).permute(_inverse(perm)).contiguous().view(n, cols_p)
    return full[:, :cols].view(dtype)
