"""The zoo's first-tests shortcut (``Mutant.first_tests``, ``runner._first_then_all``): with ``-x``
a mutant's catalogued killers run alone first; KILLED there is the verdict, anything else and
the whole selection runs and decides. Survivors are judged on the whole selection; without
``-x`` (every killing test listed) nothing is cut. Child runs are synthetic here (the parent's
logic); the zoo itself, CI's step, is the real run."""

import pytest

from fp4moe.gates.zoo import mutants, runner, sglang_mutants
from fp4moe.gates.zoo.runner import KILLED, NOT_JUDGED, SURVIVED, ZooOptions
from fp4moe.infra.paths import REPO_ROOT
from fp4moe.infra.runner import ChildResult

SEL = ["tests/mx", "tests/reference"]
EQUIV = "tests/reference/test_equivalence.py"


def _rec(name, exitstatus, failed=(), passed=3):
    return {"mutant": name, "applied": True, "patches": 1, "exitstatus": exitstatus, "failed": list(failed),
            "passed": passed, "collect_errors": [], "reverted": []}


def test_every_catalogued_first_test_exists_and_lies_in_its_targets_default_tests():
    cats = [(m, runner.TARGETS["reference"].default_tests) for m in mutants.MUTANTS]
    cats += [(m, runner.TARGETS["sglang"].default_tests) for m in sglang_mutants.zoo_mutants()]
    for m, default in cats:
        assert m.first_tests, m.name
        for t in m.first_tests:
            assert (REPO_ROOT / t.split("::")[0]).is_file(), (m.name, t)
            assert runner._inside(t, list(default)), (m.name, t)


@pytest.mark.parametrize("first, tests, args, want", [
    ([EQUIV], SEL, ["-x"], [[EQUIV], SEL]),
    ([EQUIV], SEL, ["--exitfirst"], [[EQUIV], SEL]),
    ([EQUIV], SEL, [], [SEL]),  # every killing test listed: the whole selection only
    ([EQUIV], SEL, ["--maxfail=2"], [SEL]),
    ([EQUIV], ["tests/mx"], ["-x"], [["tests/mx"]]),  # outside the selection: never run
    (["tests/reference/no_such_test.py"], SEL, ["-x"], [SEL]),  # gone: the selection only
    ([EQUIV], [EQUIV], ["-x"], [[EQUIV]]),  # the selection itself: one run
    ([f"{EQUIV}::test_a"], [EQUIV], ["-x"], [[f"{EQUIV}::test_a"], [EQUIV]]),
    ([EQUIV], [f"{EQUIV}::test_a"], ["-x"], [[f"{EQUIV}::test_a"]]),  # wider than a node selection
    ([f"{EQUIV}::test_ab"], [f"{EQUIV}::test_a"], ["-x"], [[f"{EQUIV}::test_a"]]),  # another test, same prefix
    ([f"{EQUIV}::test_a[1]"], [f"{EQUIV}::test_a"], ["-x"], [[f"{EQUIV}::test_a[1]"], [f"{EQUIV}::test_a"]]),
    ([7, None], SEL, ["-x"], [SEL]),  # a user's file record: only strings count
])
def test_selections_a_mutant_runs(first, tests, args, want):
    assert runner._first_then_all(first, tests, args) == want


def _zoo(monkeypatch, answers):
    """run_zoo with run_suite answering from ``answers[(mutant, first selection path)]``; the calls made."""
    calls = []
    listed = [dict(name="m", origin="o", description="d", needs_shared=None, first_tests=[EQUIV])]
    monkeypatch.setattr(runner, "list_mutants", lambda target, path, timeout_s=None: listed)

    def run_suite(tests, mutant, mutant_file, extra_args=(), *, target, timeout_s):
        calls.append((mutant, list(tests)))
        rec = _rec(None, 0, passed=9) if mutant is None else answers[tuple(tests)]
        return ChildResult(["python"], rec["exitstatus"], "", "", 2.0, record=dict(rec, mutant=mutant))

    monkeypatch.setattr(runner, "run_suite", run_suite)
    res = runner.run_zoo(ZooOptions(tests=SEL, pytest_args=["-x"], quiet=True))
    return res, calls[1:]


def test_killed_by_its_first_tests_runs_nothing_else(monkeypatch):
    res, calls = _zoo(monkeypatch, {(EQUIV,): _rec("m", 1, [f"{EQUIV}::test_a"])})
    (row,) = res.rows
    assert calls == [("m", [EQUIV])]
    assert row["verdict"] == KILLED and row["killed_by"] == [f"{EQUIV}::test_a"] and row["seconds"] == 2.0


@pytest.mark.parametrize("first", [_rec("m", 0), _rec("m", 5, passed=0), {**_rec("m", 1, ["x"]), "applied": False}],
                         ids=["passed", "no-tests", "not-applied"])
def test_anything_but_killed_first_runs_the_whole_selection_which_decides(monkeypatch, first):
    res, calls = _zoo(monkeypatch, {(EQUIV,): first, tuple(SEL): _rec("m", 0, passed=40)})
    (row,) = res.rows
    assert calls == [("m", [EQUIV]), ("m", SEL)]
    assert row["verdict"] == SURVIVED and row["why"] == "40 tests passed" and row["seconds"] == 4.0
    assert res.exit_code == 1


def test_a_kill_in_the_whole_selection_after_a_miss_is_killed(monkeypatch):
    res, calls = _zoo(monkeypatch, {(EQUIV,): _rec("m", 0), tuple(SEL): _rec("m", 1, ["tests/mx/t.py::test_b"])})
    assert [r["verdict"] for r in res.rows] == [KILLED] and res.rows[0]["killed_by"] == ["tests/mx/t.py::test_b"]
    assert len(calls) == 2


def test_unclear_whole_selection_is_not_judged_whatever_the_first_run_said(monkeypatch):
    res, _ = _zoo(monkeypatch, {(EQUIV,): _rec("m", 0), tuple(SEL): _rec("m", 2)})
    assert res.rows[0]["verdict"] == NOT_JUDGED and res.exit_code == 2
