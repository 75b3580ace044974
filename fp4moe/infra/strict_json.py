"""Strict reading of the project's JSON data files (budgets, thresholds): parse, then validate
against a JSON Schema (``jsonschema``, Draft 2020-12) before any value is used.

Python's ``json`` is lenient where a gate must not be: a key given twice keeps the later
value (so a duplicate entry can override an over-budget one), ``1e400`` becomes ``inf``,
``NaN`` and ``Infinity`` are accepted. Here each of those is an error naming the file and the
JSON path; so is every schema violation (a string ``"false"`` where a boolean is required,
``8.9`` where an integer is). Entries that must be unique by some fields are checked with
:func:`unique_by`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import jsonschema

from fp4moe.infra.files import read_regular_bytes


class DataFileError(ValueError):
    """A data file that cannot be used; the message names the file and where in it."""


def _no_duplicate_keys(pairs):
    seen = {}
    for k, v in pairs:
        if k in seen:
            raise DataFileError(f"key {k!r} appears twice in one object")
        seen[k] = v
    return seen


def _finite_float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise DataFileError(f"number {text} is out of range (not a finite double)")
    return v


def _no_constant(name: str):
    raise DataFileError(f"{name} is not a JSON number")


def load_json_strict(path: str | Path, what: str):
    """Parse ``path`` (UTF-8 JSON) rejecting duplicate keys and non-finite numbers."""
    p = Path(path)
    try:
        text = read_regular_bytes(p).decode("utf-8")
    except FileNotFoundError:
        raise DataFileError(f"{what} {p}: no such file") from None
    except OSError as e:
        raise DataFileError(f"{what} {p}: cannot read: {e.strerror or str(e).replace(f'{p}: ', '')}") from None
    except UnicodeDecodeError as e:
        raise DataFileError(f"{what} {p}: not UTF-8 text (byte {e.start}: {e.reason})") from None
    try:
        return json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_float=_finite_float,
                          parse_constant=_no_constant)
    except DataFileError as e:
        raise DataFileError(f"{what} {p}: {e}") from None
    except json.JSONDecodeError as e:
        raise DataFileError(f"{what} {p}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
    except RecursionError:
        raise DataFileError(f"{what} {p}: nested too deeply") from None


def _where(err: jsonschema.ValidationError) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.absolute_path).lstrip(".") or "(top level)"


def validate(doc, schema: dict, path: str | Path, what: str) -> None:
    """Raise :class:`DataFileError` for the first schema violation (by JSON path order)."""
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        e = errors[0]
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        raise DataFileError(f"{what} {path}: {_where(e)}: {e.message}{more}")


def load_validated(path: str | Path, schema: dict, what: str):
    doc = load_json_strict(path, what)
    validate(doc, schema, path, what)
    return doc


def unique_by(items: list[dict], fields: tuple[str, ...], path, what: str, where: str = "entries") -> None:
    """Every item distinct on ``fields``: a later duplicate must never silently win."""
    seen: dict[tuple, int] = {}
    for i, item in enumerate(items):
        key = tuple(json.dumps(item.get(f)) for f in fields)
        if key in seen:
            desc = ", ".join(f"{f}={item.get(f)!r}" for f in fields)
            raise DataFileError(f"{what} {path}: {where}[{i}] repeats {where}[{seen[key]}] ({desc})")
        seen[key] = i
