"""The child's side of the kernel checks: each job of ``cases.plan`` run through aiter's kernels.

:func:`run_job` returns the outputs (tensors) and a small meta dict (the tuned configs each GEMM
used, seconds, or ``error``: where in the tree a call raised). It computes only: no comparison,
no verdict (``kernels.checks`` judges in the parent, which never imports aiter).

Per kind, the tensors:

- GEMM: ``y`` (clean), ``y2`` (a second run, plain layout), ``ya`` (every wrapper
  allocation poisoned, ``drive.poisoned_allocations``), with a pad ``yu`` (pad not told) and
  ``yp`` (random bytes and 0xFF scales in every pad channel, told); each of these as its
  difference from ``y`` (:func:`delta`);
- PAD (both sides of the first block_m switch), every allocation poisoned: ``y``/``h`` clean
  weights, ``yp``/``hp`` the pad poisoned;
- TAILS: ``y``, ``h``, every allocation poisoned;
- STAGE2 (GEMM2 alone, told K, every allocation poisoned): ``y`` on the gate's input with a zero
  pad, ``yp`` (as its difference) with the pad poisoned (``cases.stage2_inputs``);
- QUANT: a8w4's fused MXFP8 output (``q``, ``qs``) beside the bf16 stage-1 buffer ``h``; the
  FP4 activation quant (``q``, ``qs``) of the job's input;
- REDUCE: ``out`` (its buffer NaN-poisoned by the gate, the caller that provides it);
- ROUTING: the tensors ``routing()`` returned (``gate_scal``, ``expt_hist``, the ``expt_data``
  tables, ``gather``, ``scatter``) and its first stage alone (``topk_vals``, ``topk_ids``).
"""

from __future__ import annotations

import inspect
import time
from pathlib import Path

import torch

from fp4moe.targets.aiter.kernels import cases, drive
from fp4moe.targets.aiter.kernels.cases import Job, Kind
from fp4moe.targets.aiter.kernels.layout import poison_pads, to_triton_layout
from fp4moe.targets.aiter.results import TreeLacks

_LAYERS: dict = {}


def where_in_tree(e: BaseException) -> str:
    import traceback

    tb = traceback.extract_tb(e.__traceback__)
    fr = next((f for f in reversed(tb) if "/aiter/" in f.filename and "fp4moe" not in f.filename), tb[-1] if tb else None)
    return f"{fr.filename}:{fr.lineno}" if fr else "?"


def error_line(e: BaseException) -> str:
    return f"{where_in_tree(e)}: {type(e).__name__}: {' '.join(str(e).split())[:200]}"


def layer(shape, device):
    key = (shape, str(device))
    if key not in _LAYERS:
        _LAYERS.clear()
        _LAYERS[key] = cases.make_layer(shape, device=device)
    return _LAYERS[key]


def _cpu(t):
    return t.detach().cpu() if isinstance(t, torch.Tensor) else t


def run_job(am, job: Job, device: str = "cpu") -> tuple[dict, dict]:
    """(tensors, meta) of one job; an exception becomes ``meta["error"]`` (never raised), what
    the tree lacks ``meta["absent"]``."""
    t0 = time.perf_counter()
    n0 = len(am.config_log)
    try:
        out = RUNNERS[job.kind](am, job, device)
    except TreeLacks as e:  # a keyword, function or module the job needs (a later aiter has it): not called
        return {}, {"absent": str(e), "seconds": 0.0}
    except Exception as e:  # noqa: BLE001 - the tree raising is a finding about it, reported to the judge
        return {}, {"error": error_line(e), "seconds": round(time.perf_counter() - t0, 2), "where": where(am, job)}
    meta = {"seconds": round(time.perf_counter() - t0, 2), "configs": _configs(am.config_log[n0:]), "where": where(am, job)}
    return {k: _cpu(v).contiguous() for k, v in out.items()}, meta


def _configs(log) -> list:
    keep = ("block_m", "block_n", "block_k", "num_warps", "split_k")
    return [{"n": int(c["n"]), "k": int(c["k"]), "block_m": int(c["block_m"]), "source": str(c["source"]),
             "json": str(c.get("json") or ""),
             "config": {k: c["config"][k] for k in keep if isinstance(c["config"].get(k), int)}} for c in log]


