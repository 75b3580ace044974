"""``fp4moe-gate serve-bench``: serving perf gate: TTFT, TPOT (decode), E2E, output throughput of base vs head servers.

Did the head server get slower than the base? Streams the same prompts to both servers in
interleaved batches at each concurrency and judges TTFT, TPOT (decode), end-to-end latency and
output throughput with a one-sided test against --threshold (docs/serving-perf.md explains the
method).

Inputs: two running OpenAI-compatible servers (base and head URLs), or one to measure only.

Exit 0: measured, nothing regressed (or one server measured, nothing to judge)
Exit 1: at least one metric at one concurrency regressed (it is named)
Exit 2: a server down or failing, a cut or stalled stream, wrong token counts, too few batches
for a verdict, or a client busy enough to be the bottleneck
"""

from __future__ import annotations

import sys
from pathlib import Path

from fp4moe.commands import output
from fp4moe.commands.options import CANNOT_RUN, add_command, add_outputs, add_stat_options, bind, status_of
from fp4moe.infra.errors import EXIT_OK, EXIT_REGRESSION, GateCannotRun


def _concurrencies(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"--concurrency {text!r}: write a comma list of positive integers, e.g. 1,16,64") from None
    if not values or min(values) < 1:
        raise ValueError(f"--concurrency {text!r}: write a comma list of positive integers, e.g. 1,16,64")
    return values


def register(subparsers) -> None:
    from fp4moe.gates.serve_bench import DEFAULT_BATCHES, DEFAULT_MAX_CLIENT_BUSY, DEFAULT_THRESHOLD
    from fp4moe.stats.defaults import DEFAULT_ALPHA

    p = add_command(subparsers, "serve-bench", __doc__)
    p.add_argument("--base-url", required=True, help="base server: root, .../v1 or .../v1/completions")
    p.add_argument("--head-url", help="head server; without it the base server is only measured")
    p.add_argument("--model", required=True, help="model name sent with each request")
    p.add_argument("--concurrency", default="1,16,64", help="comma list of concurrencies (default %(default)s)")
    p.add_argument("--prompts", choices=("gsm8k", "random"), default="gsm8k",
                   help="gsm8k: local GSM8K data, few-shot text (default); random: --input-len random token ids")
    p.add_argument("--input-len", type=int, help="prompt tokens per request (--prompts random; default 1024)")
    p.add_argument("--output-len", type=int, default=256, help="output tokens per request, forced with ignore_eos (default %(default)s)")
    p.add_argument("--data-dir", type=Path, help="GSM8K folder (default ../shared/data/gsm8k, else the packaged fp4moe/data/gsm8k/mini)")
    p.add_argument("--num-fewshot", type=int, default=8, help="GSM8K few-shot examples per prompt (default %(default)s)")
    p.add_argument("--token-range", default="1000:30000", help="random token ids from LO:HI (default %(default)s)")
    p.add_argument("--batches", type=int, default=DEFAULT_BATCHES,
                   help="measured rounds per concurrency; one round = C requests to each server (default %(default)s)")
    p.add_argument("--requests", type=int, help="requests per server and concurrency instead of --batches (rounds = N // C)")
    p.add_argument("--warmup", type=int, default=1, help="warm-up rounds per concurrency, excluded (default %(default)s)")
    add_stat_options(p, threshold=f"{DEFAULT_THRESHOLD:.0%}",
                     alpha_help=f"one-sided significance level of the whole run, split over its metrics x concurrencies "
                                f"(Bonferroni; default {DEFAULT_ALPHA})",
                     min_samples_help="fewest rounds per concurrency for a verdict")
    p.add_argument("--seed", type=int, default=0, help="prompt and order seed (default %(default)s)")
    p.add_argument("--stall-timeout", type=float, default=60.0, help="seconds without a chunk that fail a request (default %(default)s)")
    p.add_argument("--request-timeout", type=float, default=1800.0, help="seconds per request, in all (default %(default)s)")
    p.add_argument("--connect-timeout", type=float, default=10.0, help="seconds to connect / preflight (default %(default)s)")
    p.add_argument("--max-client-busy", type=float, default=DEFAULT_MAX_CLIENT_BUSY,
                   help="client CPU busy fraction above which the run cannot be trusted (default %(default)s)")
    add_outputs(p, json="the full results, every batch and request", markdown="the tables", plot="the ratio/interval plot")
    bind(p, run_serve_bench, inputs=lambda a: [a.data_dir] if a.data_dir else [])


