"""``fp4moe-gate perf bisect``: which commit between GOOD and BAD made a benchmark slower.

The oracle of every step is ``perf ab`` with base = GOOD and head = the step's commit (not a
single timing against a stored number: aiter's proposed nightly bisect blamed innocent commits
on single runs, ROCm/aiter#5536). A step is regressed (exit 1), unchanged (exit 0) or
unjudgeable (exit 2: a build that fails, a worker that dies, arms at different clocks); an
unjudgeable commit is skipped (the next untried commit nearest the midpoint is tried instead),
like ``git bisect skip``. The search assumes one step from unchanged to regressed; a flaky
verdict can still mislead it, so the candidate is named only when it REPRODUCES: ``confirm``
more times (default 2) its head is regressed and its parent's unchanged. Otherwise the search
starts again with fresh verdicts, at most ``attempts`` times; then no culprit is named (exit 2).

Trees: ``git -C REPO archive REV`` unpacked into a scratch folder per commit. A tree with
``fp4moe/__init__.py`` is a checkout side of ``perf ab``; a tree with ``aiter/ops/triton/moe``
(or ``ops/triton/moe``) is an aiter tree, given to the gate's own checkout as
``--base-aiter-src``/``--head-aiter-src`` (the ``aiter-triton:*`` benchmarks).
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from fp4moe.infra.errors import GateCannotRun

REGRESSED, UNCHANGED, UNJUDGED = "regressed", "unchanged", "unjudged"
GIT_TIMEOUT_S = 300


@dataclass
class Step:
    rev: str
    verdict: str
    why: str = ""


@dataclass
class BisectResult:
    culprit: str | None
    parent: str | None
    steps: list[Step] = field(default_factory=list)
    reason: str = ""

    def to_dict(self) -> dict:
        return {"culprit": self.culprit, "parent": self.parent, "reason": self.reason,
                "steps": [{"rev": s.rev, "verdict": s.verdict, "why": s.why} for s in self.steps]}


def _search(commits: list[str], ask: Callable[[str], str]) -> tuple[int, int]:
    """(last unchanged index, first regressed index), assuming commits[0] unchanged and
    commits[-1] regressed; not adjacent when the commits between them were all unjudgeable."""
    lo, hi = 0, len(commits) - 1
    skipped: set[int] = set()
    while True:
        inside = [i for i in range(lo + 1, hi) if i not in skipped]
        if not inside:
            return lo, hi
        mid = (lo + hi) // 2
        i = min(inside, key=lambda j: (abs(j - mid), j))
        v = ask(commits[i])
        if v == REGRESSED:
            hi = i
        elif v == UNCHANGED:
            lo = i
        else:
            skipped.add(i)


def bisect(commits: list[str], oracle: Callable[[str], tuple[str, str]], *, confirm: int = 2, attempts: int = 3,
           log=print) -> BisectResult:
    """``commits``: GOOD first, BAD last, in history order. ``oracle(rev)`` -> (verdict, why) of
    ``perf ab`` base = GOOD, head = rev."""
    if len(commits) < 2:
        raise ValueError("bisect: need GOOD and BAD, two different commits")
    res = BisectResult(None, None)

    def ask(rev: str) -> str:
        v, why = oracle(rev)
        res.steps.append(Step(rev, v, why))
        log(f"perf bisect: {rev}: {v}" + (f" ({why})" if why else ""))
        return v

    if not any(ask(commits[-1]) == REGRESSED for _ in range(1 + confirm)):
        res.reason = f"BAD {commits[-1]} is not regressed against GOOD {commits[0]} in {1 + confirm} tries: nothing to bisect"
        return res
    for attempt in range(attempts):
        lo, hi = _search(commits, ask)
        if hi != lo + 1:
            res.reason = (f"the first regressed commit is one of {', '.join(c[:12] for c in commits[lo + 1:hi + 1])}: "
                          "the commits before the last of them were unjudgeable")
            return res
        ok = True
        for _ in range(confirm):
            if ask(commits[hi]) != REGRESSED or (lo > 0 and ask(commits[lo]) != UNCHANGED):
                ok = False
                break
        if ok:
            res.culprit, res.parent = commits[hi], commits[lo]
            return res
        log(f"perf bisect: candidate {commits[hi]} did not reproduce; searching again ({attempt + 2}/{attempts})")
    res.reason = f"no candidate reproduced {confirm} times in {attempts} searches"
    return res


def _git(repo: str, *args: str, **kw) -> subprocess.CompletedProcess:
    try:
        r = subprocess.run(["git", "-C", repo, *args], capture_output=True, timeout=GIT_TIMEOUT_S, **kw)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise GateCannotRun(f"--repo {repo}: git {args[0]}: {e}") from None
    if r.returncode != 0:
        raise GateCannotRun(f"--repo {repo}: git {' '.join(args[:3])}: {r.stderr.decode(errors='replace').strip()[:300]}")
    return r


def commit_range(repo: str, good: str, bad: str) -> list[str]:
    """GOOD, then every first-parent commit after it up to BAD (full hashes)."""
    g = _git(repo, "rev-parse", "--verify", f"{good}^{{commit}}").stdout.decode().strip()
    b = _git(repo, "rev-parse", "--verify", f"{bad}^{{commit}}").stdout.decode().strip()
    if _git_ok(repo, "merge-base", "--is-ancestor", g, b) is False:
        raise GateCannotRun(f"--good {good} is not an ancestor of --bad {bad}")
    revs = _git(repo, "rev-list", "--first-parent", "--ancestry-path", "--reverse", f"{g}..{b}").stdout.decode().split()
    if not revs:
        raise GateCannotRun(f"--good {good} and --bad {bad}: no commit between them")
    return [g, *revs]


def _git_ok(repo: str, *args: str) -> bool:
    try:
        return subprocess.run(["git", "-C", repo, *args], capture_output=True, timeout=GIT_TIMEOUT_S).returncode == 0
    except (OSError, subprocess.TimeoutExpired) as e:
        raise GateCannotRun(f"--repo {repo}: git {args[0]}: {e}") from None


class Trees:
    """One unpacked tree per commit, in a scratch folder removed by :meth:`close`."""

    def __init__(self, repo: str):
        self.repo, self.root, self.made = repo, Path(tempfile.mkdtemp(prefix="fp4moe-bisect-")), {}

    def get(self, rev: str) -> Path:
        if rev not in self.made:
            dest = self.root / rev[:12]
            dest.mkdir()
            tar = self.root / f"{rev[:12]}.tar"
            with open(tar, "wb") as f:
                try:
                    r = subprocess.run(["git", "-C", self.repo, "archive", "--format=tar", rev], stdout=f,
                                       stderr=subprocess.PIPE, timeout=GIT_TIMEOUT_S)
                except (OSError, subprocess.TimeoutExpired) as e:
                    raise GateCannotRun(f"--repo {self.repo}: git archive {rev}: {e}") from None
            if r.returncode != 0:
                raise GateCannotRun(f"--repo {self.repo}: git archive {rev}: {r.stderr.decode(errors='replace')[:300]}")
            with tarfile.open(tar) as t:
                t.extractall(dest, filter="data")
            tar.unlink()
            self.made[rev] = dest
        return self.made[rev]

    def close(self):
        shutil.rmtree(self.root, ignore_errors=True)


def tree_kind(tree: Path) -> str:
    if (tree / "fp4moe" / "__init__.py").is_file():
        return "checkout"
    if (tree / "aiter" / "ops" / "triton" / "moe").is_dir() or (tree / "ops" / "triton" / "moe").is_dir():
        return "aiter"
    raise GateCannotRun(f"{tree}: neither an fp4moe checkout (fp4moe/__init__.py) nor an aiter tree (aiter/ops/triton/moe)")


def ab_oracle(trees: Trees, good: str, make_options: Callable, checkout: str) -> Callable[[str], tuple[str, str]]:
    """``perf ab`` as the oracle: base = GOOD's tree, head = REV's (checkouts), or the gate's
    ``checkout`` on both sides with GOOD's and REV's aiter trees."""
    from fp4moe.gates.perf.ab import run_ab

    def oracle(rev: str) -> tuple[str, str]:
        try:
            base, head = trees.get(good), trees.get(rev)
            if tree_kind(base) == "checkout":
                opts = make_options(base=str(base), head=str(head))
            else:
                opts = make_options(base=checkout, head=checkout, base_aiter_src=str(base), head_aiter_src=str(head))
            res = run_ab(opts, log=lambda s: None)
        except GateCannotRun as e:
            return UNJUDGED, str(e)[:300]
        ratios = ", ".join(f"{n} {r.comparison.ratio:.3f}" for n, r in res.results.items())
        return (REGRESSED if res.regressed else UNCHANGED), ratios

    return oracle
