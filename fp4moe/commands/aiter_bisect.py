"""``fp4moe-gate aiter-bisect``: find the first aiter commit that breaks a check (or fixes one), with aiter-check as the oracle.

Bisects aiter's first-parent history between --good and --bad. Each commit's aiter/ and csrc/ are
git-archived into a scratch folder and judged by aiter-check (on a CPU: no GPU, no build of
aiter); a commit aiter-check cannot judge (exit 2) is skipped, as git bisect skip does. Both ends
are judged first. The first bad commit is named only when its verdict and its parent's reproduce
on a second run. It prints each step (commit, verdict, failing checks, seconds), then the commit,
its subject and the checks that flip.

Options after -- go to aiter-check unchanged (e.g. -- --no-dispatch --kernel-jobs routing
--layout-grid reduced: judge only what the bisection needs, faster). --check PATTERN judges only
the checks whose name matches (a glob, else a substring): bad when one of them fails, good when
they hold, skipped when none ran. Without --check a commit is bad when aiter-check exits 1.
--find fix swaps the roles: --bad is the older end, --good the newer, and the result is the first
good commit (where a fix landed).

Inputs: a git clone of aiter (--aiter-git; a bare or mirror clone will do), two commits.

Output: the steps and the result on stdout; --json PATH the record (steps, commit, checks that
flip, seconds).

Exit 0: it named the first bad commit (--find fix: the first good one), reproduced
Exit 2: it could not name one: the ends do not differ (both good or both bad), an end could not be
judged, skipped commits leave several candidates (listed), the verdict did not reproduce, or a
git error
"""

from __future__ import annotations

import fnmatch

from fp4moe.commands import output
from fp4moe.commands.options import PASS, add_command, add_outputs, bind

#: aiter-check options the bisection sets itself
OWNED = ("--aiter-src", "--aiter-wheel", "--base-src", "--json", "--format")


def register(subparsers) -> None:
    p = add_command(subparsers, "aiter-bisect", __doc__)
    p.add_argument("--aiter-git", required=True, metavar="DIR", help="a git clone of aiter (work tree or bare)")
    p.add_argument("--good", required=True, metavar="REV", help="a commit where the check holds")
    p.add_argument("--bad", required=True, metavar="REV", help="a commit where it fails")
    p.add_argument("--find", choices=("regression", "fix"), default="regression",
                   help="regression (default): --good is older, name the first bad commit; fix: --bad is older, "
                        "name the first good commit")
    p.add_argument("--check", metavar="PATTERN", help="judge only checks whose name matches (glob, else substring)")
    p.add_argument("--timeout", type=float, metavar="S", help="aiter-check's --timeout for each commit")
    p.add_argument("--scratch", metavar="DIR", help="where each commit's tree is unpacked (default: the temp folder)")
    p.add_argument("aiter_check_args", nargs="*", metavar="-- AITER-CHECK-OPTIONS",
                   help="options passed to aiter-check for every commit (after --)")
    add_outputs(p, json="the steps, the commit named, the checks that flip")
    bind(p, run, inputs=lambda a: [a.aiter_git])


def check_options(extra: list[str], timeout: float | None):
    """aiter-check's options from the pass-through arguments, parsed by aiter-check's own parser."""
    from fp4moe.commands import aiter_check
    from fp4moe.infra.oneline_parser import OneLineParser

    owned = [a for a in extra if a.split("=")[0] in OWNED]
    if owned:
        raise ValueError(f"aiter-bisect -- {owned[0]}: the bisection sets {', '.join(OWNED)} itself")
    parser = OneLineParser(prog="fp4moe-gate aiter-bisect --")
    aiter_check.register(parser.add_subparsers(dest="command", parser_class=OneLineParser))
    args = parser.parse_args(["aiter-check", *extra, *(["--timeout", str(timeout)] if timeout is not None else [])])
    args.json = None
    return aiter_check.options(args)


def matches(pattern: str, check: str) -> bool:
    return fnmatch.fnmatchcase(check, pattern) if any(c in pattern for c in "*?[") else pattern in check


def aiter_check_oracle(opts, pattern: str | None):
    """``(commit, tree) -> Verdict``: aiter-check on the tree, in this process (aiter's code runs
    in its children); exit 2 is a skip naming its line."""
    from dataclasses import replace

    from fp4moe.gates.aiter_check import check_aiter, unjudged_line
    from fp4moe.infra.errors import GateCannotRun
    from fp4moe.targets.aiter.bisect import BAD, GOOD, SKIP, Verdict
    from fp4moe.targets.aiter.judge.upgrade import row_state

    def oracle(commit, tree) -> Verdict:
        try:
            res = check_aiter(replace(opts, aiter_src=str(tree)))
        except (GateCannotRun, ValueError, OSError) as e:
            return Verdict(SKIP, 2, (), " ".join(str(e).split())[:300])
        states = {r.check: row_state(r.result, r.detail, opts.strict) for r in res.results
                  if pattern is None or matches(pattern, r.check)}
        failing = tuple(k for k, s in states.items() if s == "bad")
        if pattern is None:
            state = {0: GOOD, 1: BAD}.get(res.exit_code, SKIP)
            return Verdict(state, res.exit_code, failing, (unjudged_line(res.results) or "") if state == SKIP else "")
        if failing:
            return Verdict(BAD, res.exit_code, failing)
        if any(s == "ok" for s in states.values()):
            return Verdict(GOOD, res.exit_code)
        return Verdict(SKIP, res.exit_code, (), f"no check matching --check {pattern!r} was judged at this commit")

    return oracle


def run(args) -> int:
    from fp4moe.infra.errors import EXIT_OK, GateCannotRun
    from fp4moe.targets.aiter.bisect import BisectError, bisect

    opts = check_options(args.aiter_check_args, args.timeout)
    print(f"aiter-bisect: {args.aiter_git}, --find {args.find}, --good {args.good}, --bad {args.bad}"
          f"{f', --check {args.check!r}' if args.check else ''}; aiter-check {' '.join(args.aiter_check_args) or '(defaults)'}",
          flush=True)
    try:
        res = bisect(args.aiter_git, args.good, args.bad, aiter_check_oracle(opts, args.check), find=args.find,
                     scratch=args.scratch, log=lambda line: print(line, flush=True))
    except BisectError as e:
        raise ValueError(str(e)) from e
    first = "first bad" if args.find == "regression" else "first good"
    runs = len(res.steps)
    print(f"{res.commits} first-parent commit(s) in the range, {runs} aiter-check run(s), "
          f"{sum(s.state == 'skip' for s in res.steps)} skipped, {res.seconds:.0f} s")
    if res.culprit is None:
        raise GateCannotRun(res.reason)
    print(f"{first} commit: {res.culprit.sha} ({res.culprit.date}) {res.culprit.subject}")
    print(f"  its parent: {res.parent.sha[:10]} ({res.parent.date}) {res.parent.subject}")
    print(f"  reproduced: {res.culprit.sha[:10]} and its parent judged the same on a second run")
    print("  checks that flip: " + ("; ".join(res.flips) if res.flips else "none named (the verdict flips on the exit code)"))
    output.write_json(args, {"status": PASS, "check": args.check, "aiter_check_args": args.aiter_check_args, **res.to_dict()})
    return EXIT_OK
