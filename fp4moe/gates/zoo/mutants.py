"""The bug zoo: each known failure of the FP4 MoE weight path, re-created as a mutant of the
reference path. A mutant is a set of monkeypatches applied before the suite runs; the suite
must fail ("kill" it). ``fp4moe.gates.zoo.runner`` runs the suite once per mutant.

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
    #: a folder under ../shared that the only tests able to kill this mutant read; without it
    #: the zoo reports the mutant NOT JUDGED instead of running it (it would survive unjudged)
    needs_shared: str | None = None
    #: the test files (or node ids) that killed it when it was catalogued: with ``-x`` (first
    #: failure per mutant) the zoo runs them alone first and, only if they do not kill it, the
    #: whole selection (``fp4moe.gates.zoo.runner``): a shortcut to the same verdict, never a
    #: narrower suite (a survivor is always judged on the whole selection)
    first_tests: tuple[str, ...] = ()


def _pad_not_propagated(mp):
    from fp4moe.reference import quant_info

    orig = quant_info.build_quant_info

    def build(processed, **kw):
        info = orig(processed, **kw)
        info.intermediate_pad = 0  # the pad never reaches fused_moe
        return info

    mp.setattr(quant_info, "build_quant_info", build)


def _align_256(mp):
    from fp4moe.reference import weight_path

    orig = weight_path.process_fp4_moe_weights

    def process(*args, align=weight_path.DEFAULT_ALIGN, **kw):
        return orig(*args, align=max(align, 256), **kw)

    mp.setattr(weight_path, "process_fp4_moe_weights", process)


def _scale_pad_nan(mp):
    from fp4moe.reference import weight_path

    mp.setattr(weight_path, "SCALE_PAD_BYTE", 0xFF)


def _scale_pad_garbage(mp):
    """Uninitialised memory: the scale padding holds whatever bytes were there (never 0xFF
    here, so only a check of the pad bytes themselves can see it)."""
    from fp4moe.reference import weight_path

    orig = weight_path.pad_scales
    g = torch.Generator().manual_seed(1234)

    def pad_scales(s13, s2, intermediate, padded):
        out13, out2 = orig(s13, s2, intermediate, padded)
        for region in (out13[:, intermediate:padded], out13[:, padded + intermediate :], out2[..., intermediate // 32 :]):
            region.copy_(torch.randint(1, 255, region.shape, generator=g, dtype=torch.uint8).to(region.device))
        return out13, out2

    mp.setattr(weight_path, "pad_scales", pad_scales)


def _gate_up_one_block(mp):
    from fp4moe.reference import weight_path

    def pad_gate_up(t, intermediate, padded, fill):
        e, _, c = t.shape
        out = torch.full((e, 2 * padded, c), fill, dtype=torch.uint8, device=t.device)
        out[:, : 2 * intermediate] = t  # gate and up padded as one block: up lands in the gate half
        return out

    mp.setattr(weight_path, "pad_gate_up", pad_gate_up)


def _raw_weights_padded_scales(mp):
    from fp4moe.reference import weight_path

    mp.setattr(weight_path, "pad_weights", lambda w13, w2, intermediate, padded: (w13.clone(), w2.clone()))


def _scale_shuffle_without_4130(mp):
    from fp4moe.reference import layout

    orig = layout.shuffle_scale

    def shuffle_scale(src, experts_cnt=None, is_guinterleave=False, gate_up=False, **kw):
        if is_guinterleave and src.shape[-1] % 8:
            # aiter before PR #4130: view(E, N1, 2, 16, K/8, 2, 4) fails for K/32 = 12
            raise RuntimeError(f"shape '[..., {src.shape[-1] // 8}, 2, 4]' is invalid for input of size {src.numel()}")
        return orig(src, experts_cnt, is_guinterleave, gate_up, **kw)

    mp.setattr(layout, "shuffle_scale", shuffle_scale)


def _gu_layout_mismatch(mp):
    from fp4moe.reference import weight_path

    orig = weight_path.process_fp4_moe_weights

    def process(*args, gu_interleave=True, **kw):
        pw = orig(*args, gu_interleave=not gu_interleave, **kw)
        pw.gu_interleave = gu_interleave  # the runtime gate mode disagrees with the bytes
        return pw

    mp.setattr(weight_path, "process_fp4_moe_weights", process)


def _k_tail_drop(mp, tile_k: int = 256):
    from fp4moe.reference import moe

    orig = moe.stage2

    def stage2(a, ew, e, h_used, k_used, dtype, check_scales):
        k_tiles = k_used // tile_k  # FlyDSL: for k in range(inter_dim // tile_k)
        if k_tiles * tile_k == k_used:
            return orig(a, ew, e, h_used, k_used, dtype, check_scales)
        if k_tiles == 0:
            return torch.zeros((a.shape[0], h_used), dtype=dtype, device=a.device)
        return orig(a, ew, e, h_used, k_tiles * tile_k, dtype, check_scales)

    mp.setattr(moe, "stage2", stage2)


# ---------------------------------------------------------------- reference semantics (aiter's)
def _doweight_after_activation(mp):
    """fp4moe before the reference review: w * silu(gate) * up instead of silu(w gate) * (w up)."""
    from fp4moe.reference import moe

    orig = moe.stage1

    def stage1(x, ew, e, n_used, k_used, swiglu_limit, dtype, check_scales, weight=None):
        a = orig(x, ew, e, n_used, k_used, swiglu_limit, dtype, check_scales, None)
        return a if weight is None else a * weight

    mp.setattr(moe, "stage1", stage1)


def _swiglu_limit_zero_clamps(mp):
    """``if swiglu_limit is not None`` instead of aiter's ``if swiglu_limit:``: 0.0 clamps to 0."""
    from fp4moe.reference import moe

    def clamp_swiglu(gate, up, swiglu_limit):
        if swiglu_limit is None:
            return gate, up
        return gate.clamp(max=swiglu_limit), up.clamp(-swiglu_limit, swiglu_limit)

    mp.setattr(moe, "clamp_swiglu", clamp_swiglu)


