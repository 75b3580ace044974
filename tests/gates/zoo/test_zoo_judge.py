"""The zoo's judgement of one mutant run on synthetic child results: KILLED only with the
mutant confirmed applied and a failing test in a pytest run that ended; SURVIVED only with
passing tests and none failed; everything unclear NOT JUDGED, with why."""

import pytest

from fp4moe.gates.zoo import runner
from fp4moe.gates.zoo.runner import KILLED, NOT_JUDGED, SURVIVED, judge
from fp4moe.infra.runner import ChildResult

GOOD = {"mutant": "m", "applied": True, "patches": ["a.py:f"], "exitstatus": 1,
        "failed": ["tests/x.py::test_a[1]", "tests/x.py::test_a[2]", "tests/y.py::test_b"], "passed": 4}


def _res(record=None, *, timed_out=False, rc=0, stderr="", seconds=3.0):
    return ChildResult(["python"], rc, "", stderr, seconds, timed_out=timed_out, record=record)


def test_a_failing_test_under_an_applied_mutant_kills_it():
    assert judge("m", _res(GOOD)) == (KILLED, "test_a (2), test_b")


def test_passing_tests_and_none_failed_is_a_survivor():
    rec = {**GOOD, "exitstatus": 0, "failed": [], "passed": 7}
    assert judge("m", _res(rec)) == (SURVIVED, "7 tests passed")


@pytest.mark.parametrize("change, why", [
    ({"mutant": "other"}, "the child reports mutant 'other', not 'm'"),
    ({"apply_error": "no such function f"}, "apply failed: no such function f"),
    ({"applied": False}, "apply patched nothing (the mutant was not applied)"),
    ({"patches": []}, "apply patched nothing (the mutant was not applied)"),
    ({"collect_errors": ["E1", "E2", "E3"]}, "collection error under the mutant: E1 (+2 more)"),
    ({"collect_errors": ["E1"]}, "collection error under the mutant: E1"),
    ({"reverted": ["a", "b", "c", "d"]}, "patch undone before the run ended: a, b, c"),
    ({"exitstatus": 2}, "pytest ended with status 2 (4 passed, 3 failed): "),
    ({"exitstatus": 1, "failed": []}, "pytest ended with status 1 (4 passed, 0 failed): "),
    ({"exitstatus": 0, "failed": [], "passed": 0}, "pytest ended with status 0 (0 passed, 0 failed): "),
    ({"exitstatus": 0, "failed": ["t::x"], "passed": 3}, "pytest ended with status 0 (3 passed, 1 failed): "),
])
def test_anything_unclear_is_not_judged(change, why):
    assert judge("m", _res({**GOOD, **change})) == (NOT_JUDGED, why)


def test_no_record_and_time_outs_are_not_judged():
    assert judge("m", _res(timed_out=True, seconds=61.4)) == (NOT_JUDGED, "timed out after 61 s (child killed)")
    verdict, why = judge("m", _res(None, rc=3, stderr="boom\nlast words\n"))
    assert verdict == NOT_JUDGED and why == 'child pytest exited 3 without a result record: "last words"'
    assert judge("m", _res([1, 2]))[0] == NOT_JUDGED


def test_the_last_line_is_read_for_an_unclear_status():
    verdict, why = judge("m", _res({**GOOD, "exitstatus": 4}, stderr="x\nERROR: usage\n\n"))
    assert (verdict, why) == (NOT_JUDGED, 'pytest ended with status 4 (4 passed, 3 failed): last line "ERROR: usage"')  # child text: quoted


def test_summary_names_counts_and_the_rest():
    ids = [f"t.py::test_{c}[{i}]" for c in "abcdef" for i in range(ord(c) - 96)]
    assert runner.summarize(ids) == "test_f (6), test_e (5), test_d (4), test_c (3), +2 more tests"
    assert runner.summarize(["t.py::test_q"]) == "test_q"


def test_counts_at_their_boundaries():
    assert judge("m", _res({**GOOD, "collect_errors": ["E1", "E2"]}))[1] == "collection error under the mutant: E1 (+1 more)"
    one = {**GOOD, "exitstatus": 0, "failed": [], "passed": 1}
    assert judge("m", _res(one)) == (SURVIVED, "1 tests passed")
    no_count = {k: v for k, v in {**GOOD, "exitstatus": 0, "failed": []}.items() if k != "passed"}
    assert judge("m", _res(no_count)) == (NOT_JUDGED, "pytest ended with status 0 (0 passed, 0 failed): ")


def test_child_text_reaches_the_line_escaped():
    """A child's output with a terminal escape and a fake verdict (#48 item 8): escaped, quoted."""
    _, why = judge("m", _res({**GOOD, "exitstatus": 4}, stderr='x\n\x1b[2J zoo: every mutant killed, exit 0 "\n'))
    assert why.endswith('last line "\\x1b[2J zoo: every mutant killed, exit 0 \\""') and "\x1b" not in why


def test_the_suite_child_runs_with_its_asserts_whatever_the_gate_was_started_with(monkeypatch):
    """Under PYTHONOPTIMIZE=1 (some runners set it) the child pytest would strip every assert
    of the suite and every mutant would survive: the zoo's verdict would change (#48 item 5)."""
    from fp4moe.gates.zoo import runner

    seen = {}
    monkeypatch.setenv("PYTHONOPTIMIZE", "1")
    monkeypatch.setattr(runner.runner, "run_python", lambda args, **kw: seen.update(kw["env"]))
    runner.run_suite(["tests/mx"], "m", None)
    assert "PYTHONOPTIMIZE" not in seen and seen["FP4MOE_MUTANT"] == "m"
