"""One ``fused_moe`` call of a loaded tree, run and recorded (in a child that loaded the tree).

Index: :func:`observe_cfgs` (every ``get_2stage_cfgs`` question and answer logged, the function
itself unchanged), :func:`metadata` (its ``MOEMetadata`` as a record), :func:`value` (a keyword
as the parent described it, made real), :func:`run_row` (one :class:`..table.Row` on ``meta``
tensors: the dispatch table's call), :class:`LiveCalls` (the tree's ``fused_moe`` wrapped for a
caller that computes with it: each call's op records and config answers kept, its result and
exceptions unchanged).

Shared by the dispatch child (``fp4moe.targets.aiter.dispatch.child``) and the SGLang child in
its executed-dispatch setup (``fp4moe.targets.sglang.child.dispatch_aiter``); the records are
:data:`..records.ROWS_OUTPUT`'s per-row shape ``{"calls", "cfgs", "result"? | "error"?}``. No
check or verdict here: the parent judges.
"""

from __future__ import annotations

import functools
import os
import sys

from fp4moe.infra import runner
from fp4moe.targets.aiter.dispatch.standins import describe

#: characters of an exception a call record keeps
ERROR_CAP = 300


def metadata(md) -> dict:
    def stage(p):
        fn = getattr(p, "func", p)
        kw = getattr(p, "keywords", {}) or {}
        return {"func": getattr(fn, "__name__", repr(fn)[:80]), "keywords": {k: describe(v) for k, v in kw.items()}}

    return {"stage1": stage(md.stage1), "stage2": stage(md.stage2), "block_m": describe(md.block_m),
            "ksplit": describe(md.ksplit), "run_1stage": bool(md.run_1stage), "fuse_quant": str(md.fuse_quant),
            "prequant": bool(getattr(md, "prequant", True))}


def observe_cfgs(fm, log: list) -> None:
    """Record every ``get_2stage_cfgs`` question and answer into ``log`` (the function is unchanged)."""
    orig = fm.get_2stage_cfgs

    def observed(*args, **kwargs):
        md = orig(*args, **kwargs)
        log.append({"cfg_args": [describe(a) for a in args], "cfg_kwargs": {k: describe(v) for k, v in kwargs.items()},
                    "metadata": metadata(md)})
        return md

    observed.cache_info = getattr(orig, "cache_info", None)
    fm.get_2stage_cfgs = observed


def value(v, aiter, dev: str):
    """A keyword's value as the parent described it: "torch.NAME" a dtype, {"tensor": shape,
    "dtype"} a tensor of that shape on ``dev``, {"enum", "name"} that aiter enum member, else as is."""
    import torch

    if isinstance(v, str) and v.startswith("torch."):
        return getattr(torch, v.removeprefix("torch."))
    if isinstance(v, dict) and "tensor" in v:
        dt = getattr(torch, str(v["dtype"]).removeprefix("torch."))
        return torch.empty(v["tensor"], dtype=dt, device=dev)
    if isinstance(v, dict) and "enum" in v:
        return getattr(getattr(aiter, v["enum"]), v["name"])
    return v


def run_row(ld, rec, row: dict, cfg_log: list, fused_moe=None) -> dict:
    """``row`` (``table.Row.to_child()``) through the tree's ``fused_moe`` (or ``fused_moe``, the
    same function kept before a caller wrapped it) on meta tensors."""
    import torch

    call = fused_moe or ld.fused_moe.fused_moe
    aiter = sys.modules["aiter"]
    E, H, I, topk, M = row["experts"], row["hidden"], row["inter_padded"], row["topk"], row["tokens"]
    dev = "meta"
    fp4, e8 = torch.float4_e2m1fn_x2, torch.float8_e8m0fnu
    w1 = torch.empty(E, 2 * I, H // 2, dtype=torch.uint8, device=dev).view(fp4)
    w2 = torch.empty(E, H, I // 2, dtype=torch.uint8, device=dev).view(fp4)
    w1.is_shuffled = w2.is_shuffled = row["is_shuffled"]
    s1 = torch.empty(E * 2 * I, H // 32, dtype=torch.uint8, device=dev).view(e8)
    s2 = torch.empty(E * H, I // 32, dtype=torch.uint8, device=dev).view(e8)
    x = torch.empty(M, H, dtype=torch.bfloat16, device=dev)
    tw = torch.empty(M, topk, dtype=torch.float32, device=dev)
    ti = torch.empty(M, topk, dtype=torch.int32, device=dev)
    for k in [k for k in os.environ if k.startswith("AITER_")]:
        del os.environ[k]
    os.environ.update(row["env"])
    n0 = len(rec.calls)
    del cfg_log[:]
    out = {"id": row["id"], "calls": [], "cfgs": []}
    kw = dict(activation=getattr(aiter.ActivationType, row["activation"]), quant_type=aiter.QuantType.per_1x32,
              w1_scale=s1, w2_scale=s2, hidden_pad=row["hidden_pad"], intermediate_pad=row["intermediate_pad"],
              gate_mode=row["gate_mode"])
    if row.get("swiglu_limit") is not None:
        kw["swiglu_limit"] = row["swiglu_limit"]
    for k, v in row.get("extra", {}).items():
        kw[k] = value(v, aiter, dev)
    try:
        res = call(x, w1, w2, tw, ti, **kw)
        out["result"] = {"tensor": list(res.shape), "dtype": str(res.dtype)}
    except Exception as e:  # noqa: BLE001 -- the row's own outcome (a stand-in missing, the tree raising)
        out["error"] = runner.one_line(f"{type(e).__name__}: {e}", ERROR_CAP)
    out["calls"] = rec.calls[n0:]
    out["cfgs"] = list(cfg_log)
    return out


class LiveCalls:
    """The tree's ``fused_moe`` for a caller that computes with it (SGLang's runner): :meth:`wrap`
    returns a function with the same signature and result that keeps, per call, the op records
    and config answers of that call in :attr:`done` (``{"calls", "cfgs", "result"? | "error"?,
    "not_computed"?}``).

    A computing stand-in that does not model an argument it is given (``compute.StandInError``,
    e.g. an expert mask at a FlyDSL stage) does not end the caller's run: the call runs again with
    the stand-ins recording only, its records replace the first attempt's, and ``not_computed``
    names the refusal (the output is then not a result: the parent judges it ``n/a``). Anything
    else the tree raises (a keyword it does not take, an op with no stand-in) goes to the caller."""

    def __init__(self, rec, cfg_log: list):
        self.rec, self.cfg_log = rec, cfg_log
        self.done: list[dict] = []

    def _attempt(self, real, entry: dict, args, kwargs):
        n0 = len(self.rec.calls)
        del self.cfg_log[:]
        try:
            return real(*args, **kwargs)
        except Exception as e:
            entry["error"] = runner.one_line(f"{type(e).__name__}: {e}", ERROR_CAP)
            raise
        finally:
            entry["calls"] = self.rec.calls[n0:]
            entry["cfgs"] = list(self.cfg_log)

    def wrap(self, real):
        from fp4moe.targets.aiter.dispatch.compute import StandInError

        @functools.wraps(real)
        def fused_moe(*args, **kwargs):
            entry: dict = {"calls": [], "cfgs": []}
            self.done.append(entry)
            try:
                res = self._attempt(real, entry, args, kwargs)
            except StandInError:
                entry["not_computed"] = entry.pop("error")
                computing, self.rec.compute = self.rec.compute, {}
                try:
                    res = self._attempt(real, entry, args, kwargs)
                finally:
                    self.rec.compute = computing
            entry["result"] = describe(res)
            return res

        return fused_moe
