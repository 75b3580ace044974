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
judge, a base benchmark missing from head or arms at different clocks included).

compare and ab append their verdicts to ``--history FILE``; ``perf history FILE`` finds change
points in it (Apache Otava), ``perf calibrate`` turns A/A rows into per-benchmark thresholds
(``--thresholds``), ``perf bisect`` bisects with perf ab as its oracle.
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
        description="The performance gate's subcommands: compare (two pytest-benchmark JSON files, or one "
                    "against a stored baseline), accept (store a baseline), ab (time two checkouts or environments "
                    "in one job), history (change points of a --history file, Apache Otava), calibrate (per-benchmark "
                    "thresholds from A/A ratios) and bisect (perf ab as a bisection's oracle). Each one's --help says "
                    "its inputs and exit codes.")
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
    _add_family_options(c)
    add_outputs(c, json="per-benchmark results", markdown="the markdown table", plot="the ratio/interval plot")
    bind(c, run_compare, inputs=lambda a: [*a.files, *([a.baseline_dir] if a.runner and a.baseline_dir else []),
                                           *([a.thresholds] if a.thresholds else [])])

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
    _add_ab_machine_options(b)
    _add_family_options(b)
    add_outputs(b, json="per-benchmark results, every look", markdown="the markdown summary", plot="the ratio/interval plot")
    bind(b, run_ab, inputs=lambda a: [x for x in (a.base, a.head, a.base_aiter_src, a.head_aiter_src, a.thresholds) if x])

    h = add_command(sub, "history", run_history.__doc__)
    h.add_argument("file", metavar="FILE", help="a --history file (JSON lines, or CSV when it ends in .csv)")
    h.add_argument("--max-pvalue", type=float, default=0.001, help="Otava's significance level (default %(default)s)")
    h.add_argument("--min-magnitude", type=float, default=0.01,
                   help="smallest relative change reported (default %(default)s: 1%%)")
    h.add_argument("--window", type=int, default=50, help="Otava's sliding window, rows (default %(default)s)")
    add_outputs(h, json="every change point")
    bind(h, run_history, inputs=lambda a: [a.file])

    k = add_command(sub, "calibrate", run_calibrate.__doc__)
    k.add_argument("archive", nargs="+", metavar="A_A_ARCHIVE", help="history files of A/A verdicts (a revision against itself)")
    k.add_argument("--out", required=True, type=Path, metavar="FILE", help="the thresholds file to write (JSON), atomically")
    add_outputs(k, json="the thresholds record")
    bind(k, run_calibrate, inputs=lambda a: [*a.archive])

    s = add_command(sub, "bisect", run_bisect.__doc__)
    s.add_argument("--repo", required=True, metavar="DIR", help="a git repository (work tree or bare) of fp4moe checkouts or of aiter")
    s.add_argument("--good", required=True, metavar="REV", help="a revision without the slowdown")
    s.add_argument("--bad", required=True, metavar="REV", help="a later revision with it")
    s.add_argument("--benchmarks", required=True, metavar="SEL", help="perf ab's --benchmarks")
    s.add_argument("--device", default=None, help="perf ab's --device")
    s.add_argument("--checkout", default=None, metavar="PATH",
                   help="for an aiter repository: the fp4moe checkout both sides run (default: this gate's)")
    add_stat_options(s, threshold="5%", alpha_help="perf ab's --alpha at every step (default %(default)s)")
    s.add_argument("--first", type=int, default=DEFAULT_FIRST, help="perf ab's --first (default %(default)s)")
    s.add_argument("--step", type=int, default=DEFAULT_STEP, help="perf ab's --step (default %(default)s)")
    s.add_argument("--max-rounds", type=int, default=DEFAULT_MAX_ROUNDS, help="perf ab's --max-rounds (default %(default)s)")
    s.add_argument("--confirm", type=int, default=2, help="reproductions a culprit needs (default %(default)s)")
    s.add_argument("--timeout", type=float, default=REQUEST_TIMEOUT_S, help="perf ab's --timeout (default %(default)s)")
    s.add_argument("--setup-timeout", type=float, default=SETUP_TIMEOUT_S, help="perf ab's --setup-timeout (default %(default)s)")
    add_outputs(s, json="every step and the culprit")
    bind(s, run_bisect, inputs=lambda a: [a.repo])


