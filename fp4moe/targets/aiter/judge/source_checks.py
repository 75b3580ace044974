"""Groups (a)-(d) of aiter-check, the source checks, as one table.

- :data:`SOURCE_CHECKS` -- the table: name -> function(:class:`Context`) -> rows; adding a
  check is one function and one entry;
- :func:`run_checks` -- every entry in order (in aiter-check's source-checks child, once);
- :func:`check_differential` -- (d): aiter's pure-torch reference functions against ``fp4moe``
  (``fp4moe.targets.aiter.conformance``): ``bitwise`` / ``within`` / ``DIFFER``, or ``n/a``;
- :data:`CHILD_SCHEMA` -- the record of the source-checks child
  (``python -m fp4moe.targets.aiter.child.source_checks``); its rows travel as output ``rows``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from fp4moe.infra import runner
from fp4moe.targets.aiter.judge.api import check_api
from fp4moe.targets.aiter.judge.capabilities import probe_bound_env, probe_pr4130
from fp4moe.targets.aiter.judge.layout import LayoutCase, check_layout
from fp4moe.targets.aiter.results import CheckResult, Result
from fp4moe.targets.aiter.source import FUSED_MOE_FILE, SHUFFLE_FILE, AiterSource, note_stage

#: the record of the source-checks child: where the tree came from
CHILD_SCHEMA = runner.RecordSchema("aiter-check-rows", 2, {"source": str, "version": (str, type(None)),
                                                              "writes_confined": bool, "unconfined": (str, type(None))})


@dataclass
class Context:
    """What every source check reads: the tree and the options."""

    src: AiterSource
    cases: list[LayoutCase] | None = None
    differential: bool = False
    moe_cases: object = None
    allow_kwargs: bool = False


def check_differential(src: AiterSource, moe_cases=None) -> list[CheckResult]:
    from fp4moe.targets.aiter import conformance as conf

    diffs = conf.run_differential(src, moe_cases)
    word = {conf.BITWISE: Result.BITWISE, conf.WITHIN: Result.WITHIN, conf.DIFFER: Result.DIFFER, conf.MISSING_FN: Result.ABSENT}
    # a reference function or keyword this tree lacks is absent; one that needs aiter's compiled
    # runtime could not be checked from source (n/a)
    return [CheckResult(f"diff: {d.check}", Result.NA if d.outcome == conf.MISSING_FN and "not checkable" in d.detail
                        else word[d.outcome], f"{d.detail} [aiter {d.aiter_fn}]") for d in diffs]


def _api(c: Context) -> list[CheckResult]:
    return check_api(c.src, allow_kwargs=c.allow_kwargs)


def _layout(c: Context) -> list[CheckResult]:
    return check_layout(c.src, c.cases)


def _pr4130(c: Context) -> list[CheckResult]:
    return [probe_pr4130(c.src)]


def _bound_env(c: Context) -> list[CheckResult]:
    return [probe_bound_env(c.src)]


def _differential(c: Context) -> list[CheckResult]:
    return check_differential(c.src, c.moe_cases) if c.differential else []


#: (a) API, (b) layouts, (c) capabilities, (d) aiter's references -- in the order of the rows
SOURCE_CHECKS: dict[str, Callable[[Context], list[CheckResult]]] = {
    "api": _api,
    "layout": _layout,
    "capability: PR #4130": _pr4130,
    "capability: bound env": _bound_env,
    "differential": _differential,
}


def run_checks(src: AiterSource, cases: list[LayoutCase] | None = None, *, differential: bool = False, moe_cases=None,
               allow_kwargs: bool = False) -> list[CheckResult]:
    """Every check of groups (a)-(d). (a) and the bound probe read source text only (``ast``);
    the others execute aiter's files in this process (aiter-check runs this in its child)."""
    ctx = Context(src, cases, differential, moe_cases, allow_kwargs)
    note_stage(f"reading {FUSED_MOE_FILE} and {SHUFFLE_FILE} signatures")
    return [row for check in SOURCE_CHECKS.values() for row in check(ctx)]
