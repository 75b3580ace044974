"""Driving every row through SGLang's code: create, load, process, quant info, run, probes.

Index: :func:`drive_rows` (the mutant, the poison, then each row; a row that raises does not
hide the others), :func:`drive_row` (one row, its tensors handed to ``put``), :class:`RowFailed`
(the step that raised), :func:`a8w4_route`, :func:`where` (the SGLang / fp4moe frames of an
exception). CHILD PROCESS ONLY.
"""

from __future__ import annotations

import dataclasses
import os
import traceback

from fp4moe.targets.sglang import modes
from fp4moe.targets.sglang.child import aiter_spy, dispatch_aiter, layout_env, paths, probes, routing
from fp4moe.targets.sglang.child import layer as sglang_layer
from fp4moe.targets.sglang.child.poison import poison_fresh_memory
from fp4moe.targets.sglang.child.refused_call import recorded_fields
from fp4moe.targets.sglang.record import SETUP_STEPS


class RowFailed(Exception):
    def __init__(self, step, exc):
        super().__init__(f"{type(exc).__name__}: {exc}")
        self.step, self.exc = step, exc


def drive_row(fp8, runner_mod, row: dict, req: dict, put) -> dict:
    """One row through SGLang's code (its record); ``put(label, tensors)`` takes the processed
    tensors and the runner's output. A step that raises is a :class:`RowFailed` naming it."""
    from fp4moe.targets.sglang.child import patches

    step = {"now": "create_weights"}
    try:
        with patches.parallel_override(fp8, row["tp"]):
            return _drive_row(fp8, runner_mod, row, req, put, step)
    except Exception as e:
        raise RowFailed(step["now"], e) from e


def _drive_row(fp8, runner_mod, row: dict, req: dict, put, step: dict) -> dict:
    """The steps of one row, each named in ``step["now"]`` while it runs."""
    import torch

    rec: dict = {"label": row["label"]}
    dev = req.get("device", "cpu")
    layer, method = _create_and_load(fp8, runner_mod, row, req, rec, step, dev)
    step["now"] = "process_weights_after_loading"
    processed = _process(method, layer, rec)
    step["now"] = "maybe_get_hip_aiter_quant_info"
    info, fields = _quant_info(method, layer, row, rec, dev)
    tok = {k: v.to(dev) for k, v in torch.load(row["tokens"]).items()}
    routing_in = {k: tok.pop(k) for k in routing.INPUTS}  # the routed batch's; the row's tokens stay as they were
    core = runner_mod.AiterRunnerCore(layer.moe_runner_config)

    def runner_input(q):
        kw = dict(hidden_states=tok["hidden_states"], topk_ids=tok["topk_ids"], topk_weights=tok["topk_weights"],
                  quant_type=q.quant_type)
        names = {f.name for f in dataclasses.fields(runner_mod.AiterRunnerInput)}
        return runner_mod.AiterRunnerInput(**{k: v for k, v in kw.items() if k in names})

    out, pre = _run_once(runner_mod, core, info, layer, tok, runner_input, row, fields, rec, step)
    step["now"] = "select_experts -> AiterRunnerCore.run (padded batch)"
    try:  # judged in the parent (expert_ids, routing_once), never a drive failure
        rec["routed"] = routing.routed(core, pre, info, layer, {**tok, **routing_in}, row, patch=dev == "cpu")
    except Exception as e:
        rec["routed"] = {"error": f"{type(e).__name__}: {e}"[:500], "where": where(e)}
    step["now"] = "AiterRunnerCore.run (empty batch)"
    rec["empty_batch"] = probes.empty_batch(core, pre, info, layer, tok, runner_input)
    step["now"] = "AiterRunnerCore.run (field probe)"
    rec["field_probe"] = probes.field_probe(core, runner_input, info, fields)
    step["now"] = "AiterRunnerCore.run (field probe, one field at a time)"
    rec["field_probe_each"] = {f: probes.field_probe(core, runner_input, info, fields, only=f)[f]
                               for f in fields if f in probes.PROBE_ONE}
    step["now"] = "AiterRunnerCore.run (which implementation: small-M switch as a gfx950 runner has it)"
    rec["moe_path"], bypass = paths.moe_path(runner_mod, core, info, runner_input, patch=dev == "cpu")
    put(row["label"], {**{f"processed.{p}": sglang_layer.u8(t).cpu() for p, t in processed.items()},
                       "output": out.hidden_states.detach().cpu().clone(),
                       **({"moe_path_output": bypass} if bypass is not None else {})})
    step["now"] = "footprint (meta device)"
    rec["footprint"] = sglang_layer.full_size_footprint(fp8, runner_mod, row, req["swiglu_limit"])
    step["now"] = "the layer under each combination of the environment variables it reads"
    names = layout_env.env_names(fp8, runner_mod)
    rec["layout_env"] = {"names": names, "combinations": layout_env.probe(
        names, lambda: _layout_under_env(fp8, runner_mod, row, req, dev, runner_input))}
    return rec