def _add_family_options(p) -> None:
    p.add_argument("--thresholds", type=Path, default=None, metavar="FILE",
                   help="per-benchmark thresholds (fp4moe-gate perf calibrate); others use --threshold")
    p.add_argument("--family", choices=("holm", "none"), default="holm",
                   help="family-wise control over the run's benchmarks: holm (default; perf ab spends alpha/m per "
                        "benchmark, Holm's first step) or none (alpha per benchmark)")
    p.add_argument("--history", type=Path, default=None, metavar="FILE",
                   help="append one row per benchmark verdict here (JSON lines; CSV when it ends in .csv)")
    p.add_argument("--base-rev", default=None, help="the base's revision in the history row (default: git's, else the path)")
    p.add_argument("--head-rev", default=None, help="the head's revision in the history row")


def _add_ab_machine_options(p) -> None:
    p.add_argument("--workers", choices=("auto", "shared", "separate"), default="auto",
                   help="shared: one worker serves both checkouts (no per-process bias); separate: one per side; "
                        "auto (default): shared on a CPU for two checkouts without aiter trees")
    p.add_argument("--clocks", choices=("auto", "off"), default="auto",
                   help="auto (default): sample SM/memory clocks, power and throttle reasons per arm with "
                        "nvidia-smi, amd-smi or rocm-smi when one is on PATH; exit 2 when the arms' differ")
    p.add_argument("--compile-cache", metavar="DIR", default=None,
                   help="keep the workers' kernel compile caches (Triton, Inductor, CUDA JIT) in DIR between runs; "
                        "both sides share it (the caches are keyed by source); default: a scratch folder per run")


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
    from fp4moe.gates.perf.ab import AbOptions, ArmsAtDifferentClocks
    from fp4moe.gates.perf.ab import run_ab as gate_run_ab
    from fp4moe.stats.report import markdown_table

    opts = AbOptions(base=args.base, head=args.head, benchmarks=args.benchmarks, device=args.device,
                     threshold=args.threshold, alpha=args.alpha, first=args.first, step=args.step,
                     max_rounds=args.max_rounds, seed=args.seed, timeout=args.timeout,
                     setup_timeout=args.setup_timeout, base_aiter_src=args.base_aiter_src,
                     head_aiter_src=args.head_aiter_src, workers=args.workers, clocks=args.clocks,
                     thresholds=_thresholds(args), family=args.family, compile_cache=args.compile_cache)
    try:
        res = gate_run_ab(opts, log=lambda s: print(s, flush=True))
    except ArmsAtDifferentClocks as e:
        output.write_json(args, {"status": CANNOT_RUN, "reason": str(e), "base": args.base, "head": args.head,
                                 "clocks": e.record})
        raise
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
    if args.history is not None:
        clock = ((res.clocks or {}).get("head") or {}).get("sm_mhz_median")
        device = next(iter(res.head_meta.values()), {}).get("gpu_name") or res.device
        _append_history(args, "perf ab", [(n, r.comparison, r.rounds) for n, r in res.results.items()], device,
                        "" if clock is None else f"{clock:g} MHz", _rev(args.base, args.base_rev), _rev(args.head, args.head_rev))
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
    per_bench = _thresholds(args) or {}
    for key in matched:
        try:
            results.append(
                compare_samples(
                    base.benchmarks[key].samples,
                    head.benchmarks[key].samples,
                    name=key,
                    threshold=per_bench.get(key, threshold),
                    alpha=alpha,
                    min_samples=args.min_samples,
                )
            )
        except ValueError as e:
            errors.append(str(e))
    if args.family == "holm" and len(results) > 1:
        _holm(results, alpha)
        notes = notes + [f"family-wise: Holm over {len(results)} benchmarks at alpha {alpha:g}"]
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
    if args.history is not None:
        device = next((b.extra_info.get("gpu_name") for b in head.benchmarks.values() if b.extra_info.get("gpu_name")),
                      None) or str((head.machine_info.get("cpu") or {}).get("brand_raw") or head.machine_info.get("machine") or "")
        _append_history(args, "perf compare", [(r.name, r, r.n_head) for r in results], device, "",
                        args.base_rev or (base.commit_info or {}).get("id") or base.path,
                        args.head_rev or (head.commit_info or {}).get("id") or head.path)
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


def _thresholds(args) -> dict | None:
    from fp4moe.stats.family import load_thresholds

    return load_thresholds(args.thresholds) if args.thresholds is not None else None


