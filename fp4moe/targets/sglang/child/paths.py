"""Which MoE implementation SGLang's runner actually calls for a row's token count, with its
own defaults. CHILD PROCESS ONLY.

The drive's main run switches SGLang's gfx950 small-M kernel off (``SGLANG_ROCM_SMALLM_MOE=0``:
the gate judges the ``fused_moe`` path). :func:`moe_path` runs the runner once more with that
switch as a gfx950 runner has it by default (on, the kernel available), every implementation
recorded: aiter's ``fused_moe`` (the spy), SGLang's small-M kernel ``smallm_moe_fwd`` (in cpu mode a
stand-in that computes this project's reference MoE from exactly what the kernel is handed --
no pads, no swiglu limit, no expert mask, bf16 activations, separated gate/up), or neither (an
unknown private path). The parent judges a path other than ``fused_moe`` by its output
(``fp4moe.targets.sglang.checks``' ``moe_path``), never leaves it unjudged.
"""

from __future__ import annotations

import importlib

from fp4moe.targets.sglang.child import aiter_spy

SMALLM_MODULE = "sglang.kernels.ops.moe.smallm_moe_gfx950"
FUSED_MOE = "aiter.fused_moe"
SMALLM = f"{SMALLM_MODULE}.smallm_moe_fwd"
#: what the cpu stand-in of the small-M kernel computes with (its docstring: bf16 activations,
#: silu(gate) * up over aiter's shuffled layout, nothing else passed)
SMALLM_AS = {"act_mode": "a16w4", "gate_mode": "separated", "swiglu_limit": None, "intermediate_pad": 0, "hidden_pad": 0}


def _smallm_stand_in(calls: list):
    def smallm_moe_fwd(hidden_states, w13, w2, topk_weights, topk_ids, w13_scale, w2_scale):
        from fp4moe.reference.reference_backend import ReferenceBackend

        calls.append({"tokens": int(hidden_states.shape[0])})
        return ReferenceBackend().fused_moe(hidden_states, w13, w2, topk_weights, topk_ids, activation="silu",
                                            quant_type="per_1x32", w1_scale=w13_scale, w2_scale=w2_scale, **SMALLM_AS)

    return smallm_moe_fwd


def moe_path(runner_mod, core, info, runner_input, patch: bool) -> tuple[dict, object]:
    """({"tokens", "path", "switch"}, the bypass's output tensor or None)."""
    n = int(runner_input(info).hidden_states.shape[0])
    rec: dict = {"tokens": n}
    try:
        smallm = importlib.import_module(SMALLM_MODULE)
    except ImportError as e:
        smallm, rec["switch"] = None, f"no small-M module in this release ({type(e).__name__})"
    saved, calls = {}, []
    if smallm is not None and patch:  # the gfx950 runner's defaults: switch on, kernel available
        saved = {"on": getattr(runner_mod, "_SMALLM_MOE_ON", None), "enabled": smallm.smallm_moe_enabled,
                 "fwd": smallm.smallm_moe_fwd}
        runner_mod._SMALLM_MOE_ON = True
        smallm.smallm_moe_enabled = lambda: True
        smallm.smallm_moe_fwd = _smallm_stand_in(calls)
        rec["switch"] = "SGLANG_ROCM_SMALLM_MOE on (its default), kernel available (a gfx950 runner)"
    elif smallm is not None:
        rec["switch"] = f"as this runner has it: _SMALLM_MOE_ON={getattr(runner_mod, '_SMALLM_MOE_ON', None)}"
    n0 = len(aiter_spy.SPY_CALLS)
    aiter_spy.SPY_MODE["compute"] = False  # a fused_moe path is judged by the main run's output
    try:
        out = core.run(runner_input(info), info, {})
    finally:
        aiter_spy.SPY_MODE["compute"] = True
        if saved:
            runner_mod._SMALLM_MOE_ON = saved["on"]
            smallm.smallm_moe_enabled, smallm.smallm_moe_fwd = saved["enabled"], saved["fwd"]
    fused = len(aiter_spy.SPY_CALLS) - n0
    del aiter_spy.SPY_CALLS[n0:]
    if fused:
        rec["path"] = FUSED_MOE
        return rec, None
    rec["path"] = SMALLM if calls else "unknown: neither aiter.fused_moe nor a known kernel was called"
    hs = getattr(out, "hidden_states", None)
    return rec, (hs.detach().cpu().clone() if hs is not None else None)
