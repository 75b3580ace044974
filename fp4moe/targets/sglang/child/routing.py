"""SGLang's router in front of the kernel: a padded batch through ``select_experts`` into the
runner, and what reached ``fused_moe``. CHILD PROCESS ONLY.

:func:`routed` drives, for one row: the parent's router logits for a batch padded the way a
CUDA graph or DP attention pads it (``num_token_non_padded`` real rows, the rest padding) ->
SGLang's ``select_experts`` with DeepSeek-V4's top-k config (ungrouped ``sqrtsoftplus``,
correction bias, ``routed_scaling_factor``, ``apply_routed_scaling_factor_on_output`` as
``deepseek_v2.py`` sets it on aiter) -> on HIP with aiter, aiter's ``topk_gating`` (cpu mode: the
stub of ``aiter_spy``: ``fp4moe.reference.routing`` in float64, cast to fp32) -> SGLang's HIP padded-row
post-processing -> the registered standard pre-permute -> ``AiterRunnerCore.run`` -> the spy
(records only). It returns the ``topk_ids`` / ``topk_weight`` values ``fused_moe`` received,
which router ran, and whether SGLang says the scale was folded into the top-k
(``is_routed_scaling_factor_fused_in_topk``: then the model's epilogue does not multiply again).
The parent judges them (``fp4moe.targets.sglang.checks``: ``expert_ids``, ``routing_once``).
"""

from __future__ import annotations

import dataclasses
import importlib

from fp4moe.targets.sglang.child import aiter_spy, probes

TOPK_MODULE = "sglang.srt.layers.moe.topk"
#: what the parent writes beside the row's tokens for the routed batch (fp4moe.targets.sglang.target.routing_inputs)
INPUTS = ("router_logits", "correction_bias", "num_token_non_padded")
#: topk.py's import-time platform selectors in the cpu drive: SGLang on ROCm with aiter (the
#: MI355X path); read, never set, in gfx950 mode
TOPK_FLAGS = {"_is_hip": True, "_use_aiter": True, "_is_cuda": False, "_is_cpu": False, "_is_npu": False, "_is_xpu": False}


def topk_config(topk, top_k: int, bias, scaling: float):
    """DeepSeek-V4's ``TopKConfig`` on aiter (``deepseek_v2.py``'s DSV4 override): keywords the
    release does not have are left out (recorded by the caller)."""
    kw = dict(top_k=top_k, use_grouped_topk=False, renormalize=True, correction_bias=bias, routed_scaling_factor=scaling,
              apply_routed_scaling_factor_on_output=True, scoring_func="sqrtsoftplus")
    names = {f.name for f in dataclasses.fields(topk.TopKConfig)}
    return topk.TopKConfig(**{k: v for k, v in kw.items() if k in names}), sorted(set(kw) - names)


def routed(core, pre, info, layer, tok: dict, row: dict, *, patch: bool = True) -> dict:
    """One padded batch from router logits to ``fused_moe`` (see the module docstring)."""
    import torch

    from fp4moe.targets.sglang.child import patches

    if pre is None:
        raise RuntimeError("no standard -> aiter pre-permute registered: the routed batch cannot reach the runner")
    topk = importlib.import_module(TOPK_MODULE)
    flags = patches.set_flags(topk, TOPK_FLAGS) if patch else {
        n: {"found": hasattr(topk, n), "was": repr(getattr(topk, n, None)), "now": repr(getattr(topk, n, None))} for n in TOPK_FLAGS}
    logits, bias = tok["router_logits"], tok["correction_bias"]
    n_real, padded = int(tok["num_token_non_padded"]), logits.shape[0]
    x = torch.zeros(padded, tok["hidden_states"].shape[1], dtype=tok["hidden_states"].dtype, device=logits.device)
    x[:n_real] = tok["hidden_states"][:n_real]
    cfg, missing = topk_config(topk, row["top_k"], bias, float(row["routed_scaling_factor"]))
    r0, n0 = len(aiter_spy.ROUTER_CALLS), len(aiter_spy.SPY_CALLS)
    out = topk.select_experts(hidden_states=x, router_logits=logits, topk_config=cfg,
                              num_token_non_padded=torch.tensor(n_real, dtype=torch.int32, device=logits.device))
    fused = getattr(topk, "is_routed_scaling_factor_fused_in_topk", None)
    aiter_spy.SPY_MODE["compute"] = False
    try:
        made = pre(probes.dispatch_output({"hidden_states": x}, out), info, layer.moe_runner_config, {})
        core.run(made, info, {})
    finally:
        aiter_spy.SPY_MODE["compute"] = True
    calls = aiter_spy.SPY_CALLS[n0:]
    del aiter_spy.SPY_CALLS[n0:]
    res = {"rows": padded, "non_padded": n_real, "config_missing": missing, "flags": {k: v["found"] for k, v in flags.items()},
           "router": [c["name"] for c in aiter_spy.ROUTER_CALLS[r0:]] or
           (["sglang (no aiter router called)"] if patch else ["as this runner selects it (not recorded in gfx950 mode)"]),
           "fused_in_topk": bool(fused(cfg)) if fused else None, "fused_moe_calls": len(calls)}
    if calls:
        objs = calls[0]["objects"]
        res["topk_ids"] = objs["topk_ids"].detach().cpu().to(torch.int64).tolist()
        res["topk_weight"] = objs["topk_weight"].detach().cpu().to(torch.float64).tolist()
        res["topk_weight_dtype"] = str(objs["topk_weight"].dtype).replace("torch.", "")
    return res