def _holm(results: list, alpha: float) -> None:
    """Holm over the run's benchmarks: a benchmark stays regressed only if its Holm-adjusted
    p(slower) is below alpha (the threshold rule still applies)."""
    from fp4moe.stats.compare import REGRESSED, UNCHANGED
    from fp4moe.stats.family import holm_adjust

    for r, adj in zip(results, holm_adjust([r.p_slower for r in results])):
        if r.verdict == REGRESSED and not adj < alpha:
            r.verdict = UNCHANGED
            r.notes.append(f"p(slower) {r.p_slower:.3g} is significant alone, not after Holm over {len(results)} "
                           f"benchmarks (adjusted {adj:.3g})")


def _rev(path: str, given: str | None) -> str:
    """The revision a history row names: ``given``, else the checkout's git HEAD, else the path."""
    import subprocess

    if given:
        return given
    try:
        r = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30,
                           stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return str(path)
    return r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else str(path)


def _append_history(args, gate: str, rows: list, device: str, clocks: str, base_rev: str, head_rev: str) -> None:
    from fp4moe.stats.history import append_rows

    try:
        append_rows(args.history, [{"gate": gate, "benchmark": name, "device": device, "clocks": clocks,
                                    "base_rev": base_rev, "head_rev": head_rev, "ratio": c.ratio, "ci_low": c.ci_low,
                                    "ci_high": c.ci_high, "verdict": c.verdict, "base_median": c.base_median,
                                    "head_median": c.head_median, "threshold": c.threshold, "rounds": rounds}
                                   for name, c, rounds in rows])
    except OSError as e:
        raise GateCannotRun(f"--history {args.history}: {e.strerror or e}") from None


def run_history(args) -> int:
    """``fp4moe-gate perf history``: find the change points in a history of perf verdicts (Apache Otava).

    Did a benchmark drift, even in steps each below the per-PR threshold? Per benchmark and
    device, the head medians of the rows (in file order) go through Apache Otava's change-point
    detection; each change point is reported with the revision where the new level starts and
    its size.

    Inputs: FILE, written by perf ab / perf compare --history (JSON lines, or CSV); needs the
    optional extra apache-otava (pip install 'fp4moe-gate[otava]').

    Exit 0: no change point is a slowdown
    Exit 1: at least one change point is a slowdown (it is named with its revision and size)
    Exit 2: the file is unreadable or malformed (the line is named), or apache-otava is not installed
    """
    from fp4moe.stats import history

    try:
        history.otava_analysis()
    except ImportError as e:
        raise GateCannotRun(f"perf history needs the otava extra: {e}") from None
    if not 0 < args.max_pvalue < 1 or not 0 <= args.min_magnitude < 1 or args.window < 2:
        raise ValueError(f"--max-pvalue {args.max_pvalue} / --min-magnitude {args.min_magnitude} / --window {args.window}: "
                         "a level in (0, 1), a fraction in [0, 1), at least 2 rows")
    rows = history.read_rows(args.file)
    cps = history.change_points(rows, max_pvalue=args.max_pvalue, window=args.window, min_magnitude=args.min_magnitude)
    n_series = len(history.series(rows))
    print(f"perf history: {len(rows)} rows, {n_series} series (benchmark, device), {len(cps)} change point(s)")
    for c in cps:
        print(f"  {c['benchmark']} [{c['device']}]: {c['size']:+.1%} from {c['rev']} (after {c['after_rev']}; "
              f"mean {c['mean_before']:.4g} s -> {c['mean_after']:.4g} s, p {c['pvalue']:.2g})")
    slower = [c for c in cps if c["size"] > 0]
    rc = EXIT_REGRESSION if slower else EXIT_OK
    output.write_json(args, {"status": STATUS_BY_EXIT[rc], "file": str(args.file), "rows": len(rows), "series": n_series,
                             "settings": {"max_pvalue": args.max_pvalue, "min_magnitude": args.min_magnitude,
                                          "window": args.window}, "change_points": cps})
    if slower:
        print(f"perf history: {len(slower)} slowdown(s): " + ", ".join(f"{c['benchmark']} {c['size']:+.1%} at {c['rev']}"
                                                                        for c in slower), file=sys.stderr)
    return rc


