"""The registry of known upstream defects in aiter (``--known-defects``), for every group's rows.

A schema-checked JSON file (``fp4moe/data/aiter_known_defects.json``): each entry names the
defect (``id``, ``summary``), where it sits in aiter (``aiter_lines``: ``path:line`` in the
tree it was found in), the rows that show it (``checks``: each one row's full check name, as
the table prints it -- ``kernel: ...``, ``dispatch ...``; no wildcards: an entry stands for the
rows it was recorded against, never for rows that may appear later), the first tree seen
(``first_seen``: a commit id) and that tree's commit date (``first_seen_date``: a real date,
not after today), and -- required -- the failure's ``signature`` per check name (the text after
the row's last ``": "``): what the failing row must show (``differ``/``nan``/``written``:
``all``/``some``/``none`` of the values; ``fail_rows``: the count of failing table rows a
dispatch contract row states; ``detail``: a regular expression its detail must match).
Matching is done on the rows the run produced:

- a FAIL row matched by an entry's checks AND signature becomes ``known`` (the gate exits 0 on
  it only when the runner passed the registry);
- a FAIL row matched by the checks whose failure differs from the signature stays FAIL, as a
  new failure, naming the registered signature and the row's (:func:`signature_mismatch`);
- an entry whose checks ran and all passed is ``stale``: the gate says so and exits 1 until the
  entry is removed, whatever its dates;
- an entry none of whose checks ran is ``not judged`` (printed, never a pass).

A ``checks`` name with a wildcard (``*``, ``?``, ``[``), whose part after the last ``": "`` is no
check the gate makes (:func:`check_names`), or without a signature for its check is refused at
load (exit 2 naming the entry).
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, field
from pathlib import Path

from fp4moe.infra.paths import data_path
from fp4moe.targets.aiter.results import Result

PROJECT_REGISTRY = data_path("aiter_known_defects.json")
KNOWN, STALE, REPRODUCED, NOT_JUDGED = "known", "stale", "reproduces", "not judged"
DIFFERS = "fails differently"  # its checks fail, none as the signature says: new failures
NOT_SEEN = "not seen in this tree"  # kept for callers: no longer produced (a stale entry fails whatever its dates)
#: the kernel checks' row names (the text after a row label's last ": "), as kernels.checks makes them
KERNEL_CHECK_NAMES = (
    "configs", "vs reference (kernel budget)", "vs per-slot-bf16 reference", "bitwise repeat",
    "pad told == untold (zero pads)", "pad poison (told) == clean", "allocation poison == clean", "pad checks",
    "pad honoured (poisoned pad, told) == clean", "told pad never computed", "told K pad never read", "tiles",
    "vs the gate's OCP MX quant", "vs exact sum (bitwise)", "vs the reference top-k", "topk stage alone", "outputs", "not judged",
    "killed the kernel child", "interpreter casts == RNE/saturating rounding",
)
#: the dispatch numerics rows' check names (fp4moe.targets.aiter.dispatch.numerics, ``dispatch numerics
#: <case>: <check>``): like the kernel checks, they state value counts, so an entry may sign them
NUMERICS_CHECK_NAMES = ("stage ops are the path's", "pad told to the stages", "== reference (bitwise)",
                        "== reference, bf16 inter-stage (bitwise)", "== reference, float32 slots (bitwise)")
SIGNED_CHECK_NAMES = KERNEL_CHECK_NAMES + NUMERICS_CHECK_NAMES
AMOUNTS = ("all", "some", "none")

SCHEMA = {
    "type": "object",
    "required": ["defects"],
    "additionalProperties": False,
    "properties": {
        "_doc": {"type": "string"},
        # what the caller depends on: an `absent` row whose check name holds `check` fails (as --require)
        "requires": {"type": "array", "items": {"type": "object", "additionalProperties": False, "required": ["check", "why"],
                                                "properties": {"check": {"type": "string", "minLength": 1},
                                                               "why": {"type": "string", "minLength": 1}}}},
        "defects": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["id", "summary", "aiter_lines", "checks", "first_seen", "signature"],
                "properties": {
                    "id": {"type": "string", "pattern": "^[a-z0-9][a-z0-9-]*$"},
                    "summary": {"type": "string", "minLength": 1},
                    "aiter_lines": {"type": "array", "minItems": 1,
                                    "items": {"type": "string", "pattern": r"^aiter/[^:\s]+\.py:[0-9]+$"}},
                    "checks": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
                    "first_seen": {"type": "string", "pattern": "^[0-9a-f]{7,40}$"},
                    "first_seen_date": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"},
                    "signature": {"type": "object", "minProperties": 1},
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
    signature: dict = field(default_factory=dict)

    def matches(self, check: str) -> bool:
        return check in self.checks


def row_signature(detail: str) -> dict:
    """What a failing row shows, read from its detail: ``differ``/``nan``/``written`` as
    all/some/none of the values (keys absent where the row states no such count)."""
    out = {}
    for key, rx in (("differ", r"(\d+)/(\d+) values differ"), ("nan", r"(\d+)/(\d+) NaN"),
                    ("written", r"written in (\d+)/(\d+) values")):
        m = re.search(rx, detail)
        if m:
            a, b = int(m.group(1)), int(m.group(2))
            out[key] = "none" if a == 0 else "all" if a == b else "some"
    m = re.match(r"(\d+) FAIL\b", detail)  # a dispatch contract row: N FAIL (table) row(s)
    if m:
        out["fail_rows"] = int(m.group(1))
    if "differ" in out and "nan" not in out and re.search(r"values differ", detail):
        out["nan"] = "none"
    if "all still poison" in detail:
        out["written"] = "none"
    return out


SIGNATURE_KEYS = ("differ", "nan", "written", "fail_rows", "detail")
COUNTED = ("differ", "nan", "written", "fail_rows")


def signature_for(d: Defect, check: str) -> dict:
    """The signature a row of ``check`` must show: the entry's per-check-name one (a key equal
    to the check name after the last ": "), else its top-level keys."""
    name = check.rsplit(": ", 1)[-1]
    sig = d.signature.get(name)
    return sig if isinstance(sig, dict) else {k: v for k, v in d.signature.items() if k in SIGNATURE_KEYS}


def signature_mismatch(d: Defect, detail: str, check: str = "") -> str | None:
    """None when the row's failure is the registered one; else one line naming both."""
    sig = signature_for(d, check)
    if not sig:
        return None
    got = row_signature(detail)
    bad = [k for k in COUNTED if k in sig and got.get(k) != sig[k]]
    if "detail" in sig and not re.search(sig["detail"], detail):
        bad.append("detail")
    if not bad:
        return None
    want = ", ".join(f"{k} {sig[k]!s}" for k in SIGNATURE_KEYS if k in sig)
    have = ", ".join(f"{k} {got.get(k, '?')}" for k in COUNTED if k in sig)
    return f"fails differently from known defect {d.id}: registered {want}; this row: {have or 'no counts'}"


