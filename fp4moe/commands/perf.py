"""``fp4moe-gate perf compare``, ``perf accept`` and ``perf ab``.

compare: ``perf compare BASE.json HEAD.json`` (A/B or two runs) or
``perf compare --runner NAME [--baseline-dir DIR] HEAD.json`` (stored baseline). Exit 0 when no
benchmark regressed, 1 when at least one did, 2 when the compare could not be made (missing or
corrupt file, no per-round data, different hardware/shape/timer, too few rounds, a baseline
benchmark missing from HEAD). A regression outranks a could-not-compare benchmark (exit 1).

Benchmarks only in BASE mean HEAD lost coverage: exit 2 unless ``--allow-missing``. Benchmarks
only in HEAD are new and listed, never failing.

ab: ``perf ab --base PATH --head PATH`` times two checkouts or environments in one job
(``fp4moe.gates.perf.ab.run_ab``; exit 0 nothing regressed, 1 a benchmark regressed, 2 could not
judge, a base benchmark missing from head included).
"""

from __future__ import annotations

import sys
from pathlib import Path

from fp4moe.commands import output
from fp4moe.commands.options import CANNOT_RUN, STATUS_BY_EXIT, add_command, add_outputs, add_stat_options, bind
from fp4moe.infra.errors import EXIT_CANNOT_RUN, EXIT_OK, EXIT_REGRESSION, GateCannotRun, exit_code_of
from fp4moe.infra.paths import CHECKOUT, data_path
from fp4moe.stats.defaults import DEFAULT_FIRST, DEFAULT_MAX_ROUNDS, DEFAULT_STEP

#: The environment variable naming the stored-baselines folder (``--baseline-dir`` wins).
BASELINE_ENV = "FP4MOE_BASELINE_DIR"


def default_baseline_dir(*, writing: bool) -> Path:
    """``$FP4MOE_BASELINE_DIR``, else the packaged ``fp4moe/data/perf/baselines``. Writing
    (``perf accept``) there is allowed only from a checkout (the file is then committed); an
    installed package's data is never written: GateCannotRun naming ``--baseline-dir``."""
    import os

    env = os.environ.get(BASELINE_ENV)
    if env:
        return Path(env)
    packaged = data_path("perf/baselines")
    if writing and (CHECKOUT is None or not packaged.resolve().is_relative_to(CHECKOUT)):
        raise GateCannotRun(f"--baseline-dir: required (or ${BASELINE_ENV}): the installed package's "
                            f"{packaged} is never written")
    return packaged


