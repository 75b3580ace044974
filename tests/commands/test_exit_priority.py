"""The exit-code priority and the status word, one copy each (``fp4moe.infra.errors.exit_code_of``,
``fp4moe.commands.options.STATUS_BY_EXIT``), pinned over their whole truth table, and every gate
verdict that decides between 0, 1 and 2 shown to follow it on inputs that cross each boundary."""

import itertools

import pytest

from fp4moe.commands.options import CANNOT_RUN, PASS, REGRESSION, STATUS_BY_EXIT, STATUSES, status_of
from fp4moe.gates import aiter_check
from fp4moe.gates.footprint import BudgetVerdict, require_judged
from fp4moe.gates.zoo import runner as zoo
from fp4moe.infra.errors import EXIT_CANNOT_RUN, EXIT_OK, EXIT_REGRESSION, GateCannotRun, exit_code_of
from fp4moe.targets.aiter.results import CheckResult, Result

TABLE = {(False, False): EXIT_OK, (False, True): EXIT_CANNOT_RUN, (True, False): EXIT_REGRESSION,
         (True, True): EXIT_REGRESSION}


@pytest.mark.parametrize("regressed, unjudged", list(itertools.product((False, True), repeat=2)))
def test_a_regression_outranks_an_unjudged_part_which_outranks_a_pass(regressed, unjudged):
    assert exit_code_of(regressed=regressed, unjudged=unjudged) == TABLE[regressed, unjudged]
    assert status_of(regressed=regressed, unjudged=unjudged) == STATUS_BY_EXIT[TABLE[regressed, unjudged]]


def test_unjudged_defaults_to_false_and_the_codes_are_the_contract():
    assert exit_code_of(regressed=False) == 0 and exit_code_of(regressed=True) == 1
    assert (EXIT_OK, EXIT_REGRESSION, EXIT_CANNOT_RUN) == (0, 1, 2)
    assert STATUS_BY_EXIT == {0: PASS, 1: REGRESSION, 2: CANNOT_RUN} and set(STATUS_BY_EXIT.values()) == set(STATUSES)
    assert (PASS, REGRESSION, CANNOT_RUN) == ("pass", "regression", "cannot-run")


@pytest.mark.parametrize("bad", [1, 0, None, [], "yes"])
def test_only_bools_decide(bad):
    with pytest.raises(TypeError, match="must be bools"):
        exit_code_of(regressed=bad)
    with pytest.raises(TypeError, match="must be bools"):
        exit_code_of(regressed=False, unjudged=bad)


def _zoo(verdicts):
    rows = [{"mutant": f"m{i}", "verdict": v, "killed": v == zoo.KILLED, "why": "w"} for i, v in enumerate(verdicts)]
    return zoo.ZooResult("reference", [], 1.0, 10.0, rows)


@pytest.mark.parametrize("verdicts, code", [
    ([zoo.KILLED, zoo.KILLED], EXIT_OK),
    ([zoo.KILLED, zoo.NOT_JUDGED], EXIT_CANNOT_RUN),
    ([zoo.SURVIVED, zoo.KILLED], EXIT_REGRESSION),
    ([zoo.NOT_JUDGED, zoo.SURVIVED], EXIT_REGRESSION),
    ([], EXIT_OK),
])
def test_zoo_result_follows_the_priority(verdicts, code):
    r = _zoo(verdicts)
    assert r.exit_code == code
    assert r.survivors == [row["mutant"] for row in r.rows if row["verdict"] == zoo.SURVIVED]
    assert r.not_judged == [row["mutant"] for row in r.rows if row["verdict"] == zoo.NOT_JUDGED]


def test_footprint_verdict_is_1_on_a_failure_and_refuses_to_pass_over_nothing():
    assert BudgetVerdict(rows=[{"ok": True}]).exit_code == EXIT_OK
    assert BudgetVerdict(rows=[{"ok": False}], failures=["over"]).exit_code == EXIT_REGRESSION
    require_judged(BudgetVerdict(rows=[{"ok": True}]))
    require_judged(BudgetVerdict(rows=[{"ok": False}], failures=["over"], unbudgeted=["r: no entry"]))
    require_judged(BudgetVerdict(failures=["over"]))
    with pytest.raises(GateCannotRun, match="^no catalogue row was measured against the budget: nothing to judge$"):
        require_judged(BudgetVerdict())
    with pytest.raises(GateCannotRun, match=r"^2 catalogue row\(s\) have no budget entry: a: x; b: y$"):
        require_judged(BudgetVerdict(rows=[{"ok": True}], unbudgeted=["a: x", "b: y"]))


def _row(check, result):
    return CheckResult(check, result, "detail")


@pytest.mark.parametrize("results, strict, allow_missing, code", [
    ([("a", Result.PASS)], False, False, EXIT_OK),
    ([("a", Result.FAIL)], False, False, EXIT_REGRESSION),
    ([("a", Result.DIFFER)], False, False, EXIT_REGRESSION),
    ([("a", Result.NA)], False, False, EXIT_REGRESSION),
    ([("a", Result.NA)], False, True, EXIT_OK),
    ([("a", Result.WARN)], False, False, EXIT_OK),
    ([("a", Result.WARN)], True, False, EXIT_REGRESSION),
    ([("a", Result.ABSENT)], True, False, EXIT_REGRESSION),
    ([("a", Result.ABSENT)], False, False, EXIT_OK),
    ([("a", Result.NOT_JUDGED)], False, False, EXIT_CANNOT_RUN),
    ([("a", Result.NOT_JUDGED), ("b", Result.FAIL)], False, False, EXIT_REGRESSION),
    ([("base: a", Result.NOT_JUDGED)], False, False, EXIT_CANNOT_RUN),
    ([("a", Result.PRESENT)], True, False, EXIT_OK),
])
def test_aiter_check_verdict_follows_the_priority(results, strict, allow_missing, code):
    rows = [_row(c, r) for c, r in results]
    assert aiter_check.verdict(rows, strict=strict, allow_missing=allow_missing) == code


def test_aiter_check_verdict_defaults_are_not_strict_and_do_not_allow_missing():
    assert aiter_check.verdict([_row("a", Result.WARN)]) == EXIT_OK  # a warning fails only --strict
    assert aiter_check.verdict([_row("a", Result.ABSENT)]) == EXIT_OK
    assert aiter_check.verdict([_row("a", Result.NA)]) == EXIT_REGRESSION  # n/a passes only --allow-missing


def test_aiter_check_unjudged_line_names_the_first_and_counts_the_rest():
    nj = Result.NOT_JUDGED
    assert aiter_check.unjudged_line([_row("a", Result.PASS)]) is None
    assert aiter_check.unjudged_line([_row("k: not judged", nj)]) == "not judged: k: detail"
    assert aiter_check.unjudged_line([_row("a", Result.PASS), _row("k: not judged", nj), _row("m", nj),
                                      _row("n", nj)]) == "not judged: k: detail (+2 more not-judged row(s) in the table)"
    # the count starts at the second row not judged: exactly two say "+1 more"
    assert aiter_check.unjudged_line([_row("k: not judged", nj), _row("m", nj)]) == \
        "not judged: k: detail (+1 more not-judged row(s) in the table)"


def test_status_of_defaults_to_judged():
    assert status_of(regressed=False) == PASS and status_of(regressed=True) == REGRESSION
