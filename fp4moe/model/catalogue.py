"""The model catalogue (``fp4moe/data/models.json``): DeepSeek-V4 routed-expert shapes and the
parallel configurations users run.

Sharding convention (SGLang's): with tensor parallel size ``tp`` and expert parallel size
``ep`` (``ep`` divides ``tp``), each rank holds ``routed_experts / ep`` experts and the MoE
intermediate dimension is split ``tp / ep`` ways (``moe_tp``).

Per model, the routing and activation settings the model ships (``ModelSpec.settings``,
:class:`ModelSettings`): each a :class:`Setting` with its value, the ``config.json`` field
SGLang/vLLM read it from and the source that states it; a value no source states is
``unknown`` (``value None``), never guessed. The kernel checks and the reference route and
activate with these (:func:`routing_settings`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache

from fp4moe.infra.paths import data_path

CATALOGUE_FILE = data_path("models.json")


class ScoreMode(str, Enum):
    """The router's scoring function (``config.json`` ``scoring_func``)."""

    SOFTMAX = "softmax"
    SQRTSOFTPLUS = "sqrtsoftplus"
    SIGMOID = "sigmoid"


@dataclass(frozen=True)
class Setting:
    """One model setting: ``value`` (None when unknown), the ``config.json`` ``field`` it is read
    from, and ``source`` (who states it) or ``unknown`` (why no source does)."""

    value: object
    field: str
    source: str | None = None
    unknown: str | None = None


#: the settings each model must carry, by group, with the value types they may hold
ROUTING_SETTINGS = {"scoring_func": str, "renormalize": bool, "routed_scaling_factor": float, "correction_bias": bool,
                    "grouped_topk": bool, "hash_layers": int}
ACTIVATION_SETTINGS = {"hidden_act": str, "swiglu_limit": float}


@dataclass(frozen=True)
class ModelSettings:
    routing: dict = field(default_factory=dict)  # name -> Setting
    activation: dict = field(default_factory=dict)

    def value(self, name: str):
        s = self.routing.get(name) or self.activation.get(name)
        return None if s is None else s.value

    @property
    def score_mode(self) -> ScoreMode | None:
        v = self.value("scoring_func")
        return None if v is None else ScoreMode(v)


@dataclass(frozen=True)
class ModelSpec:
    name: str
    display_name: str
    hidden: int
    moe_intermediate: int
    routed_experts: int
    top_k: int
    moe_layers: int
    tp: tuple[int, ...]
    ep: tuple[int, ...]
    settings: ModelSettings = field(default_factory=ModelSettings, compare=False)


@dataclass(frozen=True)
class ParallelConfig:
    """One rank's view of a model under (tp, ep)."""

    model: ModelSpec
    tp: int
    ep: int

    @property
    def moe_tp(self) -> int:
        return self.tp // self.ep

    @property
    def local_experts(self) -> int:
        return self.model.routed_experts // self.ep

    @property
    def intermediate_per_partition(self) -> int:
        """I_p: the intermediate size one rank holds before padding."""
        return self.model.moe_intermediate // self.moe_tp

    @property
    def label(self) -> str:
        return f"{self.model.name}-tp{self.tp}-ep{self.ep}"


INT_FIELDS = ("hidden", "moe_intermediate", "routed_experts", "top_k", "moe_layers")


@lru_cache(maxsize=None)
def load_catalogue() -> dict[str, ModelSpec]:
    """The model catalogue; ValueError naming the catalogue file when it is unreadable
    (a FIFO or a folder included), not strict JSON (NaN/Infinity, 1e400, a key given twice: a
    model defined twice must not silently take the later definition), lacks a field, holds no
    model, or holds a model without a single valid (tp, ep) row: a gate that iterates the
    catalogue must never pass over nothing."""
    from fp4moe.infra.strict_json import DataFileError

    try:
        return _load_catalogue()
    except DataFileError as e:  # already names the file
        raise ValueError(str(e)) from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        what = f"missing field {e}" if isinstance(e, KeyError) else " ".join(str(e).split())
        raise ValueError(f"model catalogue {CATALOGUE_FILE}: {type(e).__name__}: {what}") from None


def _positive_ints(name: str, field: str, value, *, many: bool):
    vals = value if many else [value]
    if many and (not isinstance(value, list) or not value):
        raise ValueError(f"model {name!r}: {field} must be a non-empty list of sizes, got {value!r}")
    for v in vals:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"model {name!r}: {field} holds {v!r}, not a positive integer")
    if many and len(set(vals)) != len(vals):
        raise ValueError(f"model {name!r}: {field} {value!r} repeats a size")


