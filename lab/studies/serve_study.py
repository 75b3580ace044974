#!/usr/bin/env python
"""The serving gate's own proof, on loopback servers: false-regression rate and detection rate.

For each condition (A/A, and a head server whose decode step is s% slower, s in --slowdowns) it
runs N independent ``serve-bench`` comparisons (``fp4moe.gates.serve_bench.run_bench``, the code the
CLI runs) between two loopback ``fp4moe.completions.stream_server`` endpoints (twins: one thread and
event loop, so that nothing but the configured speed differs between them) with the shared-runner
jitter of ``stream_server.SHARED_RUNNER`` (lognormal step noise, rare stalls, a slow drift
common to both servers), on top of the real noise of this machine. Every comparison collects
``--batches`` rounds and is judged, with ``fp4moe.stats.compare``'s rule, on its first b rounds
for each b in --eval-batches and each threshold in --thresholds: so one run shows how many
requests a decision needs. Reports per condition: the rate at which the decode metric (TPOT)
was flagged, the rate at which ANY metric (TTFT, TPOT, E2E, throughput) was flagged, the
median measured TPOT ratio, and the client's overhead.

    nice python3 -m lab.studies.serve_study --no-ceiling --out serve-study   # ~27 min on 2 busy cores (docs)
    python3 -m lab.studies.serve_study --quick --out /tmp/serve-study    # smoke test, ~1 min
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

import numpy as np

from fp4moe.completions.prompts import random_token_prompts
from fp4moe.completions.stream_server import SHARED_RUNNER, Jitter, Profile, StreamServer
from fp4moe.gates.serve_bench import METRICS, BenchConfig, judge, run_bench
from fp4moe.infra.files import atomic_write_json, atomic_write_text
from fp4moe.stats.compare import DEFAULT_ALPHA


def parse_list(text: str, cast=float):
    return [cast(x) for x in text.split(",") if x.strip()]


def judge_prefix(run, b: int, threshold: float, args) -> dict:
    """Verdicts on the first ``b`` rounds of one comparison, per metric, exactly as the gate
    judges them (``bench.judge``, Bonferroni over --family tests)."""
    cmps = judge([run.first(b)], threshold=threshold, alpha=args.alpha, min_samples=min(10, b), family_size=args.family)
    return {m: (c.regressed, c.ratio) for m, c in zip(METRICS, cmps)}


def run_condition(args, slowdown: float, cond_index: int, log) -> dict:
    jitter = SHARED_RUNNER if args.jitter == "shared-runner" else Jitter()
    base_p = Profile(prefill_s=args.prefill_ms / 1e3, per_token_s=args.per_token_ms / 1e3, jitter=jitter,
                     seed=10_000 + cond_index)
    head_p = Profile(prefill_s=args.prefill_ms / 1e3, per_token_s=args.per_token_ms / 1e3 * (1 + slowdown / 100),
                     jitter=jitter, seed=20_000 + cond_index)
    verdicts = []  # per comparison: {(b, thr): {metric: (regressed, ratio)}}
    overhead = []
    t0 = time.time()
    n = args.n_by.get(slowdown, args.n)
    base = StreamServer(base_p)
    head = base.twin(head_p)  # one thread and event loop for both: A/A is exactly A/A
    with base:
        for i in range(n):
            seed = 1000 * cond_index + i
            n_prompts = args.concurrency * (args.batches + 1)
            cfg = BenchConfig(base_url=base.base_url + "/v1/completions", head_url=head.base_url + "/v1/completions",
                              model="stream-replay", prompts=random_token_prompts(n_prompts, input_len=16, seed=seed),
                              concurrencies=(args.concurrency,), output_len=args.output_len, batches=args.batches,
                              warmup_batches=1, seed=seed, stall_timeout_s=30.0, request_timeout_s=60.0)
            (run,) = asyncio.run(run_bench(cfg))
            verdicts.append({(b, t): judge_prefix(run, b, t, args) for b in args.eval_batches for t in args.thresholds})
            overhead.append(run.client_overhead())
    row = {"slowdown_pct": slowdown, "n": n, "seconds": time.time() - t0, "cells": []}
    for b in args.eval_batches:
        for t in args.thresholds:
            vs = [v[(b, t)] for v in verdicts]
            row["cells"].append({
                "batches": b, "requests_per_server": b * args.concurrency, "threshold": t,
                "regressed_by_metric": {m: int(sum(v[m][0] for v in vs)) for m in METRICS},
                "tpot_regressed": int(sum(v["tpot"][0] for v in vs)),
                "any_regressed": int(sum(any(r for r, _ in v.values()) for v in vs)),
                "tpot_ratio_median": float(np.median([v["tpot"][1] for v in vs])),
            })
    row["client_busy_median"] = float(np.median([o["busy"] for o in overhead]))
    row["loop_lag_p99_ms_median"] = float(np.median([o["loop_lag_p99_ms"] for o in overhead]))
    row["cpu_per_chunk_us_median"] = float(np.median([o["cpu_per_chunk_us"] for o in overhead]))
    best = max(row["cells"], key=lambda c: (c["batches"], -c["threshold"]))
    log(f"slowdown {slowdown:g}%: N={n}, {row['seconds']:.0f} s; at {best['batches']} rounds, threshold "
        f"{best['threshold']:.0%}: TPOT flagged {best['tpot_regressed']}/{n}, any metric {best['any_regressed']}/{n}, "
        f"TPOT ratio {best['tpot_ratio_median']:.3f}; client busy {row['client_busy_median']:.0%}")
    return row


def client_ceiling(args, log) -> list[dict]:
    """How much the client costs at 1/16/64 streams against a near-instant server (0.2 ms steps)."""
    rows = []
    with StreamServer(Profile(prefill_s=0.0005, per_token_s=0.0002)) as srv:
        for c in (1, 16, 64):
            cfg = BenchConfig(base_url=srv.base_url + "/v1/completions", model="stream-replay",
                              prompts=random_token_prompts(c * 4, input_len=16, seed=c), concurrencies=(c,),
                              output_len=64, batches=3, warmup_batches=1, seed=c)
            (run,) = asyncio.run(run_bench(cfg))
            o = run.client_overhead()
            rows.append({"concurrency": c, **o})
            log(f"client ceiling at concurrency {c}: {o['chunks_per_s']:.0f} chunks/s, busy {o['busy']:.0%}, "
                f"{o['cpu_per_chunk_us']:.0f} us CPU per chunk")
    return rows


def markdown(rows, ceiling, settings) -> str:
    lines = [
        f"Loopback servers, concurrency {settings['concurrency']}, {settings['output_len']} output tokens, decode step "
        f"{settings['per_token_ms']:g} ms, prefill {settings['prefill_ms']:g} ms, jitter `{settings['jitter']}`; "
        f"N comparisons per condition (column N); family alpha {settings['alpha']} over {settings['family']} tests. Cells: TPOT (decode) flagged / "
        "any of TTFT, TPOT, E2E, throughput flagged, out of N.",
        "",
    ]
    keys = [(c["batches"], c["threshold"]) for c in rows[0]["cells"]]
    head = "| decode slowdown | N | measured TPOT ratio | " + " | ".join(
        f"{b} rounds ({b * settings['concurrency']} req/server), thr {t:.0%}" for b, t in keys) + " |"
    lines += [head, "|---:|---:|---:|" + "---:|" * len(keys)]
    for r in rows:
        label = "0% (A/A)" if r["slowdown_pct"] == 0 else f"{r['slowdown_pct']:g}%"
        ratio = r["cells"][-1]["tpot_ratio_median"]
        cells = [f"{c['tpot_regressed'] / r['n']:.0%} / {c['any_regressed'] / r['n']:.0%}" for c in r["cells"]]
        lines.append(f"| {label} | {r['n']} | {ratio:.3f} | " + " | ".join(cells) + " |")
    last = [(r, r["cells"][-1]) for r in rows]
    lines += ["", f"Flags by metric at {last[0][1]['batches']} rounds, threshold {last[0][1]['threshold']:.0%}: "
              + "; ".join(f"{r['slowdown_pct']:g}%: " + ", ".join(f"{m} {k}" for m, k in c["regressed_by_metric"].items())
                          for r, c in last)]
    lines += ["", "Client overhead during the study (median over comparisons): "
              + ", ".join(f"{r['slowdown_pct']:g}%: busy {r['client_busy_median']:.0%}, loop lag p99 "
                          f"{r['loop_lag_p99_ms_median']:.1f} ms, {r['cpu_per_chunk_us_median']:.0f} us/chunk" for r in rows)]
    if ceiling:
        lines += ["", "| client ceiling: concurrency | chunks/s | client busy | CPU / chunk | loop lag p99 |",
                  "|---:|---:|---:|---:|---:|"]
        lines += [f"| {c['concurrency']} | {c['chunks_per_s']:.0f} | {c['busy']:.0%} | {c['cpu_per_chunk_us']:.0f} us | "
                  f"{c['loop_lag_p99_ms']:.1f} ms |" for c in ceiling]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=100, help="comparisons per condition (default 100)")
    ap.add_argument("--slowdowns", default="0,2,3,5,10", help="decode slowdowns of head, percent")
    ap.add_argument("--n-by-slowdown", default="2:20,3:20,10:20", help="N per slowdown overriding -n, e.g. 2:30,3:30,10:30")
    ap.add_argument("--batches", type=int, default=40, help="rounds collected per comparison")
    ap.add_argument("--eval-batches", default="20,30,40", help="judge on the first b rounds, for each b")
    ap.add_argument("--thresholds", default="0.02,0.03", help="regression thresholds (fractions)")
    ap.add_argument("--alpha", type=float, default=DEFAULT_ALPHA, help="family-wise alpha, as the gate's --alpha")
    ap.add_argument("--family", type=int, default=12,
                    help="Bonferroni family size: the gate's default run judges 4 metrics x 3 concurrencies = 12")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--per-token-ms", type=float, default=2.0)
    ap.add_argument("--prefill-ms", type=float, default=3.0)
    ap.add_argument("--jitter", choices=("shared-runner", "none"), default="shared-runner")
    ap.add_argument("--no-ceiling", action="store_true", help="skip the client-ceiling measurement")
    ap.add_argument("--quick", action="store_true", help="smoke test: n=5, slowdowns 0,10")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.slowdowns, args.batches, args.eval_batches, args.n_by_slowdown = 5, "0,10", 10, "10", ""
    args.slowdowns = parse_list(args.slowdowns)
    args.n_by = {float(k): int(v) for k, v in (x.split(":") for x in args.n_by_slowdown.split(",") if x.strip())}
    args.eval_batches = [b for b in parse_list(args.eval_batches, int) if b <= args.batches]
    args.thresholds = parse_list(args.thresholds)
    args.out.mkdir(parents=True, exist_ok=True)
    log = lambda s: print(s, flush=True)  # noqa: E731
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    t0 = time.time()
    ceiling = [] if args.no_ceiling else client_ceiling(args, log)
    rows = []
    for i, s in enumerate(args.slowdowns):  # results are rewritten after each condition
        rows.append(run_condition(args, s, i, log))
        settings["seconds"] = time.time() - t0
        atomic_write_json(args.out / "study.json", {"settings": settings, "rows": rows, "client_ceiling": ceiling}, indent=1)
        text = markdown(rows, ceiling, settings)
        atomic_write_text(args.out / "study.md", text)
    print(text)
    print(f"{settings['seconds']:.0f} s in all; wrote {args.out / 'study.json'} and {args.out / 'study.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