def _layout_under_env(fp8, runner_mod, row: dict, req: dict, dev: str, runner_input) -> dict:
    """The row's layer built again (create, process, quant info; no checkpoint: layout and gate
    mode depend on shapes and flags, not bytes) and run once, recording only: the layout SGLang
    shuffled in, the weights' is_shuffled and the gate mode fused_moe got."""
    import torch

    with torch.device(dev):
        layer, method = sglang_layer.make_layer(fp8, runner_mod, e=row["experts"], h=row["hidden"],
                                                ip=row["intermediate_per_partition"], tp=row["tp"], top_k=row["top_k"],
                                                swiglu_limit=req["swiglu_limit"], fp8_activations=row.get("fp8_activations", False))
    n_shuffle = len(aiter_spy.SHUFFLE_CALLS)
    method.process_weights_after_loading(layer)
    calls = aiter_spy.SHUFFLE_CALLS[n_shuffle:]
    del aiter_spy.SHUFFLE_CALLS[n_shuffle:]
    info, _ = _quant_info(method, layer, row, {}, dev)
    n0 = len(aiter_spy.SPY_CALLS)
    aiter_spy.SPY_MODE["compute"] = False
    try:
        runner_mod.AiterRunnerCore(layer.moe_runner_config).run(runner_input(info), info, {})
    finally:
        aiter_spy.SPY_MODE["compute"] = True
    got = aiter_spy.SPY_CALLS[n0:]
    del aiter_spy.SPY_CALLS[n0:]
    if len(got) != 1:
        raise RuntimeError(f"AiterRunnerCore.run called aiter.fused_moe {len(got)} times (expected 1)")
    return {"shuffle_calls": calls, "is_shuffled": got[0]["w_attrs"]["w1"].get("is_shuffled"),
            "gate_mode": got[0]["kwargs"].get("gate_mode")}


def _create_and_load(fp8, runner_mod, row: dict, req: dict, rec: dict, step: dict, dev: str):
    """SGLang's create_weights, then the checkpoint: through its own weight loader (a TP rank's
    shard of the whole layer) or rank 0's partition copied in."""
    import torch

    from fp4moe.model.checkpoint import load_moe_layer

    e, tp = row["experts"], row["tp"]
    with torch.device(dev):  # SGLang's model loader creates the parameters on the target device
        layer, method = sglang_layer.make_layer(fp8, runner_mod, e=e, h=row["hidden"], ip=row["intermediate_per_partition"],
                                                tp=tp, top_k=row["top_k"], swiglu_limit=req["swiglu_limit"],
                                                fp8_activations=row.get("fp8_activations", False), tp_rank=row.get("tp_rank"))
    step["now"] = "load"
    if layer.fp4moe_loader is not None:
        fm, fm_cls = layer.fp4moe_loader
        rec["created"] = {p: {"shape": list(getattr(layer, p).shape), "dtype": str(getattr(layer, p).dtype).replace("torch.", "")}
                          for p in sglang_layer.PARAMS}
        rec["loader"] = dict(sglang_layer.load_with_sglang(layer, fm, fm_cls, row["checkpoint"], e),
                             via=f"{sglang_layer.FUSED_MOE_MODULE}.FusedMoE.weight_loader", tp_rank=row["tp_rank"], tp=tp)
    else:
        raw = load_moe_layer(row["checkpoint"], 0)  # the file holds one rank's partition (I_p rows)
        rec["created"] = sglang_layer.load_shard(layer, raw)
        rec["loader"] = {"via": "fp4moe.model.checkpoint rank-0 partition copied into create_weights' parameters"}
    return layer, method