def _stage1_output_float32(mp):
    """The stage-1 output kept in float32 (no bf16 inter-stage buffer) before stage 2 / the MXFP8 quant."""
    from fp4moe.reference import moe

    orig = moe.stage2_input
    mp.setattr(moe, "stage2_input", lambda a, stage1_dtype, act_mode: orig(a, None, act_mode))


# ---------------------------------------------------------------- a8w4 and the call site
def _a8w4_swiglu_skipped(mp):
    from fp4moe.reference import moe

    orig = moe.fused_moe_unshuffled

    def fused(*args, act_mode="a16w4", swiglu_limit=None, **kw):
        return orig(*args, act_mode=act_mode, swiglu_limit=None if act_mode == "a8w4" else swiglu_limit, **kw)

    mp.setattr(moe, "fused_moe_unshuffled", fused)


def _a8w4_per_tensor_act_scale(mp):
    """One MXFP8 scale for the whole activation tensor (its amax) instead of one per 32-block."""
    from fp4moe.mx import e8m0, mxfp8
    from fp4moe.reference import moe

    orig = moe._act_quant

    def act_quant(x, act_mode):
        if act_mode != "a8w4":
            return orig(x, act_mode)
        xf = x.to(torch.float32)
        amax = xf.abs().amax().reshape(1)
        exp = mxfp8.shared_exponent(amax, "round_up", mxfp8.E4M3_EMAX, mxfp8.E4M3_MAX).clamp(e8m0.E8M0_MIN_EXP, e8m0.E8M0_MAX_EXP)
        q = torch.ldexp(xf, -exp).clamp(-mxfp8.E4M3_MAX, mxfp8.E4M3_MAX).to(torch.float8_e4m3fn)
        return torch.ldexp(q.to(torch.float32), exp)

    mp.setattr(moe, "_act_quant", act_quant)


def _a8w4_doweight_after_requant(mp):
    """doweight_stage1 applied to the MXFP8 stage-2 input instead of to gate/up in stage 1."""
    from fp4moe.reference import moe

    orig1, orig_in = moe.stage1, moe.stage2_input
    pending = []

    def stage1(x, ew, e, n_used, k_used, swiglu_limit, dtype, check_scales, weight=None):
        pending.append(weight)
        return orig1(x, ew, e, n_used, k_used, swiglu_limit, dtype, check_scales, None)

    def stage2_input(a, stage1_dtype, act_mode):
        q = orig_in(a, stage1_dtype, act_mode)
        w = pending.pop() if pending else None
        return q if w is None else q * w.to(q.dtype)

    mp.setattr(moe, "stage1", stage1)
    mp.setattr(moe, "stage2_input", stage2_input)


def _call_site_drops_expert_mask(mp):
    from fp4moe.reference import quant_info

    orig = quant_info.fused_moe_kwargs

    def kwargs(info, act_mode="a16w4"):
        kw = orig(info, act_mode)
        kw["expert_mask"] = None  # EP: tokens routed to remote experts are computed with local ids
        return kw

    mp.setattr(quant_info, "fused_moe_kwargs", kwargs)


# ---------------------------------------------------------------- layout only the golden data can see
def _weight_tile_order(mp):
    """The plain gfx950 weight layout with its K-tile and half-tile axes swapped, in shuffle and
    unshuffle alike: still an exact inverse pair, so only aiter's recorded layouts see it."""
    from fp4moe.reference import layout

    orig = layout._weight_view

    def weight_view(x, lay, is_guinterleave, gate_up, name):
        shape, perm = orig(x, lay, is_guinterleave, gate_up, name)
        if not is_guinterleave:
            perm = (0, 1, 4, 3, 2, 5)
        return shape, perm

    mp.setattr(layout, "_weight_view", weight_view)


