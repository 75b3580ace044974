"""``fp4moe-gate perf ab --base PATH --head PATH``: base and head timed in one job.

Each PATH is a checkout (a directory with ``fp4moe/__init__.py``: its worker runs this
interpreter isolated (:data:`BOOTSTRAP`), imports ``fp4moe`` only from the checkout and reports
every ``fp4moe`` file it loaded, each checked to lie inside it) or an
environment (a virtualenv directory with ``bin/python``, or a Python executable: its worker
imports whatever that environment has installed, e.g. another aiter or SGLang release). One
long-lived worker per side (``fp4moe.gates.perf.ab_worker``, through ``fp4moe.infra.childproc.Worker``:
own process group, a time limit on every request, killed with the gate) builds the selected
benchmarks; the gate then times them in interleaved pairs whose order is drawn at random
(``numpy.random.default_rng(seed)``), both sides on the same device, one call at a time.

Decision: per benchmark, the sequential rule of ``fp4moe.stats.sequential`` (looks every
``--step`` pairs up to ``--max-rounds``, Pocock alpha spending, the compare's significance AND
threshold rule at each look, futility stop once a regression of the threshold's size is
excluded). Exit 0: nothing regressed; 1: at least one benchmark regressed; 2: could not judge
(a worker failed or timed out, the sides differ in device, timer or a benchmark's shape, a base
benchmark is missing from head, a bad path).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fp4moe.infra.childproc import Worker, WorkerError
from fp4moe.infra.files import atomic_write_text
from fp4moe.infra.errors import EXIT_CANNOT_RUN, EXIT_OK, EXIT_REGRESSION, GateCannotRun

SETUP_TIMEOUT_S = 900.0  # building workloads, compiling kernels, warm-up (hello included)
REQUEST_TIMEOUT_S = 120.0  # one timed call
#: Caps on the sequential design (``--max-rounds``, ``--step``): beyond them the look table and
#: the samples outgrow any CI job (``--max-rounds 100000000 --step 1`` was a MemoryError).
MAX_ROUNDS = 100_000
MAX_LOOKS = 1_000
#: A checkout side's worker starts through this bootstrap (``python -I -B -c``): isolated mode
#: drops PYTHONPATH and the user site; the import finders that would serve ``fp4moe`` from
#: anywhere but the checkout (an editable install's meta-path finder, a ``.pth`` path entry)
#: are removed, the checkout goes first on ``sys.path``, and the worker module is run from it.
#: A checkout that lacks a module then fails its import instead of borrowing the gate's copy.
BOOTSTRAP = """\
import os, sys
root = os.path.realpath(sys.argv[1])
def _serves_elsewhere(finder):
    if type(finder).__module__.startswith(("_frozen_importlib", "_distutils_hack")):
        return False
    try:
        spec = finder.find_spec("fp4moe", None)
    except Exception:
        return True
    return spec is not None
sys.meta_path[:] = [f for f in sys.meta_path if not _serves_elsewhere(f)]
sys.path[:] = [root] + [p for p in sys.path if p and not os.path.exists(os.path.join(p, "fp4moe"))]
sys.argv[:] = ["-m"]
import runpy
runpy.run_module("fp4moe.gates.perf.ab_worker", run_name="__main__", alter_sys=True)
"""
#: keys whose difference makes two sides incomparable (the same list as the compare's, for A/B)
SAME_KEYS = ("timer", "gpu_name", "gpu_arch", "shape", "hidden_pad", "intermediate_pad")


@dataclass
class Side:
    label: str  # "base" / "head"
    path: str
    cmd: list
    env: dict
    cwd: str | None
    root: Path | None  # checkout whose fp4moe the worker must import


def resolve_side(label: str, path: str) -> Side:
    """A checkout, a virtualenv directory or a Python executable; anything else names the option."""
    p = Path(path).expanduser()
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env["PYTHONUNBUFFERED"] = "1"
    worker = ["-m", "fp4moe.gates.perf.ab_worker"]
    if p.is_dir() and (p / "fp4moe" / "__init__.py").is_file():
        root = p.resolve()
        return Side(label, path, [sys.executable, "-I", "-B", "-c", BOOTSTRAP, str(root)], env, str(root), root)
    for exe in (p / "bin" / "python", p / "bin" / "python3"):
        if p.is_dir() and exe.is_file():
            return Side(label, path, [str(exe), *worker], env, None, None)
    if p.is_file() and os.access(p, os.X_OK):
        return Side(label, path, [str(p), *worker], env, None, None)
    raise GateCannotRun(
        f"--{label} {path}: not a checkout (no fp4moe/__init__.py), a virtualenv (no bin/python) or a Python executable"
    )


def _start(side: Side, setup_timeout_s: float = SETUP_TIMEOUT_S) -> tuple[Worker, dict]:
    w = Worker(side.cmd, name=f"{side.label} worker ({side.path})", env=side.env, cwd=side.cwd)
    hello = w.request({"op": "hello"}, timeout_s=setup_timeout_s)
    if side.root is not None and Path(str(hello.get("fp4moe"))).resolve() != side.root / "fp4moe":
        w.close(kill=True)
        raise GateCannotRun(f"--{side.label} {side.path}: its worker imported fp4moe from {hello.get('fp4moe')}, not from the checkout")
    return w, hello


def check_loaded(side: Side, reply: dict) -> list[str]:
    """The ``fp4moe`` files a checkout side's worker says it loaded, all inside that checkout;
    GateCannotRun names the first one that is not."""
    loaded = reply.get("loaded")
    if side.root is None:
        return list(loaded) if isinstance(loaded, list) else []
    if not isinstance(loaded, list) or not all(isinstance(f, str) for f in loaded):
        raise GateCannotRun(f"--{side.label} {side.path}: its worker did not say which fp4moe files it loaded")
    for f in loaded:
        if side.root not in Path(f).resolve().parents:
            raise GateCannotRun(f"--{side.label} {side.path}: its worker loaded {f}, outside the checkout")
    return loaded


def seconds_of(reply: dict, side: str) -> float:
    """A timed call's duration: a finite number > 0 (``true``, a string, NaN or 0 is no time)."""
    v = reply.get("seconds")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < float("inf"):
        raise WorkerError(f"{side} worker answered seconds={v!r}, not a positive finite number of seconds")
    return float(v)


