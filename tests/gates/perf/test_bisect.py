"""``perf bisect`` on a synthetic history: a workload with a +8% step at commit k and one flaky
midpoint; the oracle is simulated ``perf ab`` (seeded timings through the real statistics), so
20 seeded bisections run in the default tier. The real ``perf ab`` on a tiny git repo is slow."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from fp4moe.gates.perf import bisect
from fp4moe.infra.paths import REPO_ROOT

N, STEP, RATIO_SD = 24, 0.08, 0.01


def _oracle(k: int, flaky: int, rng):
    """perf ab of GOOD (commit 0) against commit i, simulated: its ratio log-normal around 1.08
    from commit k on (1.00 before) with 1% sd (a perf ab interval of +-2.3% at 98%), regressed
    above the 5% threshold. The flaky commit answers at random: regressed, unchanged or
    unjudgeable."""
    def oracle(rev: str):
        i = int(rev[1:])
        if i == flaky:
            return rng.choice([bisect.REGRESSED, bisect.UNCHANGED, bisect.UNJUDGED]), "flaky"
        ratio = math.exp(rng.normal(math.log1p(STEP) if i >= k else 0.0, RATIO_SD))
        return (bisect.REGRESSED if ratio > 1.05 else bisect.UNCHANGED), f"{ratio:.3f}"

    return oracle


def test_twenty_seeded_bisections_name_the_step():
    named, innocent = [], []
    for seed in range(20):
        rng = np.random.default_rng(seed)
        k = int(rng.integers(2, N - 1))
        # the flaky commit is any other than the step and its parent: with a flaky parent the
        # honest answer is "one of k-1, k" (the unjudgeable case below)
        flaky = int(rng.choice([i for i in range(1, N - 1) if i not in (k - 1, k)]))
        res = bisect.bisect([f"c{i}" for i in range(N)], _oracle(k, flaky, rng), log=lambda s: None)
        named.append(res.culprit == f"c{k}")
        innocent.append(res.culprit not in (None, f"c{k}"))
    assert sum(named) >= 19 and sum(innocent) <= 1, (named, innocent)


def test_an_unjudgeable_step_is_skipped_and_a_non_reproducing_candidate_is_not_named():
    calls = []

    def oracle(rev):
        calls.append(rev)
        i = int(rev[1:])
        if i in unjudgeable:
            return bisect.UNJUDGED, "worker died"
        return (bisect.REGRESSED if i >= 5 else bisect.UNCHANGED), ""

    unjudgeable = {6}  # the second midpoint: skipped, its neighbour asked instead
    res = bisect.bisect([f"c{i}" for i in range(9)], oracle, log=lambda s: None)
    assert res.culprit == "c5" and res.parent == "c4" and "c6" in calls
    assert [s.verdict for s in res.steps if s.rev == "c6"] == [bisect.UNJUDGED]
    unjudgeable = {4}  # right before the step: which of c4, c5 cannot be told
    res = bisect.bisect([f"c{i}" for i in range(9)], oracle, log=lambda s: None)
    assert res.culprit is None and "one of c4, c5" in res.reason

    flip = iter([bisect.REGRESSED] * 2 + [bisect.UNCHANGED] * 100)  # BAD, then the candidate once only
    res = bisect.bisect(["c0", "c1"], lambda rev: (next(flip), ""), log=lambda s: None)
    assert res.culprit is None and "reproduced" in res.reason
    res = bisect.bisect(["c0", "c1", "c2"], lambda rev: (bisect.UNCHANGED, ""), log=lambda s: None)
    assert res.culprit is None and "not regressed" in res.reason and len(res.steps) == 3


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t"})


@pytest.mark.slow
def test_perf_bisect_on_a_tiny_git_history(tmp_path):
    """Five commits of a copy of this checkout; commit 3 adds a 3 ms host spin to the reference
    MoE: ``fp4moe-gate perf bisect`` (the real perf ab as its oracle) names commit 3."""
    from tests.gates.perf.test_perf_ab import _checkout

    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    _checkout(repo)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "c0")
    revs = []
    for i in range(1, 5):
        if i == 3:
            shutil.rmtree(repo / "fp4moe")
            _checkout(repo, slow_seconds=0.003)
        (repo / f"note{i}").write_text(str(i))
        _git(repo, "add", "-A")
        _git(repo, "commit", "-qm", f"c{i}")
        revs.append(subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip())
    r = subprocess.run([sys.executable, "-m", "fp4moe.commands.main", "perf", "bisect", "--repo", str(repo), "--good", "HEAD~4",
                        "--bad", "HEAD", "--benchmarks", "moe:*align128*", "--device", "cpu", "--max-rounds", "30"],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, timeout=1500)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"culprit {revs[2]}" in r.stdout, r.stdout