def register(subparsers) -> None:
    from fp4moe.gates.perf.ab import REQUEST_TIMEOUT_S, SETUP_TIMEOUT_S

    perf = subparsers.add_parser(
        "perf", help="performance gate: statistical compare of pytest-benchmark JSON, A/B of two checkouts",
        description="The performance gate's three subcommands: compare (two pytest-benchmark JSON files, or one "
                    "against a stored baseline), accept (store a baseline) and ab (time two checkouts or environments "
                    "in one job). Each one's --help says its inputs and exit codes.")
    sub = perf.add_subparsers(dest="perf_command", metavar="PERF_COMMAND")
    bind(perf, lambda args: (perf.print_help(sys.stderr), 2)[1])

    c = add_command(sub, "compare", run_compare.__doc__)
    c.add_argument("files", nargs="+", metavar="JSON", help="BASE.json HEAD.json, or HEAD.json with --runner")
    add_stat_options(c, threshold="5%", min_samples_help="fewest rounds per side; at least the number with which "
                     "the test can reach p < alpha: 5 for alpha 0.01")
    c.add_argument("--runner", help="baseline mode: runner name whose stored baseline to use")
    c.add_argument("--baseline-dir", type=Path, default=None,
                   help=f"stored baselines (default ${BASELINE_ENV}, else the baselines that come with the package)")
    c.add_argument("--allow-missing", action="store_true", help="do not fail when a BASE benchmark is absent from HEAD")
    add_outputs(c, json="per-benchmark results", markdown="the markdown table", plot="the ratio/interval plot")
    bind(c, run_compare, inputs=lambda a: [*a.files, *([a.baseline_dir] if a.runner and a.baseline_dir else [])])

    a = add_command(sub, "accept", run_accept.__doc__)
    a.add_argument("head", metavar="HEAD.json", help="a pytest-benchmark JSON with per-round data")
    a.add_argument("--runner", required=True, help="runner name, e.g. mi355x-ci-1")
    a.add_argument("--baseline-dir", type=Path, default=None,
                   help=f"where baselines are stored (default ${BASELINE_ENV}, else the checkout's fp4moe/data/perf/baselines; "
                        "an installed package needs one of the two)")
    bind(a, run_accept)

    b = add_command(sub, "ab", run_ab.__doc__)
    b.add_argument("--base", required=True, metavar="PATH", help="checkout, virtualenv or Python executable of the base")
    b.add_argument("--head", required=True, metavar="PATH", help="the same for the head")
    b.add_argument("--benchmarks", default="", metavar="SEL",
                   help="comma list of name patterns (fnmatch), e.g. 'moe:*T1,matmul:*'; default: all of the device's")
    b.add_argument("--device", default=None, help="torch device for both workers (default: cuda when visible, else cpu)")
    b.add_argument("--base-aiter-src", metavar="TREE", default=None,
                   help="the base side's aiter tree (its worker's $FP4MOE_AITER_SRC): what 'aiter-triton:*' times")
    b.add_argument("--head-aiter-src", metavar="TREE", default=None, help="the same for the head")
    add_stat_options(b, threshold="5%", alpha_help="one-sided alpha spent over all looks (default %(default)s)")
    b.add_argument("--first", type=int, default=DEFAULT_FIRST, help="rounds per side at the first look (default %(default)s)")
    b.add_argument("--step", type=int, default=DEFAULT_STEP, help="rounds per side between looks (default %(default)s)")
    b.add_argument("--max-rounds", type=int, default=DEFAULT_MAX_ROUNDS, help="rounds per side at the last look (default %(default)s)")
    b.add_argument("--seed", type=int, default=0, help="seed of the pair order (default %(default)s)")
    b.add_argument("--timeout", type=float, default=REQUEST_TIMEOUT_S, help="seconds one timed call may take (default %(default)s)")
    b.add_argument("--setup-timeout", type=float, default=SETUP_TIMEOUT_S,
                   help="seconds a worker may take to start, build and warm up (default %(default)s)")
    add_outputs(b, json="per-benchmark results, every look", markdown="the markdown summary", plot="the ratio/interval plot")
    bind(b, run_ab, inputs=lambda a: [x for x in (a.base, a.head, a.base_aiter_src, a.head_aiter_src) if x])


def run_ab(args) -> int:
    """``fp4moe-gate perf ab``: time BASE and HEAD (checkouts or environments) in interleaved rounds and judge them.

    Did HEAD get slower than BASE on this machine? Both sides' benchmarks are timed in one job, in
    interleaved rounds (each side in its own worker process), until a sequential test can decide
    (regression beyond --threshold at --alpha, or none).

    Inputs: two checkouts, virtualenvs or Python executables (--base, --head); --benchmarks picks
    benchmarks.

    Exit 0: nothing regressed
    Exit 1: a benchmark regressed (it is named with its figures)
    Exit 2: a side could not be set up or timed, or a base benchmark is missing from head
    """
    from fp4moe.gates.perf.ab import AbOptions
    from fp4moe.gates.perf.ab import run_ab as gate_run_ab
    from fp4moe.stats.report import markdown_table

    res = gate_run_ab(AbOptions(base=args.base, head=args.head, benchmarks=args.benchmarks, device=args.device,
                                threshold=args.threshold, alpha=args.alpha, first=args.first, step=args.step,
                                max_rounds=args.max_rounds, seed=args.seed, timeout=args.timeout,
                                setup_timeout=args.setup_timeout, base_aiter_src=args.base_aiter_src,
                                head_aiter_src=args.head_aiter_src), log=lambda s: print(s, flush=True))
    comps = [r.comparison for r in res.results.values()]
    table = markdown_table(comps, unmatched={"base (missing from head)": res.only_base, "head (new, no baseline)": res.only_head},
                           notes=res.notes())
    print(table)
    output.write_markdown(args, table)
    output.write_plot(args, comps)
    regressed = res.regressed
    lost = f"{len(res.only_base)} base benchmark(s) missing from head (lost coverage): {', '.join(res.only_base)}"
    rc = exit_code_of(regressed=bool(regressed), unjudged=bool(res.only_base))
    status = STATUS_BY_EXIT[rc]
    output.write_json(args, {"status": status, **({"reason": lost} if status == CANNOT_RUN else {}),
                             "base": args.base, "head": args.head, **res.to_dict()})
    if rc == EXIT_REGRESSION:
        print(f"perf ab: {len(regressed)} benchmark(s) regressed: {', '.join(regressed)}", file=sys.stderr)
    if rc == EXIT_CANNOT_RUN:
        raise GateCannotRun(lost)
    return rc


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
        return find_baseline(args.baseline_dir or default_baseline_dir(writing=False), args.runner, load_run(head)), head
    raise ValueError(f"expected BASE.json HEAD.json (2 files), got {len(args.files)}")


