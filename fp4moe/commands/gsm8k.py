"""``fp4moe-gate gsm8k``: GSM8K through lm-eval against a running server, with a verdict.

Exit codes: 0 pass, 1 the score is below the threshold / the baseline band (a regression),
2 the gate could not measure (see :mod:`fp4moe.gates.accuracy.gsm8k`). The results JSON is written
in every case that reaches the server, with ``status`` pass / fail / cannot-run.
"""

from __future__ import annotations

import json
import logging
import math
import os
import secrets
import sys
import time
from pathlib import Path

from fp4moe.gates.accuracy.gsm8k import DEFAULT_DEADLINE_S, DEFAULT_REQUEST_TIMEOUT_S
from fp4moe.completions.endpoint import PREFLIGHT_TIMEOUT_S
from fp4moe.gates.accuracy.thresholds import FILTERS, get_threshold
from fp4moe.gates.accuracy.verdict import DEFAULT_K_SIGMA, decide
from fp4moe.infra.files import atomic_write_text, check_output_path
from fp4moe.infra.errors import EXIT_OK, EXIT_REGRESSION
from fp4moe.infra.paths import results_dir

#: Default results file: one per run (UTC time and process id), so two runs never overwrite
#: each other, in the results folder (``fp4moe.infra.paths.results_dir()``: ``results/`` of the
#: checkout, git-ignored; never the current directory); ``--output`` names it explicitly
#: (replaced atomically). The default file is written only once the gate has started work: a
#: usage error leaves nothing behind.
DEFAULT_OUTPUT = "gsm8k-{utc}-{pid}-{token}.json"


def default_output() -> Path:
    return results_dir() / DEFAULT_OUTPUT.format(utc=time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()),
                                                 pid=os.getpid(), token=secrets.token_hex(3))


def register(sub) -> None:
    p = sub.add_parser(
        "gsm8k",
        help="GSM8K accuracy through lm-eval against an OpenAI-compatible server",
        description=(
            "Run GSM8K with lm-eval (local-completions) against --base-url and decide pass/fail. "
            "Data is read from local files (--data-dir, default ../shared/data/gsm8k); the dataset "
            "hub is never used. Exit 0 pass, 1 regression, 2 could not run."
        ),
    )
    p.add_argument("--base-url", required=True, help="server root, .../v1 or .../v1/completions")
    p.add_argument("--model", required=True, help="model name sent in each request")
    p.add_argument("--num-fewshot", type=int, default=8, help="few-shot examples (default 8, as SGLang's CI)")
    p.add_argument("--limit", type=int, default=None, help="score only the first N questions (default: all)")
    p.add_argument("--data-dir", default=None, help="folder with test.jsonl and train.jsonl / train_head200.jsonl")
    ref = p.add_mutually_exclusive_group()
    ref.add_argument("--threshold", type=float, default=None, help="pass when score >= X")
    ref.add_argument("--baseline", type=float, default=None, help="pass when score >= X - k*stderr")
    p.add_argument("--model-key", default=None, help="take the threshold from fixtures/accuracy_thresholds.json")
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
    p.add_argument("--output", default=None, help=f"results JSON (default results/{DEFAULT_OUTPUT} of the checkout, new per run, "
                   "or $FP4MOE_RESULTS_DIR; nothing is written there on a usage error); "
                   "per-question records go beside it as *.samples.jsonl")
    p.add_argument("--verbose", action="store_true", help="show lm-eval's log and progress")
    p.set_defaults(func=run)


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


def _write_json(path: Path, payload: dict) -> None:
    atomic_write_text(path, json.dumps(payload, indent=2, default=str) + "\n")


def run(args) -> int:
    from fp4moe.gates.accuracy import gsm8k

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
    )
    output = Path(args.output) if args.output else default_output()
    if output.suffix != ".json":
        raise ValueError(f"--output {output}: must end in .json (per-question records go beside it as .samples.jsonl)")
    from fp4moe.completions.data import default_data_dir

    data_inputs = [d for d in (args.data_dir or default_data_dir(),) if d]

    def check_outputs():
        check_output_path(output, "--output", inputs=data_inputs)
        check_output_path(output.with_suffix(".samples.jsonl"), "--output (its .samples.jsonl)", inputs=data_inputs)

    if args.output:
        check_outputs()
    payload = {"gate": "gsm8k", "config": vars(cfg)}
    started = False  # the default file appears only once work starts (never on a usage error)
    try:  # from here on, every exit 2 replaces the results file with a could-not-run record
        rule_kw, filter_name, source = _reference(args)  # option errors before any work
        _check_rule(rule_kw, args.k_sigma)
        gsm8k.check_config(cfg)
        payload["reference"] = {**rule_kw, "filter": filter_name, "source": source}
        if not args.verbose:  # keep CI logs to the scores and the verdict
            os.environ.setdefault("TQDM_DISABLE", "1")
            # datasets draws its own bars ("Generating train split") on a cold cache, outside
            # TQDM_DISABLE: without this a fresh machine's one-line verdict becomes several
            os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
            try:
                import datasets

                datasets.disable_progress_bars()
            except ImportError:  # lm-eval missing: gsm8k.evaluate says so, naming the extra
                pass
            for name in ("lm_eval", "lm-eval", "datasets", "httpx", "fsspec"):
                logging.getLogger(name).setLevel(logging.CRITICAL)
        if not args.output:  # the results folder is made when the first run starts work in it
            output.parent.mkdir(parents=True, exist_ok=True)
            check_outputs()
        started = True
        scores, results, data, seconds = gsm8k.evaluate(cfg)
        verdict = decide(scores[filter_name], k_sigma=args.k_sigma, source=source, **rule_kw)
    except BaseException as e:
        if args.output or started:  # a named file is always replaced: no stale result survives
            _write_json(output, {**payload, "status": "cannot-run", "reason": " ".join(str(e).split()) or type(e).__name__})
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
        status="pass" if verdict.passed else "fail",
        verdict=verdict.to_dict(),
        scores={f: {"exact_match": s.score, "stderr": s.stderr, "n": s.n} for f, s in scores.items()},
        data={"test_file": str(data.test_file), "fewshot_file": str(data.fewshot_file), "n_test": data.n_test},
        wall_s=round(seconds, 3),
        versions=gsm8k.versions(),
        lm_eval={k: results.get(k) for k in ("results", "n-samples", "configs", "higher_is_better")},
    )
    samples = output.with_suffix(".samples.jsonl")
    atomic_write_text(samples, "".join(json.dumps(rec, default=str) + "\n" for rec in gsm8k.sample_records(results)))
    _write_json(output, payload)
    for f_name, s in scores.items():
        print(f"exact_match[{f_name}] = {s.score:.4f} +- {s.stderr:.4f} (n={s.n})")
    print(f"results: {output}  samples: {samples}  lm-eval wall time: {seconds:.1f} s")
    print(verdict.line())
    return EXIT_OK if verdict.passed else EXIT_REGRESSION