#: where most first_tests lie
REF_TESTS = "tests/reference/"
MUTANTS = [
    Mutant("pad_not_propagated", "SGLang PR #27858", "weights padded 384 -> 512 but intermediate_pad=0 reaches fused_moe", _pad_not_propagated,
           first_tests=(REF_TESTS + "test_nan_guard.py",)),
    Mutant("align_256", "SGLang PR #31450", "fp4_k_align 256 where 128 is supported: TP8 pads 384 -> 512 (+33% expert bytes)", _align_256,
           first_tests=(REF_TESTS + "test_footprint_budget.py",)),
    Mutant("scale_pad_0xff", "NaN from padding", "scale padding filled with 0xFF (e8m0 NaN)", _scale_pad_nan,
           first_tests=(REF_TESTS + "test_equivalence.py",)),
    Mutant("scale_pad_garbage", "uninitialised padding", "scale padding left uninitialised (random non-NaN bytes)", _scale_pad_garbage,
           first_tests=(REF_TESTS + "test_reference_edges.py",)),
    Mutant("gate_up_one_block", "padding layout", "gate and up padded as one block instead of each half", _gate_up_one_block,
           first_tests=(REF_TESTS + "test_equivalence.py",)),
    Mutant("raw_weights_padded_scales", "SGLang PR #33090", "weights at raw dims, scales at padded dims", _raw_weights_padded_scales,
           first_tests=(REF_TESTS + "test_equivalence.py",)),
    Mutant("scale_shuffle_without_pr4130", "aiter PR #4130", "interleaved scale shuffle rejects K/32 not a multiple of 8 (inter 384)", _scale_shuffle_without_4130,
           first_tests=("tests/model/test_data_faults.py",)),
    Mutant("gu_layout_mismatch", "GU-interleave", "weights shuffled with the other GU-interleave flag than the runtime gate mode", _gu_layout_mismatch,
           first_tests=(REF_TESTS + "test_equivalence.py",)),
    Mutant("k_tail_drop", "aiter issue #5233", "kernel loops inter_dim // tile_k (256) and drops the K tail", _k_tail_drop,
           first_tests=(REF_TESTS + "test_equivalence.py",)),
    Mutant("doweight_after_activation", "reference review: doweight_stage1", "doweight_stage1: w * silu(gate) * up instead of aiter's silu(w gate) * (w up)", _doweight_after_activation,
           first_tests=(REF_TESTS + "test_grouped_moe.py",)),
    Mutant("swiglu_limit_zero_clamps", "reference review: swiglu_limit 0.0", "swiglu_limit=0.0 clamps gate/up to 0 (aiter: `if swiglu_limit:`, 0.0 = no clamp)", _swiglu_limit_zero_clamps,
           first_tests=(REF_TESTS + "test_moe_reference.py",)),
    Mutant("stage1_output_float32", "reference review: bf16 inter-stage buffer", "stage-1 output kept in float32, not rounded to the bf16 inter-stage buffer", _stage1_output_float32,
           first_tests=(REF_TESTS + "test_grouped_moe.py",)),
    Mutant("a8w4_swiglu_skipped", "a8w4 guard", "a8w4 ignores swiglu_limit", _a8w4_swiglu_skipped,
           first_tests=(REF_TESTS + "test_grouped_moe.py",)),
    Mutant("a8w4_per_tensor_act_scale", "a8w4 guard", "MXFP8 activations with one scale per tensor instead of one per 32-block", _a8w4_per_tensor_act_scale,
           first_tests=(REF_TESTS + "test_grouped_moe.py",)),
    Mutant("a8w4_doweight_after_requant", "a8w4 guard", "doweight_stage1 applied after the MXFP8 re-quantization of the stage-1 output", _a8w4_doweight_after_requant,
           first_tests=(REF_TESTS + "test_grouped_moe.py",)),
    Mutant("call_site_drops_expert_mask", "call-site guard", "the call site does not pass expert_mask (EP global expert ids)", _call_site_drops_expert_mask,
           first_tests=(REF_TESTS + "test_moe_reference.py",)),
    Mutant("weight_tile_order", "layout (golden data)", "plain weight layout with two tile axes swapped, shuffle and unshuffle alike",
           _weight_tile_order, needs_shared="golden/aiter-layouts", first_tests=(REF_TESTS + "test_golden_layouts.py",)),
]


def by_name() -> dict[str, Mutant]:
    return {m.name: m for m in MUTANTS}
