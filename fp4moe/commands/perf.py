"""``fp4moe-gate perf compare`` and ``fp4moe-gate perf accept``.

compare: ``perf compare BASE.json HEAD.json`` (A/B or two runs) or
``perf compare --runner NAME [--baseline-dir DIR] HEAD.json`` (stored baseline). Exit 0 when no
benchmark regressed, 1 when at least one did, 2 when the compare could not be made (missing or
corrupt file, no per-round data, different hardware/shape/timer, too few rounds, a baseline
benchmark missing from HEAD). A regression outranks a could-not-compare benchmark (exit 1).

Benchmarks only in BASE mean HEAD lost coverage: exit 2 unless ``--allow-missing``. Benchmarks
only in HEAD are new and listed, never failing.
"""

from __future__ import annotations

import sys
from pathlib import Path

from fp4moe.infra.files import atomic_write_json, atomic_write_text, check_output_path
from fp4moe.infra.errors import EXIT_CANNOT_RUN, EXIT_OK, EXIT_REGRESSION, GateCannotRun
from fp4moe.infra.paths import FIXTURES

DEFAULT_BASELINE_DIR = FIXTURES / "perf" / "baselines"


def register(subparsers) -> None:
    from fp4moe.stats.compare import DEFAULT_ALPHA, DEFAULT_MIN_SAMPLES

    perf = subparsers.add_parser("perf", help="performance gate: statistical compare of pytest-benchmark JSON")
    sub = perf.add_subparsers(dest="perf_command", metavar="PERF_COMMAND")
    perf.set_defaults(func=lambda args: (perf.print_help(), EXIT_CANNOT_RUN)[1])

    c = sub.add_parser("compare", help="compare BASE.json HEAD.json (or HEAD.json against a stored baseline)")
    c.add_argument("files", nargs="+", metavar="JSON", help="BASE.json HEAD.json, or HEAD.json with --runner")
    c.add_argument("--threshold", default="5%", help="regression threshold: 5%%, 5 (percent) or 0.05 (fraction); default 5%%")
    c.add_argument("--alpha", default=DEFAULT_ALPHA, help=f"one-sided significance level (default {DEFAULT_ALPHA})")
    c.add_argument("--min-samples", type=int, default=DEFAULT_MIN_SAMPLES,
                   help="fewest rounds per side (default %(default)s; at least the number with which the test can "
                        "reach p < alpha: 5 for alpha 0.01)")
    c.add_argument("--runner", help="baseline mode: runner name whose stored baseline to use")
    c.add_argument("--baseline-dir", type=Path, default=DEFAULT_BASELINE_DIR, help="stored baselines (default fixtures/perf/baselines)")
    c.add_argument("--allow-missing", action="store_true", help="do not fail when a BASE benchmark is absent from HEAD")
    c.add_argument("--markdown", type=Path, help="write the markdown table here (e.g. $GITHUB_STEP_SUMMARY)")
    c.add_argument("--plot", type=Path, help="write the ratio/interval plot (PNG) here")
    c.add_argument("--json", type=Path, help="write per-benchmark results as JSON here")
    c.set_defaults(func=run_compare)

    a = sub.add_parser("accept", help="store HEAD.json as the baseline for --runner and its aiter version")
    a.add_argument("head", metavar="HEAD.json")
    a.add_argument("--runner", required=True, help="runner name, e.g. mi355x-ci-1")
    a.add_argument("--baseline-dir", type=Path, default=DEFAULT_BASELINE_DIR)
    a.set_defaults(func=run_accept)

    from fp4moe.gates.perf import ab

    ab.register(sub)  # perf ab --base PATH --head PATH: two checkouts/environments in one job


def _resolve_files(args) -> tuple[Path, Path]:
    from fp4moe.gates.perf.baseline import find_baseline, load_run

    if len(args.files) == 2:
        if args.runner:
            raise ValueError("give either BASE.json HEAD.json or --runner NAME HEAD.json, not both")
        return Path(args.files[0]), Path(args.files[1])
    if len(args.files) == 1:
        if not args.runner:
            raise ValueError("one file given: add --runner NAME to compare it with a stored baseline, or pass BASE.json HEAD.json")
        head = Path(args.files[0])
        return find_baseline(args.baseline_dir, args.runner, load_run(head)), head
    raise ValueError(f"expected BASE.json HEAD.json (2 files), got {len(args.files)}")