def _process(method, layer, rec: dict) -> dict:
    """SGLang's process_weights_after_loading: the shuffles it made, the pads, the processed tensors."""
    n_shuffle = len(aiter_spy.SHUFFLE_CALLS)
    method.process_weights_after_loading(layer)
    rec["shuffle_calls"] = aiter_spy.SHUFFLE_CALLS[n_shuffle:]
    rec["layer_pads"] = {k: getattr(layer, k, None) for k in ("intermediate_pad", "hidden_pad")}
    rec["is_shuffled"] = bool(getattr(layer.w13_weight, "is_shuffled", False))
    processed = {p: getattr(layer, p) for p in sglang_layer.PARAMS}
    rec["processed"] = {p: aiter_spy.describe(t) for p, t in processed.items()}
    return processed


def _quant_info(method, layer, row: dict, rec: dict, dev: str):
    """SGLang's AiterMoeQuantInfo for the layer (EP: global ids, a mask over all experts with 1
    where this rank holds the expert) and whether it holds the layer's own tensors."""
    import torch

    mask = torch.tensor(row.get("expert_mask") or [1] * row["experts"], dtype=torch.int32, device=dev)
    layer.dispatcher = sglang_layer.Dispatcher(mask)
    info = method.maybe_get_hip_aiter_quant_info(layer)
    if info is None:
        raise RuntimeError("maybe_get_hip_aiter_quant_info returned None: the aiter quant info was not built")
    fields = [f.name for f in dataclasses.fields(info)]
    same = probes.same
    rec["quant_info"] = {f: aiter_spy.describe(getattr(info, f)) for f in fields}
    rec["quant_info_is_layer"] = {
        "w13_weight": same(info.w13_weight, layer.w13_weight), "w2_weight": same(info.w2_weight, layer.w2_weight),
        "w13_scale": same(info.w13_scale, layer.w13_weight_scale_inv), "w2_scale": same(info.w2_scale, layer.w2_weight_scale_inv),
        "expert_mask": info.expert_mask is mask,
    }
    return info, fields


def _run_once(runner_mod, core, info, layer, tok, runner_input, row: dict, fields, rec: dict, step: dict):
    """The runner once, its input as SGLang makes it (its registered pre-permute for the standard
    dispatcher, pre_permute_standard_to_aiter, from a StandardDispatchOutput): exactly one
    fused_moe call, whose keywords, inputs and tensors are recorded. (output, the pre-permute)."""
    step["now"] = "pre-permute (standard -> aiter)"
    rec["runner_paths"], pre = probes.runner_paths(runner_mod)
    n0, d0 = len(aiter_spy.SPY_CALLS), dispatch_aiter.count()
    if pre is not None:
        made = pre(probes.dispatch_output(tok, probes.topk_output(tok)), info, layer.moe_runner_config, {})
        rec["pre_permute_output"] = {k: aiter_spy.describe(getattr(made, k, None)) for k in ("hidden_states", "topk_ids", "topk_weights")}
        first = made
    else:
        first = runner_input(info)
    step["now"] = "AiterRunnerCore.run"
    with a8w4_route(row, fields, rec):
        out = core.run(first, info, {})
    calls = aiter_spy.SPY_CALLS[n0:]
    if len(calls) != 1:
        raise RuntimeError(f"AiterRunnerCore.run called aiter.fused_moe {len(calls)} times (expected 1)")
    objs, same = calls[0]["objects"], probes.same
    rec["fused_moe_kwargs"] = calls[0]["kwargs"]
    rec["act_mode"] = calls[0]["act_mode"]
    rec["w_attrs"] = calls[0]["w_attrs"]
    rec["aiter_inputs"] = calls[0]["inputs"]
    if dispatch_aiter.active():
        step["now"] = "AiterRunnerCore.run (executed dispatch records)"
        rec.update(dispatch_aiter.row_fields(row, rec, d0))
    rec["fused_moe_receives_layer"] = {
        "w1": same(objs["w1"], layer.w13_weight), "w2": same(objs["w2"], layer.w2_weight),
        "w1_scale": same(objs.get("w1_scale"), layer.w13_weight_scale_inv),
        "w2_scale": same(objs.get("w2_scale"), layer.w2_weight_scale_inv),
    }
    return out, pre


