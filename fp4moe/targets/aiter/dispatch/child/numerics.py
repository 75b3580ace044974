"""Child entry: ``python -m fp4moe.targets.aiter.dispatch.child.numerics TREE`` (the spec and the
tensors: harness inputs, see :mod:`fp4moe.targets.aiter.dispatch.records`).

It only computes: loads the tree's real ``aiter/fused_moe.py`` once (the loader, every compiled
op recorded and computed by :mod:`fp4moe.targets.aiter.dispatch.compute`), with aiter's own
``AITER_CONFIG_FMOE`` merge of the tree's tuned CSVs plus the spec's extra rows, runs
``fused_moe`` once per case on the parent's tensors with every fresh allocation poisoned, and
returns each output and the ops it reached (names and the arguments that say which path ran and
what each stage was told). The parent computes the references and judges
(:mod:`fp4moe.targets.aiter.dispatch.numerics`).
"""

from __future__ import annotations

import csv
import json
import os
import sys
from pathlib import Path

from fp4moe.infra import runner
from fp4moe.targets.aiter.dispatch.records import (
    NUMERICS_OUTPUT_PREFIX,
    NUMERICS_SCHEMA,
    NUMERICS_SPEC,
)

#: the op arguments a case record keeps
KEPT_ARGS = ("kernelName", "block_m", "unit_size", "tile_m", "sort_block_m", "inter_dim_pad", "model_dim_pad",
             "n_padded_zeros", "k_padded_zeros", "a_dtype", "out_dtype", "gate_mode", "split_k", "splitk",
             "swiglu_limit", "is_shuffled", "mode")
EXTRA_CSV = "numerics_tuned_fmoe.csv"
BOUND_ENV = "AITER_BF16_FP8_MOE_BOUND"


def _write_extra_csv(spec: dict, scratch: Path) -> Path:
    path = scratch / EXTRA_CSV
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=spec["csv_header"])
        w.writeheader()
        for r in spec["csv_rows"]:
            w.writerow(r)
    return path


def _ops(calls: list) -> list:
    from fp4moe.targets.aiter.dispatch.standins import describe

    return [{"op": c["op"], "args": {k: describe(v) if not isinstance(v, (str, int, float, bool, type(None))) else v
                                     for k, v in c.get("args", {}).items() if k in KEPT_ARGS}}
            for c in calls if not c["op"].startswith("_") or "opus" in c["op"]]


def run_case(ld, rec, case: dict, layer: dict, toks: dict):
    import torch

    from fp4moe.targets.aiter.dispatch import compute

    aiter = sys.modules["aiter"]
    os.environ.pop(BOUND_ENV, None)
    os.environ.update(case["env"])
    fp4 = torch.float4_e2m1fn_x2
    w1, w2 = layer["w1"].view(fp4), layer["w2"].view(fp4)
    w1.is_shuffled = w2.is_shuffled = bool(case["shuffled"])
    with compute.poisoned_allocations():
        return ld.fused_moe.fused_moe(
            toks["x"], w1, w2, toks["topk_weights"], toks["topk_ids"], activation=aiter.ActivationType.Silu,
            quant_type=aiter.QuantType.per_1x32, w1_scale=layer["w1_scale"].view(torch.float8_e8m0fnu),
            w2_scale=layer["w2_scale"].view(torch.float8_e8m0fnu), intermediate_pad=int(case["pad"]),
            swiglu_limit=case["swiglu_limit"], gate_mode="interleave")


def main(argv: list[str]) -> int:
    with runner.child_session(NUMERICS_SCHEMA) as s:
        from fp4moe.targets.aiter.dispatch import loader

        spec = json.loads(bytes(s.input_tensors(NUMERICS_SPEC)["json"].tolist()).decode())
        s.stage(f"loading {argv[0]}/aiter/fused_moe.py")
        scratch = Path(os.getcwd())
        cfg = os.pathsep.join([*spec["sources"], str(_write_extra_csv(spec, scratch))])
        from fp4moe.targets.aiter.dispatch.standins import ComputingRecorder

        rec = ComputingRecorder()
        ld = loader.load_fused_moe(loader.locate(argv[0]), scratch, rec, env={"AITER_CONFIG_FMOE": cfg})
        layers = {}
        out = []
        for case in spec["cases"]:
            s.stage(f"running fused_moe for case {case['id']}")
            if case["layer"] not in layers:
                layers[case["layer"]] = s.input_tensors(f"layer-{case['layer']}")
            n0 = len(rec.calls)
            entry = {"id": case["id"]}
            try:
                res = run_case(ld, rec, case, layers[case["layer"]], s.input_tensors(f"tokens-{case['index']}"))
                s.put_tensors(f"{NUMERICS_OUTPUT_PREFIX}{case['index']}", {"out": res})
            except Exception as e:  # noqa: BLE001 -- the case's own outcome (a stand-in refusing, the tree raising)
                entry["error"] = runner.one_line(f"{type(e).__name__}: {e}", 300)
            entry["ops"] = _ops(rec.calls[n0:])
            out.append(entry)
        s.finish({"cases": out})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
