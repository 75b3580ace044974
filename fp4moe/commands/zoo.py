"""``fp4moe-gate zoo``: run the suite against each bug-zoo mutant; fail if any survives.

Does the suite still catch every known failure of the weight path? Each mutant of the bug zoo (a
real bug planted in the reference, or in SGLang's own code with --target sglang) is applied in a
child process and the suite's guarding tests run against it: a mutant must be killed (a test
fails) and the clean tree must pass first.

Inputs: this checkout's tests; the target to mutate (--target), optionally a mutant file
(--mutant-file).

Exit 0: every mutant was killed
Exit 1: a mutant survived (the table names it and the tests that ran)
Exit 2: the zoo could not judge: the clean suite fails, a mutant was not applied, a child
crashed or timed out
"""

from __future__ import annotations

from fp4moe.commands import output
from fp4moe.commands.options import CANNOT_RUN, STATUS_BY_EXIT, add_command, add_outputs, bind
from fp4moe.gates.zoo.runner import CLEAN_TIMEOUT_S, MIN_MUTANT_TIMEOUT_S, MUTANT_TIMEOUT_FACTOR, TARGETS
from fp4moe.infra.errors import EXIT_CANNOT_RUN, GateCannotRun


def _seconds(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"--timeout {text!r}: not a number of seconds") from None


def register(sub) -> None:
    p = add_command(sub, "zoo", __doc__)
    p.add_argument("--target", default="reference", help=f"what to mutate (default reference; known: {', '.join(sorted(TARGETS))})")
    p.add_argument("--mutant", action="append", help="only this mutant (repeatable)")
    p.add_argument("--mutant-file", help="a Python file defining MUTANTS, a list of Mutant rows as docs/architecture.md shows (replaces the target's)")
    p.add_argument("--tests", nargs="+", help="test paths to run (default: the target's guarding test folders)")
    p.add_argument("-j", "--jobs", type=int, default=2, help="mutants run in parallel (default 2)")
    p.add_argument("--timeout", type=_seconds, default=None, metavar="SECONDS",
                   help=f"time limit of the whole run: listing, clean run and every mutant (each child gets what "
                        f"is left of it; also without it the clean run has {CLEAN_TIMEOUT_S:.0f} s and each mutant "
                        f"max({MIN_MUTANT_TIMEOUT_S:.0f} s, {MUTANT_TIMEOUT_FACTOR:.0f} x the clean run's time)); "
                        "a mutant past it is NOT JUDGED")
    add_outputs(p, json="one row per mutant: verdict, why, the tests that killed it")
    p.add_argument("--pytest-args", nargs="*", default=[], metavar="ARG", help="extra arguments for each pytest run")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress lines on stderr (one per mutant as it is judged, each starting [zoo])")
    bind(p, run, inputs=lambda a: [a.mutant_file] if a.mutant_file else [])


def run(args) -> int:
    from fp4moe.gates.zoo.runner import ZooOptions, run_zoo

    res = run_zoo(ZooOptions(target=args.target, mutant=args.mutant, mutant_file=args.mutant_file, tests=args.tests,
                             jobs=args.jobs, timeout=args.timeout, pytest_args=list(args.pytest_args),
                             quiet=args.quiet))
    print(f"clean run: passed in {res.clean_seconds:.1f} s ({len(res.tests)} test paths); "
          f"per-mutant limit {res.mutant_timeout_s:.0f} s")
    print("| mutant | origin | verdict | killed by / why |")
    print("|---|---|---|---|")
    for r in res.rows:
        print(f"| {r['mutant']} | {r['origin']} | {r['verdict']} | {r['why']} |")
    print(res.summary())
    rc = res.exit_code  # the gate's rule; the record's status is its word
    status = STATUS_BY_EXIT[rc]
    output.write_json(args, {"status": status, **({"reason": res.not_judged_reason()} if status == CANNOT_RUN else {}),
                             **res.to_dict()})
    if rc == EXIT_CANNOT_RUN:
        raise GateCannotRun(res.not_judged_reason())
    return rc