def _setting(name: str, group: str, key: str, raw, want: type) -> Setting:
    where = f"model {name!r}: {group}.{key}"
    if not isinstance(raw, dict) or set(raw) - {"value", "field", "source", "unknown"} or "value" not in raw:
        raise ValueError(f"{where} must be an object with value, field and source (or unknown), got {raw!r:.80}")
    if not isinstance(raw.get("field"), str) or not raw["field"]:
        raise ValueError(f"{where}: field must name the config.json field it is read from")
    v = raw["value"]
    if v is None:
        if not isinstance(raw.get("unknown"), str) or not raw["unknown"] or "source" in raw:
            raise ValueError(f"{where}: an unknown value (null) must say why in 'unknown' and carry no source")
        return Setting(None, raw["field"], unknown=raw["unknown"])
    if not isinstance(raw.get("source"), str) or not raw["source"] or "unknown" in raw:
        raise ValueError(f"{where}: a value must name its source (and not be marked unknown)")
    number = isinstance(v, (int, float)) and not isinstance(v, bool)
    ok = isinstance(v, bool) if want is bool else number if want is float else \
        (number and isinstance(v, int)) if want is int else isinstance(v, want)
    if not ok:
        raise ValueError(f"{where}: {v!r} is not a {want.__name__}")
    if key == "scoring_func" and v not in {m.value for m in ScoreMode}:
        raise ValueError(f"{where}: {v!r} is not one of {[m.value for m in ScoreMode]}")
    if key in ("routed_scaling_factor", "swiglu_limit") and not v > 0:
        raise ValueError(f"{where}: {v!r} must be > 0")
    return Setting(float(v) if want is float else v, raw["field"], source=raw["source"])


def _settings(name: str, m: dict) -> ModelSettings:
    groups = {}
    for group, table in (("routing", ROUTING_SETTINGS), ("activation", ACTIVATION_SETTINGS)):
        raw = m.get(group)
        if not isinstance(raw, dict) or set(raw) != set(table):
            raise ValueError(f"model {name!r}: {group} must hold exactly {sorted(table)}, got "
                             f"{sorted(raw) if isinstance(raw, dict) else raw!r}")
        groups[group] = {k: _setting(name, group, k, raw[k], want) for k, want in table.items()}
    return ModelSettings(**groups)


def _load_catalogue() -> dict[str, ModelSpec]:
    from fp4moe.infra.strict_json import load_json_strict

    raw = load_json_strict(CATALOGUE_FILE, "model catalogue")
    models = raw["models"]
    if not isinstance(models, dict) or not models:
        raise ValueError(f"'models' must be a non-empty object, got {models!r:.60}")
    out = {}
    for name, m in models.items():
        for f in INT_FIELDS:
            _positive_ints(name, f, m[f], many=False)
        for f in ("tp", "ep"):
            _positive_ints(name, f, m[f], many=True)
        if not isinstance(m["display_name"], str):
            raise ValueError(f"model {name!r}: display_name must be a string")
        spec = ModelSpec(
            name=name,
            display_name=m["display_name"],
            hidden=m["hidden"],
            moe_intermediate=m["moe_intermediate"],
            routed_experts=m["routed_experts"],
            top_k=m["top_k"],
            moe_layers=m["moe_layers"],
            tp=tuple(m["tp"]),
            ep=tuple(m["ep"]),
            settings=_settings(name, m),
        )
        try:
            rows = _rows_of(spec)
        except ValueError as e:
            raise ValueError(f"model {name!r}: {e}") from None
        if not rows:
            raise ValueError(f"model {name!r}: no (tp, ep) row: no ep of {list(spec.ep)} divides a tp of {list(spec.tp)}")
        out[name] = spec
    return out


def get_model(name: str) -> ModelSpec:
    cat = load_catalogue()
    if name not in cat:
        raise ValueError(f"unknown model {name!r}; valid models: {', '.join(sorted(cat))}")
    return cat[name]


def parallel_config(model: str | ModelSpec, tp: int, ep: int = 1) -> ParallelConfig:
    """Validate (tp, ep) for a model and return the per-rank view.

    Errors name the option and list what is valid.
    """
    spec = get_model(model) if isinstance(model, str) else model
    if tp < 1 or ep < 1:
        raise ValueError(f"--tp and --ep must be >= 1, got tp={tp}, ep={ep}")
    if tp % ep:
        valid = [d for d in sorted(set(spec.ep) | {1}) if tp % d == 0]
        raise ValueError(f"--ep {ep} must divide --tp {tp} (moe_tp = tp / ep); valid ep for tp {tp}: {valid}")
    moe_tp = tp // ep
    if spec.moe_intermediate % moe_tp:
        valid = [d for d in range(1, spec.moe_intermediate + 1) if spec.moe_intermediate % d == 0 and d <= 64]
        raise ValueError(
            f"--tp {tp} (moe_tp {moe_tp}) does not divide {spec.name} moe_intermediate "
            f"{spec.moe_intermediate}; valid moe_tp values (<= 64): {valid}"
        )
    if (spec.moe_intermediate // moe_tp) % 32:
        raise ValueError(
            f"--tp {tp}: per-partition intermediate {spec.moe_intermediate // moe_tp} of {spec.name} "
            "is not a multiple of the MXFP4 block (32)"
        )
    if spec.routed_experts % ep:
        valid = [d for d in range(1, spec.routed_experts + 1) if spec.routed_experts % d == 0]
        raise ValueError(
            f"--ep {ep} does not divide {spec.name} routed_experts {spec.routed_experts}; "
            f"valid ep values: {valid}"
        )
    return ParallelConfig(spec, tp, ep)


def _rows_of(spec: ModelSpec) -> list[ParallelConfig]:
    return [parallel_config(spec, tp, ep) for tp in spec.tp for ep in spec.ep if tp % ep == 0]


def catalogue_rows() -> list[ParallelConfig]:
    """Every (model, tp, ep) users run: each tp with each catalogue ep that divides it (never
    empty: :func:`load_catalogue` refuses a catalogue without rows)."""
    return [row for spec in load_catalogue().values() for row in _rows_of(spec)]