def _setup(am, job: Job, device, swz=None):
    pw = layer(job.shape, device)
    x, w, ids, _ = cases.gemm_inputs(job.shape, job.tokens, pw, job.limit)
    x, w, ids = x.to(device), w.to(device), ids.to(device)
    bm = cases.block_m_for(job.tokens, job.shape.top_k, job.shape.experts)
    rd = drive.gate_routing(am, ids, w, job.shape.experts, bm)
    W = to_triton_layout(pw.w13, pw.w13_scale, pw.w2, pw.w2_scale, pw.padded_intermediate, swz, am.modules.get("shuffle"))
    return pw, x, rd, W


#: a run compared with the clean one travels as the bit patterns where it differs (the judge
#: rebuilds it: ``checks.rebuilt``), whole when more than this share differs
DELTA_MAX_SHARE = 0.25


def delta(name: str, y: torch.Tensor, other: torch.Tensor) -> dict:
    """``other`` as {name+"@idx", name+"@val"} (flat positions where its bits differ from ``y``),
    or {name: other} when the shapes differ or much differs (the judge sees every value)."""
    if other.shape != y.shape or other.dtype != y.dtype:
        return {name: other}
    a, b = y.reshape(-1).view(torch.int16), other.reshape(-1).view(torch.int16)
    idx = (a != b).nonzero().reshape(-1)
    if idx.numel() > DELTA_MAX_SHARE * a.numel():
        return {name: other}
    return {f"{name}@idx": idx.to(torch.int64), f"{name}@val": other.reshape(-1)[idx]}


def _gemm(am, job: Job, device) -> dict:
    """Every run with the wrappers' allocations NaN-poisoned: an unwritten value is NaN."""
    pw, x, rd, W = _setup(am, job, device, job.layout)
    kw = dict(pad=pw.intermediate_pad, limit=job.limit)
    with drive.poisoned_allocations(am):
        y, _ = drive.forward(am, x, W, rd, job.component, **kw)
        out = {"y": y}
        if job.layout is None:  # determinism: once per kernel and shape
            out |= delta("y2", y, drive.forward(am, x, W, rd, job.component, **kw)[0])
        if pw.intermediate_pad:
            out |= delta("yu", y, drive.forward(am, x, W, rd, job.component, tell_pad=False, **kw)[0])
            Wp = to_triton_layout(*poison_pads(pw), pw.padded_intermediate, job.layout, am.modules.get("shuffle"))
            out |= delta("yp", y, drive.forward(am, x, Wp, rd, job.component, **kw)[0])
    return out


def _pad(am, job: Job, device) -> dict:
    pw, x, rd, W = _setup(am, job, device)
    Wp = to_triton_layout(*poison_pads(pw), pw.padded_intermediate, None, am.modules.get("shuffle"))
    kw = dict(pad=pw.intermediate_pad, limit=job.limit)
    with drive.poisoned_allocations(am):
        y, h = drive.forward(am, x, W, rd, job.component, **kw)
        yp, hp = drive.forward(am, x, Wp, rd, job.component, **kw)
    return {"y": y, "h": h, "yp": yp, "hp": hp}


def _tails(am, job: Job, device) -> dict:
    pw, x, rd, W = _setup(am, job, device)
    with drive.poisoned_allocations(am):  # an unwritten tail tile shows as NaN
        y, h = drive.forward(am, x, W, rd, job.component, pad=pw.intermediate_pad, limit=job.limit)
    return {"y": y, "h": h}


def _stage2(am, job: Job, device) -> dict:
    """GEMM2 alone, told K, on the gate's input (``cases.stage2_inputs``): ``y`` its pad zero, ``yp``
    its pad poison; every allocation poisoned."""
    pw, _, rd, W = _setup(am, job, device)
    clean, bad = (tuple(t.to(device) for t in x) if isinstance(x, tuple) else x.to(device) for x in cases.stage2_inputs(job))
    with drive.poisoned_allocations(am):
        y = drive.stage2(am, clean, W, rd, job.component, pad=pw.intermediate_pad)
        return {"y": y} | delta("yp", y, drive.stage2(am, bad, W, rd, job.component, pad=pw.intermediate_pad))


