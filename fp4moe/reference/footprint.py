"""Exact byte model of the MXFP4 routed-expert weights one rank holds, per layer and per model.

Why: SGLang PR #31450 (DeepSeek-V4-Pro, TP8, MI355X) cut MoE weight memory by no longer padding
the per-partition intermediate size I_p = 384 up to 512. This module says, to the byte, what any
catalogue model x TP x EP x align x GU-interleave costs, so that a weight-path change states its
price before it ships (``fp4moe-gate footprint``) and a budget gate catches padding creeping back.

Per rank and per MoE layer (E = routed_experts / ep local experts, I_p = moe_intermediate /
(tp / ep), P = ceil(I_p / align) * align, H = hidden), all tensors uint8:

================  ==================  ==========================================================
tensor            shape (padded)      bytes
================  ==================  ==========================================================
w13               (E, 2P, H/2)        E * 2P * H / 2   (two E2M1 codes per byte)
w13_scale         (E, 2P, H/32)       E * 2P * H / 32  (one E8M0 byte per 32-element block)
w2                (E, H, P/2)         E * H * P / 2
w2_scale          (E, H, P/32)        E * H * P / 32
================  ==================  ==========================================================

The gfx950 shuffles (aiter ``shuffle_weight`` / ``shuffle_scale``; ``fp4moe.reference.layout``) keep the
weights' shape but view each scale as 2-D [E*N, K/32] (N = 2P, K = H for w13; N = H, K = P for
w2) and grow it: non-interleaved rounds rows up to a multiple of 256 and columns to a multiple of
8; GU-interleaved rounds columns to a multiple of 8 only. Row rounding is on E*N, so it is NOT
linear in the expert count; everything else is.

Units: every figure is an exact integer number of bytes; GiB = 2**30 bytes and GB = 10**9 bytes
are given side by side. SGLang's "mem usage=... GB" log line divides by 2**30, so it is GiB.

Optional per-layer terms around the routed experts (shared expert, router) are ASSUMPTIONS, not
catalogue facts: see ``NonRoutedAssumption``. They exist so per-layer figures can be compared
with logged ones (PR #31450's 2.105 / 1.582), never in the budget.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path

from fp4moe.infra.paths import data_path
from fp4moe.model.catalogue import ModelSpec, ParallelConfig, catalogue_rows, parallel_config
from fp4moe.reference.pads import DEFAULT_ALIGN, SCALE_ROW_ALIGN, PadPlan, round_up, shuffled_scale_shape

GIB = 1 << 30
GB = 10**9

MXFP4_BLOCK = 32  # elements per E8M0 scale (OCP MX spec v1.0, MXFP4 block size)
FP4_PER_BYTE = 2  # two E2M1 codes per packed byte
PRE_31450_ALIGN = 256  # SGLang before PR #31450
ALIGNS = (DEFAULT_ALIGN, PRE_31450_ALIGN)
ROUTED_TENSORS = ("w13", "w13_scale", "w2", "w2_scale")
BUDGET_FILE = data_path("footprint_budget.json")


def padded_intermediate(intermediate: int, align: int) -> int:
    """P = ceil(I_p / align) * align (the weight path's rule, ``weight_path.PadPlan``); must stay a
    multiple of 32."""
    if not isinstance(align, int) or align < 1:
        raise ValueError(f"--align must be a positive integer, got {align!r}; valid: {', '.join(map(str, ALIGNS))}")
    p = PadPlan(intermediate, align).padded
    if p % MXFP4_BLOCK:
        raise ValueError(f"--align {align}: padded intermediate {p} is not a multiple of the MXFP4 block (32)")
    return p


def gib(nbytes: int) -> float:
    return nbytes / GIB


def gb(nbytes: int) -> float:
    return nbytes / GB


def units(nbytes: int) -> dict:
    """The same quantity in bytes (exact), GiB (2^30) and GB (10^9)."""
    return {"bytes": int(nbytes), "GiB": gib(nbytes), "GB": gb(nbytes)}


# ------------------------------------------------------------------------------------ routed
@dataclass(frozen=True)
class TensorFootprint:
    """One uint8 tensor: its shape after padding and after the gfx950 shuffle."""

    name: str
    shape: tuple[int, ...]
    shuffled_shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape)

    @property
    def shuffled_nbytes(self) -> int:
        return math.prod(self.shuffled_shape)

    def to_dict(self) -> dict:
        return {
            "shape": list(self.shape),
            "bytes": self.nbytes,
            "shuffled_shape": list(self.shuffled_shape),
            "shuffled_bytes": self.shuffled_nbytes,
        }


def routed_tensors(experts: int, hidden: int, padded: int, *, gu_interleave: bool) -> tuple[TensorFootprint, ...]:
    """The four routed tensors of one rank's layer, shapes as in the module docstring."""
    e, h, p = experts, hidden, padded
    w13_scale = (e, 2 * p, h // MXFP4_BLOCK)
    w2_scale = (e, h, p // MXFP4_BLOCK)
    return (
        TensorFootprint("w13", (e, 2 * p, h // FP4_PER_BYTE), (e, 2 * p, h // FP4_PER_BYTE)),
        TensorFootprint(
            "w13_scale", w13_scale, shuffled_scale_shape(e * 2 * p, h // MXFP4_BLOCK, is_guinterleave=gu_interleave)
        ),
        TensorFootprint("w2", (e, h, p // FP4_PER_BYTE), (e, h, p // FP4_PER_BYTE)),
        TensorFootprint("w2_scale", w2_scale, shuffled_scale_shape(e * h, p // MXFP4_BLOCK, is_guinterleave=gu_interleave)),
    )


# --------------------------------------------------------------------------- non-routed terms
@dataclass(frozen=True)
class NonRoutedTerm:
    """A per-layer tensor around the routed experts, with the assumption it rests on."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    assumption: str

    def to_dict(self) -> dict:
        return {"shape": list(self.shape), "dtype": self.dtype, "bytes": self.nbytes, "assumption": self.assumption}


SHARED_DTYPES = ("none", "fp8-block128", "bf16", "mxfp4")
ROUTER_DTYPES = ("none", "bf16", "fp32")
FP8_BLOCK = 128  # DeepSeek-V3/V4 FP8 checkpoints: 128x128 weight blocks, one float32 scale each


@dataclass(frozen=True)
class NonRoutedAssumption:
    """What the shared expert and the router gate are assumed to cost on one rank.

    Assumptions (NOT taken from the catalogue or a config.json; labelled in every output):
    - ``shared_experts`` shared experts (default 1), each of the routed experts' intermediate
      width (DeepSeek-V3 convention; Pro: 3072), TP-sharded over all ``tp`` ranks as SGLang's
      dense MLP is: gate_up [2*S/tp, H] and down [H, S/tp].
    - ``shared``: fp8-block128 (e4m3 bytes + one float32 per 128x128 block), bf16, mxfp4, none.
    - ``router``: gate weight [routed_experts, H] replicated on every rank (bf16 / fp32 / none);
      ``router_bias`` adds the float32 [routed_experts] score-correction bias.
    """

    shared: str = "fp8-block128"
    router: str = "bf16"
    router_bias: bool = False
    shared_experts: int = 1

    def __post_init__(self):
        if self.shared not in SHARED_DTYPES:
            raise ValueError(f"shared expert dtype {self.shared!r} unknown; valid: {', '.join(SHARED_DTYPES)}")
        if self.router not in ROUTER_DTYPES:
            raise ValueError(f"router dtype {self.router!r} unknown; valid: {', '.join(ROUTER_DTYPES)}")

    @property
    def label(self) -> str:
        bias = "+bias" if self.router_bias else ""
        return f"shared={self.shared},router={self.router}{bias}"

    def terms(self, cfg: ParallelConfig, hidden: int | None = None) -> tuple[NonRoutedTerm, ...]:
        h = hidden or cfg.model.hidden
        out: list[NonRoutedTerm] = []
        s_total = self.shared_experts * cfg.model.moe_intermediate
        if self.shared != "none":
            if s_total % cfg.tp:
                raise ValueError(f"shared expert width {s_total} not divisible by --tp {cfg.tp}")
            s = s_total // cfg.tp
            why = (
                f"ASSUMED {self.shared_experts} shared expert(s) of width {cfg.model.moe_intermediate}, "
                f"TP-sharded /{cfg.tp}, {self.shared}"
            )
            for name, (n, k) in (("shared.gate_up", (2 * s, h)), ("shared.down", (h, s))):
                if self.shared == "bf16":
                    out.append(NonRoutedTerm(name, (n, k), "bf16", 2 * n * k, why))
                elif self.shared == "mxfp4":
                    out.append(NonRoutedTerm(name, (n, k // 2), "fp4x2", n * k // 2, why))
                    out.append(NonRoutedTerm(name + "_scale", (n, k // 32), "e8m0", n * k // 32, why))
                else:  # fp8-block128; gate and up halves are separate 128-row block grids
                    out.append(NonRoutedTerm(name, (n, k), "fp8_e4m3", n * k, why))
                    row_blocks = 2 * round_up(s, FP8_BLOCK) // FP8_BLOCK if name == "shared.gate_up" else -(-n // FP8_BLOCK)
                    sc = (row_blocks, -(-k // FP8_BLOCK))
                    out.append(NonRoutedTerm(name + "_scale_inv", sc, "fp32", 4 * math.prod(sc), why))
        if self.router != "none":
            why = f"ASSUMED router gate replicated on every rank, {self.router}"
            size = 2 if self.router == "bf16" else 4
            shape = (cfg.model.routed_experts, h)
            out.append(NonRoutedTerm("router.weight", shape, self.router, size * math.prod(shape), why))
            if self.router_bias:
                b = (cfg.model.routed_experts,)
                out.append(NonRoutedTerm("router.e_score_correction_bias", b, "fp32", 4 * b[0], why + " + fp32 bias"))
        return tuple(out)


def all_non_routed_assumptions() -> list[NonRoutedAssumption]:
    """Every combination the model knows (for the PR #31450 reconciliation)."""
    return [
        NonRoutedAssumption(shared=s, router=r, router_bias=b)
        for s, r, b in itertools.product(SHARED_DTYPES, ROUTER_DTYPES, (False, True))
        if not (b and r == "none")
    ]


# ------------------------------------------------------------------------------------ layers
@dataclass(frozen=True)
class LayerFootprint:
    """One rank's bytes for one MoE layer (and x moe_layers for the model)."""

    model: str
    tp: int
    ep: int
    align: int
    gu_interleave: bool
    shuffle: bool
    experts: int
    hidden: int
    intermediate: int  # I_p, real
    padded_intermediate: int  # P
    moe_layers: int
    tensors: tuple[TensorFootprint, ...]
    non_routed: tuple[NonRoutedTerm, ...] = ()
    non_routed_label: str | None = None

    @property
    def label(self) -> str:
        gu = "gu" if self.gu_interleave else "nogu"
        return f"{self.model}-tp{self.tp}-ep{self.ep}-align{self.align}-{gu}"

    @property
    def intermediate_pad(self) -> int:
        return self.padded_intermediate - self.intermediate

    def tensor(self, name: str) -> TensorFootprint:
        return {t.name: t for t in self.tensors}[name]

    @property
    def routed_bytes_before_shuffle(self) -> int:
        """Padded tensors before the scale shuffles grow them (PR #31450's quantity)."""
        return sum(t.nbytes for t in self.tensors)

    @property
    def routed_bytes(self) -> int:
        """What the weight path leaves allocated: after shuffle growth when it shuffles."""
        return sum(t.shuffled_nbytes for t in self.tensors) if self.shuffle else self.routed_bytes_before_shuffle

    @property
    def shuffle_growth_bytes(self) -> int:
        return self.routed_bytes - self.routed_bytes_before_shuffle

    @property
    def unpadded_bytes(self) -> int:
        """The same layer with P = I_p and no shuffle growth: the bytes that hold real data."""
        return sum(t.nbytes for t in routed_tensors(self.experts, self.hidden, self.intermediate, gu_interleave=True))

    @property
    def waste_bytes(self) -> int:
        """Intermediate padding plus scale-shuffle growth: bytes that hold no weight data."""
        return self.routed_bytes - self.unpadded_bytes

    @property
    def waste_pct(self) -> float:
        return 100.0 * self.waste_bytes / self.routed_bytes

    @property
    def non_routed_bytes(self) -> int:
        return sum(t.nbytes for t in self.non_routed)

    @property
    def layer_bytes(self) -> int:
        """Routed (after growth) plus any assumed non-routed terms."""
        return self.routed_bytes + self.non_routed_bytes

    @property
    def model_bytes(self) -> int:
        return self.layer_bytes * self.moe_layers

    @property
    def model_routed_bytes(self) -> int:
        return self.routed_bytes * self.moe_layers

    def to_dict(self) -> dict:
        d = {
            "label": self.label,
            "model": self.model,
            "tp": self.tp,
            "ep": self.ep,
            "align": self.align,
            "gu_interleave": self.gu_interleave,
            "shuffle": self.shuffle,
            "experts_per_rank": self.experts,
            "hidden": self.hidden,
            "intermediate_per_partition": self.intermediate,
            "padded_intermediate": self.padded_intermediate,
            "intermediate_pad": self.intermediate_pad,
            "moe_layers": self.moe_layers,
            "tensors": {t.name: t.to_dict() for t in self.tensors},
            "per_layer": {
                "routed_before_shuffle": units(self.routed_bytes_before_shuffle),
                "routed": units(self.routed_bytes),
                "shuffle_growth": units(self.shuffle_growth_bytes),
                "unpadded": units(self.unpadded_bytes),
                "waste": units(self.waste_bytes),
                "waste_pct": self.waste_pct,
            },
            "per_model": {
                "routed_before_shuffle": units(self.routed_bytes_before_shuffle * self.moe_layers),
                "routed": units(self.model_routed_bytes),
                "waste": units(self.waste_bytes * self.moe_layers),
            },
        }
        if self.non_routed_label is not None:
            d["non_routed"] = {
                "assumption": self.non_routed_label,
                "terms": {t.name: t.to_dict() for t in self.non_routed},
                "per_layer": units(self.non_routed_bytes),
            }
            d["per_layer"]["total_with_non_routed"] = units(self.layer_bytes)
            d["per_model"]["total_with_non_routed"] = units(self.model_bytes)
        return d


def layer_footprint(
    model: str | ModelSpec,
    tp: int,
    ep: int = 1,
    align: int = DEFAULT_ALIGN,
    gu_interleave: bool = True,
    *,
    shuffle: bool = True,
    experts: int | None = None,
    hidden: int | None = None,
    non_routed: NonRoutedAssumption | None = None,
) -> LayerFootprint:
    """Exact bytes of one rank's MoE layer.

    ``experts`` / ``hidden`` override the per-rank expert count and hidden size (the measured
    checks run the real weight path at reduced sizes and compare the same configuration).
    Invalid model / tp / ep raise ValueError from ``fp4moe.model.catalogue.parallel_config``.
    """
    cfg = parallel_config(model, tp, ep)
    e = cfg.local_experts if experts is None else experts
    h = cfg.model.hidden if hidden is None else hidden
    if not isinstance(e, int) or e < 1:
        raise ValueError(f"experts override must be a positive integer, got {experts!r}")
    if not isinstance(h, int) or h < MXFP4_BLOCK or h % MXFP4_BLOCK:
        raise ValueError(f"hidden override must be a positive multiple of {MXFP4_BLOCK}, got {hidden!r}")
    i_p = cfg.intermediate_per_partition
    p = padded_intermediate(i_p, align)
    return LayerFootprint(
        model=cfg.model.name,
        tp=cfg.tp,
        ep=cfg.ep,
        align=align,
        gu_interleave=bool(gu_interleave),
        shuffle=bool(shuffle),
        experts=e,
        hidden=h,
        intermediate=i_p,
        padded_intermediate=p,
        moe_layers=cfg.model.moe_layers,
        tensors=routed_tensors(e, h, p, gu_interleave=gu_interleave),
        non_routed=non_routed.terms(cfg, h) if non_routed else (),
        non_routed_label=non_routed.label if non_routed else None,
    )


def pad_summary(model: str | ModelSpec, tp: int, ep: int = 1, align: int = DEFAULT_ALIGN) -> tuple[int, int, int]:
    """(I_p, P, P - I_p) for a row."""
    cfg = parallel_config(model, tp, ep)
    i_p = cfg.intermediate_per_partition
    p = padded_intermediate(i_p, align)
    return i_p, p, p - i_p


# ---------------------------------------------------------------- measured (real weight path)
@dataclass(frozen=True)
class MeasuredTensor:
    name: str
    shape: tuple[int, ...]
    nbytes: int


def measure_processed(processed) -> dict[str, MeasuredTensor]:
    """nbytes and shape of the four tensors a ``ProcessedMoEWeights`` holds (whatever dtype)."""
    out = {}
    for name in ROUTED_TENSORS:
        t = getattr(processed, name)
        out[name] = MeasuredTensor(name, tuple(t.shape), t.numel() * t.element_size())
    return out


def run_weight_path(
    model: str | ModelSpec,
    tp: int,
    ep: int = 1,
    align: int = DEFAULT_ALIGN,
    gu_interleave: bool = True,
    *,
    experts: int,
    hidden: int | None = None,
    shuffle: bool = True,
    seed: int = 0,
    device: str = "cpu",
):
    """Run the real ``process_fp4_moe_weights`` on seeded random uint8 raw tensors of the
    row's per-rank shapes (I_p real; ``experts`` / ``hidden`` as given). Returns the processed
    record. Byte counts do not depend on the values, but they are seeded anyway."""
    import torch

    from fp4moe.reference.weight_path import process_fp4_moe_weights

    cfg = parallel_config(model, tp, ep)
    h = cfg.model.hidden if hidden is None else hidden
    i_p = cfg.intermediate_per_partition
    g = torch.Generator(device="cpu").manual_seed(seed)

    def raw(*shape, high=256):
        # a seeded random 64 KiB tile repeated: byte counts do not depend on the values, and
        # drawing tens of MB of random bytes would cost more than the weight path itself
        n = math.prod(shape)
        tile = torch.randint(0, high, (min(n, 1 << 16),), dtype=torch.uint8, generator=g)
        return tile.repeat(-(-n // tile.numel()))[:n].view(shape).to(device)

    # e8m0 0xFF is NaN, which the weight path rejects: scales draw from [0x00, 0xFE]
    return process_fp4_moe_weights(
        raw(experts, 2 * i_p, h // 2),
        raw(experts, 2 * i_p, h // 32, high=255),
        raw(experts, h, i_p // 2),
        raw(experts, h, i_p // 32, high=255),
        align=align,
        gu_interleave=gu_interleave,
        shuffle=shuffle,
    )


def extrapolate_experts(
    measured: dict[str, MeasuredTensor], experts_measured: int, experts_full: int, *, gu_interleave: bool, shuffle: bool = True
) -> dict[str, int]:
    """Bytes per tensor at ``experts_full`` from a measurement at ``experts_measured``.

    Weights are linear in E. A shuffled 2-D scale [rows, cols] keeps its measured cols; its
    rows are E*N (N = per-expert rows, read from the measured weight of the same GEMM),
    rounded up to 256 by the non-interleaved shuffle, which is not linear. Raises if the
    measurement does not fit that rule (then the model must be revisited, not the numbers).
    """
    out = {}
    for w, s in (("w13", "w13_scale"), ("w2", "w2_scale")):
        wt, st = measured[w], measured[s]
        if wt.nbytes % experts_measured:
            raise ValueError(f"{w}: {wt.nbytes} bytes not divisible by {experts_measured} experts")
        out[w] = wt.nbytes // experts_measured * experts_full
        n = wt.shape[-2]  # per-expert rows of the weight (2P or H); the shuffle keeps the shape
        if len(st.shape) == 2 and shuffle:
            rows, cols = st.shape
            expected_rows = experts_measured * n if gu_interleave else round_up(experts_measured * n, SCALE_ROW_ALIGN)
            if rows != expected_rows:
                raise ValueError(
                    f"{s}: measured rows {rows} at E={experts_measured}, N={n} do not follow the shuffle rule "
                    f"(expected {expected_rows}, gu_interleave={gu_interleave})"
                )
            full_rows = experts_full * n if gu_interleave else round_up(experts_full * n, SCALE_ROW_ALIGN)
            out[s] = full_rows * cols
        else:  # unshuffled [E, N, K/32]: linear
            if st.nbytes % experts_measured:
                raise ValueError(f"{s}: {st.nbytes} bytes not divisible by {experts_measured} experts")
            out[s] = st.nbytes // experts_measured * experts_full
    return out


def measured_row_bytes(
    cfg: ParallelConfig, align: int = DEFAULT_ALIGN, gu_interleave: bool = True, *, experts_measured: int = 1, seed: int = 0
) -> int:
    """Routed bytes per rank per layer at full size, measured through the real weight path at
    ``experts_measured`` experts (full hidden, real I_p) and scaled to ``cfg.local_experts``."""
    processed = run_weight_path(
        cfg.model, cfg.tp, cfg.ep, align, gu_interleave, experts=experts_measured, seed=seed
    )
    full = extrapolate_experts(
        measure_processed(processed), experts_measured, cfg.local_experts, gu_interleave=gu_interleave
    )
    return sum(full.values())


# ---------------------------------------------------------------------------------- budget
@dataclass(frozen=True)
class BudgetEntry:
    model: str
    tp: int
    ep: int
    align: int
    gu_interleave: bool
    role: str  # "budget" (gated) or "reference" (pre-#31450, informative)
    max_bytes_per_layer: int
    max_bytes_per_model: int

    @property
    def key(self) -> tuple:
        return (self.model, self.tp, self.ep, self.align, self.gu_interleave)

    @property
    def label(self) -> str:
        gu = "gu" if self.gu_interleave else "nogu"
        return f"{self.model}-tp{self.tp}-ep{self.ep}-align{self.align}-{gu}"


_COUNT = {"type": "integer", "minimum": 1, "maximum": 65536}
_BYTES = {"type": "integer", "minimum": 1, "maximum": 2**63 - 1}
#: JSON Schema of ``fp4moe/data/footprint_budget.json`` (validated before any entry is used).
BUDGET_SCHEMA = {
    "type": "object",
    "required": ["entries"],
    "additionalProperties": False,
    "properties": {
        "_doc": {"type": "string"},
        "units": {"const": "bytes"},
        "entries": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["model", "tp", "ep", "align", "gu_interleave", "role", "max_bytes_per_layer",
                             "max_bytes_per_model"],
                "properties": {
                    "model": {"type": "string", "minLength": 1},
                    "tp": _COUNT,
                    "ep": _COUNT,
                    "align": {"type": "integer", "minimum": 32, "maximum": 65536, "multipleOf": 32},
                    "gu_interleave": {"type": "boolean"},
                    "role": {"enum": ["budget", "reference"]},
                    "max_bytes_per_layer": _BYTES,
                    "max_bytes_per_model": _BYTES,
                },
            },
        },
    },
}


def load_budget(path: str | Path = BUDGET_FILE) -> list[BudgetEntry]:
    """Read ``fp4moe/data/footprint_budget.json``, validated by :data:`BUDGET_SCHEMA` (types,
    ranges; ``"false"`` is not a boolean, ``8.9`` not an integer, ``1e400`` not a number) and
    with each (model, tp, ep, align, gu_interleave) at most once: a later duplicate never
    overrides an earlier entry. Errors name the file and the entry."""
    from fp4moe.infra.strict_json import load_validated, unique_by

    path = Path(path)
    what = "footprint budget file"
    raw = load_validated(path, BUDGET_SCHEMA, what)
    unique_by(raw["entries"], ("model", "tp", "ep", "align", "gu_interleave"), path, what)
    return [BudgetEntry(**{**row, **{k: int(row[k]) for k in ("tp", "ep", "align", "max_bytes_per_layer",
                                                             "max_bytes_per_model")}})
            for row in raw["entries"]]


def budget_violation(entry: BudgetEntry, bytes_per_layer: int, moe_layers: int) -> str | None:
    """None when within budget; otherwise a message naming the row and the growth (bytes, %)."""
    per_model = bytes_per_layer * moe_layers
    msgs = []
    if bytes_per_layer > entry.max_bytes_per_layer:
        grow = bytes_per_layer - entry.max_bytes_per_layer
        msgs.append(
            f"per layer {bytes_per_layer:,} B > budget {entry.max_bytes_per_layer:,} B "
            f"(+{grow:,} B, +{100.0 * grow / entry.max_bytes_per_layer:.3f}%)"
        )
    if per_model > entry.max_bytes_per_model:
        grow = per_model - entry.max_bytes_per_model
        msgs.append(
            f"per model {per_model:,} B > budget {entry.max_bytes_per_model:,} B "
            f"(+{grow:,} B, +{100.0 * grow / entry.max_bytes_per_model:.3f}%)"
        )
    return f"{entry.label}: " + "; ".join(msgs) if msgs else None


def budget_entries_for_today() -> list[dict]:
    """The fixture's content computed from this model (used once to write it; the test
    ``tests/gates/footprint/test_budget.py`` checks the fixture against the REAL weight path)."""
    rows = []
    for cfg in catalogue_rows():
        for align, role in ((DEFAULT_ALIGN, "budget"), (PRE_31450_ALIGN, "reference")):
            fp = layer_footprint(cfg.model, cfg.tp, cfg.ep, align, True)
            rows.append(
                {
                    "model": cfg.model.name,
                    "tp": cfg.tp,
                    "ep": cfg.ep,
                    "align": align,
                    "gu_interleave": True,
                    "role": role,
                    "max_bytes_per_layer": fp.routed_bytes,
                    "max_bytes_per_model": fp.model_routed_bytes,
                }
            )
    return rows

