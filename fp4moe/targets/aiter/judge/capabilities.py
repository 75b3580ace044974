"""(c) Capability probes: facts about this aiter that the backend's choices depend on.

- :func:`probe_pr4130` -- aiter PR #4130: the interleaved ``shuffle_scale`` accepts K/32 = 12
  (intermediate 384 = DeepSeek-V4-Pro w2 at TP8), padding the columns to 16: ``present`` iff it
  returns [E*N, 16];
- :func:`probe_bound_env` -- whether ``fused_moe`` reads ``AITER_BF16_FP8_MOE_BOUND`` (what
  selects fp8 activations at decode).
"""

from __future__ import annotations

import torch

from fp4moe.infra.errors import GateCannotRun
from fp4moe.reference import layout
from fp4moe.targets.aiter.backend import BOUND_ENV
from fp4moe.targets.aiter.judge.layout import LAYOUT_EXPERTS, function_params_of
from fp4moe.targets.aiter.results import CheckResult, Result
from fp4moe.targets.aiter.source import FUSED_MOE_FILE, SHUFFLE_FILE, AiterSource, aiter_stubs, load_shuffle_module, note_stage

#: K/32 for intermediate 384
PR4130_PROBE_COLS = 12
PR4130_SEED = 4130
PR4130_NAME = "capability: PR #4130 (interleaved scale K/32=12, inter 384)"


def _pr4130_call(mod, x: torch.Tensor, experts: int):
    ss = getattr(mod, "shuffle_scale", None)
    if ss is not None and "is_guinterleave" in function_params_of(ss):
        return (lambda: ss(x, experts_cnt=experts, is_guinterleave=True, gate_up=False)), "shuffle_scale(is_guinterleave=True)"
    a16 = getattr(mod, "shuffle_scale_a16w4", None)
    if a16 is not None:
        return (lambda: a16(x, experts, False)), "shuffle_scale_a16w4"
    return None, None


def probe_pr4130(src: AiterSource, experts: int = LAYOUT_EXPERTS, rows_per_expert: int = 64) -> CheckResult:
    """Interleaved shuffle_scale on [E*N, 12]: present iff it returns [E*N, 16]."""
    name = PR4130_NAME
    note_stage(f"executing {SHUFFLE_FILE} (PR #4130 probe)")
    try:
        mod = load_shuffle_module(src)
    except (ValueError, GateCannotRun, SyntaxError):
        raise
    except Exception as e:
        return CheckResult(name, Result.ABSENT, f"{SHUFFLE_FILE} does not load from source: {type(e).__name__}: {e}")
    if mod is None:
        return CheckResult(name, Result.ABSENT, f"no {SHUFFLE_FILE}")
    x = torch.randint(0, 256, (experts * rows_per_expert, PR4130_PROBE_COLS), dtype=torch.uint8,
                      generator=torch.Generator().manual_seed(PR4130_SEED))
    call, how = _pr4130_call(mod, x, experts)
    if call is None:
        return CheckResult(name, Result.ABSENT, f"no interleaved scale shuffle in {SHUFFLE_FILE}")
    try:
        with aiter_stubs():
            out = call()
    except Exception as e:
        return CheckResult(name, Result.ABSENT, f"{how} raises {type(e).__name__}: {str(e).splitlines()[0][:120]}")
    want = layout.shuffled_scale_shape(x.shape[0], PR4130_PROBE_COLS, True)
    if tuple(out.shape) != want:
        return CheckResult(name, Result.ABSENT, f"{how} returned shape {tuple(out.shape)}, not {want}")
    return CheckResult(name, Result.PRESENT, f"{how} pads K/32 12 -> {want[1]}")


def probe_bound_env(src: AiterSource) -> CheckResult:
    name = f"capability: fused_moe reads {BOUND_ENV}"
    text = src.read(FUSED_MOE_FILE)
    if text is None:
        return CheckResult(name, Result.ABSENT, f"no {FUSED_MOE_FILE}")
    if BOUND_ENV in text:
        return CheckResult(name, Result.PRESENT, "=0 gives fp8 activations at decode on gfx950 (default 256: bf16 below 256 tokens)")
    return CheckResult(name, Result.ABSENT, "act_mode a8w4/a16w4 cannot be selected by environment on this aiter")