def check_names() -> tuple[str, ...]:
    """Every check name a registry entry may sign: the kernel checks', the dispatch numerics' and
    the dispatch contracts' (``dispatch.contracts.CONTRACTS``)."""
    from fp4moe.targets.aiter.dispatch.contracts import CONTRACTS

    return SIGNED_CHECK_NAMES + tuple(c.name for c in CONTRACTS)


def _signature_error(sig: dict) -> str | None:
    names = check_names()
    for k, v in sig.items():
        if k in names:
            if not isinstance(v, dict) or not v:
                return f"signature[{k!r}] must be a non-empty object"
            why = _signature_error(v) if not (set(v) & set(names)) else "nests a check name"
            if why:
                return f"signature[{k!r}]: {why}"
        elif k in ("differ", "nan", "written"):
            if v not in AMOUNTS:
                return f"signature.{k} {v!r} is not one of {list(AMOUNTS)}"
        elif k == "fail_rows":
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                return f"signature.fail_rows {v!r} is not a count >= 1"
        elif k == "detail":
            if not isinstance(v, str) or not v:
                return "signature.detail must be a non-empty regular expression"
            try:
                re.compile(v)
            except re.error as e:
                return f"signature.detail is not a regular expression ({e})"
        else:
            return f"signature has an unknown key {k!r} (differ, nan, written, fail_rows, detail, or a check name)"
    return None