def run_calibrate(args) -> int:
    """``fp4moe-gate perf calibrate``: per-benchmark thresholds from an archive of A/A ratios.

    How large must a benchmark's slowdown be to stand out of its own noise? From each benchmark's
    A/A ratios (a revision against itself), the threshold is exp(Q3 + 3 IQR of the log-ratios) - 1
    (at least 0.2%); the file also records the command that regenerates it.

    Inputs: one or more history files of A/A verdicts (perf ab / perf compare --history); --out FILE.

    Exit 0: the thresholds were written
    Exit 2: a file is unreadable, or a benchmark has fewer than 20 A/A ratios (named)
    """
    import shlex

    from fp4moe.infra.files import atomic_write_json
    from fp4moe.stats import family, history

    ratios: dict[str, list[float]] = {}
    for f in args.archive:
        for r in history.read_rows(f):
            if r.get("ratio") is not None:
                ratios.setdefault(str(r["benchmark"]), []).append(r["ratio"])
    if not ratios:
        raise GateCannotRun(f"{', '.join(args.archive)}: no row with a ratio")
    out = {}
    for name, rs in sorted(ratios.items()):
        try:
            out[name] = family.calibrated_threshold(rs)
        except ValueError as e:
            raise GateCannotRun(f"{name}: {e} (in {', '.join(args.archive)})") from None
    doc = {"method": f"exp(Q3 + {family.IQR_FACTOR:g} IQR of the A/A log-ratios) - 1, at least {family.MIN_THRESHOLD:g}",
           "command": "fp4moe-gate perf calibrate " + " ".join(shlex.quote(str(a)) for a in args.archive) +
                      f" --out {shlex.quote(str(args.out))}",
           "benchmarks": out}
    atomic_write_json(args.out, doc, indent=1)
    for name, t in out.items():
        print(f"perf calibrate: {name}: threshold {t['threshold']:.2%} from {t['n']} A/A ratios")
    output.write_json(args, {"status": STATUS_BY_EXIT[EXIT_OK], **doc})
    return EXIT_OK


def run_bisect(args) -> int:
    """``fp4moe-gate perf bisect``: find the commit between --good and --bad that made a benchmark slower.

    Which commit made it slower? A bisection whose oracle is perf ab (base = GOOD, head = the
    step's commit); an unjudgeable step is skipped; a culprit is named only when it reproduces
    --confirm times (its head regressed, its parent's unchanged). Each commit's tree is unpacked
    with git archive: an fp4moe checkout is a perf ab side, an aiter tree is given to --checkout's
    workers as --base-aiter-src/--head-aiter-src.

    Inputs: --repo DIR (a git repository), --good REV, --bad REV, --benchmarks SEL.

    Exit 0: BAD is not slower than GOOD (nothing to bisect)
    Exit 1: the culprit is named (it reproduced)
    Exit 2: no culprit could be named (unjudgeable neighbours, no reproduction), or git or perf ab could not run
    """
    from fp4moe.gates.perf import bisect
    from fp4moe.gates.perf.ab import AbOptions, design_of
    from fp4moe.infra.paths import REPO_ROOT

    if args.confirm < 1:
        raise ValueError(f"--confirm {args.confirm}: at least 1")

    def make_options(**sides):
        return AbOptions(benchmarks=args.benchmarks, device=args.device, threshold=args.threshold, alpha=args.alpha,
                         first=args.first, step=args.step, max_rounds=args.max_rounds, timeout=args.timeout,
                         setup_timeout=args.setup_timeout, **sides)

    design_of(make_options(base="", head=""))  # every option checked before git runs
    commits = bisect.commit_range(args.repo, args.good, args.bad)
    trees = bisect.Trees(args.repo)
    try:
        oracle = bisect.ab_oracle(trees, commits[0], make_options, str(args.checkout or REPO_ROOT))
        res = bisect.bisect(commits, oracle, confirm=args.confirm, log=lambda s: print(s, flush=True))
    finally:
        trees.close()
    if res.culprit:
        print(f"perf bisect: culprit {res.culprit} (parent {res.parent}), reproduced {args.confirm} times")
        rc = EXIT_REGRESSION
    elif res.reason.startswith("BAD"):
        print(f"perf bisect: {res.reason}")
        rc = EXIT_OK
    else:
        rc = EXIT_CANNOT_RUN
    output.write_json(args, {"status": STATUS_BY_EXIT[rc], "repo": str(args.repo), "commits": len(commits),
                             **({"reason": res.reason} if rc == EXIT_CANNOT_RUN else {}), **res.to_dict()})
    if rc == EXIT_CANNOT_RUN:
        raise GateCannotRun(f"perf bisect: {res.reason}")
    return rc
