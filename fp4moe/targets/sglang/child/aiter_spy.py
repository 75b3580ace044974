"""aiter as the CPU drive sees it: enums, the recording ``fused_moe`` spy, the recorded shuffles.

Index: ``ActivationType`` / ``QuantType`` / ``GateMode`` (aiter's enums by name), ``SPY_CALLS`` /
``SHUFFLE_CALLS`` (every call the drive's aiter saw), :func:`describe` (a value as the record
holds it), :func:`spy_fused_moe` (records, then this project's reference MoE), :func:`recording`
(a shuffle recorded, with a shapes-only fallback on ``meta``), :func:`shuffle_provider` (which
shuffles: ``fp4moe.reference.layout`` or ``--aiter-src``'s), :func:`aiter_fillers` (what the aiter
stub modules hold). CHILD PROCESS ONLY.
"""

from __future__ import annotations

import enum
import types

from fp4moe.targets.sglang import modes

SPY_CALLS: list[dict] = []
SHUFFLE_CALLS: list[dict] = []
#: every router call the drive's aiter saw (``topk_gating``): {"name", "rows", "renormalize", "scaling"}
ROUTER_CALLS: list[dict] = []
SPY_MODE = {"compute": True}
#: cpu mode with ``--aiter-src``: the parameter names of that tree's ``aiter.fused_moe`` (its
#: syntax tree); the spy refuses other keywords as the real function would (TypeError)
FUSED_MOE_PARAMS: dict = {"names": None, "origin": None}


class ActivationType(enum.Enum):  # aiter/ops/enum.py (a C++ enum there; the names matter)
    No = 0
    Silu = 1
    Gelu = 2
    Swiglu = 3
    Situv2 = 4


class QuantType(enum.Enum):
    No = 0
    per_Tensor = 1
    per_Token = 2
    per_1x32 = 3
    per_1x128 = 4
    per_128x128 = 5


class GateMode(str, enum.Enum):  # aiter/ops/flydsl/moe_common.py
    SEPARATED = "separated"
    MOCK_GATE_ONLY = "mock_gate_only"
    GATE_ONLY = "gate_only"
    INTERLEAVE = "interleave"


AITER_DEFAULT_GATE_MODE = GateMode.SEPARATED.value  # aiter.fused_moe's default


def describe(v):
    import torch

    if isinstance(v, torch.Tensor):
        return {"tensor": True, "shape": list(v.shape), "dtype": str(v.dtype).replace("torch.", "")}
    if isinstance(v, enum.Enum):
        return {"enum": type(v).__name__, "name": v.name}
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    return repr(v)


def weight_attrs(w) -> dict:
    """The Python attributes aiter may read from a weight tensor it receives: everything set on
    it (its ``__dict__``), plus each name of the aiter target's table (absent ones as "<absent>")."""
    from fp4moe.targets.aiter.tensor_attrs import KNOWN

    names = set(getattr(w, "__dict__", {}) or {}) | {n for _, n in KNOWN}
    return {n: describe(getattr(w, n)) if hasattr(w, n) else "<absent>" for n in sorted(names)}


def record_call(hidden_states, w1, w2, topk_weight, topk_ids, args, kwargs) -> dict:
    if args:
        raise TypeError(f"fused_moe spy: {len(args)} positional arguments after topk_ids; SGLang passes keywords")
    call = {"kwargs": {k: describe(v) for k, v in kwargs.items()}, "objects": dict(kwargs, w1=w1, w2=w2,
            hidden_states=hidden_states, topk_weight=topk_weight, topk_ids=topk_ids),
            "act_mode": modes.effective_act_mode(kwargs, int(hidden_states.shape[0])),
            "w_attrs": {"w1": weight_attrs(w1), "w2": weight_attrs(w2)},
            "inputs": {"hidden_states": describe(hidden_states), "topk_weight": describe(topk_weight),
                       "topk_ids": describe(topk_ids)}}
    SPY_CALLS.append(call)
    return call