def a8w4_route(row: dict, fields: list[str], rec: dict):
    """How a row asking for fp8 activations reaches aiter's a8w4 in this release: through
    SGLang's own ``fp8_activations`` -> ``quant_dtype_a`` where ``AiterMoeQuantInfo`` has that
    field (the layer attribute is set in ``make_layer``); in releases without it, the way their
    DeepSeek-V4 launch did it, ``AITER_BF16_FP8_MOE_BOUND=0`` for the call (aiter reads it at
    call time; the spy's ``effective_act_mode`` too)."""
    import contextlib

    if not row.get("fp8_activations"):
        return contextlib.nullcontext()
    if "fp8_activations" in fields:
        rec["a8w4_via"] = "SGLang fp8_activations -> quant_dtype_a"
        return contextlib.nullcontext()
    rec["a8w4_via"] = f"{modes.BOUND_ENV}=0 (this release has no fp8_activations field)"

    @contextlib.contextmanager
    def bound0():
        was = os.environ.get(modes.BOUND_ENV)
        os.environ[modes.BOUND_ENV] = "0"
        try:
            yield
        finally:
            if was is None:
                os.environ.pop(modes.BOUND_ENV, None)
            else:
                os.environ[modes.BOUND_ENV] = was

    return bound0()



TRAIL_FILE = "/child/import_trail.py"


def where(e: BaseException, most: int = 8) -> list[str]:
    """The SGLang / fp4moe frames of an exception, innermost last: "file:line in func"."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if ("/sglang/" in f.filename or "/fp4moe/" in f.filename)
              and not (f.name == "exec_module" and f.filename.endswith(TRAIL_FILE))]  # the import trail's loader: noise
    return [f"{f.filename.split('/sglang/')[-1] if '/sglang/' in f.filename else 'fp4moe/' + f.filename.split('/fp4moe/')[-1]}"
            f":{f.lineno} in {f.name}" for f in frames[-most:]]


def drive_rows(fp8, runner_mod, req: dict, record: dict, put, stage) -> None:
    """Mutant (if any), then every row; both modes. ``stage(text)`` before each row: a process
    ended by SGLang's code names the row; ``put`` as in :func:`drive_row`."""
    if req.get("mutant"):
        from fp4moe.targets.sglang.child import mutants

        record["stage"] = "mutant"
        record["mutant"] = mutants.apply(req["mutant"], fp8, runner_mod)
    record["pad_poison"] = poison_fresh_memory(fp8, runner_mod)
    record["stage"] = "rows"
    for row in req["rows"]:  # rows are independent: one that raises does not hide the others
        stage(f"driving row {row['label']} through SGLang's code")
        n0, d0 = len(aiter_spy.SPY_CALLS), dispatch_aiter.count()
        try:
            record["rows"].append(drive_row(fp8, runner_mod, row, req, put))
        except RowFailed as e:  # SGLang's code (or the reference it feeds) raised for this row
            kept = recorded_fields(aiter_spy.SPY_CALLS[n0:], e.exc)
            record["rows"].append({"label": row["label"], "error": str(e)[:2000], "where": where(e.exc),
                                   "step": e.step, "setup": e.step in SETUP_STEPS, **kept,
                                   **dispatch_aiter.row_fields(row, kept, d0)})
    if req.get("mutant") and record["mutant"].get("applied"):
        from fp4moe.targets.sglang.child import mutants

        hits = mutants.runtime_hits(req["mutant"])
        record["mutant"]["runtime_hits"] = hits
        if hits == 0:  # patched, but SGLang never reached the mutated behaviour: not judged
            record["mutant"].update(applied=False, why="patched, but it never acted during the drive")
    record["stage"] = "done"