def comparability(base_meta: dict, head_meta: dict) -> tuple[list[str], list[str], list[str]]:
    """(problems, only in base, only in head) of the two sides' benchmark metadata."""
    problems = []
    for name in sorted(set(base_meta) & set(head_meta)):
        for key in SAME_KEYS:
            b, h = base_meta[name].get(key), head_meta[name].get(key)
            if b != h:
                problems.append(f"{name}: {key} differs (base {b!r}, head {h!r})")
    return problems, sorted(set(base_meta) - set(head_meta)), sorted(set(head_meta) - set(base_meta))


def time_pairs(base: Worker, head: Worker, name: str, rng: np.random.Generator, counter: list, timeout_s: float):
    """``sample(n)`` for ``fp4moe.stats.sequential.run_sequential``: n interleaved pairs, order
    drawn per pair, both sides on the same input set."""

    def sample(n: int):
        b, h = np.empty(n), np.empty(n)
        for j in range(n):
            req = {"op": "run", "name": name, "index": counter[0]}
            counter[0] += 1
            if rng.random() < 0.5:
                h[j] = seconds_of(head.request(req, timeout_s=timeout_s), "head")
                b[j] = seconds_of(base.request(req, timeout_s=timeout_s), "base")
            else:
                b[j] = seconds_of(base.request(req, timeout_s=timeout_s), "base")
                h[j] = seconds_of(head.request(req, timeout_s=timeout_s), "head")
        return b, h

    return sample


def register(sub) -> None:
    from fp4moe.stats import sequential
    from fp4moe.stats.compare import DEFAULT_ALPHA

    a = sub.add_parser("ab", help="time BASE and HEAD (checkouts or environments) in interleaved rounds and judge them")
    a.add_argument("--base", required=True, metavar="PATH", help="checkout, virtualenv or Python executable of the base")
    a.add_argument("--head", required=True, metavar="PATH", help="the same for the head")
    a.add_argument("--benchmarks", default="", metavar="SEL",
                   help="comma list of name patterns (fnmatch), e.g. 'moe:*T1,matmul:*'; default: all of the device's")
    a.add_argument("--device", default=None, help="torch device for both workers (default: cuda when visible, else cpu)")
    a.add_argument("--threshold", default="5%", help="regression threshold, as perf compare (default 5%%)")
    a.add_argument("--alpha", default=DEFAULT_ALPHA, help=f"one-sided alpha spent over all looks (default {DEFAULT_ALPHA})")
    a.add_argument("--first", type=int, default=sequential.DEFAULT_FIRST, help="rounds per side at the first look")
    a.add_argument("--step", type=int, default=sequential.DEFAULT_STEP, help="rounds per side between looks")
    a.add_argument("--max-rounds", type=int, default=sequential.DEFAULT_MAX_ROUNDS, help="rounds per side at the last look")
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--timeout", type=float, default=REQUEST_TIMEOUT_S, help="seconds one timed call may take (default %(default)s)")
    a.add_argument("--setup-timeout", type=float, default=SETUP_TIMEOUT_S, help="seconds a worker may take to build and warm up")
    a.add_argument("--json", type=Path, help="write per-benchmark results (every look) as JSON here")
    a.add_argument("--markdown", type=Path, help="write the markdown summary here (e.g. $GITHUB_STEP_SUMMARY)")
    a.add_argument("--plot", type=Path, help="write the ratio/interval plot (PNG) here")
    a.set_defaults(func=run_ab)