def spy_fused_moe(hidden_states, w1, w2, topk_weight, topk_ids, *args, **kwargs):
    """``aiter.fused_moe`` on this machine: record every argument, then the reference MoE."""
    import torch

    call = record_call(hidden_states, w1, w2, topk_weight, topk_ids, args, kwargs)
    if not SPY_MODE["compute"]:
        return torch.zeros_like(hidden_states)
    names = FUSED_MOE_PARAMS["names"]
    if names is not None and not any(n.startswith("**") for n in names):
        unknown = sorted(set(kwargs) - set(names))
        if unknown:
            raise TypeError(f"aiter.fused_moe() got unexpected keyword argument(s) {unknown} "
                            f"(its signature in {FUSED_MOE_PARAMS['origin']})")
    from fp4moe.reference.reference_backend import ReferenceBackend

    act = kwargs.get("activation", ActivationType.Silu)
    qt = kwargs.get("quant_type", QuantType.No)
    act_mode = call["act_mode"]
    unsupported = sorted(k for k in ("no_combine", "output", "stage2_scatter", "num_local_tokens", "beta", "linear_beta")
                         if kwargs.get(k) not in (None, False))
    if unsupported:
        raise NotImplementedError(f"fused_moe spy: the reference does not model {unsupported}")
    limit = kwargs.get("swiglu_limit")
    return ReferenceBackend().fused_moe(
        hidden_states, w1, w2, topk_weight, topk_ids,
        expert_mask=kwargs.get("expert_mask"),
        activation=act.name.lower() if isinstance(act, enum.Enum) else str(act),
        quant_type=qt.name if isinstance(qt, enum.Enum) else str(qt),
        doweight_stage1=bool(kwargs.get("doweight_stage1", False)),
        w1_scale=kwargs.get("w1_scale"), w2_scale=kwargs.get("w2_scale"),
        a1_scale=kwargs.get("a1_scale"), a2_scale=kwargs.get("a2_scale"),
        hidden_pad=int(kwargs.get("hidden_pad", 0)), intermediate_pad=int(kwargs.get("intermediate_pad", 0)),
        bias1=kwargs.get("bias1"), bias2=kwargs.get("bias2"),
        swiglu_limit=limit if limit else None,
        gate_mode=str(getattr(kwargs.get("gate_mode", AITER_DEFAULT_GATE_MODE), "value", kwargs.get("gate_mode", AITER_DEFAULT_GATE_MODE))),
        act_mode=act_mode,
    )


def spy_topk_gating(topk_weights, topk_ids, gating_output, correction_bias, renormalize, routed_scaling_factor,
                    score_func="sqrtsoftplus", *args, **kwargs):
    """aiter's ``topk_gating`` on this machine (a HIP kernel there): writes the top-k weights and
    ids in place as aiter's does -- bias-steered choice, renormalised, scaled by
    ``routed_scaling_factor`` (aiter always folds it) -- computed by ``fp4moe.reference.routing``
    in float64 and cast; recorded."""
    import torch

    from fp4moe.model.catalogue import ScoreMode
    from fp4moe.reference import routing

    if score_func != "sqrtsoftplus":
        raise NotImplementedError(f"topk_gating stub: score_func {score_func!r} is not modelled")
    ROUTER_CALLS.append({"name": "aiter.topk_gating", "rows": int(gating_output.shape[0]), "renormalize": bool(renormalize),
                         "scaling": routed_scaling_factor})
    w, ids = routing.reference_topk(gating_output.float().cpu(), topk_weights.shape[1], ScoreMode.SQRTSOFTPLUS,
                                    renormalize=bool(renormalize), scaling=float(routed_scaling_factor or 1.0),
                                    bias=None if correction_bias is None else correction_bias.float().cpu())
    topk_weights.copy_(w.to(torch.float32))
    topk_ids.copy_(ids.to(torch.int32))


