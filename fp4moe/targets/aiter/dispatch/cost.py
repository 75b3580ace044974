"""The cost of each stage launch, on paper, from the arguments the dispatch recorded (parent only).

On the DeepSeek-V4 path (CK, CK-tile, FlyDSL, Opus) the kernels are stand-ins, so no poison
shows the work a launch does: it is derived from what the launch is told. Per stage launch:
the N and K extents it computes (its weight's extents less the pad arguments it takes, as
``compute.py`` models them), the block and split it uses, and the bytes of weights (MXFP4: 4 bits
an element) and e8m0 scales (1 byte per 32 K elements) it reads; beside them the minimum, the
unpadded problem of the row (stage 1: N = 2 x intermediate (gate and up), K = hidden; stage 2:
N = hidden, K = intermediate), and R = bytes / minimum. SGLang PR #27858 is the case: weights
padded 384 -> 512, the pad never told, the same output and an 18-19% slower MoE.

Index: :data:`LAUNCHES` (op name -> :class:`Launch`: its weight and scale arguments, the pad
argument on N and on K with how many times it counts), :func:`stage_cost` (one launch),
:func:`row_cost` (a row's launches, the total and R), :func:`cost_text` (the table's column).
Every number is an int except R (a ratio rounded to 4 places), so the same records give
bit-identical facts (an A/A run).
"""

from __future__ import annotations

from dataclasses import dataclass

#: bits a stored weight element holds, per recorded dtype (fp4x2 packs two 4-bit elements a byte)
ELEMENT_BITS = {"torch.float4_e2m1fn_x2": 4, "torch.float8_e4m3fn": 8, "torch.bfloat16": 16}
#: elements per stored element (fp4x2's last dimension counts pairs)
PACKED = {"torch.float4_e2m1fn_x2": 2}
#: elements sharing one e8m0 scale byte along K (MX block)
MX_BLOCK = 32


@dataclass(frozen=True)
class Launch:
    weight: str  # the argument holding the stage's weights [E, N, K(packed)]
    scale: str  # its e8m0 scales
    n_pad: tuple[str, int] | None  # (argument, times it counts) the N extent loses; None: the op takes none
    k_pad: tuple[str, int] | None


#: by op name (table.STAGE_OPS's): stage 1's inter pad counts twice on N (gate and up halves)
LAUNCHES = {
    "ck_moe_stage1": Launch("w1", "w1_scale", None, None),
    "ck_moe_stage2": Launch("w2", "w2_scale", None, None),
    "moe_cktile2stages_gemm1_ck": Launch("WQ", "w_scale", ("n_padded_zeros", 1), ("k_padded_zeros", 1)),
    "moe_cktile2stages_gemm2_ck": Launch("WQ", "w_scale", ("n_padded_zeros", 1), ("k_padded_zeros", 1)),
    "flydsl_moe_stage1": Launch("w1", "w1_scale", ("inter_dim_pad", 2), ("model_dim_pad", 1)),
    "flydsl_moe_stage2": Launch("w2", "w2_scale", ("model_dim_pad", 1), ("inter_dim_pad", 1)),
    "_opus_moe_stage1_a8w4_fwd_raw": Launch("w1", "w1_scale", ("inter_dim_pad", 2), None),
    "_opus_moe_stage2_a8w4_decode_fwd_raw": Launch("w2", "w2_scale", None, ("inter_dim_pad", 1)),
    "_opus_moe_stage2_a8w4_fwd_raw": Launch("w2", "w2_scale", None, ("inter_dim_pad", 1)),
}
#: the block and split arguments a launch may carry, by the name the facts give them
BLOCK_ARGS = {"block_m": ("block_m", "tile_m"), "tile_n": ("tile_n",), "tile_k": ("tile_k",),
              "split_k": ("split_k", "k_batch", "splitk")}


class CostUnknown(ValueError):
    """The launch's arguments do not give its extents (no weight tensor, an unmodelled dtype)."""


