#!/usr/bin/env python
"""Measure what the MXFP4 MoE weight path costs in GPU memory, beyond tensor bytes.

For DeepSeek-V4-Pro at TP8 (per rank: E = 384, H = 7168, I_p = 384), align 128 and 256,
GU-interleave on and off, for ``--layers`` consecutive MoE layers (as a model load does):

1. build one layer's raw tensors on the GPU (seeded ``torch.randint`` uint8; byte counts do not
   depend on the values, so no quantizer is needed at full size),
2. run ``fp4moe.reference.weight_path.process_fp4_moe_weights`` (the padding branch allocates new buffers
   while the raw ones are still alive; the shuffles allocate again),
3. delete the raw tensors and keep the processed record alive (as the model keeps its params),

recording ``torch.cuda.memory_allocated`` (live tensors), ``max_memory_allocated`` (peak),
``memory_reserved`` (allocator cache included) and ``torch.cuda.mem_get_info`` (device free,
what SGLang's "mem usage" log is computed from, in GiB), then ``empty_cache`` and reserved again.
The exact byte model (``fp4moe.reference.footprint``) is printed beside each figure.

Usage (run by hand on an H200; < 2 minutes):
    python3 -m lab.studies.gpu_memory --out out/gpu_memory            # markdown table + JSON
    python3 -m lab.studies.gpu_memory --dry-run                       # the plan, no GPU needed
    python3 -m lab.studies.gpu_memory --device cpu --experts 2 --hidden 256 --out /tmp/x  # logic check
Exit codes: 0 ran, 2 could not run (no GPU without --device cpu / --dry-run).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

MODEL, TP, EP = "dsv4-pro", 8, 1
CONFIGS = [(128, True), (256, True), (128, False), (256, False)]  # (align, gu_interleave)
GIB = 1 << 30



def _plan(experts: int | None, hidden: int | None, layers: int):
    from fp4moe.model.catalogue import parallel_config
    from fp4moe.reference.footprint import layer_footprint

    cfg = parallel_config(MODEL, TP, EP)
    e = experts or cfg.local_experts
    h = hidden or cfg.model.hidden
    i_p = cfg.intermediate_per_partition
    raw_bytes = e * 2 * i_p * h // 2 + e * 2 * i_p * h // 32 + e * h * i_p // 2 + e * h * i_p // 32
    plan = []
    for align, gu in CONFIGS:
        fp = layer_footprint(MODEL, TP, EP, align, gu, experts=e, hidden=h)
        plan.append(
            {
                "config": f"{cfg.label}-align{align}-{'gu' if gu else 'nogu'}",
                "align": align,
                "gu_interleave": gu,
                "experts": e,
                "hidden": h,
                "intermediate": i_p,
                "padded": fp.padded_intermediate,
                "layers": layers,
                "raw_bytes_per_layer": raw_bytes,
                "model_bytes_per_layer": fp.routed_bytes,
                "model_bytes_before_shuffle": fp.routed_bytes_before_shuffle,
                "tensors": {t.name: {"shape": list(t.shuffled_shape), "bytes": t.shuffled_nbytes} for t in fp.tensors},
            }
        )
    return plan


def _measure(p: dict, device: str, seed: int) -> dict:
    import torch

    from fp4moe.reference.footprint import measure_processed
    from fp4moe.reference.weight_path import process_fp4_moe_weights

    cuda = device.startswith("cuda")
    e, h, i_p = p["experts"], p["hidden"], p["intermediate"]

    def stats():
        if not cuda:
            return {}
        torch.cuda.synchronize()
        free, total = torch.cuda.mem_get_info()
        return {
            "allocated": torch.cuda.memory_allocated(),
            "peak": torch.cuda.max_memory_allocated(),
            "reserved": torch.cuda.memory_reserved(),
            "device_used": total - free,
        }

    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    before = stats()
    g = torch.Generator(device=device).manual_seed(seed)

    def raw(*shape, high=256):  # e8m0 0xFF is NaN and rejected: scales draw from [0, 0xFE]
        return torch.randint(0, high, shape, dtype=torch.uint8, device=device, generator=g)

    kept, per_layer = [], []
    t0 = time.perf_counter()
    for layer in range(p["layers"]):
        w13, w2 = raw(e, 2 * i_p, h // 2), raw(e, h, i_p // 2)
        w13_s, w2_s = raw(e, 2 * i_p, h // 32, high=255), raw(e, h, i_p // 32, high=255)
        loaded = stats()
        if cuda:  # per-layer peak: what processing needs on top of what is already live
            torch.cuda.reset_peak_memory_stats()
        processed = process_fp4_moe_weights(w13, w13_s, w2, w2_s, align=p["align"], gu_interleave=p["gu_interleave"])
        processing_peak = stats().get("peak")
        del w13, w2, w13_s, w2_s  # the raw params are dropped; the processed ones stay, as in a model
        kept.append(processed)
        after = stats()
        nbytes = sum(m.nbytes for m in measure_processed(processed).values())
        per_layer.append(
            {
                "layer": layer,
                "measured_nbytes": nbytes,
                "after_raw_loaded": loaded,
                "after": after,
                "transient_peak_over_loaded": (processing_peak - loaded["allocated"]) if cuda else None,
            }
        )
    elapsed = time.perf_counter() - t0
    end = stats()
    if cuda:
        torch.cuda.empty_cache()
    end_emptied = stats()
    del kept
    if cuda:
        torch.cuda.empty_cache()
    out = dict(p)
    out.pop("tensors")
    out.update({"device": device, "seconds": elapsed, "before": before, "per_layer": per_layer, "end": end})
    out["end_after_empty_cache"] = end_emptied
    nb = per_layer[0]["measured_nbytes"]
    out["measured_nbytes_per_layer"] = nb
    out["model_equals_measured"] = all(r["measured_nbytes"] == p["model_bytes_per_layer"] for r in per_layer)
    if cuda:
        n = p["layers"]
        out["derived"] = {
            "allocated_per_layer": (end["allocated"] - before["allocated"]) / n,
            "transient_peak_per_layer": max(r["transient_peak_over_loaded"] for r in per_layer),
            "reserved_per_layer": (end["reserved"] - before["reserved"]) / n,
            "allocator_cache_left": end["reserved"] - end["allocated"],
            "allocator_cache_after_empty_cache": end_emptied["reserved"] - end_emptied["allocated"],
            "device_used_per_layer": (end["device_used"] - before["device_used"]) / n,
        }
    return out


def _markdown(results: list[dict], header: dict) -> str:
    g = lambda b: f"{b / GIB:.4f}"  # noqa: E731
    lines = [
        f"Device: {header['device_name']}; torch {header['torch']}; PYTORCH_CUDA_ALLOC_CONF="
        f"{header['alloc_conf'] or '(unset)'}; {results[0]['layers']} layers per config; GiB = 2^30 B.",
        "",
        "| config | P | model B/layer | measured nbytes/layer | allocated/layer GiB | transient peak GiB "
        "| reserved/layer GiB | cache left GiB | cache after empty_cache GiB | device used/layer GiB | s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        d = r.get("derived")
        cells = (
            [g(d["allocated_per_layer"]), g(d["transient_peak_per_layer"]), g(d["reserved_per_layer"]),
             g(d["allocator_cache_left"]), g(d["allocator_cache_after_empty_cache"]), g(d["device_used_per_layer"])]
            if d else ["-"] * 6
        )
        lines.append(
            f"| {r['config']} | {r['padded']} | {r['model_bytes_per_layer']:,} | {r['measured_nbytes_per_layer']:,} | "
            + " | ".join(cells)
            + f" | {r['seconds']:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None, help="directory for gpu_memory.json and gpu_memory.md")
    ap.add_argument("--layers", type=int, default=4, help="consecutive MoE layers per config (default 4)")
    ap.add_argument("--device", default=None, help="cuda (default when available) or cpu (logic check, no memory stats)")
    ap.add_argument("--experts", type=int, default=None, help="override experts per rank (default 384)")
    ap.add_argument("--hidden", type=int, default=None, help="override hidden (default 7168)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dry-run", action="store_true", help="print the plan and the byte model; touch no device")
    args = ap.parse_args(argv)
    if args.layers < 1:
        print("--layers must be >= 1", file=sys.stderr)
        return 2

    plan = _plan(args.experts, args.hidden, args.layers)
    if args.dry_run:
        for p in plan:
            print(
                f"{p['config']}: E={p['experts']} H={p['hidden']} I_p={p['intermediate']} P={p['padded']} "
                f"layers={p['layers']} raw={p['raw_bytes_per_layer']:,} B/layer "
                f"model={p['model_bytes_per_layer']:,} B/layer ({p['model_bytes_per_layer'] / GIB:.4f} GiB)"
            )
            for name, t in p["tensors"].items():
                print(f"    {name:<10} {str(tuple(t['shape'])):<24} {t['bytes']:>16,} B")
        return 0

    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else None)
    if device is None or (device.startswith("cuda") and not torch.cuda.is_available()):
        print("cannot run: no GPU visible to torch.cuda (use --dry-run, or --device cpu for a logic check)", file=sys.stderr)
        return 2
    header = {
        "device_name": torch.cuda.get_device_name(0) if device.startswith("cuda") else "cpu",
        "torch": torch.__version__,
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
        "command": "python3 -m lab.studies.gpu_memory " + " ".join(sys.argv[1:] if argv is None else argv),
    }
    results = [_measure(p, device, args.seed) for p in plan]
    md = _markdown(results, header)
    print(md)
    ok = all(r["model_equals_measured"] for r in results)
    print(f"\nmodel == measured nbytes for every config and layer: {ok}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gpu_memory.json").write_text(json.dumps({"header": header, "results": results}, indent=2))
        (args.out / "gpu_memory.md").write_text(md + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
