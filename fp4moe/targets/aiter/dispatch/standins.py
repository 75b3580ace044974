"""The one table of stand-ins for every compiled op and launch ``aiter.fused_moe`` can reach.

Index: :data:`STANDINS` (name -> :class:`StandIn`: what it models, the result builder, the optional
compute function), :class:`Recorder` (the ``compile_ops`` replacement and the FlyDSL launch
stand-ins: each call is recorded with its bound arguments, then stood in),
:class:`ComputingRecorder` (the numerics children's: an op with a compute function returns what
that function returns), :func:`describe`
(an argument as a record: shape/dtype/device for tensors, the value for scalars, never data).

Op names are aiter's Python names (the ``def`` under ``@compile_ops``). A compute function for an
op is looked up by the same name in ``fp4moe.targets.aiter.dispatch.compute.COMPUTE`` when that
module exists: ``COMPUTE[name](bound)`` receives the bound arguments as a dict (the names below)
and fills the op's output tensors in place; for an op that returns tensors, the stand-in
allocates them first and passes them as ``bound["_returns"]`` (a tuple, in return order). An op
with no entry here is recorded as ``unmodelled`` and raises :class:`NoStandIn` (the child reports
which; every check after it is ``n/a``).

Bound argument names as e4048607 declares them (``aiter/ops/*.py``, ``aiter/ops/opus/*``,
``aiter/ops/flydsl/moe_kernels.py``); a compute function reads these keys:

- ``ActivationType``, ``QuantType``, ``MlaVersion`` (``ops/enum.py``): ``dummy``. Return the
  ``aiter_enum.h`` member (the pybind enums).
- ``moe_sorting_fwd`` (``ops/moe_sorting.py``): ``topk_ids, topk_weights, sorted_token_ids,
  sorted_weights, sorted_expert_ids, num_valid_ids, moe_buf, num_experts, unit_size,
  local_expert_mask, num_local_tokens, dispatch_policy``.
- ``moe_sorting_opus_fwd`` (``ops/moe_sorting_opus.py``): ``topk_ids, topk_weights,
  sorted_token_ids, sorted_weights, sorted_expert_ids, num_valid_ids, moe_buf, num_experts,
  unit_size, local_expert_mask, num_local_tokens, workspace, dispatch_policy, local_topk_ids,
  aux_m_indices, aux_reverse_sorted``; ``moe_sorting_opus_get_workspace_size``: ``num_tokens,
  num_experts, topk, dispatch_policy`` (returns 0 bytes here).
- ``ck_moe_stage1`` (``ops/moe_op.py``): ``hidden_states, w1, w2, sorted_token_ids,
  sorted_expert_ids, num_valid_ids, out, topk, kernelName, w1_scale, a1_scale, block_m,
  sorted_weights, quant_type, activation, splitk, non_temporal_load, dst_type, is_shuffled``.
- ``ck_moe_stage2`` (``ops/moe_op.py``): ``inter_states, w1, w2, sorted_token_ids,
  sorted_expert_ids, num_valid_ids, out, topk, kernelName, w2_scale, a2_scale, block_m,
  sorted_weights, quant_type, activation, splitk, non_temporal_load, dst_type, is_shuffled``.
- ``moe_cktile2stages_gemm1_ck`` / ``moe_cktile2stages_gemm2_ck`` (``ops/moe_op.py``, the
  CK-tile split-k stages): ``XQ, WQ, Y, sorted_ids, sorted_expert_ids, max_token_ids, topk,
  n_padded_zeros, k_padded_zeros, topk_weight, x_scale, w_scale, exp_bias, activation, block_m,
  split_k`` (stage 1); stage 2 the same without ``split_k``.
- ``flydsl_silu_and_mul_interleaved`` (``ops/flydsl/moe_kernels.py``): ``input, out,
  sorted_token_ids, num_valid_ids, token_num, topk, quant_mode, gui_layout``;
  ``flydsl_swiglu_and_mul_interleaved``: ``input, out`` (the CK-tile split-k post-activation).
- ``flydsl_moe_stage1`` / ``flydsl_moe_stage2`` (``ops/flydsl/moe_kernels.py``): keyword-only
  launch arguments as declared there (``a, w1, sorted_token_ids, ..., inter_dim_pad,
  model_dim_pad, swiglu_limit, gate_mode, act`` / ``inter_states, w2, ..., mode``).
- ``_opus_moe_stage1_a8w4_fwd_raw`` (``ops/opus/moe_stage1_a8w4.py``) and the Opus stage-2 op
  (``ops/opus/moe_stage2_a8w4.py``): the names their declarations give (recorded verbatim).
- the activation quants ``dynamic_per_group_scaled_quant_fp4``, ``fused_dynamic_mxfp4_quant_moe_sort_hip``,
  ``mxfp4_moe_sort_hip``, ``fused_dynamic_mxfp8_quant_moe_sort_hip`` (``ops/quant.py``): recorded
  verbatim; their outputs are the tensors the Python wrapper allocated and passed in.

The exact list each tree reaches is in the dispatch table's ``ops`` column; the names above are
the ones e4048607's DeepSeek-V4 rows reach.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import inspect
from collections.abc import Callable

import torch

#: how many characters of a non-tensor, non-scalar argument's repr a record keeps
REPR_CAP = 120


class NoStandIn(RuntimeError):
    """An op the table does not model was reached; the dispatch stops there."""


@dataclasses.dataclass(frozen=True)
class StandIn:
    models: str  # what the compiled op computes on a gfx950
    result: Callable | None = None  # (bound, ctx) -> return value; None: the op returns nothing / fills its args


def _returns_value(fn) -> bool:
    ann = inspect.signature(fn).return_annotation
    return ann not in (None, "None", inspect.Signature.empty)


def _flydsl_stage1_result(bound, ctx):
    """``out`` when given (bf16 output); else the fused-quant pair (out, e8m0 scale in sorted order),
    shaped as fused_moe_2stages views them."""
    a, w1, out = bound["a"], bound["w1"], bound.get("out")
    if out is not None:
        return out
    inter = w1.shape[1] // 2
    qdt = {"fp8": torch.float8_e4m3fn, "fp4": torch.float4_e2m1fn_x2}.get(bound.get("out_dtype"), torch.float8_e4m3fn)
    cols = inter if qdt == torch.float8_e4m3fn else inter // 2
    q = torch.empty(a.shape[0] * bound.get("topk", 1) * cols, dtype=torch.uint8, device=a.device).view(qdt)
    scale_cols = ((inter + 31) // 32 + 7) // 8 * 8
    scale = torch.empty(bound["sorted_token_ids"].shape[0], scale_cols, dtype=torch.uint8, device=a.device)
    return q.view(a.shape[0], bound.get("topk", 1), cols), scale.view(torch.float8_e8m0fnu)


def _enum_member(kind: str):
    def build(bound, ctx):
        return ctx.enums[kind](int(bound.get("dummy", 0)))
    return build


def _mirrored_enum(kind: str):
    """A pybind enum whose C++ header the tree does not parse for us: its members are those of the
    tree's own Python int mirror (``aiter/utility/mx_types.py``: ``<kind>Int``), the drift guard's
    reference, so the guard compares the mirror with itself."""
    def build(bound, ctx):
        import enum
        import sys

        mirror = getattr(sys.modules.get("aiter.utility.mx_types"), f"{kind}Int", None)
        if mirror is None:
            raise NoStandIn(f"_{kind}: no aiter.utility.mx_types.{kind}Int to model the pybind enum with")
        members = {k: v for k, v in vars(mirror).items() if not k.startswith("_") and isinstance(v, int)}
        return enum.IntEnum(kind, members)(int(bound.get("dummy", 0)))
    return build


def _zero_bytes(bound, ctx):
    return 0


def _returns_arg(arg: str):
    """The op writes argument ``arg`` and returns it."""
    def build(bound, ctx):
        return bound[arg]
    return build


STANDINS: dict[str, StandIn] = {
    "_ActivationType": StandIn("the pybind enum ActivationType of aiter_enum.h", _enum_member("ActivationType")),
    "_QuantType": StandIn("the pybind enum QuantType of aiter_enum.h", _enum_member("QuantType")),
    "_MlaVersion": StandIn("the pybind enum MlaVersion of aiter_enum.h", _enum_member("MlaVersion")),
    "_MxScaleRoundMode": StandIn("the pybind enum MxScaleRoundMode (members: the tree's MxScaleRoundModeInt)",
                                 _mirrored_enum("MxScaleRoundMode")),
    "_MxDtype": StandIn("the pybind enum MxDtype (members: the tree's MxDtypeInt)", _mirrored_enum("MxDtype")),
    "moe_sorting_fwd": StandIn("CK moe sorting: tokens grouped per expert, padded to unit_size (block_m)"),
    "moe_sorting_opus_get_workspace_size": StandIn("Opus sorting workspace bytes (0: the stand-in needs none)", _zero_bytes),
    "moe_sorting_opus_fwd": StandIn("Opus moe sorting (the default backend): as moe_sorting_fwd, plus local ids / aux"),
    "ck_moe_stage1": StandIn("CK 2-stage gemm1: gate/up GEMM + activation, out [M, topk, I] (codegen module named by gen_func)"),
    "ck_moe_stage2": StandIn("CK 2-stage gemm2: down GEMM, atomically accumulated into out [M, H]"),
    "moe_cktile2stages_gemm1_ck": StandIn("CK-tile gemm1 (split-k capable) with n/k pad zeros; writes and returns Y",
                                          _returns_arg("Y")),
    "moe_cktile2stages_gemm2_ck": StandIn("CK-tile gemm2 with n/k pad zeros; writes and returns Y", _returns_arg("Y")),
    "flydsl_moe_stage1": StandIn("FlyDSL stage-1 launch (gate/up GEMM + activation + optional fused fp8/fp4 quant "
                                 "of its output, scales in sorted order)", _flydsl_stage1_result),
    "flydsl_moe_stage2": StandIn("FlyDSL stage-2 launch (down GEMM, atomic or reduce epilogue)", _returns_arg("out")),
    "flydsl_silu_and_mul_interleaved": StandIn("FlyDSL SiLU-and-mul over interleaved gate/up (CK-tile split-k "
                                               "post-activation)"),
    "flydsl_swiglu_and_mul_interleaved": StandIn("FlyDSL SwiGLU-and-mul over interleaved gate/up (CK-tile split-k "
                                                 "post-activation)"),
    "_opus_moe_stage1_a8w4_fwd_raw": StandIn("Opus a8w4 stage 1 (gate/up GEMM + SiLU/SwiGLU with runtime clamp, "
                                             "fused MXFP8 output quant); result from the tree's gen_fake"),
    "_opus_moe_stage2_a8w4_decode_fwd_raw": StandIn("Opus a8w4 stage 2, decode kernel (down GEMM; atomic, bf16 or MXFP8 route output)"),
    "_opus_moe_stage2_a8w4_fwd_raw": StandIn("Opus a8w4 stage 2 (down GEMM)"),
    "_opus_moe_stage2_reduce_token_slot_route_output_fwd_raw": StandIn("Opus stage-2 route-slot reduce into [M, H] (bf16 or MXFP8 route output)"),
    "fused_dynamic_mx_quant_moe_sort_hip": StandIn("MX (fp4 or fp8, by out's dtype) activation quant per 1x32 + e8m0 "
                                                   "scale sort into the sorted, padded order"),
    "mxfp4_moe_sort_hip": StandIn("sort + swizzle of a per-token e8m0 scale into the sorted order"),
    "dynamic_per_group_scaled_quant_fp4": StandIn("MXFP4 per-1x32 activation quant"),
    "dynamic_per_group_scaled_quant": StandIn("per-1x32 MX activation quant of the large-token split path "
                                              "(per-token e8m0 scales, sorted afterwards by mxfp4_moe_sort_hip)"),
}


def compute_table() -> dict[str, Callable]:
    """``compute.COMPUTE`` when that module exists, else {} (recording only)."""
    try:
        mod = importlib.import_module("fp4moe.targets.aiter.dispatch.compute")
    except ModuleNotFoundError as e:
        if e.name != "fp4moe.targets.aiter.dispatch.compute":
            raise
        return {}
    return dict(getattr(mod, "COMPUTE", {}))


# ----------------------------------------------------------------------------------------- records
def describe(v):
    """An argument as JSON: tensors by shape/dtype/device (and is_shuffled when set), scalars as is."""
    if isinstance(v, torch.Tensor):
        d = {"tensor": list(v.shape), "dtype": str(v.dtype), "device": v.device.type}
        if getattr(v, "is_shuffled", None) is not None:
            d["is_shuffled"] = bool(v.is_shuffled)
        return d
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, enum.Enum):
        return str(v)
    if isinstance(v, torch.dtype):
        return str(v)
    if isinstance(v, (list, tuple)) and len(v) <= 16:
        return [describe(x) for x in v]
    return {"repr": repr(v)[:REPR_CAP]}


@dataclasses.dataclass
class Recorder:
    """The ``compile_ops`` replacement: records every op call (in order) and stands it in."""

    enums: dict = dataclasses.field(default_factory=dict)
    calls: list = dataclasses.field(default_factory=list)
    compute: dict = dataclasses.field(default_factory=compute_table)
    stage: str = ""

    def record(self, name: str, module: str, build: dict, bound: dict) -> dict:
        rec = {"op": name, "module": module, "args": {k: describe(v) for k, v in bound.items()}}
        if build:
            rec["build"] = {k: describe(v) for k, v in build.items()}
        self.calls.append(rec)
        return rec

    def call(self, name: str, module: str, fn, args, kwargs, build: dict | None = None, gen_fake=None):
        from fp4moe.targets.aiter.dispatch.loader import bound_arguments

        bound = bound_arguments(fn, args, kwargs)
        rec = self.record(name, module, build or {}, bound)
        spec = STANDINS.get(name)
        if spec is None:
            rec["unmodelled"] = True
            raise NoStandIn(f"{name} ({module}): no stand-in models this op")
        if spec.result is not None:
            out = spec.result(bound, self)
        elif "out" in bound and _returns_value(fn):  # the op writes ``out`` and returns it
            out = bound["out"]
        else:
            out = None
        fn_compute = self.compute.get(name)
        if fn_compute is not None:
            if out is not None:
                bound["_returns"] = out if isinstance(out, tuple) else (out,)
            fn_compute(bound)
            rec["computed"] = True
        return out

    # -------------------------------------------------------------- the decorator
    def compile_ops(self, _md_name: str, fc_name: str | None = None, gen_func=None, gen_fake=None,
                    ffi_type: str = "pybind", develop: bool = False):
        """Replaces ``aiter.jit.core.compile_ops``: same signature, records then stands in."""
        def decorator(func):
            name = func.__name__

            def standin(*args, custom_build_args=None, **kwargs):
                build = dict(custom_build_args or {})
                if fc_name is not None:
                    build["symbol"] = fc_name
                if gen_func is not None:
                    build.update(gen_func(*args, **kwargs))
                return self.call(name, build.get("md_name", _md_name), func, args, kwargs, build, gen_fake)

            standin.__name__ = func.__name__
            standin.__qualname__ = func.__qualname__
            standin.__wrapped__ = func
            standin.__signature__ = inspect.signature(func)
            return standin
        return decorator

    def flydsl_launch(self, name: str, declared):
        """A FlyDSL launch (``flydsl_moe_stage1/2``) stood in; ``declared`` is the tree's function."""
        def launch(*args, **kwargs):
            return self.call(name, "flydsl", declared, args, kwargs)
        launch.__name__ = name
        launch.__signature__ = inspect.signature(declared)
        return launch


class ComputingRecorder(Recorder):
    """An op ``compute`` has is recorded, then computed, and returns what the compute function
    returns (it allocates what the op returns, as the launch would); the others keep the
    stand-in table's result builders (the enums) or raise :class:`NoStandIn`."""

    def call(self, name: str, module: str, fn, args, kwargs, build: dict | None = None, gen_fake=None):
        comp = self.compute.get(name)
        if comp is None:
            return super().call(name, module, fn, args, kwargs, build, gen_fake)
        from fp4moe.targets.aiter.dispatch.loader import bound_arguments

        bound = bound_arguments(fn, args, kwargs)
        self.record(name, module, build or {}, bound)["computed"] = True
        return comp(bound)
