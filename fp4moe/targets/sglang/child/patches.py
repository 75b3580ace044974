"""Every patch point the CPU drive of SGLang uses, and how each is found in a release.

CHILD PROCESS ONLY. On a machine without ROCm and aiter, SGLang's DeepSeek-V4 FP4 aiter
branch is unreachable: its selectors are module globals computed at import
(``_is_hip = is_hip()`` ...) and aiter's shuffles / ``fused_moe`` cannot load. The drive
changes exactly these, after import, and records which ones the release had:

====================================  ==========================================================
patch point                           why, and what replaces it
====================================  ==========================================================
``fp8._is_hip``, ``fp8._use_aiter``   select the ``if _use_aiter and self.is_fp4_expert:`` branch
                                      of ``process_weights_after_loading_block_quant`` and the
                                      e8m0 scale dtype of ``create_fp8_moe_weight_`` -> True
``fp8._is_shuffle_moe_mxfp4``         the gfx950 weight shuffle after padding -> True
``fp8._is_gfx95_supported``           gfx950 (MI350/MI355) code paths, newer releases -> True
``fp8._is_gfx1250_supported``         MI400 ``moe_shuffle_*`` path, newer releases -> False
``fp8._use_aiter_a8w4``               gfx1250 a8w4 weight layout (env AITER_FORCE_A8W4) -> False
``fp8.<names from aiter.ops.shuffle>`` read from ``fp8.py``'s syntax tree (they changed across
                                      releases: ``shuffle_weight_a16w4``/``shuffle_scale_a16w4``,
                                      ``shuffle_weight``/``shuffle_scale``, ``moe_shuffle_*``) ->
                                      ``fp4moe.reference.layout`` or ``--aiter-src``'s own shuffle.py,
                                      wrapped so every call is recorded
runner ``is_gfx95_supported``         the runner module's gfx950 switch (gate_mode, a8w4) -> True
``fp8.get_tensor_model_parallel_*``   older releases (0.5.13-...) read the TP size from the process
                                      group in ``create_weights`` -> the row's TP size, rank 0
                                      (newer ones read the layer's ``moe_tp_size``, set too)
``get_parallel().override(...)``      0.5.17-...: SGLang's own runtime-context override answers
                                      the row's TP size (world = TP, rank 0, no EP)
``aiter`` (whole package)             stub: ``ActivationType``, ``QuantType``, ``GateMode``,
                                      ``dtypes`` as aiter defines them; ``fused_moe`` = the spy
                                      (records every keyword, then runs ``fp4moe.reference.moe``)
env ``SGLANG_ROCM_SMALLM_MOE=0``      newer runners may route small batches to SGLang's own
                                      gfx950 small-M kernel instead of ``fused_moe``; the gate
                                      judges the ``fused_moe`` path (set before import)
====================================  ==========================================================

In the gfx950 mode (``fp4moe.targets.sglang.modes``: ROCm torch, gfx950 GPU, importable aiter) none of
these is applied except the TP size and ``SGLANG_ROCM_SMALLM_MOE=0``: the selectors are read
and must already be True, aiter and its shuffles are the real ones (recorded, not replaced).

Nothing else of SGLang is changed. Tensor-parallel size reaches SGLang through the layer's
``moe_tp_size`` attribute (what ``FusedMoE`` sets); the checkpoint shard of rank 0 is read
by ``fp4moe.model.checkpoint`` and copied byte for byte into the parameters ``create_weights``
made (their shapes and dtypes are checked first).
"""

from __future__ import annotations

import ast
import types

#: fp8.py module globals -> value in the CPU drive. Absent ones are recorded, not errors,
#: except those in REQUIRED_FLAGS (without them the branch under test does not exist).
FP8_FLAGS = {
    "_is_hip": True,
    "_use_aiter": True,
    "_is_shuffle_moe_mxfp4": True,
    "_is_gfx95_supported": True,
    "_is_gfx1250_supported": False,
    "_use_aiter_a8w4": False,
    "_use_hip_int4": False,
    "_is_cuda": False,
}
REQUIRED_FLAGS = ("_use_aiter",)


def parallel_override(fp8, tp: int):
    """Newer releases (0.5.17-...) read the TP size from ``get_parallel()`` (SGLang's runtime
    context); its own ``override(...)`` context answers for the row (world = TP, rank 0, no EP).
    A null context where the release has none."""
    import contextlib
    import sys

    get_parallel = getattr(fp8, "get_parallel", None)
    ctx = get_parallel() if callable(get_parallel) else None
    if ctx is None or not hasattr(ctx, "override"):
        return contextlib.nullcontext()
    rc = sys.modules.get("sglang.srt.runtime_context")
    fields = getattr(rc, "_PARALLEL_FIELDS", None)  # 0.5.17-0.5.20
    if fields is None and callable(getattr(rc, "_parallel_fields", None)):  # 0.5.21-
        fields = rc._parallel_fields()
    want = {"world_size": tp, "world_rank": 0, "tp_size": tp, "tp_rank": 0, "moe_tp_size": tp, "moe_tp_rank": 0,
            "moe_ep_size": 1, "moe_ep_rank": 0, "moe_dp_size": 1, "moe_dp_rank": 0, "pp_size": 1, "pp_rank": 0}
    return ctx.override(**{k: v for k, v in want.items() if fields is None or k in fields})


def tp_functions(tp: int) -> dict:
    """Older releases ask ``get_tensor_model_parallel_world_size()`` in ``create_weights``
    (no process group exists here): answer the row's TP size, rank 0."""
    return {"get_tensor_model_parallel_world_size": lambda *a, **k: tp,
            "get_tensor_model_parallel_rank": lambda *a, **k: 0}
RUNNER_FLAGS = {"is_gfx95_supported": lambda *a, **k: True}
ENV = {"SGLANG_ROCM_SMALLM_MOE": "0", "SGLANG_USE_AITER": "1"}
SHUFFLE_MODULE = "aiter.ops.shuffle"


def shuffle_imports(source_text: str) -> list[str]:
    """Names that ``fp8.py`` imports from ``aiter.ops.shuffle`` at module level (also inside
    module-level ``if``/``try`` blocks), read from the syntax tree, in order."""
    names: list[str] = []

    def visit(body):
        for node in body:
            if isinstance(node, ast.ImportFrom) and node.module == SHUFFLE_MODULE:
                names.extend(a.asname or a.name for a in node.names)
            elif isinstance(node, (ast.If, ast.Try)):
                visit(node.body)
                visit(node.orelse)
                for h in getattr(node, "handlers", []):
                    visit(h.body)

    visit(ast.parse(source_text).body)
    return list(dict.fromkeys(names))


def set_flags(module: types.ModuleType, flags: dict) -> dict:
    """Set each flag the module has; return {name: {"found": bool, "was": repr, "now": repr}}."""
    out = {}
    for name, value in flags.items():
        found = hasattr(module, name)
        out[name] = {"found": found, "was": repr(getattr(module, name, None)) if found else None,
                     "now": repr(value) if found else None}
        if found:
            setattr(module, name, value)
    return out
