"""Told/untold timing table of aiter's Triton MXFP4 MoE kernels (docs/perf-gate.md), one run.

DeepSeek-V4-Pro TP8 (384 experts, H 7168, I 384 -> 512 at align 256), per kernel (a16w4, a8w4),
per batch (1/64/1024/4096 tokens), per part (whole MoE, stage 1, stage 2): the pad told
(from ``quant_info.build_quant_info``) vs not told, CUDA graphs, ROUNDS interleaved randomly
ordered pairs (``fp4moe.gates.perf.abtest``), medians and the Hodges-Lehmann ratio. GPU only.

    FP4MOE_AITER_SRC=TREE python3 -m lab.studies.aiter_triton_pad_table OUT.md [--rounds N] [--tokens 1,64]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--tokens", default="1,64,1024,4096")
    p.add_argument("--modes", default="a16w4,a8w4")
    p.add_argument("--stages", default="moe,stage1,stage2")
    a = p.parse_args(argv)
    import torch

    from fp4moe.gates.perf import workloads
    from fp4moe.gates.perf.abtest import interleaved_ab
    from fp4moe.gates.perf.timer import DeviceTimer
    from fp4moe.stats.compare import compare_samples

    tree, why = workloads.aiter_tree_from_env()
    if tree is None:
        print(f"aiter_triton_pad_table: {why}", file=sys.stderr)
        return 2
    timer = DeviceTimer("cuda")
    lines = [f"aiter tree `{tree}`, {torch.cuda.get_device_name()}, {a.rounds} interleaved pairs, CUDA graphs; "
             "told = `unpadded_N/K` from `build_quant_info`'s intermediate_pad", "",
             "| kernel | tokens | part | untold median (us) | told median (us) | untold/told (median) | told/untold HL ratio [98% CI] | graph |",
             "|---|---:|---|---:|---:|---:|---|---|"]
    for mode in a.modes.split(","):
        for t in [int(x) for x in a.tokens.split(",")]:
            for st in a.stages.split(","):
                stage = None if st == "moe" else st
                t0 = time.perf_counter()
                try:
                    kw = dict(aiter_src=tree, tokens=t, act_mode=mode, stage=stage, device="cuda", seed=5)
                    bf, inputs, bm = workloads.make_aiter_triton_workload(propagate_pad=False, **kw)
                    hf, _, hm = workloads.make_aiter_triton_workload(**kw)
                    ab = interleaved_ab(bf, hf, inputs, a.rounds, 3, seed=3, timer=timer)
                    c = compare_samples(ab.base, ab.head, name=f"{mode} T{t} {st}")
                    mb, mh = np.median(ab.base) * 1e6, np.median(ab.head) * 1e6
                    row = (f"| {mode} | {t} | {st} | {mb:.1f} | {mh:.1f} | {mb / mh:.3f} | {c.ratio:.3f} "
                           f"[{c.ci_low:.3f}, {c.ci_high:.3f}] | {hm['cuda_graph'] and bm['cuda_graph']} |")
                except Exception as e:  # noqa: BLE001 -- one failing cell is reported, the table goes on
                    row = f"| {mode} | {t} | {st} | error: {type(e).__name__}: {str(e)[:120]} | | | | |"
                lines.append(row)
                print(row, f"({time.perf_counter() - t0:.1f} s)", flush=True)
                with open(a.out, "w") as f:
                    f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
