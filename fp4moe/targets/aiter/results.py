"""aiter-check's result words and its row.

- :class:`Result` -- the ONE set of words a row of ``fp4moe-gate aiter-check`` can carry (the
  source checks, the kernel checks, the registry, the upgrade diff and the dispatch group);
  a ``str`` Enum, so a row reads, prints and serialises as the plain word;
- :class:`CheckResult` -- one row: the check's name, its word and the detail with its figure;
- :func:`rows_from_child` -- rows a child returned as JSON, validated (the parent's schema).
"""

from __future__ import annotations

from dataclasses import dataclass

try:
    from enum import StrEnum
except ImportError:  # Python 3.10: str() of a member is its value, as enum.StrEnum's
    from enum import Enum

    class StrEnum(str, Enum):
        __str__ = str.__str__


class Result(StrEnum):
    PASS = "pass"
    FAIL = "FAIL"
    WARN = "warn"
    #: not supported by this aiter: a function, keyword or file the check needs is absent
    NA = "n/a"
    PRESENT = "present"
    #: a defect the registry (``--known-defects``) accepts
    KNOWN = "known"
    #: a fact without a verdict
    INFO = "info"
    #: a kernel component (or an upgrade comparison) that could not be loaded or called
    NOT_JUDGED = "not judged"
    #: upgrade: routing differs and the head tree is the one matching the tie-proof top-k
    FIXED = "fixed"
    BITWISE = "bitwise"
    WITHIN = "within"
    DIFFER = "DIFFER"
    #: the tree lacks a function, keyword, layout, capability or file a later aiter has: a fact
    #: (never a failure) unless asked for (``--require NAME``, or a registry ``requires`` entry)
    ABSENT = "absent"


@dataclass
class CheckResult:
    check: str
    result: str
    detail: str


class TreeLacks(Exception):
    """The tree lacks a file, function or structure a check reads (a later aiter has it): the
    check's group makes an ``absent`` row of it instead of running."""


#: what a child's cannot-run line says when the tree lacks a module or name (an older aiter)
LACKS_MARKS = ("No module named", "cannot import name", "has no attribute", "defines no ")


def rows_from_child(data, what: str) -> list[CheckResult]:
    """The rows a child returned (a JSON list of ``{"check", "result", "detail"}``), each field
    checked; anything else is a cannot-run naming ``what`` and the first bad entry."""
    from fp4moe.infra.errors import GateCannotRun

    words = {r.value for r in Result}
    if not isinstance(data, list):
        raise GateCannotRun(f"{what}: its rows are a {type(data).__name__}, not a list")
    out = []
    for i, r in enumerate(data):
        ok = isinstance(r, dict) and set(r) == {"check", "result", "detail"} and \
            all(isinstance(r[k], str) for k in r) and r["result"] in words
        if not ok:
            raise GateCannotRun(f"{what}: row {i} is not a {{check, result, detail}} row with a known result word: "
                                f"{str(r)[:200]!r}")
        out.append(CheckResult(r["check"], r["result"], r["detail"]))
    return out