def recording(name: str, fn, meta_fallback=None):
    """``fn`` recorded. ``meta_fallback`` (gfx950 mode): if the real shuffle cannot run on the
    ``meta`` device (the shapes-only full-size footprint build), the same-named
    ``fp4moe.reference.layout`` shuffle gives the shape instead; recorded as such."""
    def wrapper(*args, **kwargs):
        import torch

        meta = any(isinstance(a, torch.Tensor) and a.is_meta for a in args)
        call = {"name": name, "args": [describe(a) for a in args],
                "kwargs": {k: describe(v) for k, v in kwargs.items()}, "meta": meta}
        SHUFFLE_CALLS.append(call)
        if meta and meta_fallback is not None:
            try:
                return fn(*args, **kwargs)
            except Exception as e:  # shapes only: the real bytes are judged from the GPU run
                call["meta_fallback"] = f"{type(e).__name__}: {e}"[:200]
                return meta_fallback(*args, **kwargs)
        return fn(*args, **kwargs)

    wrapper.__name__ = name
    wrapper.__wrapped__ = fn
    return wrapper


def shuffle_provider(aiter_src: str | None) -> tuple[dict, str]:
    """name -> callable for aiter's shuffles: ``fp4moe.reference.layout`` or ``aiter_src``'s shuffle.py."""
    if aiter_src:
        from fp4moe.targets.aiter.source import AiterSource, load_shuffle_module

        src = AiterSource.from_dir(aiter_src)
        mod = load_shuffle_module(src)
        if mod is None:
            raise FileNotFoundError(f"--aiter-src {aiter_src}: no aiter/ops/shuffle.py")
        funcs = {k: v for k, v in vars(mod).items() if callable(v) and not k.startswith("_")}
        return funcs, f"aiter shuffle.py from {src.origin}"
    from fp4moe.reference import layout

    def shuffle_weight_a16w4(src, NLane, gate_up):  # aiter: shuffle_weight(..., is_guinterleave=True)
        return layout.shuffle_weight(src, (NLane, 16), is_guinterleave=True, gate_up=gate_up)

    def shuffle_scale_a16w4(src, experts_cnt, gate_up):  # aiter: shuffle_scale(..., is_guinterleave=True)
        return layout.shuffle_scale(src, experts_cnt, True, gate_up)

    return {"shuffle_weight": layout.shuffle_weight, "shuffle_scale": layout.shuffle_scale,
            "shuffle_weight_a16w4": shuffle_weight_a16w4, "shuffle_scale_a16w4": shuffle_scale_a16w4}, "fp4moe.reference.layout"


def missing(name):
    def f(*a, **k):
        raise NotImplementedError(f"aiter.ops.shuffle.{name}: not provided by this shuffle source")

    return f


def aiter_fillers(shuffles: dict) -> dict:
    import torch

    def aiter_root(m):
        m.ActivationType, m.QuantType = ActivationType, QuantType
        m.dtypes = types.SimpleNamespace(fp4x2=torch.float4_e2m1fn_x2, fp8=torch.float8_e4m3fn,
                                         fp8_e8m0=torch.float8_e8m0fnu, bf16=torch.bfloat16, fp16=torch.float16,
                                         fp32=torch.float32, i32=torch.int32, u8=torch.uint8, i8=torch.int8)
        m.fused_moe = spy_fused_moe
        m.topk_gating = spy_topk_gating

    def fused_moe_mod(m):
        m.fused_moe = spy_fused_moe
        m.ActivationType, m.QuantType = ActivationType, QuantType

    def moe_common(m):
        m.GateMode = GateMode

    def shuffle_mod(m):
        for k, v in shuffles.items():
            setattr(m, k, v)

    return {"aiter": aiter_root, "aiter.fused_moe": fused_moe_mod, "aiter.ops.flydsl.moe_common": moe_common,
            "aiter.ops.shuffle": shuffle_mod}