def _quant(am, job: Job, device) -> dict:
    pw, x, rd, W = _setup(am, job, device)
    if job.component == "a8w4":
        h = drive.stage1(am, x, W, rd, "a8w4", pad=pw.intermediate_pad, limit=job.limit)
        with drive.poisoned_allocations(am):  # an fp8 value the fused quant leaves unwritten reads NaN
            q, qs = drive.stage1(am, x, W, rd, "a8w4", pad=pw.intermediate_pad, limit=job.limit, out_mx_quant=True)
        return {"h": h, "q": q.view(torch.uint8), "qs": qs.view(torch.uint8)}
    q, qs = am.quant.downcast_to_mxfp(x, torch.uint8, axis=-1)
    return {"q": q.view(torch.uint8), "qs": qs.view(torch.uint8)}


def _reduce(am, job: Job, device) -> dict:
    g, k, n = job.reduce
    x, indx = cases.reduce_inputs(g, k, n)
    out = torch.full((g, n), float("nan"), dtype=cases.BF16, device=device)  # the caller's buffer: poisoned
    got = am.reduce.reduce_grouped(x.to(device), indx.to(device), out, out_dtype=cases.BF16)
    return {"out": got.reshape(-1, n) if isinstance(got, torch.Tensor) else out}


def _routing(am, job: Job, device) -> dict:
    import importlib

    logits, bias = cases.routing_inputs(job)
    k = job.extra["top_k"]
    kw = job.routing.kwargs()
    b = {"bias": bias.to(device)} if bias is not None else {}
    for fn in (am.routing.routing,):
        lacking = [n for n in (*kw, *b) if not _takes(fn, n)]
        if lacking:
            at = where(am, job) or inspect.getsourcefile(fn)
            raise TreeLacks(f"{at}: {fn.__name__}() takes no keyword {', '.join(lacking)} (the model's routing settings need it)")
    rdata, gather, scatter = am.routing.routing(logits.to(device), k, **kw, **b)
    ed = rdata.expt_data
    out = {"gate_scal": rdata.gate_scal, "expt_hist": rdata.expt_hist, "gather": gather, "scatter": scatter,
           "block_m": torch.tensor([int(rdata.block_m)])}
    for f in ("token_offs_raw", "token_offs_pad", "block_pid_map"):
        out[f] = getattr(ed, f)
    out = {n: (v.to(torch.int64) if not v.is_floating_point() else v) for n, v in out.items()}
    if not job.extra.get("topk_stage", True):
        return out
    tk = importlib.import_module(am.routing.__name__.rsplit(".", 1)[0] + ".topk")
    if kw:
        vals, ids, _ = tk.topk(logits.to(device), k, apply_softmax=False, score_mode=kw["score_mode"], renorm=kw["renorm"],
                               routed_scaling_factor=kw["routed_scaling_factor"], **b)
    else:
        vals, ids, _ = tk.topk(logits.to(device), k, apply_softmax=True)
    out["topk_vals"], out["topk_ids"] = vals.float(), ids.to(torch.int64)
    return out



#: the tree's function each component's jobs call (what a FAIL row names as the tree's file:line)
ENTRY = {"a16w4": ("a16w4", "moe_gemm_a16w4"), "a8w4": ("a8w4", "moe_gemm_a8w4"), "a4w4": ("a4w4", "moe_gemm_a4w4"), "routing": ("routing", "routing"),
         "reduce": ("reduce", "reduce_grouped"), "quant": ("quant", "downcast_to_mxfp")}


def where(am, job: Job) -> str:
    """``aiter/...py:LINE`` of the tree's function the job calls (its ``def``), or ""."""
    mod, fn = ENTRY.get(job.component, (None, None))
    try:
        f = inspect.unwrap(getattr(getattr(am, mod), fn))
        path = Path(inspect.getsourcefile(f)).resolve()
        rel = path.relative_to(Path(am.tree).resolve().parent)
        return f"{rel.as_posix()}:{inspect.getsourcelines(f)[1]}"
    except (AttributeError, TypeError, OSError, ValueError):
        return ""


def _takes(fn, name: str) -> bool:
    params = inspect.signature(fn).parameters
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


RUNNERS = {Kind.GEMM: _gemm, Kind.PAD: _pad, Kind.TAILS: _tails, Kind.QUANT: _quant, Kind.REDUCE: _reduce,
           Kind.ROUTING: _routing, Kind.STAGE2: _stage2}


def job_meta(job: Job) -> dict:
    """The job's identity, as the record lists it (the parent checks it against its own plan)."""
    return {"kind": job.kind.value, "key": job.key}