def _pad(args: dict, spec: tuple[str, int] | None) -> int:
    if spec is None:
        return 0
    v = args.get(spec[0])
    if v is None:
        return 0
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise CostUnknown(f"{spec[0]}={v!r} is not a pad")
    return v * spec[1]


def minimum(stage: int, row: dict) -> tuple[int, int]:
    """(N, K) of the unpadded problem of ``row`` at ``stage``."""
    inter, hidden = row["inter"], row["hidden"] - row.get("hidden_pad", 0)
    return (2 * inter, hidden) if stage == 1 else (hidden, inter)


def _bytes(n: int, k: int, bits: int, scaled: bool) -> tuple[int, int]:
    return n * k * bits // 8, (n * -(-k // MX_BLOCK) if scaled else 0)


def stage_cost(op: str, stage: int, args: dict, row: dict) -> dict:
    """One launch's extents, block/split and bytes per expert, its unpadded minimum and R;
    :class:`CostUnknown` when the recorded arguments do not give them."""
    spec = LAUNCHES.get(op)
    if spec is None:
        raise CostUnknown(f"{op}: no launch shape modelled (cost.LAUNCHES)")
    w = args.get(spec.weight)
    if not isinstance(w, dict) or len(w.get("tensor", ())) != 3 or w.get("dtype") not in ELEMENT_BITS:
        raise CostUnknown(f"{op}.{spec.weight}={w!r}: not a modelled [E, N, K] weight")
    bits = ELEMENT_BITS[w["dtype"]]
    _, n_w, k_stored = w["tensor"]
    n, k = n_w - _pad(args, spec.n_pad), k_stored * PACKED.get(w["dtype"], 1) - _pad(args, spec.k_pad)
    scaled = isinstance(args.get(spec.scale), dict)
    n_min, k_min = minimum(stage, row)
    wb, sb = _bytes(n, k, bits, scaled)
    wmin, smin = _bytes(n_min, k_min, bits, scaled)
    blocks = {key: next((args[a] for a in names if isinstance(args.get(a), int)), None) for key, names in BLOCK_ARGS.items()}
    told = {a: args.get(a) for a in (spec.n_pad[0] if spec.n_pad else None, spec.k_pad[0] if spec.k_pad else None) if a}
    return {"stage": stage, "op": op, "n": n, "k": k, "n_min": n_min, "k_min": k_min, **blocks,
            "pads_told": told or None, "weight_bytes": wb, "scale_bytes": sb, "bytes": wb + sb,
            "min_bytes": wmin + smin, "ratio": round((wb + sb) / (wmin + smin), 4)}


def experts_read(row: dict) -> int:
    """Experts a launch reads at most: every local expert, or one per routed (token, slot)."""
    return min(row["experts"], row["tokens"] * (row.get("routed_topk") or row["topk"]))


def row_cost(row: dict, launches: list[tuple[str, int, dict]]) -> dict:
    """``{"stages": [...], "experts_read", "bytes", "min_bytes", "ratio"}`` over ``launches``
    ((op, stage, recorded args)), bytes for the experts read; ``{"error": ...}`` when one
    launch's cost cannot be derived."""
    try:
        stages = [stage_cost(op, st, args, row) for op, st, args in launches]
    except CostUnknown as e:
        return {"error": str(e)}
    e = experts_read(row)
    total, least = sum(s["bytes"] for s in stages) * e, sum(s["min_bytes"] for s in stages) * e
    return {"stages": stages, "experts_read": e, "bytes": total, "min_bytes": least,
            "ratio": round(total / least, 4) if least else None}


def _mb(b: int) -> str:
    return f"{b / 1e6:.1f} MB"


def cost_text(c: dict | None) -> str:
    """The table's column: total bytes read, R, and per stage N x K (R)."""
    if not c:
        return "-"
    if c.get("error"):
        return f"unknown ({c['error']})"
    per = " / ".join(f"s{s['stage']} {s['n']}x{s['k']} x{s['ratio']:g}" for s in c["stages"])
    return f"{_mb(c['bytes'])} x{c['ratio']:g} ({per})"
