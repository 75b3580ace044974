"""The bug zoo: each known failure of the FP4 MoE weight path, re-created as a mutant of the
reference path. A mutant is a set of monkeypatches applied before the suite runs; the suite
must fail ("kill" it). ``fp4moe.zoo`` runs the suite once per mutant.

Patches replace module attributes that the code looks up at call time
(``quant_info.build_quant_info``, ``weight_path.pad_gate_up``, ``moe.stage2`` ...), so a
mutant changes behaviour everywhere, tests included. A user's own mutants live in a Python
file defining ``MUTANTS = [Mutant(...), ...]`` (``fp4moe-gate zoo --mutant-file``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch


@dataclass(frozen=True)
class Mutant:
    name: str
    origin: str
    description: str
    apply: Callable  # (pytest.MonkeyPatch) -> None


def _pad_not_propagated(mp):
    from fp4moe import quant_info

    orig = quant_info.build_quant_info

    def build(processed, **kw):
        info = orig(processed, **kw)
        info.intermediate_pad = 0  # the pad never reaches fused_moe
        return info

    mp.setattr(quant_info, "build_quant_info", build)


def _align_256(mp):
    from fp4moe import weight_path

    orig = weight_path.process_fp4_moe_weights

    def process(*args, align=weight_path.DEFAULT_ALIGN, **kw):
        return orig(*args, align=max(align, 256), **kw)

    mp.setattr(weight_path, "process_fp4_moe_weights", process)


def _scale_pad_nan(mp):
    from fp4moe import weight_path

    mp.setattr(weight_path, "SCALE_PAD_BYTE", 0xFF)


def _scale_pad_garbage(mp):
    """Uninitialised memory: the scale padding holds whatever bytes were there (never 0xFF
    here, so only a check of the pad bytes themselves can see it)."""
    from fp4moe import weight_path

    orig = weight_path.pad_scales
    g = torch.Generator().manual_seed(1234)

    def pad_scales(s13, s2, intermediate, padded):
        out13, out2 = orig(s13, s2, intermediate, padded)
        for region in (out13[:, intermediate:padded], out13[:, padded + intermediate :], out2[..., intermediate // 32 :]):
            region.copy_(torch.randint(1, 255, region.shape, generator=g, dtype=torch.uint8).to(region.device))
        return out13, out2

    mp.setattr(weight_path, "pad_scales", pad_scales)


def _gate_up_one_block(mp):
    from fp4moe import weight_path

    def pad_gate_up(t, intermediate, padded, fill):
        e, _, c = t.shape
        out = torch.full((e, 2 * padded, c), fill, dtype=torch.uint8, device=t.device)
        out[:, : 2 * intermediate] = t  # gate and up padded as one block: up lands in the gate half
        return out

    mp.setattr(weight_path, "pad_gate_up", pad_gate_up)


def _raw_weights_padded_scales(mp):
    from fp4moe import weight_path

    mp.setattr(weight_path, "pad_weights", lambda w13, w2, intermediate, padded: (w13.clone(), w2.clone()))


def _scale_shuffle_without_4130(mp):
    from fp4moe import layout

    orig = layout.shuffle_scale

    def shuffle_scale(src, experts_cnt=None, is_guinterleave=False, gate_up=False, **kw):
        if is_guinterleave and src.shape[-1] % 8:
            # aiter before PR #4130: view(E, N1, 2, 16, K/8, 2, 4) fails for K/32 = 12
            raise RuntimeError(f"shape '[..., {src.shape[-1] // 8}, 2, 4]' is invalid for input of size {src.numel()}")
        return orig(src, experts_cnt, is_guinterleave, gate_up, **kw)

    mp.setattr(layout, "shuffle_scale", shuffle_scale)


def _gu_layout_mismatch(mp):
    from fp4moe import weight_path

    orig = weight_path.process_fp4_moe_weights

    def process(*args, gu_interleave=True, **kw):
        pw = orig(*args, gu_interleave=not gu_interleave, **kw)
        pw.gu_interleave = gu_interleave  # the runtime gate mode disagrees with the bytes
        return pw

    mp.setattr(weight_path, "process_fp4_moe_weights", process)


def _k_tail_drop(mp, tile_k: int = 256):
    from fp4moe import moe

    orig = moe.stage2

    def stage2(a, ew, e, h_used, k_used, dtype, check_scales):
        k_tiles = k_used // tile_k  # FlyDSL: for k in range(inter_dim // tile_k)
        if k_tiles * tile_k == k_used:
            return orig(a, ew, e, h_used, k_used, dtype, check_scales)
        if k_tiles == 0:
            return torch.zeros((a.shape[0], h_used), dtype=dtype, device=a.device)
        return orig(a, ew, e, h_used, k_tiles * tile_k, dtype, check_scales)

    mp.setattr(moe, "stage2", stage2)


MUTANTS = [
    Mutant("pad_not_propagated", "SGLang PR #27858", "weights padded 384 -> 512 but intermediate_pad=0 reaches fused_moe", _pad_not_propagated),
    Mutant("align_256", "SGLang PR #31450", "fp4_k_align 256 where 128 is supported: TP8 pads 384 -> 512 (+33% expert bytes)", _align_256),
    Mutant("scale_pad_0xff", "NaN from padding", "scale padding filled with 0xFF (e8m0 NaN)", _scale_pad_nan),
    Mutant("scale_pad_garbage", "uninitialised padding", "scale padding left uninitialised (random non-NaN bytes)", _scale_pad_garbage),
    Mutant("gate_up_one_block", "padding layout", "gate and up padded as one block instead of each half", _gate_up_one_block),
    Mutant("raw_weights_padded_scales", "SGLang PR #33090", "weights at raw dims, scales at padded dims", _raw_weights_padded_scales),
    Mutant("scale_shuffle_without_pr4130", "aiter PR #4130", "interleaved scale shuffle rejects K/32 not a multiple of 8 (inter 384)", _scale_shuffle_without_4130),
    Mutant("gu_layout_mismatch", "GU-interleave", "weights shuffled with the other GU-interleave flag than the runtime gate mode", _gu_layout_mismatch),
    Mutant("k_tail_drop", "aiter issue #5233", "kernel loops inter_dim // tile_k (256) and drops the K tail", _k_tail_drop),
]


def by_name() -> dict[str, Mutant]:
    return {m.name: m for m in MUTANTS}