def _build_config(args):
    from fp4moe.completions.endpoint import completions_url
    from fp4moe.completions.prompts import gsm8k_prompts, parse_token_range, random_token_prompts
    from fp4moe.gates.serve_bench import BenchConfig

    concurrencies = _concurrencies(args.concurrency)
    if args.output_len < 2:
        raise ValueError(f"--output-len {args.output_len}: TPOT needs at least 2 output tokens")
    if args.batches < 1 or args.warmup < 0 or (args.requests is not None and args.requests < 1):
        raise ValueError("--batches and --requests must be >= 1, --warmup >= 0")
    from fp4moe.infra.runner import check_timeout

    for opt, v in (("--connect-timeout", args.connect_timeout), ("--stall-timeout", args.stall_timeout),
                   ("--request-timeout", args.request_timeout)):
        check_timeout(opt, v)
    json_out, markdown = getattr(args, "json", None), getattr(args, "markdown", None)
    if json_out is not None and markdown is not None and Path(json_out).resolve() == Path(markdown).resolve():
        raise ValueError(f"--json and --markdown name the same file {markdown}: one would overwrite the other")
    if args.input_len is not None and args.input_len < 1:  # 0 used to mean the 1024-token default (falsy)
        raise ValueError(f"--input-len {args.input_len}: must be >= 1 token")
    if args.prompts == "gsm8k" and args.input_len is not None:
        raise ValueError("--input-len applies to --prompts random; GSM8K prompts have the data's lengths (see --num-fewshot)")
    cfg = BenchConfig(
        base_url=completions_url(args.base_url)[1],
        head_url=completions_url(args.head_url)[1] if args.head_url else None,
        model=args.model, prompts=[], concurrencies=concurrencies, output_len=args.output_len,
        batches=args.batches, requests=args.requests, warmup_batches=args.warmup, seed=args.seed,
        connect_timeout_s=args.connect_timeout, stall_timeout_s=args.stall_timeout, request_timeout_s=args.request_timeout,
    )
    if cfg.head_url:
        short = {c: cfg.batches_for(c) for c in concurrencies if cfg.batches_for(c) < args.min_samples}
        if short:
            c, b = next(iter(short.items()))
            need = f"--requests >= {args.min_samples * max(short)}" if args.requests else f"--batches >= {args.min_samples}"
            raise GateCannotRun(f"too few samples: {b} round(s) at concurrency {c}, a verdict needs >= {args.min_samples} "
                                f"per concurrency (--min-samples); use {need}")
    elif min(cfg.batches_for(c) for c in concurrencies) < 1:
        raise GateCannotRun(f"--requests {args.requests} is fewer than the concurrency {max(concurrencies)}")
    from fp4moe.gates.serve_bench import prompts_needed

    n = prompts_needed(cfg)
    if args.prompts == "gsm8k":
        cfg.prompts = gsm8k_prompts(n, data_dir=args.data_dir, num_fewshot=args.num_fewshot, seed=args.seed)
    else:
        cfg.prompts = random_token_prompts(n, input_len=1024 if args.input_len is None else args.input_len, seed=args.seed,
                                           token_range=parse_token_range(args.token_range))
    return cfg


