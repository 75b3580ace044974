"""A ``fp4moe.reference.weight_path`` layer in the layout aiter's Triton MoE kernels take.

Input: the processed layer unshuffled (``process_fp4_moe_weights(..., shuffle=False)``):
w13 ``[E, 2P, H/2]`` (gate rows ``[0, P)``, up rows ``[P, 2P)``, FP4 packed along H, low nibble
first), w2 ``[E, H, P/2]``, e8m0 scales ``[E, rows, K/32]``.

What ``moe_gemm_a16w4`` / ``moe_gemm_a8w4`` take (aiter ``moe/moe_op_gemm_a16w4.py``; the wrapper
asserts ``w.stride(-2) == 1``):

- ``W1 = (E, H/2, 2P)``: the transpose view of a contiguous ``[E, 2P, H/2]`` whose rows are gate
  and up *interleaved row by row* (row 2j = gate j, row 2j+1 = up j): the kernel's SwiGLU
  (``_triton_kernels/moe/activations.py``) splits N as ``reshape(M, N/2, 2)`` -> (gate, linear);
- ``S1 = (E, H/32, 2P)``, the transpose view, interleaved the same way;
- ``W2 = (E, P/2, H)`` and ``S2 = (E, P/32, H)``, transpose views;
- scale layout ``"CDNA4_SCALE"`` (gfx950's production layout): the ``(E, K/32, N)`` scale goes
  through the tree's own ``utils/shuffle.shuffle_scale_moe(s, arch="gfx950", preshuffle_factor=32,
  scale_kwidth=8)`` (needs N % 32 == 0 and K % 256 == 0); ``None``: the plain layout.

Where this differs from the CK/asm layouts ``fp4moe.reference.layout`` models (what SGLang's
``aiter.fused_moe`` path takes):

- no 16x16 weight byte shuffle (``layout.shuffle_weight``);
- gate/up interleaved per *row* (CK GU-interleave: 16-row blocks G0 U0 G1 U1 ...; CK without
  interleave: the gate half, then the up half);
- scales K-major per expert ``(E, K/32, N)``, not the 2-D ``[E*N(+pad), K/32]`` 32x8 tiles of
  ``layout.shuffle_scale``; no row padding to 256 and no column padding to 8;
- the nibble packing is the same (low nibble first, along K).

Because the interleaved W1's pad channels sit at its end, the pad told to GEMM1 is
``unpadded_N = 2 * I`` and to GEMM2 ``unpadded_K = I``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

#: the scale layouts checked: aiter's plain layout and gfx950's swizzled one
SCALE_LAYOUTS = (None, "CDNA4_SCALE")
CDNA4_PRESHUFFLE_FACTOR = 32
CDNA4_SCALE_KWIDTH = 8
#: a pad scale byte that is NaN as e8m0: any read of it shows
NAN_SCALE = 0xFF


def layout_name(swizzle: str | None) -> str:
    return "cdna4" if swizzle == "CDNA4_SCALE" else "plain"


def interleave_rows(t: torch.Tensor, p: int) -> torch.Tensor:
    """``[E, 2P, C]`` gate-then-up -> ``[E, 2P, C]`` with row 2j = gate j, row 2j+1 = up j."""
    e, rows, c = t.shape
    if rows != 2 * p:
        raise ValueError(f"w13: {rows} rows, expected 2 * padded intermediate = {2 * p}")
    return torch.stack((t[:, :p], t[:, p:]), dim=2).reshape(e, 2 * p, c)


@dataclass(frozen=True)
class TritonWeights:
    w1: torch.Tensor
    s1: torch.Tensor
    w2: torch.Tensor
    s2: torch.Tensor
    swizzle: str | None


def to_triton_layout(w13, s13, w2, s2, p: int, swizzle: str | None, shuffle_mod=None) -> TritonWeights:
    """Unshuffled padded tensors -> the Triton kernels' (W1, S1, W2, S2). New tensors; the
    inputs are never written. ``shuffle_mod``: the tree's ``utils/shuffle`` (CDNA4_SCALE only)."""
    if swizzle not in SCALE_LAYOUTS:
        raise ValueError(f"swizzle must be one of {SCALE_LAYOUTS}, got {swizzle!r}")
    W1 = interleave_rows(w13, p).contiguous().transpose(1, 2)
    S1 = interleave_rows(s13, p).contiguous().transpose(1, 2)
    W2 = w2.contiguous().clone().transpose(1, 2)
    S2 = s2.contiguous().clone().transpose(1, 2)
    if swizzle == "CDNA4_SCALE":
        if shuffle_mod is None:
            from fp4moe.targets.aiter.results import TreeLacks

            raise TreeLacks("CDNA4_SCALE needs the tree's utils/shuffle module (shuffle_scale_moe): this tree has none")
        sh = shuffle_mod.shuffle_scale_moe
        kw = dict(arch="gfx950", preshuffle_factor=CDNA4_PRESHUFFLE_FACTOR, scale_kwidth=CDNA4_SCALE_KWIDTH)
        S1, S2 = sh(S1, **kw), sh(S2, **kw)
    return TritonWeights(W1, S1, W2, S2, swizzle)


def poison_pads(pw, seed: int = 1):
    """(w13, s13, w2, s2) of an unshuffled layer with random bytes in every pad weight
    channel and 0xFF (NaN) in every pad scale byte; the caller's tensors are untouched."""
    g = torch.Generator().manual_seed(seed)
    i, p = pw.intermediate, pw.padded_intermediate
    if i == p:
        raise ValueError(f"poison_pads: the layer has no pad (intermediate {i} == padded {p})")
    w13, s13, w2, s2 = (t.clone() for t in (pw.w13, pw.w13_scale, pw.w2, pw.w2_scale))
    for sl in (slice(i, p), slice(p + i, 2 * p)):
        w13[:, sl] = torch.randint(0, 256, w13[:, sl].shape, generator=g, dtype=torch.uint8)
        s13[:, sl] = NAN_SCALE
    w2[:, :, i // 2:] = torch.randint(0, 256, w2[:, :, i // 2:].shape, generator=g, dtype=torch.uint8)
    s2[:, :, i // 32:] = NAN_SCALE
    return w13, s13, w2, s2
