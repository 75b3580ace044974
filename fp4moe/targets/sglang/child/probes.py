"""What the drive asks SGLang's aiter runner beyond the row itself.

Index: :func:`field_probe` (each ``AiterMoeQuantInfo`` field set to a sentinel: which ``fused_moe``
keyword it reaches, all at once or one at a time, ``PROBE_ONE``), :func:`runner_paths` (the
pre-permutes SGLang registers to aiter, ``KNOWN_PRE_PERMUTE``), :func:`empty_batch` (the runner
at 0 tokens), :func:`same` (same storage), the standard dispatcher's objects. CHILD PROCESS ONLY.
"""

from __future__ import annotations

import dataclasses
import sys

from fp4moe.targets.sglang.child import aiter_spy


def same(a, b) -> bool:
    """Same bytes in the same storage (a dtype view of the layer's tensor counts as the same)."""
    import torch

    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return False
    return a.data_ptr() == b.data_ptr() and a.nbytes == b.nbytes


#: AiterMoeQuantInfo field -> the aiter.fused_moe keyword it must reach (SGLang's contract).
FIELD_TO_KWARG = {
    "w13_weight": "w1", "w2_weight": "w2", "w13_scale": "w1_scale", "w2_scale": "w2_scale",
    "a13_scale": "a1_scale", "a2_scale": "a2_scale", "b13": "bias1", "b2": "bias2",
    "expert_mask": "expert_mask", "doweight_stage1": "doweight_stage1", "hidden_pad": "hidden_pad",
    "intermediate_pad": "intermediate_pad", "swiglu_limit": "swiglu_limit", "quant_type": "quant_type",
}


#: the dispatch formats SGLang registers a pre-permute to the aiter runner for, and what the
#: tier does with each (0.5.23 moe_runner/aiter.py): a release registering another one is an
#: unknown path (the runner_paths check fails naming it)
KNOWN_PRE_PERMUTE = {
    "standard": "driven: pre_permute_standard_to_aiter (TP, and EP through the standard dispatcher's expert mask)",
    "deepep_normal": "not driven: DeepEP dispatch (needs DeepEP and a process group); listed",
    "deepep_ll": "not driven: DeepEP low-latency dispatch (needs DeepEP and a process group); listed",
}


def runner_paths(runner_mod):
    """({format: what the tier does} for every pre-permute registered to aiter, plus "unknown"
    for those not in KNOWN_PRE_PERMUTE; the standard one or None)."""
    base = sys.modules[runner_mod.__name__.rsplit(".", 1)[0] + ".base"]
    pool = getattr(getattr(base, "PermuteMethodPool", None), "_pre_permute_methods", None)
    if pool is None:
        return {"error": "no PermuteMethodPool._pre_permute_methods in this release"}, None
    out = {}
    std = None
    for (fmt, backend), fn in pool.items():
        fmt, backend = str(getattr(fmt, "value", fmt)), str(getattr(backend, "value", backend))
        if backend != "aiter":
            continue
        out[fmt] = {"function": getattr(fn, "__name__", repr(fn)), "how": KNOWN_PRE_PERMUTE.get(fmt, "unknown")}
        if fmt == "standard":
            std = fn
    return out, std


def topk_output(tok):
    topk = sys.modules.get("sglang.srt.layers.moe.topk") or __import__("importlib").import_module("sglang.srt.layers.moe.topk")
    import torch

    ids = tok["topk_ids"]
    logits = torch.zeros(ids.shape[0], int(ids.max()) + 1 if ids.numel() else 1)
    return topk.StandardTopKOutput(topk_weights=tok["topk_weights"], topk_ids=tok["topk_ids"], router_logits=logits)


def dispatch_output(tok, topk_out):
    std = __import__("importlib").import_module("sglang.srt.layers.moe.token_dispatcher.standard")
    return std.StandardDispatchOutput(hidden_states=tok["hidden_states"], hidden_states_scale=None, topk_output=topk_out)


