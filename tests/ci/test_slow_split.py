"""The slow tier split over a runner pool (ci/workflows/cpu-ci.yml, job ``slow``): pytest-split's
groups, computed from the durations recorded in ``.test_durations``, partition the slow tests of
this checkout -- every one in exactly one group, none in two, none left out -- for the workflow's
own group count and algorithm, and no group runs longer than the algorithm's bound.

Refresh the durations after adding or reshaping slow tests (on a quiet machine; commit the file):

    python3 -m pytest -q --slow -m slow -p no:cacheprovider --store-durations --durations-path .test_durations

(or the workflow's manual ``durations`` job, whose artifact is the same file). A slow test missing
from the file is still placed (pytest-split gives it the mean duration): the split stays a
partition, only its balance suffers; ``test_the_recorded_durations_cover_the_slow_tier`` fails,
naming them, once more than a tenth of the slow tests (at least 5) have none.

The slow tests are read from this pytest run's own collection when it collected the whole suite
(the CPU tier's ``pytest``: slow tests are collected there and skipped), else from one
``--collect-only`` child.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass

import pytest

from fp4moe.infra.paths import REPO_ROOT

DURATIONS = REPO_ROOT / ".test_durations"
WORKFLOW = REPO_ROOT / "ci" / "workflows" / "cpu-ci.yml"
#: LPT's guarantee: the longest group is at most 4/3 of the best possible one, itself at least
#: the longest test and the mean group (Graham 1969); least_duration is LPT
LPT_BOUND = 4 / 3


@dataclass(frozen=True)
class _Item:
    """What pytest-split's algorithms read of a test item: its node id (also its str)."""

    nodeid: str

    def __str__(self) -> str:
        return self.nodeid


def _whole_suite_collected(config) -> bool:
    from _pytest.config import Config

    return (config.args_source == Config.ArgsSource.TESTPATHS and not config.option.keyword
            and not config.getoption("deselect") and not config.getoption("markexpr"))


def _slow_ids(request) -> list[str]:
    if _whole_suite_collected(request.config):
        return [i.nodeid for i in request.session.items if i.get_closest_marker("slow") is not None]
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "--slow", "-m", "slow", "-p", "no:cacheprovider",
                        "--collect-only"], capture_output=True, text=True, cwd=REPO_ROOT, timeout=300, check=False)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return [ln.strip() for ln in r.stdout.splitlines() if "::" in ln]


@pytest.fixture(scope="module")
def slow_ids(request) -> list[str]:
    ids = _slow_ids(request)
    assert len(ids) == len(set(ids)) and ids, ids[:5]
    return ids


@pytest.fixture(scope="module")
def durations() -> dict[str, float]:
    doc = json.loads(DURATIONS.read_text())
    assert isinstance(doc, dict) and doc, f"{DURATIONS}: not pytest-split's object of node id -> seconds"
    bad = {k: v for k, v in doc.items() if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0}
    assert not bad, f"{DURATIONS}: not a duration in seconds: {list(bad.items())[:3]}"
    return doc


def _workflow_split() -> tuple[int, str, str]:
    """(group count, algorithm, durations path) as the workflow's slow job runs pytest-split."""
    yaml = pytest.importorskip("yaml")
    wf = yaml.safe_load(WORKFLOW.read_text())
    run = " ".join(s.get("run", "") for s in wf["jobs"]["slow"]["steps"]).split()

    def opt(name: str) -> str:
        return run[run.index(name) + 1]

    assert opt("--splits") == '"$SLOW_GROUPS"', run
    return int(wf["env"]["SLOW_GROUPS"]), opt("--splitting-algorithm"), opt("--durations-path")


def test_the_workflow_splits_by_the_committed_durations_file():
    groups, algorithm, path = _workflow_split()
    assert (REPO_ROOT / path).resolve() == DURATIONS.resolve(), path
    assert groups >= 2 and algorithm in ("least_duration", "duration_based_chunks")


def test_the_groups_partition_the_slow_tier(slow_ids, durations):
    algorithms = pytest.importorskip("pytest_split.algorithms", reason="pytest-split not installed (pip install -e '.[ci]')")
    splits, name, _ = _workflow_split()
    items = [_Item(i) for i in slow_ids]
    groups = algorithms.Algorithms[name].value(splits, items, {k: v for k, v in durations.items() if k in set(slow_ids)})
    assert len(groups) == splits
    runs = [[i.nodeid for i in g.selected] for g in groups]
    seen: dict[str, int] = {}
    for k, ids in enumerate(runs, 1):
        assert ids, f"group {k} of {splits} runs no test"
        for i in ids:
            assert i not in seen, f"{i} runs in groups {seen[i]} and {k}"
            seen[i] = k
    assert set(seen) == set(slow_ids), f"never run: {sorted(set(slow_ids) - set(seen))[:3]}"
    for k, g in enumerate(groups, 1):  # what each group deselects is the rest, exactly
        assert sorted(i.nodeid for i in g.deselected) == sorted(set(slow_ids) - set(runs[k - 1]))
    if name == "least_duration":
        known = [durations[i] for i in slow_ids if i in durations]
        mean = sum(known) / len(known) if known else 1.0
        each = [durations.get(i, mean) for i in slow_ids]
        best = max(max(each), sum(each) / splits)
        assert max(g.duration for g in groups) <= LPT_BOUND * best + 1e-9, [round(g.duration) for g in groups]


def test_the_recorded_durations_cover_the_slow_tier(slow_ids, durations):
    missing = sorted(set(slow_ids) - set(durations))
    # new slow tests land before the file is refreshed: a few may be missing; most must be there
    assert len(missing) <= max(5, len(slow_ids) // 10), (
        f"{len(missing)}/{len(slow_ids)} slow tests have no recorded duration in {DURATIONS.name} "
        f"(first: {missing[:3]}); refresh it (this module's docstring)")


def test_the_ci_run_commands_the_slow_step_holds_are_slow_tests(slow_ids):
    """.ci/run names, for each aiter-check command it no longer runs as a step of its own, the slow
    test that runs it: each named test exists in the slow tier, and no such step came back."""
    text = (REPO_ROOT / ".ci" / "run").read_text()
    named = [ln.strip("# ").strip() for ln in text.splitlines() if ln.startswith("#     tests/") and "::" in ln]
    assert len(named) >= 2, named
    assert not sorted(set(named) - set(slow_ids)), sorted(set(named) - set(slow_ids))
    steps = [ln for ln in text.splitlines() if ln.startswith("step ") and "aiter-check" in ln]
    assert not steps, steps
