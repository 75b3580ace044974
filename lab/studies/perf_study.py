#!/usr/bin/env python
"""The perf gate's own proof: false-regression rate (A/A) and detection rate (injected slowdowns).

For each condition (A/A, and head = base + extra device work worth s% of the base median for
s in --slowdowns) it runs N independent interleaved A/B comparisons of R rounds per side, in one
process, and judges every comparison twice on the same samples: with ``fp4moe.stats.compare``
(defaults: 5% threshold, one-sided alpha 0.01) and with pytest-benchmark's own
``--benchmark-compare-fail=mean:5%`` rule. It prints a markdown table and writes
``study.json`` (rates, settings, every sample) and ``study.md`` under --out.

Injection: on a GPU the extra work is ``torch.cuda._sleep(cycles)`` on the same stream right after
the workload (a spin kernel; cycles calibrated once against the event timer, then corrected once
from a measured A/B); on the CPU it is a host spin of the same duration. The *measured* ratio of
medians per condition is reported next to the target.

Rerun on the H200 (docs/perf-gate.md):
    python3 -m lab.studies.perf_study --workload moe --device cuda --out study-out
CPU smoke test:
    python3 -m lab.studies.perf_study --workload matmul --device cpu --quick --out /tmp/study
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from fp4moe.gates.perf.abtest import interleaved_ab
from fp4moe.gates.perf.timer import DEVICE_EVENTS, DeviceTimer, time_rounds
from fp4moe.stats import sequential
from fp4moe.stats.compare import DEFAULT_ALPHA, DEFAULT_THRESHOLD, compare_samples, pytest_benchmark_rule_fails

DEFAULT_SLOWDOWNS = (0.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0)
PYTEST_BENCHMARK_RULE = "mean:5%"
#: an injected condition counts only if its measured ratio is within this of the target
INJECTION_TOLERANCE = 0.005
#: pairs of the probe that calibrates (and re-calibrates) an injection before its comparisons
PROBE_ROUNDS = 200
CALIBRATION_STEPS = 4
#: between comparisons, every this many, the last ones' pooled ratio re-tunes the injection when
#: it drifted more than half the tolerance (decisions never see a change within a comparison)
RECALIBRATE_EVERY = 25


# ---------------------------------------------------------------- workloads
def make_matmul_workload(device, size: int, n_inputs: int = 4, seed: int = 0):
    """A bf16 (GPU) / float32 (CPU) matmul, rotated over ``n_inputs`` seeded operand pairs."""
    dev = torch.device(device)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    g = torch.Generator(device="cpu").manual_seed(seed)
    inputs = [
        (torch.randn(size, size, generator=g).to(dev, dtype), torch.randn(size, size, generator=g).to(dev, dtype))
        for _ in range(n_inputs)
    ]
    outs = [torch.empty(size, size, device=dev, dtype=dtype) for _ in range(n_inputs)]

    def fn(x):
        a, b = x
        torch.matmul(a, b, out=outs[0])

    return fn, inputs


def load_workload(args):
    if args.workload == "matmul":
        return make_matmul_workload(args.device, args.size)
    if args.workload == "moe":
        from fp4moe.gates.perf.workloads import moe_study_workload

        # contract: (fn(inputs), inputs_list)
        return moe_study_workload(device=args.device, tokens=args.tokens)
    raise SystemExit(f"unknown --workload {args.workload!r}")


# ---------------------------------------------------------------- injection
class Injector:
    """Adds ``seconds`` of extra work after the workload, on the device that times it."""

    def __init__(self, timer: DeviceTimer):
        self.timer = timer
        self.cycles_per_s = None
        if timer.kind == DEVICE_EVENTS:
            if not hasattr(torch.cuda, "_sleep"):
                raise SystemExit("this torch has no torch.cuda._sleep: cannot inject device slowdowns")
            big = 20_000_000
            secs = time_rounds(lambda _: torch.cuda._sleep(big), [None], 5, 2, timer=timer)
            self.cycles_per_s = big / float(np.median(secs))

    def extra(self, seconds: float):
        """A callable that performs ``seconds`` of extra work."""
        if seconds <= 0:
            return lambda: None
        if self.cycles_per_s is not None:
            cycles = max(1, int(seconds * self.cycles_per_s))
            return lambda: torch.cuda._sleep(cycles)

        def spin():
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                pass

        return spin


def make_head(fn, extra):
    def head(x):
        fn(x)
        extra()

    return head


# ---------------------------------------------------------------- study core
def _rates(ours: list[bool], theirs: list[bool]) -> dict:
    """How many comparisons each rule called regressed, and the rates (in [0, 1])."""
    return {"n": len(ours), "regressed_ours": int(sum(ours)), "regressed_pytest_benchmark": int(sum(theirs)),
            "rate_ours": float(np.mean(ours)), "rate_pytest_benchmark": float(np.mean(theirs))}


def judge(pairs, *, threshold=DEFAULT_THRESHOLD, alpha=DEFAULT_ALPHA, rule=PYTEST_BENCHMARK_RULE) -> dict:
    """Verdicts of both rules on a list of (base, head) samples; rates in [0, 1]."""
    ours = [compare_samples(b, h, threshold=threshold, alpha=alpha, min_samples=min(10, len(b))).regressed for b, h in pairs]
    theirs = [pytest_benchmark_rule_fails(b, h, rule) for b, h in pairs]
    ratios = [float(np.median(h) / np.median(b)) for b, h in pairs]
    return {**_rates(ours, theirs), "measured_ratio_median": float(np.median(ratios))}


def judge_sequential(results: list, theirs: list[bool], measured: float, target: float) -> dict:
    """Rates of a condition run with the sequential rule: verdicts, rounds and device seconds
    per decision, the measured ratio (pooled medians) and whether it is within
    ``INJECTION_TOLERANCE`` of the target (else the row is invalid and not counted)."""
    ours = [r["verdict"] == "regressed" for r in results]
    return {
        **_rates(ours, theirs),
        "measured_ratio_median": measured,
        "target_ratio": target,
        "valid": bool(abs(measured - target) <= INJECTION_TOLERANCE),
        "mean_rounds": float(np.mean([r["rounds"] for r in results])),
        "max_rounds_used": int(max(r["rounds"] for r in results)),
        "mean_device_s": float(np.mean([r["device_s"] for r in results])),
        "mean_wall_s": float(np.mean([r["wall_s"] for r in results])),
    }


def smallest_detected(rows: list[dict], key: str, level: float = 0.95):
    """Smallest injected slowdown (> 0) whose detection rate is >= level (None if none); rows
    whose injection was not verified (``valid`` False) do not count."""
    hits = [r["slowdown_pct"] for r in rows if r["slowdown_pct"] > 0 and r[key] >= level and r.get("valid", True)]
    return min(hits) if hits else None


def _stalls(settings: dict, before: str, after: str) -> str:
    """The emulated stalls of the run, as a phrase (empty when none were emulated)."""
    if not settings.get("stalls"):
        return ""
    p, lo, hi = settings["stalls"][:3]
    return f"{before}p={p:g}, {lo:g}-{hi:g} x median{after}"


def _condition(row: dict) -> str:
    return "0% (A/A)" if row["slowdown_pct"] == 0 else f"{row['slowdown_pct']:g}%"


def markdown(rows: list[dict], settings: dict) -> str:
    if settings.get("sequential"):
        return markdown_sequential(rows, settings)
    lines = [
        f"Workload `{settings['workload']}` on {settings['device_name']} ({settings['timer']}); "
        f"N={settings['n']} comparisons x R={settings['rounds']} rounds per side; base median "
        f"{settings['base_median_s'] * 1e6:.1f} us; ours: threshold {settings['threshold']:.0%}, alpha {settings['alpha']}"
        + _stalls(settings, "; emulated stalls: ", "") + ".",
        "",
        "| injected slowdown | measured ratio | regressed (ours) | regressed (pytest-benchmark mean:5%) |",
        "|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {_condition(r)} | {r['measured_ratio_median']:.3f} | {r['rate_ours']:.1%} ({r['regressed_ours']}/{r['n']}) | "
            f"{r['rate_pytest_benchmark']:.1%} ({r['regressed_pytest_benchmark']}/{r['n']}) |"
        )
    so, sp = smallest_detected(rows, "rate_ours"), smallest_detected(rows, "rate_pytest_benchmark")
    lines += [
        "",
        f"Smallest injected slowdown detected >= 95% of the time: ours {so if so is None else f'{so:g}%'}, "
        f"pytest-benchmark mean:5% {sp if sp is None else f'{sp:g}%'}.",
    ]
    return "\n".join(lines) + "\n"


def markdown_sequential(rows: list[dict], settings: dict) -> str:
    seq = settings["sequential"]
    lines = [
        f"Workload `{settings['workload']}` on {settings['device_name']} ({settings['timer']}); N={settings['n']} "
        f"comparisons per condition; base median {settings['base_median_s'] * 1e6:.1f} us; sequential rule: looks at "
        f"{seq['looks'][0]}..{seq['looks'][-1]} rounds per side every {seq['looks'][1] - seq['looks'][0] if len(seq['looks']) > 1 else 0}, "
        f"{seq['spending']} alpha spending, one-sided alpha {settings['alpha']}, threshold {settings['threshold']:.1%}; "
        f"injection verified to +-{INJECTION_TOLERANCE * 100:g} points."
        + _stalls(settings, " Emulated stalls: ", "."),
        "",
        "| injected | measured ratio | injection | regressed (ours, sequential) | mean rounds per side | device s per decision | regressed (pytest-benchmark mean:5%, same samples) |",
        "|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {_condition(r)} | {r['measured_ratio_median']:.4f} | {'verified' if r['valid'] else '**INVALID** (not counted)'} | "
            f"{r['rate_ours']:.1%} ({r['regressed_ours']}/{r['n']}) | {r['mean_rounds']:.1f} | {r['mean_device_s']:.3f} | "
            f"{r['rate_pytest_benchmark']:.1%} ({r['regressed_pytest_benchmark']}/{r['n']}) |"
        )
    so = smallest_detected(rows, "rate_ours")
    lines += ["", f"Smallest verified injected slowdown detected >= 95% of the time: {so if so is None else f'{so:g}%'}."]
    return "\n".join(lines) + "\n"


def calibrate(fn, injector, target_s, target_ratio, inputs, timer, warmup, seed, log):
    """Seconds of injected work whose measured ratio (median of a ``PROBE_ROUNDS``-pair
    interleaved probe) is within ``INJECTION_TOLERANCE`` of ``target_ratio``: up to
    ``CALIBRATION_STEPS`` corrections. Returns (seconds, last probe ratio)."""
    seconds, ratio = target_s, float("nan")
    for step in range(CALIBRATION_STEPS):
        probe = interleaved_ab(fn, make_head(fn, injector.extra(seconds)), inputs, PROBE_ROUNDS, warmup, seed + 7919 * step, timer=timer)
        bm, hm = float(np.median(probe.base)), float(np.median(probe.head))
        ratio = hm / bm
        if abs(ratio - target_ratio) <= INJECTION_TOLERANCE / 2:
            break
        added = hm - bm
        if added > 0:  # clamp: a noisy probe must not blow the correction up
            seconds *= min(2.0, max(0.5, (target_ratio - 1.0) * bm / added))
        log(f"  calibration step {step + 1}: probe ratio {ratio:.4f} (target {target_ratio:.4f}), injected {seconds * 1e6:.2f} us")
    return seconds, ratio


def run_study_sequential(fn, inputs, timer: DeviceTimer, *, slowdowns, n, design, warmup, seed, log=print, stalls=None,
                         n_aa=None):
    """Per condition: calibrate the injection, then N sequential comparisons (``n_aa`` for
    A/A); the measured ratio is the ratio of the pooled medians of every timed round."""
    import time as _time

    fn, injector, base_median = _baseline(fn, inputs, 100, warmup, timer, stalls, seed)
    rows, samples = [], {}
    t_start = _time.time()
    for ci, s in enumerate(slowdowns):
        target = 1.0 + s / 100.0
        head, inj = fn, {"seconds": 0.0, "recalibrations": 0}
        if s > 0:
            inj["seconds"], probe = calibrate(fn, injector, base_median * s / 100.0, target, inputs, timer, warmup, seed + 10_000 + ci, log)
            head = make_head(fn, lambda: injector.extra(inj["seconds"])())
        results, theirs, all_b, all_h = [], [], [], []
        for i in range(n_aa if (s == 0 and n_aa) else n):
            if s > 0 and i and i % RECALIBRATE_EVERY == 0:  # the spin kernel drifts with the clock
                recent = slice(i - RECALIBRATE_EVERY, i)
                chunk = float(np.median(np.concatenate(all_h[recent])) / np.median(np.concatenate(all_b[recent])))
                if abs(chunk - target) > INJECTION_TOLERANCE / 2 and chunk > 1.0:
                    inj["seconds"] *= min(1.25, max(0.8, (target - 1.0) / (chunk - 1.0)))
                    inj["recalibrations"] += 1
            rng = np.random.default_rng(seed + 1000 * ci + i)
            counter = [0]

            def sample(m, rng=rng, counter=counter):
                ab = interleaved_ab(fn, head, inputs, m, warmup if counter[0] == 0 else 0, int(rng.integers(1 << 31)), timer=timer)
                counter[0] += m
                return ab.base, ab.head

            t0 = _time.perf_counter()
            res = sequential.run_sequential(sample, design)
            wall = _time.perf_counter() - t0
            results.append({"verdict": res.verdict, "rounds": res.rounds, "device_s": float(res.base.sum() + res.head.sum()),
                            "wall_s": wall, "ratio": res.comparison.ratio})
            theirs.append(pytest_benchmark_rule_fails(res.base, res.head, PYTEST_BENCHMARK_RULE))
            all_b.append(res.base)
            all_h.append(res.head)
        measured = float(np.median(np.concatenate(all_h)) / np.median(np.concatenate(all_b)))
        row = {"slowdown_pct": s, **judge_sequential(results, theirs, measured, target), "recalibrations": inj["recalibrations"]}
        rows.append(row)
        samples[f"{s:g}"] = [[b.tolist(), h.tolist()] for b, h in zip(all_b, all_h)]
        log(
            f"[{ci + 1}/{len(slowdowns)}] slowdown {s:g}%: measured x{measured:.4f} ({'verified' if row['valid'] else 'INVALID'}), "
            f"ours {row['rate_ours']:.1%}, mean rounds {row['mean_rounds']:.1f}, device {row['mean_device_s']:.3f} s/decision "
            f"({_time.time() - t_start:.0f} s elapsed)"
        )
    return rows, samples, base_median


def with_stalls(fn, injector: "Injector", base_median: float, stalls, seed: int):
    """A shared runner's interference, emulated on real timings: with probability p a call is
    followed, inside the timed region, by a stall of U(lo, hi) x the base median. Applied to
    base and head alike (seeded), so it adds noise, not a slowdown."""
    p, lo, hi = stalls
    rng = np.random.default_rng(seed)

    def noisy(x):
        fn(x)
        if rng.random() < p:
            injector.extra(rng.uniform(lo, hi) * base_median)()

    return noisy


def _baseline(fn, inputs, n_rounds: int, warmup: int, timer: DeviceTimer, stalls, seed: int):
    """(the workload, with emulated stalls when asked; its injector; the base median of
    ``n_rounds`` timed rounds, taken before any stall is added)."""
    base_median = float(np.median(time_rounds(fn, inputs, n_rounds, warmup, timer=timer)))
    injector = Injector(timer)
    if stalls:
        fn = with_stalls(fn, injector, base_median, stalls, seed + 777)
    return fn, injector, base_median


def run_study(fn, inputs, timer: DeviceTimer, *, slowdowns, n, rounds, warmup, seed, threshold, alpha, log=print, stalls=None):
    """Calibrate, then collect N interleaved comparisons per slowdown. Returns (rows, samples, base_median)."""
    fn, injector, base_median = _baseline(fn, inputs, max(rounds, 30), warmup, timer, stalls, seed)
    rows, samples = [], {}
    t_start = time.time()
    for ci, s in enumerate(slowdowns):
        target = base_median * s / 100.0
        seconds = target
        if s > 0:  # one correction step: measure what the injected work really adds
            probe = interleaved_ab(fn, make_head(fn, injector.extra(seconds)), inputs, max(rounds, 30), warmup, seed + 10_000 + ci, timer=timer)
            added = float(np.median(probe.head) - np.median(probe.base))
            if added > 0:  # clamp: a noisy probe must not blow the correction up
                seconds = seconds * min(2.0, max(0.5, target / added))
        head = fn if s == 0 else make_head(fn, injector.extra(seconds))
        pairs = []
        for i in range(n):
            ab = interleaved_ab(fn, head, inputs, rounds, warmup, seed + 1000 * ci + i, timer=timer)
            pairs.append((ab.base, ab.head))
        row = {"slowdown_pct": s, "injected_seconds": seconds, **judge(pairs, threshold=threshold, alpha=alpha)}
        rows.append(row)
        samples[f"{s:g}"] = [[b.tolist(), h.tolist()] for b, h in pairs]
        log(
            f"[{ci + 1}/{len(slowdowns)}] slowdown {s:g}%: measured x{row['measured_ratio_median']:.3f}, "
            f"ours {row['rate_ours']:.1%}, mean:5% {row['rate_pytest_benchmark']:.1%} "
            f"({time.time() - t_start:.0f} s elapsed)"
        )
    return rows, samples, base_median


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", choices=("moe", "matmul"), default="moe")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--size", type=int, default=None, help="matmul size (default 4096 on GPU, 128 on CPU)")
    p.add_argument("--tokens", type=int, default=16, help="moe workload token count")
    p.add_argument("-n", "--comparisons", type=int, default=100, help="comparisons per condition (default 100)")
    p.add_argument("-r", "--rounds", type=int, default=50, help="rounds per side per comparison (default 50, as the benchmarks record)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--slowdowns", default=",".join(f"{s:g}" for s in DEFAULT_SLOWDOWNS), help="percent list; 0 = A/A")
    p.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD, help="fraction, e.g. 0.02")
    p.add_argument("--alpha", type=float, default=DEFAULT_ALPHA)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="smoke test: N=10, R=12, slowdowns 0,20")
    p.add_argument("--fixed-rounds", action="store_true",
                   help="the old study: every comparison exactly R rounds per side (default: the sequential rule)")
    p.add_argument("--n-aa", type=int, default=None, help="comparisons for the A/A condition (default: -n)")
    p.add_argument("--first", type=int, default=sequential.DEFAULT_FIRST, help="sequential: rounds at the first look")
    p.add_argument("--step", type=int, default=sequential.DEFAULT_STEP, help="sequential: rounds between looks")
    p.add_argument("--max-rounds", type=int, default=sequential.DEFAULT_MAX_ROUNDS, help="sequential: rounds at the last look")
    p.add_argument("--no-samples", action="store_true", help="omit raw samples from study.json")
    p.add_argument("--out", type=Path, default=Path("perf-study-out"))
    p.add_argument("--stalls", default=None, metavar="P,LO,HI",
                   help="emulate a shared runner: each call stalls with probability P for U(LO, HI) x the base median "
                        "(e.g. 0.08,0.3,1.0)")
    args = p.parse_args(argv)
    if args.stalls:
        try:
            sp, slo, shi = (float(v) for v in args.stalls.split(","))
        except ValueError:
            p.error(f"--stalls {args.stalls!r}: expected P,LO,HI, e.g. 0.08,0.3,1.0")
        if not (0 <= sp <= 1 and 0 <= slo <= shi):
            p.error(f"--stalls {args.stalls!r}: need 0 <= P <= 1 and 0 <= LO <= HI")
        args.stalls = (sp, slo, shi)
    if args.size is None:
        args.size = 4096 if torch.device(args.device).type == "cuda" else 128
    if args.quick:
        args.comparisons, args.rounds, args.slowdowns = 10, 12, "0,20"
        args.max_rounds = min(args.max_rounds, 30)
        if torch.device(args.device).type == "cpu":
            args.size = min(args.size, 64)
    args.slowdown_list = [float(x) for x in args.slowdowns.split(",") if x.strip()]
    return args


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    timer = DeviceTimer(args.device)
    fn, inputs = load_workload(args)
    design = None
    if args.fixed_rounds:
        total = len(args.slowdown_list) * args.comparisons * 2 * args.rounds
        print(f"perf study: {args.workload} on {args.device} ({timer.kind}); {total} timed rounds", flush=True)
        rows, samples, base_median = run_study(
            fn, inputs, timer, slowdowns=args.slowdown_list, n=args.comparisons, rounds=args.rounds,
            warmup=args.warmup, seed=args.seed, threshold=args.threshold, alpha=args.alpha,
            log=lambda m: print(m, flush=True), stalls=args.stalls,
        )
    else:
        design = sequential.make_design(first=args.first, step=args.step, max_rounds=args.max_rounds,
                                        alpha=args.alpha, threshold=args.threshold)
        print(f"perf study: {args.workload} on {args.device} ({timer.kind}); sequential, looks {list(design.looks)}, "
              f"nominal levels {[f'{a:.2e}' for a in design.nominal]}", flush=True)
        rows, samples, base_median = run_study_sequential(
            fn, inputs, timer, slowdowns=args.slowdown_list, n=args.comparisons, design=design, warmup=args.warmup,
            seed=args.seed, log=lambda m: print(m, flush=True), stalls=args.stalls, n_aa=args.n_aa,
        )
    meta = timer.metadata()
    settings = {
        "workload": args.workload,
        "device_name": meta.get("gpu_name") or "cpu",
        "timer": timer.kind,
        "n": args.comparisons,
        "rounds": args.rounds,
        "threshold": args.threshold,
        "alpha": args.alpha,
        "base_median_s": base_median,
        "size": args.size if args.workload == "matmul" else None,
        "tokens": args.tokens if args.workload == "moe" else None,
        "seed": args.seed,
        "stalls": args.stalls,
        "meta": meta,
        "sequential": None if design is None else {"looks": list(design.looks), "spending": design.spending,
                                                    "nominal": list(design.nominal), "beta": design.beta},
        "command": " ".join(sys.argv),
    }
    table = markdown(rows, settings)
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {"settings": settings, "rows": rows}
    if not args.no_samples:
        doc["samples"] = samples
    (args.out / "study.json").write_text(json.dumps(doc))
    (args.out / "study.md").write_text(table)
    print(f"wrote {args.out / 'study.json'} and {args.out / 'study.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
