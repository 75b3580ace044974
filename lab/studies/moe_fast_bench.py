#!/usr/bin/env python
"""Time the GPU-bound reference MoE (``fp4moe.reference.grouped_moe``) on DeepSeek-V4 shapes and place each
shape on the roofline; check it against the exact reference on the same inputs first.

Per shape: the perf workload (``fp4moe.gates.perf.workloads.make_moe_workload``, reference backend,
which picks the fast path on a CUDA GPU), median of R device-timed rounds (CUDA events, inputs
rotating, a 512 MiB scratch write between rounds), the bytes a fused MoE must move
(``fp4moe.gates.perf.moe_bytes``) over the measured copy bandwidth, and the GEMM flops
(2 * T * k * 3 * n * H) over a measured bf16 matmul rate. Prints a markdown table and writes
``moe_fast_bench.json`` under --out.

    python3 -m lab.studies.moe_fast_bench --out out/fast        # on the H200
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

from fp4moe.gates.perf import workloads
from fp4moe.gates.perf.roofline import measure_bandwidth
from fp4moe.gates.perf.timer import DeviceTimer, time_rounds
from fp4moe.reference import kernel_budget
from fp4moe.reference.reference_backend import ReferenceBackend

FLUSH_BYTES = 512 << 20


def matmul_rate(device, size: int = 8192, rounds: int = 10) -> float:
    """bf16 matmul FLOP/s on random data (median of ``rounds``)."""
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(size, size, generator=g, device=device).to(torch.bfloat16)
    b = torch.randn(size, size, generator=g, device=device).to(torch.bfloat16)
    secs = time_rounds(lambda _: a @ b, [None], rounds, 3, timer=DeviceTimer(device))
    return 2.0 * size**3 / float(np.median(secs))


def check_against_exact(model, tp, align, tokens, act_mode, device) -> float:
    """rel. L2 of the fast path against the exact reference on the workload's weights and one
    batch of its tokens."""
    from fp4moe.model import catalogue
    from fp4moe.reference import quant_info, weight_path

    pc = catalogue.parallel_config(model, tp)
    e = workloads.DEFAULT_EXPERTS["reference"]
    raw = workloads.random_raw_layer(experts=e, hidden=pc.model.hidden, intermediate=pc.intermediate_per_partition,
                                     seed=0, device=device)
    pw = weight_path.process_fp4_moe_weights(*raw.tensors(), align=align, gu_interleave=True)
    info = quant_info.build_quant_info(pw)
    x, w, ids = workloads.random_tokens(tokens=tokens, hidden=pc.model.hidden, experts=e, top_k=pc.model.top_k, seed=1,
                                        device=device)
    fast = quant_info.call_fused_moe(ReferenceBackend(path="fast"), x, w, ids, info, act_mode=act_mode)
    exact = quant_info.call_fused_moe(ReferenceBackend(path="exact"), x, w, ids, info, act_mode=act_mode)
    return kernel_budget.rel_l2(fast.float(), exact.float())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--tokens", default="1,16,128,512,4096")
    p.add_argument("--shapes", default="dsv4-pro:8:128,dsv4-pro:8:256,dsv4-flash:8:128")
    p.add_argument("--act-modes", default="a16w4")
    p.add_argument("-r", "--rounds", type=int, default=50)
    p.add_argument("--check-tokens", type=int, default=16, help="tokens for the check against the exact path (0: skip)")
    p.add_argument("--out", type=Path, default=Path("moe-fast-bench"))
    args = p.parse_args(argv)
    dev = args.device
    timer = DeviceTimer(dev)
    bw = measure_bandwidth(dev)
    rate = matmul_rate(dev)
    print(f"copy bandwidth {bw['bytes_per_s'] / 1e12:.2f} TB/s, bf16 matmul {rate / 1e12:.0f} TFLOP/s", flush=True)
    rows = []
    for shape in args.shapes.split(","):
        model, tp, align = shape.split(":")
        tp, align = int(tp), int(align)
        for act in args.act_modes.split(","):
            err = check_against_exact(model, tp, align, args.check_tokens, act, dev) if args.check_tokens else None
            for t in (int(v) for v in args.tokens.split(",")):
                fn, inputs, meta = workloads.make_moe_workload(model=model, tp=tp, align=align, tokens=t, act_mode=act, device=dev)
                secs = time_rounds(fn, inputs, args.rounds, 5, timer=timer, flush_bytes=FLUSH_BYTES)
                med = float(np.median(secs))
                n = meta["padded_intermediate"] - meta["kernel_intermediate_pad"]
                flops = 2.0 * t * meta["top_k"] * 3 * n * meta["hidden"]
                row = {
                    "shape": meta["shape"], "tokens": t, "act_mode": act, "median_us": med * 1e6,
                    "iqr_us": float(np.subtract(*np.percentile(secs, [75, 25]))) * 1e6,
                    "bytes_moved": meta["bytes_moved"], "bw_fraction": meta["bytes_moved"] / med / bw["bytes_per_s"],
                    "flops": flops, "compute_fraction": flops / med / rate, "cuda_graph": meta.get("cuda_graph"),
                    "rel_l2_vs_exact": err,
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
    lines = [
        f"Copy bandwidth {bw['bytes_per_s'] / 1e12:.2f} TB/s (best of 20, 1 GiB); bf16 matmul {rate / 1e12:.0f} TFLOP/s (8192^3).",
        "",
        "| shape | median | IQR | bytes | bandwidth fraction | compute fraction | CUDA graph | rel. L2 vs exact (T=%d) |" % args.check_tokens,
        "|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in rows:
        lines.append(
            f"| `{r['shape']}` | {r['median_us']:.1f} us | {r['iqr_us']:.1f} us | {r['bytes_moved'] / 1e6:.1f} MB | "
            f"{r['bw_fraction']:.1%} | {r['compute_fraction']:.1%} | {'yes' if r['cuda_graph'] else 'no'} | "
            f"{'' if r['rel_l2_vs_exact'] is None else format(r['rel_l2_vs_exact'], '.2e')} |"
        )
    table = "\n".join(lines) + "\n"
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "moe_fast_bench.json").write_text(json.dumps({"bandwidth": bw, "matmul_flops": rate, "rows": rows}, indent=1))
    (args.out / "moe_fast_bench.md").write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
