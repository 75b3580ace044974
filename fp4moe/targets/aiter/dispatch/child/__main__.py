"""Child entry: ``python -m fp4moe.targets.aiter.dispatch.child TREE`` (rows: the harness input ``rows``).

Runs the tree's real ``fused_moe`` (loaded by :mod:`..loader`, compiled ops stood in by
:mod:`..standins`) once per row on meta tensors and returns only call records: which ops ran, in
which order, with their bound arguments (shapes/dtypes/scalars, never data), and what
``get_2stage_cfgs`` was asked and chose. No check or verdict runs here (the parent judges:
:mod:`fp4moe.targets.aiter.dispatch.contracts`).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from fp4moe.infra import harness
from fp4moe.targets.aiter.dispatch.records import ROWS_INPUT, ROWS_OUTPUT, SCHEMA


def _metadata(md) -> dict:
    from fp4moe.targets.aiter.dispatch.standins import describe

    def stage(p):
        fn = getattr(p, "func", p)
        kw = getattr(p, "keywords", {}) or {}
        return {"func": getattr(fn, "__name__", repr(fn)[:80]), "keywords": {k: describe(v) for k, v in kw.items()}}

    return {"stage1": stage(md.stage1), "stage2": stage(md.stage2), "block_m": describe(md.block_m),
            "ksplit": describe(md.ksplit), "run_1stage": bool(md.run_1stage), "fuse_quant": str(md.fuse_quant),
            "prequant": bool(getattr(md, "prequant", True))}


def _observe_cfgs(fm, log: list) -> None:
    """Record every ``get_2stage_cfgs`` question and answer (the function itself is unchanged)."""
    from fp4moe.targets.aiter.dispatch.standins import describe

    orig = fm.get_2stage_cfgs

    def observed(*args, **kwargs):
        md = orig(*args, **kwargs)
        log.append({"cfg_args": [describe(a) for a in args], "cfg_kwargs": {k: describe(v) for k, v in kwargs.items()},
                    "metadata": _metadata(md)})
        return md

    observed.cache_info = getattr(orig, "cache_info", None)
    fm.get_2stage_cfgs = observed


def _value(v, aiter, dev: str):
    """A keyword's value as the parent described it: "torch.NAME" a dtype, {"tensor": shape,
    "dtype"} a meta tensor of that shape, {"enum", "name"} that aiter enum member, else as is."""
    import torch

    if isinstance(v, str) and v.startswith("torch."):
        return getattr(torch, v.removeprefix("torch."))
    if isinstance(v, dict) and "tensor" in v:
        dt = getattr(torch, str(v["dtype"]).removeprefix("torch."))
        return torch.empty(v["tensor"], dtype=dt, device=dev)
    if isinstance(v, dict) and "enum" in v:
        return getattr(getattr(aiter, v["enum"]), v["name"])
    return v


def run_row(ld, rec, row: dict) -> dict:
    import torch

    fm = ld.fused_moe
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
    out = {"id": row["id"], "calls": [], "cfgs": []}
    kw = dict(activation=getattr(aiter.ActivationType, row["activation"]), quant_type=aiter.QuantType.per_1x32,
              w1_scale=s1, w2_scale=s2, hidden_pad=row["hidden_pad"], intermediate_pad=row["intermediate_pad"],
              gate_mode=row["gate_mode"])
    if row.get("swiglu_limit") is not None:
        kw["swiglu_limit"] = row["swiglu_limit"]
    for k, v in row.get("extra", {}).items():
        kw[k] = _value(v, aiter, dev)
    try:
        res = fm.fused_moe(x, w1, w2, tw, ti, **kw)
        out["result"] = {"tensor": list(res.shape), "dtype": str(res.dtype)}
    except Exception as e:  # noqa: BLE001 -- the row's own outcome (a stand-in missing, the tree raising)
        out["error"] = harness.one_line(f"{type(e).__name__}: {e}", 300)
    out["calls"] = rec.calls[n0:]
    return out


def main(argv: list[str]) -> int:
    tree_arg = argv[0]
    with harness.child_session(SCHEMA) as s:
        from fp4moe.targets.aiter.dispatch import loader, standins

        rows = json.loads(bytes(s.input_tensors(ROWS_INPUT)["json"].tolist()).decode())
        s.stage(f"loading {tree_arg}/aiter/fused_moe.py")
        tree = loader.locate(tree_arg)
        rec = standins.Recorder()
        scratch = Path(os.getcwd())
        ld = loader.load_fused_moe(tree, scratch, rec, env={})
        cfg_log: list = []
        _observe_cfgs(ld.fused_moe, cfg_log)
        import_calls = list(rec.calls)
        results = []
        for row in rows:
            s.stage(f"running fused_moe for row {row['id']}")
            del cfg_log[:]
            r = run_row(ld, rec, row)
            r["cfgs"] = list(cfg_log)
            results.append(r)
        s.put_json(ROWS_OUTPUT, {"rows": results, "import_calls": import_calls})
        s.finish({"tree": str(tree.root), "config_file": os.path.basename(ld.config_file),
                  "config_sources": [os.path.relpath(p, tree.root) for p in ld.config_sources],
                  "rows": len(results), "computed": sorted(rec.compute)})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
