"""Which machine the SGLang child runs on, and what aiter runs there (pure helpers).

Index: :class:`Mode` (the modes, ``--mode``), :func:`detect_mode`, :func:`effective_act_mode`
(aiter's activation rule), :func:`recording` (aiter's ``fused_moe`` wrapped transparently).

The child (``fp4moe.targets.sglang.child.drive``) drives SGLang in one of two modes:

- ``cpu``: aiter is a stub, SGLang's branch selectors are patched, ``fused_moe`` is a spy that
  runs this project's reference MoE (``fp4moe.targets.sglang.child.patches`` lists every patch point);
- ``gfx950``: a ROCm torch on a gfx950 GPU with an importable aiter. Nothing of SGLang or aiter
  is patched: SGLang computes its selectors itself, aiter's real shuffles and the real
  ``aiter.fused_moe`` run on the GPU, wrapped transparently (:func:`recording`) only so the
  gate sees the keywords they got.

No SGLang, no stubs here: the parent's unit tests import this module.
"""

from __future__ import annotations

import functools
import os

try:
    from enum import StrEnum
except ImportError:  # Python 3.10: str() of a member is its value, as enum.StrEnum's
    from enum import Enum

    class StrEnum(str, Enum):
        __str__ = str.__str__


class Mode(StrEnum):
    """Where the SGLang child runs (``--mode``); the record's ``mode`` is the value."""

    #: gfx950 where a ROCm torch, a gfx950 GPU and an importable aiter are present, else cpu
    AUTO = "auto"
    #: aiter stubbed, SGLang's selectors patched, ``fused_moe`` a spy running the reference MoE
    CPU = "cpu"
    #: nothing patched: SGLang's own selectors, aiter's real shuffles and ``fused_moe`` on the GPU
    GFX950 = "gfx950"


#: the values ``--mode`` accepts
MODES = tuple(m.value for m in Mode)
#: never stubbed in gfx950 mode: the code under test and what it runs on
REAL_IN_GFX950 = ("aiter", "triton", "torch")
#: fp8.py globals that SGLang itself must have set True on a gfx950 runner for the DeepSeek-V4
#: FP4 aiter branch (read, never set, in gfx950 mode; absent ones are recorded: older releases
#: lack ``_is_gfx95_supported``)
GFX950_SELECTORS = ("_is_hip", "_use_aiter", "_is_shuffle_moe_mxfp4", "_is_gfx95_supported")
#: aiter.fused_moe's default AITER_BF16_FP8_MOE_BOUND (aiter/fused_moe.py, read at call time)
AITER_DEFAULT_BOUND = 256
BOUND_ENV = "AITER_BF16_FP8_MOE_BOUND"


def detect_mode(requested: str) -> tuple[Mode, str]:
    """(mode, why). ``gfx950`` needs a ROCm torch, a gfx950 GPU and an importable aiter;
    ``requested="gfx950"`` where one is missing raises RuntimeError naming it (exit 2)."""
    if requested not in MODES:
        raise ValueError(f"mode {requested!r} is not one of {MODES}")
    if requested == Mode.CPU:
        return Mode.CPU, "requested"
    import torch

    from fp4moe.infra.capabilities import gfx_arch_of, probe_aiter

    why = None
    if not getattr(torch.version, "hip", None):
        why = f"torch {torch.__version__} is not a ROCm build"
    elif not torch.cuda.is_available():
        why = "ROCm torch sees no GPU"
    else:
        arch = gfx_arch_of(getattr(torch.cuda.get_device_properties(0), "gcnArchName", None))
        if arch != Mode.GFX950:
            why = f"GPU 0 is {arch}, not gfx950"
        else:
            ok, reason = probe_aiter()
            why = None if ok else reason
    if why is None:
        return Mode.GFX950, f"ROCm {torch.version.hip}, {torch.cuda.get_device_name(0)}, aiter importable"
    if requested == Mode.GFX950:
        raise RuntimeError(f"gfx950 mode requested but {why}")
    return Mode.CPU, why


def effective_act_mode(kwargs: dict, tokens: int) -> str:
    """The activation mode aiter's ``fused_moe`` runs for these keywords (aiter/fused_moe.py,
    ``per_1x32`` with fp4 weights): ``quant_dtype_a`` given -> fp8 activations (a8w4); else
    with interleaved gate/up, ``tokens >= AITER_BF16_FP8_MOE_BOUND`` -> a8w4 and below -> bf16
    activations (a16w4). The CPU spy follows the same rule, so both modes judge like with like.
    Separated gate/up with Silu: aiter runs MXFP4 activations (a4w4) at every token count (the
    executed dispatch shows it: tests/targets/aiter/dispatch/test_pinned_facts.py); this answers
    a16w4 there, as fp4moe.reference has no a4w4 mode (DeepSeek-V4 on gfx950 passes interleave)."""
    if kwargs.get("quant_dtype_a") is not None:
        return "a8w4"
    gm = kwargs.get("gate_mode", "separated")
    if str(getattr(gm, "value", gm)) == "interleave":
        bound = int(os.environ.get(BOUND_ENV, str(AITER_DEFAULT_BOUND)))
        return "a8w4" if tokens >= bound else "a16w4"
    return "a16w4"


def recording(real, on_call, compute):
    """``real`` (aiter's ``fused_moe``) with ``on_call(hidden_states, w1, w2, topk_weight,
    topk_ids, args, kwargs)`` run first. Transparent: the same arguments go through and the
    same result comes back; ``functools.wraps`` keeps the signature SGLang inspects
    (``inspect.signature(fused_moe)`` for ``output`` / ``no_combine``). Only while ``compute()``
    is False (the field probe, whose sentinel values must never reach a kernel) it returns
    zeros without calling ``real``."""

    @functools.wraps(real)
    def fused_moe(hidden_states, w1, w2, topk_weight, topk_ids, *args, **kwargs):
        on_call(hidden_states, w1, w2, topk_weight, topk_ids, args, kwargs)
        if not compute():
            import torch

            return torch.zeros_like(hidden_states)
        return real(hidden_states, w1, w2, topk_weight, topk_ids, *args, **kwargs)

    return fused_moe