def empty_batch(core, pre, info, layer, tok, runner_input) -> dict:
    """The runner at 0 tokens, its input made the same way as the row's (SGLang's pre-permute
    where registered): SGLang 0.5.23's ``AiterRunnerCore.run`` returns early without calling
    ``fused_moe`` (aiter has no M == 0 guard of its own). Records the fused_moe calls it made,
    the output's shape and dtype, or the exception."""
    empty = {k: v[:0] for k, v in tok.items()}
    n0 = len(aiter_spy.SPY_CALLS)
    try:
        first = pre(dispatch_output(empty, topk_output(empty)), info, layer.moe_runner_config, {}) if pre is not None \
            else runner_input(info)
        if pre is None:
            first.hidden_states, first.topk_ids, first.topk_weights = empty["hidden_states"], empty["topk_ids"], empty["topk_weights"]
        out = core.run(first, info, {})
        res = {"output": aiter_spy.describe(getattr(out, "hidden_states", out))}
    except Exception as e:  # judged in the parent (the empty_batch check), not a drive failure
        res = {"error": f"{type(e).__name__}: {e}"[:300]}
    res["fused_moe_calls"] = len(aiter_spy.SPY_CALLS) - n0
    del aiter_spy.SPY_CALLS[n0:]
    return res


#: fields probed one at a time as well (every other field as the builder made it), so a field
#: forwarded only inside some branch (e.g. swiglu_limit only with fp8 activations) is seen
PROBE_ONE = ("a13_scale", "a2_scale", "b13", "b2", "expert_mask", "doweight_stage1", "hidden_pad", "intermediate_pad",
             "swiglu_limit", "fp8_activations")


def field_probe(core, runner_input, info, fields, only: str | None = None) -> dict:
    """Run the runner once more with every quant-info field set to a distinct sentinel (or
    only field ``only``) and see which ``fused_moe`` keyword each one reaches (the spy only
    records here)."""
    import torch

    sentinels = {
        "a13_scale": torch.full((1,), 3.0), "a2_scale": torch.full((1,), 5.0), "b13": torch.full((1,), 7.0),
        "b2": torch.full((1,), 11.0), "expert_mask": torch.ones(info.expert_mask.numel() if info.expert_mask is not None else 1, dtype=torch.int32),
        "doweight_stage1": True, "hidden_pad": 96, "intermediate_pad": 160, "swiglu_limit": 7.25,
        "fp8_activations": True,  # gfx950 + bf16 + interleaved gate/up: must become quant_dtype_a=fp8
    }
    sentinels = {k: v for k, v in sentinels.items() if k in fields and (only is None or k == only)}
    probe = dataclasses.replace(info, **sentinels)
    if "fused_moe_kwargs" in fields and only is None:
        probe.fused_moe_kwargs = dict(info.fused_moe_kwargs or {}, fp4moe_probe_kwarg=13)
    aiter_spy.SPY_MODE["compute"] = False
    n0 = len(aiter_spy.SPY_CALLS)
    try:
        core.run(runner_input(probe), probe, {})
    finally:
        aiter_spy.SPY_MODE["compute"] = True
    objs = aiter_spy.SPY_CALLS[n0]["objects"] if len(aiter_spy.SPY_CALLS) > n0 else {}
    out = {}
    for f in (fields if only is None else [only]):
        want = FIELD_TO_KWARG.get(f)
        v = getattr(probe, f)
        if f == "fused_moe_kwargs":
            got = objs.get("fp4moe_probe_kwarg")
            out[f] = {"kwarg": "(its keys)", "reached": got == 13, "got": aiter_spy.describe(got)}
        elif f == "fp8_activations":  # aiter's a8w4: MXFP8 activations (dtypes.fp8)
            got = objs.get("quant_dtype_a")
            out[f] = {"kwarg": "quant_dtype_a", "reached": got is torch.float8_e4m3fn, "got": aiter_spy.describe(got),
                      "sent": True, "gate_mode": aiter_spy.describe(objs.get("gate_mode"))}
        elif f == "quant_type":
            got = objs.get("quant_type")
            out[f] = {"kwarg": want, "reached": getattr(got, "name", None) == getattr(v, "value", v), "got": aiter_spy.describe(got),
                      "sent": aiter_spy.describe(v)}
        elif want is None:
            out[f] = {"kwarg": None, "reached": None, "got": None, "note": "no fused_moe keyword known for this field"}
        elif isinstance(v, torch.Tensor):
            got = objs.get(want)
            out[f] = {"kwarg": want, "reached": got is v or same(got, v), "got": aiter_spy.describe(got), "sent": aiter_spy.describe(v)}
        else:
            got = objs.get(want, "<absent>")
            out[f] = {"kwarg": want, "reached": got == v, "got": aiter_spy.describe(got), "sent": aiter_spy.describe(v)}
    return out
