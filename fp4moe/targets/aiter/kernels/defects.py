"""The registry of known upstream defects in aiter's Triton MoE kernels (``--known-defects``).

A schema-checked JSON file (``fixtures/aiter_known_defects.json``): each entry names the
defect (``id``, ``summary``), where it sits in aiter (``aiter_lines``: ``path:line`` in the
tree it was found in), the checks that show it (``checks``: ``fnmatch`` patterns over check
names) and the first tree seen (``first_seen``). Matching is done on the rows the kernel
checks produced:

- a FAIL row matched by an entry becomes ``known`` (the gate exits 0 on it only when the
  runner passed the registry);
- an entry whose checks ran and all passed is ``stale``: the defect no longer reproduces, and
  the gate says so and exits 1 until the entry is removed (the registry cannot rot);
- an entry none of whose checks ran is ``not judged`` (printed, never a pass).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path

from fp4moe.infra.paths import REPO_ROOT

PROJECT_REGISTRY = REPO_ROOT / "fixtures" / "aiter_known_defects.json"
KNOWN, STALE, REPRODUCED, NOT_JUDGED = "known", "stale", "reproduces", "not judged"

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

    def matches(self, check: str) -> bool:
        return any(fnmatch.fnmatchcase(check, pat) for pat in self.checks)


def load_registry(path: str | Path) -> list[Defect]:
    """Parse and validate; a bad file raises ``DataFileError`` naming the file and the JSON path."""
    from fp4moe.infra.strict_json import load_validated, unique_by

    doc = load_validated(path, SCHEMA, "known-defects registry")
    unique_by(doc["defects"], ("id",), path, "known-defects registry", "defects")
    return [Defect(d["id"], d["summary"], tuple(d["aiter_lines"]), tuple(d["checks"]), d["first_seen"]) for d in doc["defects"]]


@dataclass
class Status:
    defect: Defect
    state: str  # KNOWN/REPRODUCED (a matched FAIL), STALE, NOT_JUDGED
    failing: list[str]


def match(rows: list[dict], defects: list[Defect], accepted: bool) -> list[Status]:
    """Each entry's state against the rows (dicts with ``check`` and ``result``)."""
    out = []
    for d in defects:
        ran = [r for r in rows if d.matches(r["check"])]
        failing = [r["check"] for r in ran if r["result"] == "FAIL"]
        state = (KNOWN if accepted else REPRODUCED) if failing else (STALE if ran else NOT_JUDGED)
        out.append(Status(d, state, failing))
    return out