def run_compare(args) -> int:
    from fp4moe.stats.compare import check_min_samples, parse_alpha, parse_threshold

    threshold = parse_threshold(args.threshold)  # every option checked before any file is read
    alpha = parse_alpha(args.alpha)
    check_min_samples(args.min_samples, alpha)
    inputs = [*args.files, *([args.baseline_dir] if args.runner else [])]
    outputs = [("--markdown", args.markdown), ("--plot", args.plot), ("--json", args.json)]
    for option, path in outputs:
        check_output_path(path, option, inputs=inputs + [q for o, q in outputs if q is not None and o != option])
    try:
        return _compare(args, threshold, alpha)
    except BaseException as e:
        # an earlier run's results must not outlive this one: replace them with "could not run"
        reason = " ".join(str(e).split()) or type(e).__name__
        if args.json:
            atomic_write_json(args.json, {"gate": "perf compare", "status": "cannot-run", "reason": reason}, indent=1)
        if args.markdown:
            from fp4moe.stats.report import md_text

            atomic_write_text(args.markdown, f"**perf compare could not run**: {md_text(reason)}\n")
        raise


def _compare(args, threshold: float, alpha: float) -> int:
    from fp4moe.gates.perf.baseline import comparability_problems, load_run
    from fp4moe.stats.compare import compare_samples
    from fp4moe.stats.report import markdown_table, plot_ratios

    base_path, head_path = _resolve_files(args)
    if base_path.resolve() == head_path.resolve():
        raise GateCannotRun(f"BASE and HEAD are the same file ({head_path}): a compare of a run with itself "
                            "always passes; check the job's paths")
    base, head = load_run(base_path), load_run(head_path)
    matched = [k for k in base.benchmarks if k in head.benchmarks]
    only_base = [k for k in base.benchmarks if k not in head.benchmarks]
    only_head = [k for k in head.benchmarks if k not in base.benchmarks]
    if not matched:
        raise GateCannotRun(
            f"no benchmark names in common between {base.path} and {head.path} "
            f"(base: {sorted(base.benchmarks)[:5]}, head: {sorted(head.benchmarks)[:5]})"
        )
    problems, notes = comparability_problems(base, head, matched)
    if problems:
        raise GateCannotRun("runs are not comparable: " + "; ".join(problems))

    results, errors = [], []
    for key in matched:
        try:
            results.append(
                compare_samples(
                    base.benchmarks[key].samples,
                    head.benchmarks[key].samples,
                    name=key,
                    threshold=threshold,
                    alpha=alpha,
                    min_samples=args.min_samples,
                )
            )
        except ValueError as e:
            errors.append(str(e))
    unmatched = {"base (missing from head)": only_base, "head (new, no baseline)": only_head}
    regressed = [r.name for r in results if r.regressed]
    lost = bool(only_base and not args.allow_missing)
    status = "regression" if regressed else "cannot-run" if errors or lost else "pass"
    table = markdown_table(results, unmatched=unmatched, notes=notes + [f"could not compare: {e}" for e in errors])
    print(table)
    if args.plot and results:
        plot_ratios(results, args.plot)
    if args.markdown:
        atomic_write_text(args.markdown, table)
    if args.json:
        atomic_write_json(
            args.json,
            {
                "gate": "perf compare",
                "status": status,
                "base": base.path,
                "head": head.path,
                "results": [r.to_dict() for r in results],
                "errors": errors,
                "only_in_base": only_base,
                "only_in_head": only_head,
                "notes": notes,
            },
            indent=1,
        )
    if regressed:
        print(f"perf compare: {len(regressed)} benchmark(s) regressed: {', '.join(regressed)}", file=sys.stderr)
        return EXIT_REGRESSION
    if errors:
        print(f"perf compare: cannot run: {len(errors)} benchmark(s) could not be judged: " + "; ".join(errors),
              file=sys.stderr)
        return EXIT_CANNOT_RUN
    if lost:
        print(
            f"perf compare: cannot run: {len(only_base)} benchmark(s) of BASE are missing from HEAD (lost coverage; "
            f"--allow-missing to accept): {', '.join(only_base)}",
            file=sys.stderr,
        )
        return EXIT_CANNOT_RUN
    return EXIT_OK


def run_accept(args) -> int:
    from fp4moe.gates.perf.baseline import accept_baseline

    target = accept_baseline(args.head, args.runner, args.baseline_dir)
    print(f"perf accept: stored {args.head} as baseline {target}")
    return EXIT_OK
