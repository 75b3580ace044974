"""The model catalogue (``fixtures/models.json``): DeepSeek-V4 routed-expert shapes and the
parallel configurations users run.

Sharding convention (SGLang's): with tensor parallel size ``tp`` and expert parallel size
``ep`` (``ep`` divides ``tp``), each rank holds ``routed_experts / ep`` experts and the MoE
intermediate dimension is split ``tp / ep`` ways (``moe_tp``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache

from fp4moe.infra.paths import FIXTURES

CATALOGUE_FILE = FIXTURES / "models.json"


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


@lru_cache(maxsize=None)
def load_catalogue() -> dict[str, ModelSpec]:
    """The model catalogue; ValueError naming ``fixtures/models.json`` when it is unreadable,
    not JSON (NaN/Infinity included), or lacks a field."""
    try:
        return _load_catalogue()
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        what = f"missing field {e}" if isinstance(e, KeyError) else " ".join(str(e).split())
        raise ValueError(f"model catalogue {CATALOGUE_FILE}: {type(e).__name__}: {what}") from None


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a number a catalogue may hold")


def _load_catalogue() -> dict[str, ModelSpec]:
    with open(CATALOGUE_FILE) as f:
        raw = json.load(f, parse_constant=_reject_constant)
    out = {}
    for name, m in raw["models"].items():
        out[name] = ModelSpec(
            name=name,
            display_name=m["display_name"],
            hidden=m["hidden"],
            moe_intermediate=m["moe_intermediate"],
            routed_experts=m["routed_experts"],
            top_k=m["top_k"],
            moe_layers=m["moe_layers"],
            tp=tuple(m["tp"]),
            ep=tuple(m["ep"]),
        )
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


def catalogue_rows() -> list[ParallelConfig]:
    """Every (model, tp, ep) users run: each tp with ep=1, and each ep>1 that divides tp."""
    rows = []
    for spec in load_catalogue().values():
        for tp in spec.tp:
            for ep in spec.ep:
                if tp % ep == 0:
                    rows.append(parallel_config(spec, tp, ep))
    return rows
