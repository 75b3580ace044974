"""GSM8K thresholds per model and parallel configuration (``fp4moe/data/accuracy_thresholds.json``).

Every entry carries the number, the lm-eval filter it applies to, the conditions it was set
under (few-shot count, question count) and a ``source`` saying where it comes from.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fp4moe.infra.paths import data_path

THRESHOLDS_FILE = data_path("accuracy_thresholds.json")
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


#: JSON Schema of ``fp4moe/data/accuracy_thresholds.json`` (validated before any entry is used).
THRESHOLDS_SCHEMA = {
    "type": "object",
    "required": ["thresholds"],
    "additionalProperties": False,
    "properties": {
        "_doc": {"type": "string"},
        "thresholds": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "additionalProperties": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["value", "filter", "num_fewshot", "num_questions", "source"],
                    "properties": {
                        "value": {"type": "number", "minimum": 0, "maximum": 1},
                        "filter": {"enum": list(FILTERS)},
                        "num_fewshot": {"type": "integer", "minimum": 0, "maximum": 64},
                        "num_questions": {"type": "integer", "minimum": 1},
                        "source": {"type": "string", "pattern": "\\S"},
                    },
                },
            },
        },
        "observations": {"type": "array"},
    },
}


def load_thresholds(path: Path = THRESHOLDS_FILE) -> dict[str, dict[str, Threshold]]:
    """Parse the fixture, validated by :data:`THRESHOLDS_SCHEMA` (a key given twice, a value
    outside [0, 1], ``"0.9"`` as a string, an empty source: each an error naming the file and
    the JSON path)."""
    from fp4moe.infra.strict_json import load_validated

    raw = load_validated(path, THRESHOLDS_SCHEMA, "thresholds file")
    out: dict[str, dict[str, Threshold]] = {}
    for model, configs in raw["thresholds"].items():
        for parallel, e in configs.items():
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
