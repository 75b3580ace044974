"""The aiter backend: ``aiter.fused_moe`` on gfx950 behind ``fp4moe.reference.backend.MoEBackend``.

What it does with the interface keywords (facts from ROCm/aiter ``aiter/fused_moe.py`` and
SGLang's aiter MoE runner, read through the search tools):

- ``quant_type="per_1x32"`` -> ``aiter.QuantType.per_1x32`` (MXFP4 weights, e8m0 scale per 32).
- ``activation="silu"`` -> ``aiter.ActivationType.Silu``.
- ``gate_mode`` -> aiter's ``gate_mode`` keyword, the string values of
  ``aiter.ops.flydsl.moe_common.GateMode`` (``"interleave"`` for the GU-interleaved layout,
  SGLANG_USE_AITER_MOE_GU_ITLV=1; ``"separated"`` for the plain one). aiter's default is
  ``"separated"``; an aiter whose ``fused_moe`` has no ``gate_mode`` keyword (e.g. PyPI
  amd-aiter 0.1.7.post2.dev18) cannot be told the weights are interleaved, so the backend
  refuses to run interleaved weights on it instead of computing garbage.
- ``hidden_pad`` / ``intermediate_pad`` are passed through unchanged: they are the contract
  with the kernel (SGLang PR #27858 lost ``intermediate_pad`` on the way).
- ``swiglu_limit`` is passed only when set (aiter's default 0.0 means "no clamp").
- Weights are viewed as ``aiter.dtypes.fp4x2`` (torch.float4_e2m1fn_x2) and tagged
  ``is_shuffled = True`` (aiter reads that attribute to pick the preshuffled kernels); scales
  are viewed as ``aiter.dtypes.fp8_e8m0`` (torch.float8_e8m0fnu). Views only: the caller's
  tensors are never written.

What selects the DeepSeek-V4 kernels (``act_mode``): for ``per_1x32`` with
``gate_mode="interleave"``, aiter picks the activation dtype per call from the token count
``M`` and ``AITER_BF16_FP8_MOE_BOUND`` (read at call time, default 256): on gfx950
``M >= bound`` runs fp8 activations (a8w4), ``M < bound`` runs bf16 activations (a16w4).
So ``AITER_BF16_FP8_MOE_BOUND=0`` gives fp8 activations at every M, decode included (what
SGLang's DeepSeek-V4 launch sets); with the default, tokens below 256 run bf16. This backend
sets the variable for the duration of one call:

- ``act_mode="a8w4"``: ``"0"`` (fp8 activations for every M);
- ``act_mode="a16w4"``: ``"2147483647"`` (bf16 activations for every M);
- ``act_mode="auto"``: the variable as the environment has it (aiter's own rule);
- ``gate_mode="separated"``: aiter quantizes Silu activations to fp4 (a4w4) whatever the bound,
  so only ``act_mode="a4w4"`` / ``"auto"`` are accepted there.

aiter is imported lazily, inside the methods; any exception from the import (on a machine
without ROCm it is ``RuntimeError``, not ImportError) becomes ``GateCannotRun`` with the
original message.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os

import torch

from fp4moe.infra.errors import GateCannotRun
from fp4moe.reference.backend import KEYWORDS, POSITIONAL, PROJECT_KEYWORDS, FusedMoEKeywords

BOUND_ENV = "AITER_BF16_FP8_MOE_BOUND"
AITER_DEFAULT_BOUND = 256  # aiter's default when BOUND_ENV is unset
_BF16_EVERYWHERE = str(2**31 - 1)

#: act_mode -> the value of AITER_BF16_FP8_MOE_BOUND it needs (None: leave the environment as is)
ACT_MODE_BOUND = {"a8w4": "0", "a16w4": _BF16_EVERYWHERE, "auto": None, "a4w4": None}
GATE_MODES = ("interleave", "separated")
ACTIVATIONS = {"silu": "Silu"}
QUANT_TYPES = {"per_1x32": "per_1x32"}

ALWAYS = "always"
#: the fused_moe keywords passed only under a condition (every other one is passed always)
FUSED_MOE_CONDITIONAL = {
    "gate_mode": "needed for GU-interleaved weights (SGLANG_USE_AITER_MOE_GU_ITLV=1, the DeepSeek-V4 default)",
    "swiglu_limit": "needed when the layer sets swiglu_limit",
}
#: Every keyword this project passes to aiter, per aiter function, with when it is passed.
#: The API conformance check (``fp4moe.targets.aiter.judge.api``) reads this constant: a keyword listed ``always``
#: that an aiter lacks is a failure; a conditional one is a warning naming its condition.
AITER_CALL_KEYWORDS: dict[str, dict[str, str]] = {
    "fused_moe": {k: FUSED_MOE_CONDITIONAL.get(k, ALWAYS) for k in (*POSITIONAL, *KEYWORDS) if k not in PROJECT_KEYWORDS},
    "shuffle_weight": {
        "x": "needed by AiterBackend.prepare_weights(use_aiter_shuffle=True)",
        "layout": "needed by AiterBackend.prepare_weights(use_aiter_shuffle=True)",
        "is_guinterleave": "needed by AiterBackend.prepare_weights(use_aiter_shuffle=True) for GU-interleaved weights",
        "gate_up": "needed by AiterBackend.prepare_weights(use_aiter_shuffle=True) for GU-interleaved weights",
    },
    "shuffle_scale": {
        "src": "needed by AiterBackend.prepare_weights(use_aiter_shuffle=True)",
        "experts_cnt": "needed by AiterBackend.prepare_weights(use_aiter_shuffle=True)",
        "is_guinterleave": "needed by AiterBackend.prepare_weights(use_aiter_shuffle=True)",
        "gate_up": "needed by AiterBackend.prepare_weights(use_aiter_shuffle=True)",
    },
}


def import_aiter():
    """``import aiter`` with any failure turned into ``GateCannotRun`` naming the cause."""
    try:
        return importlib.import_module("aiter")
    except Exception as e:  # RuntimeError without ROCm, ImportError without the package
        raise GateCannotRun(f"aiter backend: import aiter failed: {type(e).__name__}: {e}") from e


def _aiter_attr(module: str, name: str):
    try:
        return getattr(importlib.import_module(module), name)
    except Exception as e:
        raise GateCannotRun(f"aiter backend: {module}.{name} is not available: {type(e).__name__}: {e}") from e


def fused_moe_function():
    """The installed ``aiter.fused_moe.fused_moe``, looked up at every call (so a spy that
    monkeypatches the module attribute sees the real call)."""
    import_aiter()
    return _aiter_attr("aiter.fused_moe", "fused_moe")


def accepted_keywords(func) -> frozenset[str] | None:
    """Keyword names ``func`` accepts (follows ``__wrapped__``); None if it takes ``**kwargs``."""
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return frozenset(p.name for p in params)


def _bound_value(act_mode: str, gate_mode: str) -> str | None:
    if act_mode not in ACT_MODE_BOUND:
        raise ValueError(f"act_mode: {act_mode!r} is not one of {sorted(ACT_MODE_BOUND)}")
    if gate_mode == "separated" and act_mode in ("a8w4", "a16w4"):
        raise ValueError(
            f"act_mode={act_mode!r} with gate_mode='separated': aiter runs per_1x32 Silu on the separated "
            "layout with fp4 activations (a4w4) whatever AITER_BF16_FP8_MOE_BOUND says; use act_mode='a4w4' "
            "or 'auto', or GU-interleaved weights"
        )
    if gate_mode == "interleave" and act_mode == "a4w4":
        raise ValueError("act_mode='a4w4' needs gate_mode='separated' (interleaved weights run a16w4/a8w4)")
    current = os.environ.get(BOUND_ENV)
    if current is not None:
        try:
            int(current)
        except ValueError:
            raise ValueError(f"environment {BOUND_ENV}={current!r} is not an integer (aiter parses it with int())")
    return ACT_MODE_BOUND[act_mode]


@contextlib.contextmanager
def bound_env(value: str | None):
    """Set ``AITER_BF16_FP8_MOE_BOUND`` for one call and restore what was there."""
    if value is None:
        yield
        return
    old = os.environ.get(BOUND_ENV)
    os.environ[BOUND_ENV] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(BOUND_ENV, None)
        else:
            os.environ[BOUND_ENV] = old


def activation_dtype_name(tokens: int, act_mode: str, bound_env_value: str | None = None) -> str:
    """The activation precision aiter picks on gfx950 for interleaved per_1x32 Silu (docs/tests)."""
    bound = ACT_MODE_BOUND.get(act_mode)
    if bound is None:
        bound = bound_env_value if bound_env_value is not None else str(AITER_DEFAULT_BOUND)
    return "bf16" if tokens < int(bound) else "fp8"


def _view(t: torch.Tensor | None, dtype, name: str) -> torch.Tensor | None:
    if t is None:
        return None
    if t.dtype == dtype:
        return t.view(dtype)  # a new tensor object: the caller's attributes are not touched
    if t.dtype not in (torch.uint8, torch.int8):
        raise TypeError(f"{name}: expected uint8 bytes or {dtype}, got {t.dtype}")
    return t.view(dtype)


class AiterBackend:
    """``aiter.fused_moe`` behind the backend interface (see the module docstring)."""

    name = "aiter"

    # ------------------------------------------------------------------ weights
    def prepare_weights(self, w13, w13_scale, w2, w2_scale, *, align: int = 128, gu_interleave: bool = True, use_aiter_shuffle: bool = False):
        """Raw checkpoint tensors -> ``ProcessedMoEWeights`` for this backend.

        Default: the reference processing (``fp4moe.reference.weight_path``: pad, record pads, shuffle with
        ``fp4moe.reference.layout``). ``use_aiter_shuffle=True`` pads with the reference and shuffles with
        the installed aiter's ``aiter.ops.shuffle.shuffle_weight`` / ``shuffle_scale`` instead.
        """
        from fp4moe.reference.weight_path import process_fp4_moe_weights

        if not use_aiter_shuffle:
            return process_fp4_moe_weights(w13, w13_scale, w2, w2_scale, align=align, gu_interleave=gu_interleave, shuffle=True)
        import_aiter()
        shuffle_weight = _aiter_attr("aiter.ops.shuffle", "shuffle_weight")
        shuffle_scale = _aiter_attr("aiter.ops.shuffle", "shuffle_scale")
        for fn, fname in ((shuffle_weight, "shuffle_weight"), (shuffle_scale, "shuffle_scale")):
            kw = accepted_keywords(fn)
            missing = [k for k in AITER_CALL_KEYWORDS[fname] if kw is not None and k not in kw]
            if missing:
                raise GateCannotRun(f"aiter backend: installed aiter.ops.shuffle.{fname} lacks keyword(s) {missing}")
        p = process_fp4_moe_weights(w13, w13_scale, w2, w2_scale, align=align, gu_interleave=gu_interleave, shuffle=False)
        e, h, pi = p.experts, p.hidden, p.padded_intermediate
        p.w13 = shuffle_weight(p.w13, layout=(16, 16), is_guinterleave=gu_interleave, gate_up=True).view(torch.uint8)
        p.w2 = shuffle_weight(p.w2, layout=(16, 16), is_guinterleave=gu_interleave, gate_up=False).view(torch.uint8)
        p.w13_scale = shuffle_scale(
            p.w13_scale.reshape(e * 2 * pi, -1), experts_cnt=e, is_guinterleave=gu_interleave, gate_up=True
        ).view(torch.uint8)
        p.w2_scale = shuffle_scale(
            p.w2_scale.reshape(e * h, -1), experts_cnt=e, is_guinterleave=gu_interleave, gate_up=False
        ).view(torch.uint8)
        p.shuffled = True
        return p

    # ------------------------------------------------------------------ the call
    def build_kwargs(self, hidden_states, w1, w2, topk_weight, topk_ids, *, accepted: frozenset[str] | None = None,
                     **keywords) -> dict:
        """The exact keyword arguments for ``aiter.fused_moe`` (needs an importable aiter);
        ``keywords``: those of ``fp4moe.reference.backend.FusedMoEKeywords``."""
        k = FusedMoEKeywords(**keywords)
        aiter = import_aiter()
        if k.activation not in ACTIVATIONS:
            raise ValueError(f"activation: {k.activation!r} is not one of {sorted(ACTIVATIONS)}")
        if k.quant_type not in QUANT_TYPES:
            raise ValueError(f"quant_type: {k.quant_type!r} is not one of {sorted(QUANT_TYPES)} (MXFP4 experts)")
        if k.gate_mode not in GATE_MODES:
            raise ValueError(f"gate_mode: {k.gate_mode!r} is not one of {GATE_MODES}")
        if k.w1_scale is None or k.w2_scale is None:
            raise ValueError("w1_scale and w2_scale are required for per_1x32 (MXFP4) weights")
        if hidden_states.dtype not in (torch.bfloat16, torch.float16):
            raise TypeError(f"hidden_states: aiter.fused_moe takes bf16/fp16 activations, got {hidden_states.dtype}")
        dev = hidden_states.device
        for name, t in (("w1", w1), ("w2", w2), ("topk_weight", topk_weight), ("topk_ids", topk_ids), ("w1_scale", k.w1_scale), ("w2_scale", k.w2_scale)):
            if t.device != dev:
                raise ValueError(f"{name}: on {t.device}, hidden_states on {dev}; all tensors must share one device")
        dtypes = getattr(aiter, "dtypes", None)
        fp4 = getattr(dtypes, "fp4x2", None) or getattr(torch, "float4_e2m1fn_x2", torch.uint8)
        e8m0 = getattr(dtypes, "fp8_e8m0", None) or getattr(torch, "float8_e8m0fnu", torch.uint8)
        w1v, w2v = _view(w1, fp4, "w1"), _view(w2, fp4, "w2")
        w1v.is_shuffled = True  # weights reaching a backend are the processed (shuffled) ones
        w2v.is_shuffled = True
        kwargs = dict(
            hidden_states=hidden_states,
            w1=w1v,
            w2=w2v,
            topk_weight=topk_weight if topk_weight.dtype == torch.float32 else topk_weight.float(),
            topk_ids=topk_ids if topk_ids.dtype == torch.int32 else topk_ids.to(torch.int32),
            expert_mask=k.expert_mask,
            activation=getattr(aiter.ActivationType, ACTIVATIONS[k.activation]),
            quant_type=getattr(aiter.QuantType, QUANT_TYPES[k.quant_type]),
            doweight_stage1=bool(k.doweight_stage1),
            w1_scale=_view(k.w1_scale, e8m0, "w1_scale"),
            w2_scale=_view(k.w2_scale, e8m0, "w2_scale"),
            a1_scale=k.a1_scale,
            a2_scale=k.a2_scale,
            hidden_pad=int(k.hidden_pad),
            intermediate_pad=int(k.intermediate_pad),
            bias1=k.bias1,
            bias2=k.bias2,
        )
        has = (lambda k: True) if accepted is None else (lambda k: k in accepted)
        if has("gate_mode"):
            kwargs["gate_mode"] = k.gate_mode
        elif k.gate_mode == "interleave":
            raise GateCannotRun(
                "aiter backend: the installed aiter.fused_moe has no gate_mode keyword, so it cannot be told the "
                "weights are GU-interleaved; upgrade aiter or process the weights with gu_interleave=False"
            )
        if k.swiglu_limit is not None:
            if not has("swiglu_limit"):
                raise GateCannotRun("aiter backend: the installed aiter.fused_moe has no swiglu_limit keyword")
            kwargs["swiglu_limit"] = float(k.swiglu_limit)
        unknown = set(kwargs) - set(AITER_CALL_KEYWORDS["fused_moe"])
        assert not unknown, f"keywords {unknown} missing from AITER_CALL_KEYWORDS"  # keeps check (a) complete
        return kwargs

    def fused_moe(self, hidden_states, w1, w2, topk_weight, topk_ids, *, act_mode: str = "a16w4", **kw) -> torch.Tensor:
        """Run ``aiter.fused_moe``; keywords as in ``fp4moe.reference.backend.MoEBackend``."""
        gate_mode = kw.get("gate_mode", "interleave")
        bound = _bound_value(act_mode, gate_mode)
        if hidden_states.dtype == torch.float32:
            # aiter takes bf16/fp16 activations; the reference rounds to bf16 the same way
            hidden_states = hidden_states.to(torch.bfloat16)
        fn = fused_moe_function()
        kwargs = self.build_kwargs(hidden_states, w1, w2, topk_weight, topk_ids, accepted=accepted_keywords(fn), **kw)
        with bound_env(bound):
            return fn(**kwargs)

