"""One known-defect row of aiter-check (``fp4moe.targets.aiter.judge.registry``), from a matched
registry entry, on any machine: each state's word (accepted or not) and its exact detail, the
entry's aiter lines joined, the count of rows that fail differently."""

from __future__ import annotations

import pytest

from fp4moe.targets.aiter.judge import registry
from fp4moe.targets.aiter.kernels import defects
from fp4moe.targets.aiter.results import Result

DEFECT = defects.Defect("d1", "scales read past K", ("a.py:10", "b.py:20"), ("kernel: x*",), "e4048607 (2026-05-21)")
WHERE = "a.py:10, b.py:20"
REPRO = f"reproduces (2 check(s)): scales read past K [{WHERE}; first seen e4048607 (2026-05-21)]"


@pytest.mark.parametrize("state", [defects.KNOWN, defects.REPRODUCED])
@pytest.mark.parametrize("accepted, word", [(True, Result.KNOWN), (False, Result.FAIL)])
def test_a_reproduced_entry_is_known_only_when_accepted(state, accepted, word):
    st = defects.Status(DEFECT, state, ["x a", "x b"])
    assert registry._registry_verdict(st, accepted) == (word, REPRO)


def test_a_reproduced_entry_counts_the_matched_rows_that_fail_differently():
    st = defects.Status(DEFECT, defects.KNOWN, ["x a", "x b"], {"x c": "NaN where none was", "x d": "all differ"})
    assert registry._registry_verdict(st, True) == \
        (Result.KNOWN, REPRO + "; 2 more matched row(s) fail differently (FAIL, new)")


def test_an_entry_whose_checks_fail_otherwise_fails_and_quotes_the_first():
    st = defects.Status(DEFECT, defects.DIFFERS, [], {"x c": "NaN where none was", "x d": "all differ"})
    assert registry._registry_verdict(st, True) == \
        (Result.FAIL, "its checks fail, but not as registered (2 row(s)): NaN where none was")


@pytest.mark.parametrize("accepted", [True, False])
def test_a_stale_entry_fails_and_one_never_run_is_info(accepted):
    assert registry._registry_verdict(defects.Status(DEFECT, defects.STALE, []), accepted) == \
        (Result.FAIL, f"stale: no longer reproduces (its checks ran and passed); remove it from the registry [{WHERE}]")
    assert registry._registry_verdict(defects.Status(DEFECT, defects.NOT_JUDGED, []), accepted) == \
        (Result.INFO, "not judged: none of its checks ran")
