"""``fp4moe-gate gsm8k``: GSM8K accuracy through lm-eval against an OpenAI-compatible server.

Is the served model's GSM8K score still where it was? Runs GSM8K with lm-eval
(local-completions) against --base-url and judges the score against a threshold (--threshold, or
the packaged one for --model-key) or a baseline band (--baseline, k x stderr).

Inputs: a running OpenAI-compatible server (--base-url, --model); the GSM8K files from a local
folder (--data-dir, default ../shared/data/gsm8k; the dataset hub is never used).

Output: the score and the verdict on stdout; --json PATH the results record (status pass /
regression / cannot-run; a cannot-run record on every exit 2) and the per-question records beside
it as *.samples.jsonl; nothing is written where not asked.

Exit 0: the score passes
Exit 1: the score is below the threshold or the baseline band
Exit 2: the gate could not measure (server unreachable or failing, data missing, lm-eval absent)
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys

from fp4moe.commands import output
from fp4moe.commands.options import CANNOT_RUN, PASS, REGRESSION, STDOUT, add_command, add_outputs, bind
from fp4moe.completions.endpoint import PREFLIGHT_TIMEOUT_S
from fp4moe.gates.accuracy.gsm8k import DEFAULT_DEADLINE_S, DEFAULT_REQUEST_TIMEOUT_S
from fp4moe.gates.accuracy.thresholds import FILTERS, get_threshold
from fp4moe.gates.accuracy.verdict import DEFAULT_K_SIGMA
from fp4moe.infra.errors import EXIT_OK, EXIT_REGRESSION

SAMPLES = "--json (its .samples.jsonl)"


def _data_inputs(args) -> list:
    from fp4moe.completions.data import default_data_dir

    return [d for d in (args.data_dir or default_data_dir(),) if d]


def register(sub) -> None:
    p = add_command(sub, "gsm8k", __doc__)
    p.add_argument("--base-url", required=True, help="server root, .../v1 or .../v1/completions")
    p.add_argument("--model", required=True, help="model name sent in each request")
    p.add_argument("--num-fewshot", type=int, default=8, help="few-shot examples (default 8, as SGLang's CI)")
    p.add_argument("--limit", type=int, default=None, help="score only the first N questions (default: all)")
    p.add_argument("--data-dir", default=None, help="folder with test.jsonl and train.jsonl / train_head200.jsonl")
    ref = p.add_mutually_exclusive_group()
    ref.add_argument("--threshold", type=float, default=None, help="pass when score >= X")
    ref.add_argument("--baseline", type=float, default=None, help="pass when score >= X - k*stderr")
    p.add_argument("--model-key", default=None, help="take the threshold from the packaged fp4moe/data/accuracy_thresholds.json")
    p.add_argument("--parallel", default="tp8", help="parallel config label for --model-key (default tp8)")
    p.add_argument("--k-sigma", type=float, default=DEFAULT_K_SIGMA, help="k of the baseline rule (default 2)")
    p.add_argument(
        "--filter",
        choices=FILTERS,
        default=None,
        help="lm-eval filter whose score decides (default: the threshold entry's, else flexible-extract)",
    )
    p.add_argument("--concurrency", type=int, default=64, help="concurrent requests (default 64)")
    p.add_argument("--max-retries", type=int, default=3, help="attempts per request (default 3)")
    p.add_argument("--timeout", type=int, default=DEFAULT_REQUEST_TIMEOUT_S,
                   help=f"seconds per request, also the preflight's limit (at most {PREFLIGHT_TIMEOUT_S} s there); "
                        f"default {DEFAULT_REQUEST_TIMEOUT_S}")
    p.add_argument("--deadline", type=float, default=DEFAULT_DEADLINE_S,
                   help=f"seconds for the whole lm-eval run (default {DEFAULT_DEADLINE_S})")
    p.add_argument("--max-gen-toks", type=int, default=512, help="generation limit per answer (default 512)")
    add_outputs(p, json="scores, verdict, versions; a PATH ending in .json, the per-question records go beside it "
                        "as *.samples.jsonl")
    p.add_argument("--verbose", action="store_true", help="show lm-eval's log and progress")
    bind(p, run, inputs=_data_inputs)


def _reference(args) -> tuple[dict, str, str]:
    """(decide() keyword for the rule, filter, source) from the options."""
    if args.threshold is not None or args.baseline is not None:
        if args.model_key:
            raise ValueError("--model-key picks a threshold; do not combine it with --threshold/--baseline")
        kw = {"threshold": args.threshold} if args.threshold is not None else {"baseline": args.baseline}
        return kw, args.filter or "flexible-extract", "command line"
    if not args.model_key:
        raise ValueError("give --threshold X, --baseline X, or --model-key MODEL [--parallel CONFIG]")
    t = get_threshold(args.model_key, args.parallel)
    return {"threshold": t.value}, args.filter or t.filter, t.source


def _check_rule(rule_kw: dict, k_sigma: float) -> None:
    """--threshold/--baseline a fraction in [0, 1], --k-sigma positive: before any work."""
    for name, value in rule_kw.items():
        if not (0.0 <= value <= 1.0):  # False for nan too
            raise ValueError(f"--{name} {value!r}: must be a fraction in [0, 1] (e.g. 0.92)")
    if not (0 < k_sigma < math.inf):
        raise ValueError(f"--k-sigma {k_sigma!r}: must be a positive number")


def run(args) -> int:
    from fp4moe.gates.accuracy import gsm8k
    from fp4moe.gates.accuracy.verdict import decide

    cfg = gsm8k.RunConfig(
        base_url=args.base_url,
        model=args.model,
        data_dir=args.data_dir,
        num_fewshot=args.num_fewshot,
        limit=args.limit,
        concurrency=args.concurrency,
        max_retries=args.max_retries,
        timeout_s=args.timeout,
        max_gen_toks=args.max_gen_toks,
        deadline_s=args.deadline,
        quiet=not args.verbose,
    )
    to_file = args.json not in (None, STDOUT)
    if to_file:
        if args.json.suffix != ".json":
            raise ValueError(f"--json {args.json}: must end in .json (per-question records go beside it as .samples.jsonl)")
        output.add_side_file(args, SAMPLES, args.json.with_suffix(".samples.jsonl"))
    payload = {"config": vars(cfg)}
    try:  # from here on, every exit 2 replaces the results file with a could-not-run record
        rule_kw, filter_name, source = _reference(args)  # option errors before any work
        _check_rule(rule_kw, args.k_sigma)
        gsm8k.check_config(cfg)
        payload["reference"] = {**rule_kw, "filter": filter_name, "source": source}
        if not args.verbose:  # keep CI logs to the scores and the verdict
            os.environ.setdefault("TQDM_DISABLE", "1")
            # datasets draws its own bars ("Generating train split") on a cold cache, outside
            # TQDM_DISABLE: without this a fresh machine's one-line verdict becomes several
            # (read when datasets is imported, by lm-eval, after the checks: a run refused for its
            # options or an unreachable server never pays the ~0.7 s import; one already imported
            # in this process is told directly)
            os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
            if "datasets" in sys.modules:
                sys.modules["datasets"].disable_progress_bars()
            for name in ("lm_eval", "lm-eval", "datasets", "httpx", "fsspec"):
                logging.getLogger(name).setLevel(logging.CRITICAL)
        scores, results, data, seconds = gsm8k.evaluate(cfg)
        verdict = decide(scores[filter_name], k_sigma=args.k_sigma, source=source, **rule_kw)
    except BaseException as e:  # the record says what was configured (main keeps it on exit 2)
        output.write_json(args, {"status": CANNOT_RUN, "reason": " ".join(str(e).split()) or type(e).__name__, **payload})
        raise
    if args.model_key:
        t = get_threshold(args.model_key, args.parallel)
        if cfg.num_fewshot != t.num_fewshot or scores[filter_name].n != t.num_questions:
            print(
                f"note: the {args.model_key}/{args.parallel} threshold was set with {t.num_fewshot}-shot on "
                f"{t.num_questions} questions; this run: {cfg.num_fewshot}-shot on {scores[filter_name].n}",
                file=sys.stderr,
            )
    payload.update(
        status=PASS if verdict.passed else REGRESSION,
        verdict=verdict.to_dict(),
        scores={f: {"exact_match": s.score, "stderr": s.stderr, "n": s.n} for f, s in scores.items()},
        data={"test_file": str(data.test_file), "fewshot_file": str(data.fewshot_file), "n_test": data.n_test},
        wall_s=round(seconds, 3),
        versions=gsm8k.versions(),
        lm_eval={k: results.get(k) for k in ("results", "n-samples", "configs", "higher_is_better")},
    )
    if to_file:
        output.write_side_file(args, SAMPLES, "".join(json.dumps(rec, default=str) + "\n" for rec in gsm8k.sample_records(results)))
    output.write_json(args, {"status": payload.pop("status"), **payload})
    for f_name, s in scores.items():
        print(f"exact_match[{f_name}] = {s.score:.4f} +- {s.stderr:.4f} (n={s.n})")
    print((f"results: {args.json}  samples: {args.json.with_suffix('.samples.jsonl')}  " if to_file else "")
          + f"lm-eval wall time: {seconds:.1f} s")
    print(verdict.line())
    return EXIT_OK if verdict.passed else EXIT_REGRESSION