def _refuse_same_run(base_path: Path, head_path: Path) -> None:
    """A compare of a run with itself always passes: the same path, a hard link or symlink to
    one file (same device and inode), or a byte-for-byte copy (two real runs never time every
    round alike) is exit 2 naming both files."""
    import filecmp
    import os

    same = base_path.resolve() == head_path.resolve()
    try:
        same = same or os.path.samefile(base_path, head_path)
        if not same and base_path.is_file() and head_path.is_file():
            if filecmp.cmp(base_path, head_path, shallow=False):
                raise GateCannotRun(f"BASE {base_path} and HEAD {head_path} hold the same bytes: a compare of a run "
                                    "with itself always passes; check the job's paths")
    except OSError:
        return  # a missing or unreadable file: load_run names it
    if same:
        raise GateCannotRun(f"BASE {base_path} and HEAD {head_path} are the same file (one path, a link, or a hard "
                            "link): a compare of a run with itself always passes; check the job's paths")


def run_compare(args) -> int:
    """``fp4moe-gate perf compare``: compare BASE.json HEAD.json (or HEAD.json against a stored baseline).

    Did a benchmark get slower? Per benchmark, the rounds of BASE and HEAD are compared with a
    one-sided test: a regression is a slowdown beyond --threshold at significance --alpha.
    Benchmarks only in BASE mean HEAD lost coverage (exit 2 unless --allow-missing); benchmarks only
    in HEAD are listed, never failing.

    Inputs: two pytest-benchmark JSON files with per-round data (BASE.json HEAD.json), or HEAD.json
    with --runner NAME and its stored baseline.

    Exit 0: no benchmark regressed
    Exit 1: at least one benchmark regressed (a regression outranks a benchmark that could not be
    compared)
    Exit 2: the compare could not be made: a missing or corrupt file, no per-round data, different
    hardware, shape or timer, too few rounds, a baseline benchmark missing from HEAD
    """
    from fp4moe.stats.compare import check_min_samples, parse_alpha, parse_threshold

    threshold = parse_threshold(args.threshold)  # every option checked before any file is read
    alpha = parse_alpha(args.alpha)
    check_min_samples(args.min_samples, alpha)
    return _compare(args, threshold, alpha)


def _compare(args, threshold: float, alpha: float) -> int:
    from fp4moe.gates.perf.baseline import comparability_problems, load_run
    from fp4moe.stats.compare import compare_samples
    from fp4moe.stats.report import markdown_table

    base_path, head_path = _resolve_files(args)
    _refuse_same_run(base_path, head_path)
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
    rc = exit_code_of(regressed=bool(regressed), unjudged=bool(errors or lost))
    status = STATUS_BY_EXIT[rc]
    table = markdown_table(results, unmatched=unmatched, notes=notes + [f"could not compare: {e}" for e in errors])
    print(table)
    output.write_plot(args, results)
    output.write_markdown(args, table)
    reason = (f"{len(errors)} benchmark(s) could not be judged: " + "; ".join(errors) if errors else
              f"{len(only_base)} benchmark(s) of BASE are missing from HEAD (lost coverage; --allow-missing to accept): "
              f"{', '.join(only_base)}" if lost else None)
    output.write_json(
            args,
            {
                "status": status,
                **({"reason": reason} if status == CANNOT_RUN else {}),
                "base": base.path,
                "head": head.path,
                "results": [r.to_dict() for r in results],
                "errors": errors,
                "only_in_base": only_base,
                "only_in_head": only_head,
                "notes": notes,
            },
        )
    if rc == EXIT_REGRESSION:
        print(f"perf compare: {len(regressed)} benchmark(s) regressed: {', '.join(regressed)}", file=sys.stderr)
    if rc == EXIT_CANNOT_RUN:
        raise GateCannotRun(reason)
    return rc


def run_accept(args) -> int:
    """``fp4moe-gate perf accept``: store HEAD.json as the baseline for --runner and its aiter version.

    Stores a pytest-benchmark result as the baseline later compares read, keyed by runner and aiter
    version (nothing is judged).

    Inputs: HEAD.json with per-round data and --runner NAME.

    Exit 0: the baseline was written
    Exit 2: the file is unreadable or has no per-round data, or the baseline folder cannot be
    written
    """
    from fp4moe.gates.perf.baseline import accept_baseline

    target = accept_baseline(args.head, args.runner, args.baseline_dir or default_baseline_dir(writing=True))
    print(f"perf accept: stored {args.head} as baseline {target}")
    return EXIT_OK
