"""``fp4moe-gate zoo``: run the suite against every mutant of the bug zoo.

Each mutant (``fp4moe.mutants``) re-creates a known failure of this weight path. The suite
runs once clean (it must pass, else the zoo cannot judge: exit 2) and once per mutant, in a
child pytest with the mutant applied by ``fp4moe.zoo_plugin``. A mutant is killed when at
least one test fails or errors. The table lists, per mutant, its origin and the tests that
killed it; a surviving mutant fails the command (exit 1).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from fp4moe.errors import EXIT_OK, EXIT_REGRESSION, GateCannotRun
from fp4moe.paths import REPO_ROOT

#: The tests that guard the weight path, the kernel contract and the footprint; the whole
#: suite (``--tests tests``) also works, slower.
DEFAULT_TESTS = (
    "tests/test_mxfp4.py",
    "tests/test_e8m0.py",
    "tests/test_mxfp8.py",
    "tests/test_checkpoint.py",
    "tests/test_equivalence.py",
    "tests/test_pad_propagation.py",
    "tests/test_nan_guard.py",
    "tests/test_moe_reference.py",
    "tests/test_weight_path.py",
    "tests/test_layout.py",
    "tests/test_golden_layouts.py",
    "tests/footprint/test_footprint_budget.py",
    "tests/perf/test_relational.py",
    "tests/perf/test_workloads_cpu.py",
)


def load_mutants(path: str | None = None):
    """The built-in mutants, or those defined as ``MUTANTS`` in a user's Python file."""
    from fp4moe import mutants

    if not path:
        return list(mutants.MUTANTS)
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"--mutant-file {p}: no such file")
    spec = importlib.util.spec_from_file_location("fp4moe_user_mutants", p)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    found = getattr(mod, "MUTANTS", None)
    if not found or not all(isinstance(m, mutants.Mutant) for m in found):
        raise ValueError(f"--mutant-file {p}: must define MUTANTS = [fp4moe.mutants.Mutant(...), ...]")
    return list(found)


def run_suite(tests, mutant: str | None, mutant_file: str | None, extra_args=()) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        env = dict(os.environ, FP4MOE_ZOO_REPORT=str(report))
        env.pop("FP4MOE_MUTANT", None)
        if mutant:
            env["FP4MOE_MUTANT"] = mutant
        if mutant_file:
            env["FP4MOE_MUTANT_FILE"] = str(Path(mutant_file).resolve())
        cmd = [sys.executable, "-m", "pytest", "-p", "fp4moe.zoo_plugin", "-q", "-p", "no:cacheprovider",
               "--no-header", "-o", "addopts=--strict-markers", *extra_args, *tests]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
        failed = json.loads(report.read_text())["failed"] if report.exists() else []
        return dict(rc=proc.returncode, failed=failed, seconds=time.perf_counter() - t0,
                    tail=(proc.stdout + proc.stderr)[-2000:])


def run(args) -> int:
    mutants = load_mutants(args.mutant_file)
    if args.mutant:
        known = {m.name for m in mutants}
        unknown = [n for n in args.mutant if n not in known]
        if unknown:
            raise ValueError(f"--mutant {unknown}: unknown; known: {', '.join(sorted(known))}")
        mutants = [m for m in mutants if m.name in args.mutant]
    tests = args.tests or [t for t in DEFAULT_TESTS if (REPO_ROOT / t).exists()]
    clean = run_suite(tests, None, None, args.pytest_args)
    if clean["rc"] != 0:
        raise GateCannotRun(f"the suite fails without any mutant (rc {clean['rc']}):\n{clean['tail']}")
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(lambda m: run_suite(tests, m.name, args.mutant_file, args.pytest_args), mutants))
    rows = []
    for m, r in zip(mutants, results):
        killed = bool(r["failed"]) or r["rc"] not in (0, 5)
        rows.append(dict(mutant=m.name, origin=m.origin, description=m.description, killed=killed,
                         killed_by=r["failed"], seconds=round(r["seconds"], 1), rc=r["rc"]))
    survivors = [r["mutant"] for r in rows if not r["killed"]]
    if args.json:
        print(json.dumps(dict(clean_seconds=round(clean["seconds"], 1), mutants=rows, survivors=survivors), indent=1))
    else:
        print(f"clean run: passed in {clean['seconds']:.1f} s ({len(tests)} test paths)")
        print("| mutant | origin | verdict | killed by |")
        print("|---|---|---|---|")
        for r in rows:
            by = _summarize(r["killed_by"])
            if r["killed"] and not r["killed_by"]:
                by = f"pytest exited {r['rc']} (collection/usage error)"
            print(f"| {r['mutant']} | {r['origin']} | {'KILLED' if r['killed'] else 'SURVIVED'} | {by} |")
        print(f"zoo: {len(rows) - len(survivors)}/{len(rows)} mutants killed" + (f"; SURVIVED: {', '.join(survivors)}" if survivors else ""))
    return EXIT_REGRESSION if survivors else EXIT_OK


def _summarize(nodeids: list[str], most: int = 4) -> str:
    """'file.py::test_a[p1]', 'file.py::test_a[p2]' -> 'test_a (2)' for the table."""
    counts: dict[str, int] = {}
    for n in nodeids:
        fn = n.split("::")[-1].split("[")[0]
        counts[fn] = counts.get(fn, 0) + 1
    parts = [f"{fn} ({c})" if c > 1 else fn for fn, c in sorted(counts.items(), key=lambda kv: -kv[1])]
    extra = len(parts) - most
    return ", ".join(parts[:most]) + (f", +{extra} more tests" if extra > 0 else "")


def register(sub) -> None:
    p = sub.add_parser("zoo", help="run the suite against each bug-zoo mutant; fail if any survives")
    p.add_argument("--mutant", action="append", help="only this mutant (repeatable)")
    p.add_argument("--mutant-file", help="a Python file defining MUTANTS = [fp4moe.mutants.Mutant(...)]")
    p.add_argument("--tests", nargs="+", help=f"test paths to run (default: {' '.join(DEFAULT_TESTS)})")
    p.add_argument("-j", "--jobs", type=int, default=2, help="mutants run in parallel (default 2)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--pytest-args", nargs="*", default=[], help="extra arguments for each pytest run")
    p.set_defaults(func=run)
