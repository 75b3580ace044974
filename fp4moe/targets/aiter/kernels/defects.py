"""The registry of known upstream defects in aiter's Triton MoE kernels (``--known-defects``).

A schema-checked JSON file (``fixtures/aiter_known_defects.json``): each entry names the
defect (``id``, ``summary``), where it sits in aiter (``aiter_lines``: ``path:line`` in the
tree it was found in), the checks that show it (``checks``: ``fnmatch`` patterns over check
names), the first tree seen (``first_seen``: a commit id, not a date) and that tree's commit date
(``first_seen_date``, YYYY-MM-DD). Matching is done on the rows the kernel
checks produced:

- a FAIL row matched by an entry becomes ``known`` (the gate exits 0 on it only when the
  runner passed the registry);
- an entry whose checks ran and all passed is ``stale``: the defect no longer reproduces, and
  the gate says so and exits 1 until the entry is removed (the registry cannot rot) -- unless
  the tree under test is dated before the entry's ``first_seen_date`` (an OLDER tree, run alone
  or as ``--base-src``): then it is ``not seen in this tree`` (a fact, no verdict), since a
  defect that arrived later cannot be expected there. A tree whose date cannot be read counts
  as new (stale applies: the strict side);
- an entry none of whose checks ran is ``not judged`` (printed, never a pass).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path

from fp4moe.infra.paths import REPO_ROOT

PROJECT_REGISTRY = REPO_ROOT / "fixtures" / "aiter_known_defects.json"
KNOWN, STALE, REPRODUCED, NOT_JUDGED = "known", "stale", "reproduces", "not judged"
NOT_SEEN = "not seen in this tree"

SCHEMA = {
    "type": "object",
    "required": ["defects"],
    "additionalProperties": False,
    "properties": {
        "_doc": {"type": "string"},
        "defects": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["id", "summary", "aiter_lines", "checks", "first_seen"],
                "properties": {
                    "id": {"type": "string", "pattern": "^[a-z0-9][a-z0-9-]*$"},
                    "summary": {"type": "string", "minLength": 1},
                    "aiter_lines": {"type": "array", "minItems": 1,
                                    "items": {"type": "string", "pattern": r"^aiter/[^:\s]+\.py:[0-9]+$"}},
                    "checks": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
                    "first_seen": {"type": "string", "pattern": "^[0-9a-f]{7,40}$"},
                    "first_seen_date": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"},
                },
            },
        },
    },
}


@dataclass(frozen=True)
class Defect:
    id: str
    summary: str
    aiter_lines: tuple[str, ...]
    checks: tuple[str, ...]
    first_seen: str
    first_seen_date: str | None = None

    def matches(self, check: str) -> bool:
        return any(fnmatch.fnmatchcase(check, pat) for pat in self.checks)


def load_registry(path: str | Path) -> list[Defect]:
    """Parse and validate; a bad file raises ``DataFileError`` naming the file and the JSON path."""
    from fp4moe.infra.strict_json import load_validated, unique_by

    doc = load_validated(path, SCHEMA, "known-defects registry")
    unique_by(doc["defects"], ("id",), path, "known-defects registry", "defects")
    return [Defect(d["id"], d["summary"], tuple(d["aiter_lines"]), tuple(d["checks"]), d["first_seen"],
                   d.get("first_seen_date")) for d in doc["defects"]]


#: check-name prefix of the dispatch group's rows (fp4moe.targets.aiter.dispatch): its registry entries
#: are judged by that group, the others by the kernel checks
DISPATCH_PREFIX = "dispatch: "


def for_dispatch(d: Defect) -> bool:
    """The entry names dispatch-group checks (every pattern starts with ``dispatch: ``)."""
    return all(p.startswith(DISPATCH_PREFIX) for p in d.checks)


@dataclass
class Status:
    defect: Defect
    state: str  # KNOWN/REPRODUCED (a matched FAIL), STALE, NOT_JUDGED
    failing: list[str]


def predates(tree_date: str | None, d: Defect) -> bool:
    """The tree (dated ``tree_date``, YYYY-MM-DD) is older than the tree that first showed ``d``."""
    return bool(tree_date and d.first_seen_date and tree_date < d.first_seen_date)


def match(rows: list[dict], defects: list[Defect], accepted: bool, tree_date: str | None = None) -> list[Status]:
    """Each entry's state against the rows (dicts with ``check`` and ``result``); ``tree_date``:
    the date of the tree the rows came from (``loader.tree_date``)."""
    out = []
    for d in defects:
        ran = [r for r in rows if d.matches(r["check"]) and r["result"] in ("pass", "FAIL")]
        failing = [r["check"] for r in ran if r["result"] == "FAIL"]
        if failing:
            state = KNOWN if accepted else REPRODUCED
        elif ran:
            state = NOT_SEEN if predates(tree_date, d) else STALE
        else:
            state = NOT_JUDGED
        out.append(Status(d, state, failing))
    return out