def _tables(runs, comparisons, notes) -> str:
    from fp4moe.stats.report import markdown_table

    lines = ["| concurrency | server | requests | TTFT p50 | TTFT p99 | TPOT p50 | TPOT p99 | E2E p50 | output tok/s |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for run in runs:
        for side in run.batches:
            s = run.summary(side)
            lines.append(f"| {run.concurrency} | {side} | {s['requests']} | {s['ttft_p50_ms']:.1f} ms | {s['ttft_p99_ms']:.1f} ms | "
                         f"{s['tpot_p50_ms']:.2f} ms | {s['tpot_p99_ms']:.2f} ms | {s['e2e_p50_s']:.3f} s | {s['output_tok_per_s']:.0f} |")
    lines += ["", "Client overhead (measured batches): event-loop thread CPU / wall time, and the lateness of a "
              "5 ms ticker on the client's loop.", "",
              "| concurrency | client busy | CPU / request | CPU / chunk | chunks/s | loop lag p50 | p99 | max |",
              "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for run in runs:
        o = run.client_overhead()
        lines.append(f"| {run.concurrency} | {o['busy']:.1%} | {o['cpu_per_request_us']:.0f} us | {o['cpu_per_chunk_us']:.1f} us | "
                     f"{o['chunks_per_s']:.0f} | {o['loop_lag_p50_ms']:.2f} ms | {o['loop_lag_p99_ms']:.2f} ms | {o['loop_lag_max_ms']:.2f} ms |")
    text = "\n".join(lines) + "\n"
    if comparisons:
        text = markdown_table(comparisons, notes=notes) + "\n" + text
    elif notes:
        text += "\nNotes:\n" + "".join(f"- {n}\n" for n in notes)
    return text


def _results_doc(args, cfg, runs, comparisons, status: str, reason: str | None, served: dict) -> dict:
    return {
        "status": status,
        **({"reason": reason} if reason else {}),
        "measured_only": not (cfg.head_url if cfg else args.head_url),
        "base_url": cfg.base_url if cfg else args.base_url,
        "head_url": (cfg.head_url if cfg else args.head_url),
        "served_models": served,
        "model": args.model,
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                     if not callable(v) and not k.startswith("_") and k not in ("subparser", "prog")},
        "concurrency": [
            {
                "concurrency": r.concurrency,
                "head_first": r.head_first,
                "summary": {s: r.summary(s) for s in r.batches},
                "client_overhead": r.client_overhead(),
                "batches": [b.to_dict() for bs in r.batches.values() for b in bs],
                "warmup_batches": [b.to_dict() for bs in r.warmup.values() for b in bs],
            }
            for r in runs
        ],
        "comparisons": [c.to_dict() for c in comparisons],
        "regressed": [c.name for c in comparisons if c.regressed],
    }


def run_serve_bench(args) -> int:
    import asyncio

    from fp4moe.completions.endpoint import completions_url, preflight
    from fp4moe.gates.serve_bench import client_bound, judge, run_bench
    from fp4moe.stats.compare import parse_alpha, parse_threshold

    cfg, runs, comparisons, served = None, [], [], {}
    # "--model is not served" findings: no stderr line of their own before the verdict (exit 2
    # is ONE line): folded into the exit-2 line, else notes in the tables and one line at the end
    unserved: list[str] = []
    try:  # every exit 2 from here writes the record with what was measured (main keeps it)
        threshold, alpha = parse_threshold(args.threshold), parse_alpha(args.alpha)
        try:
            import aiohttp  # noqa: F401
        except ImportError as e:
            raise GateCannotRun(f"aiohttp is not installed ({e}); pip install -e '.[serve]'") from None
        cfg = _build_config(args)
        for side, url in (("base", args.base_url), ("head", args.head_url)):
            if url:
                root = completions_url(url)[0]
                try:
                    served[side] = preflight(root, args.model, args.connect_timeout, warn=False)
                except GateCannotRun as e:
                    raise GateCannotRun(f"{side} {e}") from None
                if served[side] and args.model not in served[side]:
                    unserved.append(f"--model {args.model!r} is not among the {side} server's served models {served[side]}")
        runs = asyncio.run(run_bench(cfg, log=lambda s: print(s, flush=True)))
        if cfg.head_url:
            comparisons = judge(runs, threshold=threshold, alpha=alpha, min_samples=args.min_samples)
    except (GateCannotRun, ValueError) as e:
        reason = " ".join(str(e).split()) + "".join(f" (note: {u})" for u in unserved)
        output.write_json(args, _results_doc(args, cfg, runs, comparisons, CANNOT_RUN, reason, served))
        if unserved:
            raise type(e)(reason) from None
        raise
    bound = client_bound(runs, args.max_client_busy)
    regressed = [c for c in comparisons if c.regressed]
    # one server only: measured, nothing judged -- status pass with "measured_only": true (exit 0)
    status = status_of(regressed=bool(regressed), unjudged=bool(bound))
    notes = list(bound) + unserved
    if comparisons:
        notes.append(f"alpha {alpha:g} for the whole run: Bonferroni over {len(comparisons)} tests, "
                     f"{comparisons[0].alpha:.2g} each; one sample per round (C requests per server)")
    table = _tables(runs, comparisons, notes)
    print(table)
    output.write_markdown(args, table)
    output.write_plot(args, comparisons, title="serve-bench: head / base (Hodges-Lehmann, interval)")
    output.write_json(args, _results_doc(args, cfg, runs, comparisons, status, "; ".join(bound) or None, served))
    if bound and not regressed:
        raise GateCannotRun("; ".join(bound) + " (raise --max-client-busy only if you accept that)"
                            + "".join(f" (note: {u})" for u in unserved))
    for u in unserved:  # a verdict (exit 0/1) follows: stderr may say more than one line
        print(f"serve-bench: warning: {u}", file=sys.stderr)
    if regressed:
        print("serve-bench: regressed: " + "; ".join(f"{c.name} {c.ratio - 1:+.1%} [{c.ci_low - 1:+.1%}, {c.ci_high - 1:+.1%}]"
                                                   for c in regressed), file=sys.stderr)
        return EXIT_REGRESSION
    return EXIT_OK
