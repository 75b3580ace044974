"""aiter-check's result words and its row.

- :class:`Result` -- the ONE set of words a row of ``fp4moe-gate aiter-check`` can carry (the
  source checks, the kernel checks, the registry, the upgrade diff and the dispatch group);
  a ``str`` Enum, so a row reads, prints and serialises as the plain word;
- :class:`CheckResult` -- one row: the check's name, its word and the detail with its figure.
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
    MISSING = "missing"
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


@dataclass
class CheckResult:
    check: str
    result: str
    detail: str