def run_ab(args) -> int:
    import torch

    from fp4moe.stats import sequential
    from fp4moe.stats.compare import REGRESSED, parse_alpha, parse_threshold
    from fp4moe.stats.report import markdown_table, plot_ratios

    from fp4moe.infra.childproc import check_timeout
    from fp4moe.infra.files import check_distinct_outputs

    check_distinct_outputs({"--json": args.json, "--markdown": args.markdown, "--plot": args.plot})
    check_timeout("--timeout", args.timeout, allow_none=False)
    check_timeout("--setup-timeout", args.setup_timeout, allow_none=False)
    if not 1 <= args.step:
        raise ValueError(f"--step {args.step}: must be >= 1 round")
    if not args.max_rounds <= MAX_ROUNDS:
        raise ValueError(f"--max-rounds {args.max_rounds}: at most {MAX_ROUNDS} rounds per side")
    if (args.max_rounds - args.first) // args.step + 1 > MAX_LOOKS:
        raise ValueError(f"--max-rounds {args.max_rounds} --step {args.step}: more than {MAX_LOOKS} looks; raise --step")
    design = sequential.make_design(first=args.first, step=args.step, max_rounds=args.max_rounds,
                                    alpha=parse_alpha(args.alpha), threshold=parse_threshold(args.threshold))
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    patterns = [p.strip() for p in args.benchmarks.split(",") if p.strip()]
    sides = [resolve_side("base", args.base), resolve_side("head", args.head)]
    workers: list[Worker] = []
    try:
        setups = []
        for side in sides:
            w, hello = _start(side, args.setup_timeout)
            workers.append(w)
            setup = w.request({"op": "setup", "device": device, "patterns": patterns}, timeout_s=args.setup_timeout)
            hello["loaded"] = check_loaded(side, setup)
            setups.append((hello, setup))
        (bh, bs), (hh, hs) = setups
        if not bs["benchmarks"]:
            raise GateCannotRun(f"--benchmarks {args.benchmarks!r} selects nothing on the base; it has: {', '.join(bs['available'])}")
        problems, only_base, only_head = comparability(bs["benchmarks"], hs["benchmarks"])
        if problems:
            raise GateCannotRun("base and head are not comparable:\n  " + "\n  ".join(problems))
        common = set(bs["benchmarks"]) & set(hs["benchmarks"])
        if not common:
            raise GateCannotRun(f"no benchmark in common: base {sorted(bs['benchmarks'])}, head {sorted(hs['benchmarks'])}")
        rng = np.random.default_rng(args.seed)
        counter = [0]
        results = {}
        for name in sorted(common):
            res = sequential.run_sequential(time_pairs(workers[0], workers[1], name, rng, counter, args.timeout), design, name)
            results[name] = res
            c = res.comparison
            print(f"perf ab: {name}: {res.verdict} after {res.rounds} rounds per side, head/base {c.ratio:.3f} "
                  f"[{c.ci_low:.3f}, {c.ci_high:.3f}], p(slower) {c.p_slower:.2g}", flush=True)
        for side, w in zip(sides, workers):
            check_loaded(side, w.request({"op": "quit"}, timeout_s=30))
    except WorkerError as e:
        raise GateCannotRun(str(e)) from None
    finally:
        for w in workers:
            w.close()
    comps = [r.comparison for r in results.values()]
    notes = [f"`{n}`: {r.rounds} rounds per side ({'stopped early' if r.stopped_early else 'cap'})" for n, r in results.items()]
    notes.insert(0, f"sequential: looks at {list(design.looks)} rounds per side, {design.spending} alpha spending "
                    f"(total one-sided alpha {design.alpha:g}); base {bh['fp4moe']} ({len(bh['loaded'])} fp4moe files loaded), "
                    f"head {hh['fp4moe']} ({len(hh['loaded'])} fp4moe files loaded); device {device}, "
                    f"timer {next(iter(bs['benchmarks'].values())).get('timer')}")
    table = markdown_table(comps, unmatched={"base (missing from head)": only_base, "head (new, no baseline)": only_head}, notes=notes)
    print(table)
    if args.markdown:
        atomic_write_text(args.markdown, table)
    if args.plot and comps:
        plot_ratios(comps, args.plot)
    if args.json:
        atomic_write_text(args.json, json.dumps({
            "base": args.base, "head": args.head, "device": device, "design": {
                "looks": list(design.looks), "alpha": design.alpha, "threshold": design.threshold,
                "spending": design.spending, "nominal": list(design.nominal), "beta": design.beta},
            "results": {n: r.to_dict() for n, r in results.items()}, "only_in_base": only_base, "only_in_head": only_head,
            "base_meta": bs["benchmarks"], "head_meta": hs["benchmarks"],
            "base_loaded": bh["loaded"], "head_loaded": hh["loaded"]}, indent=1))
    regressed = [n for n, r in results.items() if r.verdict == REGRESSED]
    if regressed:
        print(f"perf ab: {len(regressed)} benchmark(s) regressed: {', '.join(regressed)}", file=sys.stderr)
        return EXIT_REGRESSION
    if only_base:
        print(f"perf ab: {len(only_base)} base benchmark(s) missing from head (lost coverage): {', '.join(only_base)}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    return EXIT_OK
