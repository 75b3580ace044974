"""GSM8K thresholds per model and parallel configuration (``fixtures/accuracy_thresholds.json``).

Every entry carries the number, the lm-eval filter it applies to, the conditions it was set
under (few-shot count, question count) and a ``source`` saying where it comes from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from fp4moe.paths import FIXTURES

THRESHOLDS_FILE = FIXTURES / "accuracy_thresholds.json"
FILTERS = ("strict-match", "flexible-extract")


@dataclass(frozen=True)
class Threshold:
    model: str
    parallel: str
    value: float
    filter: str
    num_fewshot: int
    num_questions: int
    source: str


def load_thresholds(path: Path = THRESHOLDS_FILE) -> dict[str, dict[str, Threshold]]:
    """Parse and validate the fixture; a bad entry raises ValueError naming file and key."""
    with open(path) as f:
        raw = json.load(f)
    out: dict[str, dict[str, Threshold]] = {}
    for model, configs in raw.get("thresholds", {}).items():
        for parallel, e in configs.items():
            where = f"{path}: thresholds.{model}.{parallel}"
            missing = [k for k in ("value", "filter", "num_fewshot", "num_questions", "source") if k not in e]
            if missing:
                raise ValueError(f"{where}: missing keys {missing}")
            if not 0.0 <= float(e["value"]) <= 1.0:
                raise ValueError(f"{where}: value {e['value']!r} is not a fraction in [0, 1]")
            if e["filter"] not in FILTERS:
                raise ValueError(f"{where}: filter {e['filter']!r} is not one of {FILTERS}")
            if not str(e["source"]).strip():
                raise ValueError(f"{where}: empty source (every threshold must say where it comes from)")
            out.setdefault(model, {})[parallel] = Threshold(
                model=model,
                parallel=parallel,
                value=float(e["value"]),
                filter=e["filter"],
                num_fewshot=int(e["num_fewshot"]),
                num_questions=int(e["num_questions"]),
                source=str(e["source"]),
            )
    return out


def get_threshold(model: str, parallel: str, path: Path = THRESHOLDS_FILE) -> Threshold:
    """The entry for ``--model-key MODEL --parallel CONFIG``; the error lists what exists."""
    table = load_thresholds(path)
    if model not in table:
        raise ValueError(f"--model-key {model!r} has no GSM8K threshold in {path}; known: {sorted(table)}")
    if parallel not in table[model]:
        raise ValueError(
            f"--parallel {parallel!r} has no GSM8K threshold for {model} in {path}; known: {sorted(table[model])}"
        )
    return table[model][parallel]