def _pattern_error(pat: str) -> str | None:
    """Why a ``checks`` name does not name one row of one kernel, path or case (None: it does)."""
    if any(c in pat for c in "*?["):
        return ("is a pattern: it matches more than the rows the entry was recorded against (name each row "
                "in full, as the table prints it)")
    if ": " not in pat or pat.rsplit(": ", 1)[1] not in check_names():
        return "names no check the gate makes (the text after its last ': ' must be a check name)"
    return None


def _check_entry(path, i: int, d: dict, today: datetime.date) -> None:
    from fp4moe.infra.strict_json import DataFileError

    where = f"known-defects registry {path}: defects[{i}] ({d['id']})"
    for pat in d["checks"]:
        why = _pattern_error(pat)
        if why:
            raise DataFileError(f"{where}: checks pattern {pat!r} {why}")
    for pat in d["checks"]:
        if not signature_for(Defect("", "", (), (), "", signature=dict(d.get("signature", {}))), pat):
            raise DataFileError(f"{where}: {pat!r} has no signature (differ/nan/written/fail_rows/detail: the "
                                "failure it was recorded with)")
    why = _signature_error(d.get("signature", {}))
    if why:
        raise DataFileError(f"{where}: {why}")
    if "first_seen_date" in d:
        try:
            day = datetime.date.fromisoformat(d["first_seen_date"])
        except ValueError:
            raise DataFileError(f"{where}: first_seen_date {d['first_seen_date']!r} is not a real date") from None
        if day > today:
            raise DataFileError(f"{where}: first_seen_date {d['first_seen_date']} is in the future (today {today})")


def load_registry(path: str | Path) -> list[Defect]:
    """Parse and validate; a bad file raises ``DataFileError`` naming the file and the JSON path."""
    from fp4moe.infra.strict_json import load_validated, unique_by

    doc = load_validated(path, SCHEMA, "known-defects registry")
    unique_by(doc["defects"], ("id",), path, "known-defects registry", "defects")
    today = datetime.datetime.now(datetime.timezone.utc).date()
    for i, d in enumerate(doc["defects"]):
        _check_entry(path, i, d, today)
    return [Defect(d["id"], d["summary"], tuple(d["aiter_lines"]), tuple(d["checks"]), d["first_seen"],
                   d.get("first_seen_date"), dict(d.get("signature", {}))) for d in doc["defects"]]


def load_requires(path: str | Path) -> tuple[str, ...]:
    """The registry's ``requires`` (what the caller depends on: ``--require`` names), validated."""
    from fp4moe.infra.strict_json import load_validated

    return tuple(r["check"] for r in load_validated(path, SCHEMA, "known-defects registry").get("requires", []))


@dataclass
class Status:
    defect: Defect
    state: str  # KNOWN/REPRODUCED (a matched FAIL), STALE, NOT_JUDGED
    failing: list[str]  # FAIL rows whose failure is the registered one
    differing: dict = field(default_factory=dict)  # FAIL rows matched by name that fail otherwise -> why


def predates(tree_date: str | None, d: Defect) -> bool:
    """The tree (dated ``tree_date``, YYYY-MM-DD) is older than the tree that first showed ``d``."""
    return bool(tree_date and d.first_seen_date and tree_date < d.first_seen_date)


def match(rows: list[dict], defects: list[Defect], accepted: bool, tree_date: str | None = None) -> list[Status]:
    """Each entry's state against the rows (dicts with ``check``, ``result``, ``detail``).
    ``tree_date`` is accepted for callers and unused: a stale entry fails whatever its dates."""
    out = []
    for d in defects:
        ran = [r for r in rows if d.matches(r["check"]) and r["result"] in (Result.PASS, Result.FAIL)]
        failing, differing = [], {}
        for r in ran:
            if r["result"] != Result.FAIL:
                continue
            why = signature_mismatch(d, r.get("detail", ""), r["check"])
            if why:
                differing[r["check"]] = why
            else:
                failing.append(r["check"])
        if failing:
            state = KNOWN if accepted else REPRODUCED
        elif ran and not differing:
            state = STALE
        elif differing:
            state = DIFFERS
        else:
            state = NOT_JUDGED
        out.append(Status(d, state, failing, differing))
    return out
