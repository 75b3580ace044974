"""Numerics through the executed dispatch, judged in the parent (``aiter-check`` dispatch group).

Index:

- :data:`CASES` -- one seeded small case per path the dispatch table reaches (CK 2-stage, CK-tile
  split-k, heuristic FlyDSL, tuned FlyDSL with its fused MXFP8 output, tuned Opus, tuned FlyDSL
  fp8 + Opus and Opus + Opus with the MXFP8 route output and route reduce, the large-token split quant), a16w4
  and a8w4, padded and not; each names the stage ops it must reach and the ``fp4moe.reference``
  variant its output must equal bitwise.
- :func:`switch_tokens` -- the token counts that select each path, read from the tree (the
  ksplit rule of ``get_ksplit``, the split-quant cut of ``fused_dynamic_mx_quant_moe_sort``).
- :func:`small_tuned_rows` -- the tree's own tuned rows (kernels, block_m, ksplit) whose shape keys
  are moved to the small layer's: one extra CSV that the child adds to aiter's own
  ``AITER_CONFIG_FMOE`` merge (the Opus and tuned FlyDSL kernels are keyed on rank shapes of
  DeepSeek-V4, far too large for a CPU).
- :func:`run_numerics` -- builds the inputs (pad bytes poisoned: weights 0xA5, e8m0 scales 0xFF),
  runs the child :data:`CHILD_MODULE` (it only computes, every fresh allocation poisoned),
  validates what comes back and returns the gate rows ``dispatch numerics <case>: <check>``.

The checks (:data:`CHECKS`): the stage ops reached are the case's path; the pad reaches every
stage that takes one; the output equals the reference bitwise (every computing stand-in rounds
where the path rounds, and the reference has the matching option: see
:mod:`fp4moe.targets.aiter.dispatch.compute`). A row's detail states ``N/M values differ, K/M NaN``
(what the known-defects signatures read).
"""

from __future__ import annotations

import csv
import enum
import io
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from fp4moe.infra.errors import GateCannotRun
from fp4moe.infra.files import read_text_bounded
from fp4moe.mx import e8m0
from fp4moe.reference import layout, moe
from fp4moe.reference.expert_weights import ShuffledExpertWeights
from fp4moe.reference.inputs import make_raw_layer, make_tokens
from fp4moe.targets.aiter.dispatch.loader import TUNED_CSV_MAX_BYTES
from fp4moe.targets.aiter.dispatch.records import NUMERICS_CHILD as CHILD_MODULE
from fp4moe.targets.aiter.dispatch.records import (
    NUMERICS_OUTPUT_PREFIX as OUTPUT_PREFIX,
)
from fp4moe.targets.aiter.dispatch.records import NUMERICS_SPEC as SPEC_INPUT
from fp4moe.targets.aiter.results import Result, TreeLacks

QUANT_PY = "aiter/ops/quant.py"
FUSED_MOE = "aiter/fused_moe.py"
PASS, FAIL, NA, INFO = Result.PASS, Result.FAIL, Result.NA, Result.INFO  # the one set of row words

#: the small layer: 4 experts, hidden 512, intermediate 384 padded to 512 (pad 128) or 512, top-k 2
E, H, P, I_PADDED, TOPK = 4, 512, 512, 384, 2
WEIGHT_PAD_BYTE = 0xA5
LAYER_SEED, PLAIN_SEED, TOKEN_SEED = 26, 27, 7
#: a clamp that binds on the seeded layer (gate/up values ~1e-1); DeepSeek-V4's 10 would not bind here
BINDING_SWIGLU_LIMIT = 0.02
#: the decode batch of the CK and tuned cases: a power of two (get_padded_M keeps it), above the
#: ksplit switch of this layer and below the bf16/fp8 bound a bf16 DeepSeek-V4 checkpoint runs under
DECODE_TOKENS = 16
#: the bf16/fp8 bound the a16w4 cases are judged under: aiter's default, the one SGLang's mode rule
#: pins (fp4moe.targets.sglang.modes.AITER_DEFAULT_BOUND); the a16w4 cases run with no bound set
A16W4_BOUND = 256
BOUND_ENV = "AITER_BF16_FP8_MOE_BOUND"
#: the tuned cases' token keys (distinct from every other case's padded token count)
TUNED_TOKENS = {"opus": 32, "flydsl_fp8": 64, "flydsl_fp8+opus": 128, "flydsl_fp8+cktile": 256, "opus+flydsl": 512,
                "flydsl_fp8+opus_route": 8, "opus+opus_route": 4}


class Layer(enum.Enum):
    PADDED = "padded"  # I 384 in P 512, shuffled, interleaved gate/up
    UNPADDED = "unpadded"  # I 512, shuffled, interleaved
    PLAIN = "plain"  # I 512, row-major (is_shuffled False)


class Tuned(enum.Enum):
    """The stage pairs DeepSeek-V4's tuned rows select (dsv4_fp8fp4_tuned_fmoe.csv in e4048607)."""

    OPUS = "opus"
    FLYDSL_FP8 = "flydsl_fp8"
    FLYDSL_OPUS = "flydsl_fp8+opus"
    FLYDSL_CKTILE = "flydsl_fp8+cktile"
    OPUS_FLYDSL = "opus+flydsl"
    FLYDSL_OPUS_ROUTE = "flydsl_fp8+opus_route"  # Opus stage 2 with the MXFP8 route output + route reduce
    OPUS_ROUTE = "opus+opus_route"


def _fly_fp8(r: dict) -> bool:
    k = r.get("kernelName1", "")
    return k.startswith("flydsl_moe1_afp8") and k.endswith("_fp8")


#: Opus stage-2 kernels whose output mode is the MXFP8 route output (``..._wfp4_fp8_..._rbn<block_n>``:
#: csrc/opus_moe/opus_moe_common.py:682-723, out_mode OPUS_A8W4_OUT_MODE_FP8, a route_reduce)
OPUS_ROUTE_FP8_PREFIX = "opus_moe2_afp8_wfp4_fp8_"
SILU = "ActivationType.Silu"


def _opus_route_fp8(r: dict) -> bool:
    k = r.get("kernelName2", "")
    return k.startswith(OPUS_ROUTE_FP8_PREFIX) and "_rbn" in k and r.get("act_type") == SILU


#: which tree row each tuned case borrows its kernels from (the first match in merge order)
TUNED_PICK: dict[Tuned, Callable[[dict], bool]] = {
    Tuned.OPUS: lambda r: r.get("kernelName1", "").startswith("opus_moe1_")
    and r.get("kernelName2", "").startswith("opus_moe2_") and "_rbn" not in r.get("kernelName2", ""),
    Tuned.FLYDSL_FP8: lambda r: _fly_fp8(r) and r.get("kernelName2", "").startswith("flydsl_moe2_"),
    Tuned.FLYDSL_OPUS: lambda r: _fly_fp8(r) and r.get("kernelName2", "").startswith("opus_moe2_")
    and "_rbn" not in r.get("kernelName2", ""),
    Tuned.FLYDSL_CKTILE: lambda r: _fly_fp8(r) and r.get("kernelName2", "").startswith("cktile_"),
    Tuned.OPUS_FLYDSL: lambda r: r.get("kernelName1", "").startswith("opus_moe1_")
    and r.get("kernelName2", "").startswith("flydsl_moe2_"),
    Tuned.FLYDSL_OPUS_ROUTE: lambda r: _fly_fp8(r) and _opus_route_fp8(r),
    Tuned.OPUS_ROUTE: lambda r: r.get("kernelName1", "").startswith("opus_moe1_") and _opus_route_fp8(r),
}


@dataclass(frozen=True)
class Case:
    id: str
    path: tuple[str, str]  # the stage-1 and stage-2 ops the case must reach
    act: str  # a16w4 | a8w4: the reference's mode
    layer: Layer
    tokens: str  # a key of switch_tokens()
    swiglu_limit: float | None = None
    tuned: Tuned | None = None
    #: the reference's rounding options for this path (see fp4moe.targets.aiter.dispatch.compute)
    ref: dict = field(default_factory=dict)
    #: further references the output must equal, by check name (e.g. the bf16 inter-stage CK lacks)
    also: dict = field(default_factory=dict)
    #: a case whose clamp is expected: the detail says whether the output equals the unclamped reference
    clamp_probe: bool = False
    #: further ops the path must reach after its stage 2 (e.g. the route reduce)
    then: tuple[str, ...] = ()

    @property
    def pad(self) -> int:
        return P - I_PADDED if self.layer is Layer.PADDED else 0

    @property
    def env(self) -> dict:
        """a8w4: fp8 activations from M = 0; a16w4: no bound set (the tree's default decides)."""
        return {BOUND_ENV: "0"} if self.act == "a8w4" else {}


MX4 = {"stage2_act": "mxfp4"}
ROUTE_FP8 = {"slot_quant": "mxfp8_route"}
ROUTE_REDUCE = ("_opus_moe_stage2_reduce_token_slot_route_output_fwd_raw",)
#: the route-reduce cases are also compared with the reference's default float32 slots (registry
#: entry opus-route-out-mxfp8-slots when they differ)
FLOAT_SLOTS = {"== reference, float32 slots (bitwise)": {}}
BF16_GU = {"gate_up_dtype": "bfloat16"}
CK, CKT = ("ck_moe_stage1", "ck_moe_stage2"), ("moe_cktile2stages_gemm1_ck", "moe_cktile2stages_gemm2_ck")
FLY = ("flydsl_moe_stage1", "flydsl_moe_stage2")
OPUS = ("_opus_moe_stage1_a8w4_fwd_raw", "_opus_moe_stage2_a8w4")

CASES = (
    Case("CK 2-stage a16w4 unpadded", CK, "a16w4", Layer.UNPADDED, "decode", ref=MX4,
         also={"== reference, bf16 inter-stage (bitwise)": {}}),
    Case("CK 2-stage a16w4 padded", CK, "a16w4", Layer.PADDED, "decode", ref=MX4),
    Case("CK 2-stage a16w4 clamp", CK, "a16w4", Layer.UNPADDED, "decode", swiglu_limit=BINDING_SWIGLU_LIMIT, ref=MX4,
         clamp_probe=True),
    Case("CK 2-stage a8w4 plain weights", CK, "a8w4", Layer.PLAIN, "decode"),
    Case("CK-tile split-k a16w4 padded", CKT, "a16w4", Layer.PADDED, "splitk", ref=BF16_GU),
    Case("CK-tile split-k a16w4 unpadded", CKT, "a16w4", Layer.UNPADDED, "splitk", ref=BF16_GU),
    Case("CK-tile split-k a16w4 clamp", CKT, "a16w4", Layer.UNPADDED, "splitk", swiglu_limit=BINDING_SWIGLU_LIMIT,
         ref=BF16_GU, clamp_probe=True),
    Case("FlyDSL a8w4 padded clamp", FLY, "a8w4", Layer.PADDED, "decode", swiglu_limit=BINDING_SWIGLU_LIMIT),
    Case("FlyDSL a8w4 unpadded", FLY, "a8w4", Layer.UNPADDED, "decode"),
    Case("FlyDSL split quant a8w4 padded", FLY, "a8w4", Layer.PADDED, "split_quant"),
    Case("tuned FlyDSL fp8 a8w4 padded", FLY, "a8w4", Layer.PADDED, "flydsl_fp8", tuned=Tuned.FLYDSL_FP8),
    Case("tuned Opus a8w4 padded clamp", OPUS, "a8w4", Layer.PADDED, "opus", swiglu_limit=BINDING_SWIGLU_LIMIT,
         tuned=Tuned.OPUS),
    Case("tuned Opus a8w4 unpadded", OPUS, "a8w4", Layer.UNPADDED, "opus", tuned=Tuned.OPUS),
    Case("tuned FlyDSL fp8 + Opus a8w4 padded", (FLY[0], OPUS[1]), "a8w4", Layer.PADDED, "flydsl_fp8+opus",
         tuned=Tuned.FLYDSL_OPUS),
    Case("tuned FlyDSL fp8 + CK-tile a8w4 padded", (FLY[0], CKT[1]), "a8w4", Layer.PADDED, "flydsl_fp8+cktile",
         tuned=Tuned.FLYDSL_CKTILE),
    Case("tuned Opus + FlyDSL a8w4 padded", (OPUS[0], FLY[1]), "a8w4", Layer.PADDED, "opus+flydsl",
         tuned=Tuned.OPUS_FLYDSL),
    Case("tuned FlyDSL fp8 + Opus route-reduce a8w4 padded", (FLY[0], OPUS[1]), "a8w4", Layer.PADDED,
         "flydsl_fp8+opus_route", tuned=Tuned.FLYDSL_OPUS_ROUTE, ref=ROUTE_FP8, then=ROUTE_REDUCE, also=FLOAT_SLOTS),
    Case("tuned FlyDSL fp8 + Opus route-reduce a8w4 unpadded", (FLY[0], OPUS[1]), "a8w4", Layer.UNPADDED,
         "flydsl_fp8+opus_route", tuned=Tuned.FLYDSL_OPUS_ROUTE, ref=ROUTE_FP8, then=ROUTE_REDUCE, also=FLOAT_SLOTS),
    Case("tuned Opus + Opus route-reduce a8w4 padded", OPUS, "a8w4", Layer.PADDED, "opus+opus_route",
         tuned=Tuned.OPUS_ROUTE, ref=ROUTE_FP8, then=ROUTE_REDUCE, also=FLOAT_SLOTS),
)


# ----------------------------------------------------------------------------------------- the tree's switches
def switch_tokens(tree: Path) -> dict[str, int]:
    """Token counts per path for the small layer, from the tree's own rules."""
    text = read_text_bounded(tree / FUSED_MOE)
    if not re.search(r"if token \* topk > expert:\s*\n\s*return 0", text):
        raise TreeLacks(f"{tree / FUSED_MOE}: get_ksplit's rule (token * topk > expert -> no split) not found; "
                            "the dispatch numerics cannot place the CK-tile split-k case")
    q = read_text_bounded(tree / QUANT_PY)
    m = re.search(r"(\d+)\s*\*\s*(\d+)\s*/\s*topk,\s*#\s*stage1", q)
    if not m:
        raise TreeLacks(f"{tree / QUANT_PY}: the stage-1 split-quant cut (N * M / topk, # stage1) not found")
    cut = int(m.group(1)) * int(m.group(2)) // TOPK
    return {"splitk": 1, "decode": DECODE_TOKENS, "split_quant": cut + 1, **{t.value: n for t, n in
                                                                             ((Tuned(k), v) for k, v in TUNED_TOKENS.items())}}


def small_tuned_rows(sources: list[Path], tokens: dict[str, int]) -> tuple[list[str], list[dict], dict]:
    """(CSV header, rows, {tuned value: "file:line" of the row borrowed}) for the small layer."""
    header: list[str] = []
    rows, where = [], {}
    for t, pick in TUNED_PICK.items():
        for src in sources:
            rd = csv.DictReader(io.StringIO(read_text_bounded(src, TUNED_CSV_MAX_BYTES), newline=""))
            hit = next(((n, r) for n, r in enumerate(rd, start=2) if pick(r)), None)
            if hit:
                header = header or list(rd.fieldnames or [])
                break
        else:
            continue
        n, r = hit
        rows.append({**r, "token": tokens[t.value], "model_dim": H, "inter_dim": P, "expert": E, "topk": TOPK})
        where[t.value] = f"{src.name}:{n} ({r['kernelName1']} | {r['kernelName2']})"
    return header, rows, where


# ----------------------------------------------------------------------------------------- inputs
def _layer(kind: Layer) -> dict:
    if kind is Layer.PLAIN:
        raw = make_raw_layer(experts=E, hidden=H, intermediate=P, seed=PLAIN_SEED)
        return {"w1": raw.w13, "w2": raw.w2, "w1_scale": raw.w13_scale.reshape(E * 2 * P, -1),
                "w2_scale": raw.w2_scale.reshape(E * H, -1)}
    i = I_PADDED if kind is Layer.PADDED else P
    raw = make_raw_layer(experts=E, hidden=H, intermediate=i, seed=LAYER_SEED)
    w13 = torch.full((E, 2 * P, H // 2), WEIGHT_PAD_BYTE, dtype=torch.uint8)
    s13 = torch.full((E, 2 * P, H // 32), e8m0.E8M0_NAN, dtype=torch.uint8)
    w13[:, :i], w13[:, P:P + i] = raw.w13[:, :i], raw.w13[:, i:]
    s13[:, :i], s13[:, P:P + i] = raw.w13_scale[:, :i], raw.w13_scale[:, i:]
    w2 = torch.full((E, H, P // 2), WEIGHT_PAD_BYTE, dtype=torch.uint8)
    s2 = torch.full((E, H, P // 32), e8m0.E8M0_NAN, dtype=torch.uint8)
    w2[..., : i // 2], s2[..., : i // 32] = raw.w2, raw.w2_scale
    return {"w1": layout.shuffle_weight(w13, is_guinterleave=True, gate_up=True),
            "w2": layout.shuffle_weight(w2, is_guinterleave=True, gate_up=False),
            "w1_scale": layout.shuffle_scale(s13.reshape(E * 2 * P, -1), E, True, True),
            "w2_scale": layout.shuffle_scale(s2.reshape(E * H, -1), E, True, False)}


def reference(case: Case, L: dict, x, w, ids, **over) -> torch.Tensor:
    if case.layer is Layer.PLAIN:
        ew = moe.ExpertWeights(L["w1"], L["w1_scale"].view(E, -1, H // 32), L["w2"], L["w2_scale"].view(E, H, -1))
    else:
        ew = ShuffledExpertWeights(L["w1"], L["w2"], L["w1_scale"], L["w2_scale"], "interleave")
    kw = {"act_mode": case.act, "swiglu_limit": case.swiglu_limit, **case.ref, **over}
    if isinstance(kw.get("gate_up_dtype"), str):
        kw["gate_up_dtype"] = getattr(torch, kw["gate_up_dtype"])
    return moe.fused_moe_reference(x, ew, w, ids, intermediate_pad=case.pad, **kw)


# ----------------------------------------------------------------------------------------- checks
def counts(got: torch.Tensor, want: torch.Tensor) -> tuple[int, str]:
    """(values that differ, ``N/M values differ, K/M NaN``, with the first differing value where one does)."""
    n = want.numel()
    diff = ~(got == want)
    bad = int(diff.sum())
    first = ""
    if bad and got.shape == want.shape:
        at = tuple(int(i) for i in diff.nonzero()[0])
        first = f"; first at {list(at)}: aiter {float(got[at]):.6g}, reference {float(want[at]):.6g}"
    return bad, f"{bad}/{n} values differ, {int(torch.isnan(got.float()).sum())}/{n} NaN{first}"


def path_reached(case: Case, seen: dict, _ref) -> tuple[str, str]:
    stages = [o["op"] for o in seen["ops"] if "stage" in o["op"] or "gemm" in o["op"]]
    s1 = stages[0] if stages else None
    i2 = next((i for i, s in enumerate(stages) if i and s.startswith(case.path[1])), None)
    s2 = None if i2 is None else stages[i2]
    later = [o for o in case.then if i2 is None or o not in stages[i2 + 1:]]
    if s1 != case.path[0] or s2 is None or later:
        dt = next((o["args"].get("a_dtype") for o in seen["ops"] if o["op"] == s1), None)
        return FAIL, (f"{case.act} at {seen['tokens']} tokens should reach {' + '.join(case.path + case.then)}; reached "
                      f"{' + '.join(stages) or 'no stage'}" + (f" (stage-1 input {dt})" if dt else ""))
    return PASS, f"{' + '.join(stages)} at {seen['tokens']} tokens"


#: the pad arguments each stage op takes, and what a pad of ``p`` must read there
PAD_ARGS = {
    "flydsl_moe_stage1": (("inter_dim_pad", 1),), "flydsl_moe_stage2": (("inter_dim_pad", 1),),
    "_opus_moe_stage1_a8w4_fwd_raw": (("inter_dim_pad", 1),), "_opus_moe_stage2_a8w4": (("inter_dim_pad", 1),),
    "moe_cktile2stages_gemm1_ck": (("n_padded_zeros", 2),), "moe_cktile2stages_gemm2_ck": (("k_padded_zeros", 1),),
}


def _pad_args(op: str):
    return next((v for k, v in PAD_ARGS.items() if op.startswith(k)), None)


def pad_told(case: Case, seen: dict, _ref) -> tuple[str, str]:
    told, bad = {}, {}
    for o in seen["ops"]:
        for arg, factor in _pad_args(o["op"]) or ():
            v = o["args"].get(arg)
            told[f"{o['op']}.{arg}"] = v
            if v != factor * case.pad:
                bad[f"{o['op']}.{arg}"] = f"{v} (want {factor * case.pad})"
    if not told:
        return INFO, f"the stage ops reached take no pad argument (pad {case.pad} not told)"
    if bad:
        return FAIL, f"pad {case.pad} given to fused_moe; " + ", ".join(f"{k}={v}" for k, v in bad.items())
    return PASS, f"pad {case.pad}: " + ", ".join(f"{k}={v}" for k, v in told.items())


def equals_reference(case: Case, seen: dict, ref) -> tuple[str, str]:
    bad, det = counts(seen["out"], ref["main"])
    extra = ""
    if case.clamp_probe:
        same = counts(seen["out"], ref["unclamped"])[0] == 0
        extra = f"; equals the unclamped reference: {'yes' if same else 'no'}"
    return (FAIL if bad else PASS), f"{det} (reference {ref['what']}){extra}"


#: (check name, function); the names are the registry's (fp4moe.targets.aiter.kernels.defects.NUMERICS_CHECK_NAMES)
CHECKS: tuple[tuple[str, Callable], ...] = (
    ("stage ops are the path's", path_reached),
    ("pad told to the stages", pad_told),
    ("== reference (bitwise)", equals_reference),
)


def _ref_what(case: Case) -> str:
    opts = {**case.ref, **({"swiglu_limit": case.swiglu_limit} if case.swiglu_limit else {})}
    return f"{case.act}" + (" " + ", ".join(f"{k}={v}" for k, v in opts.items()) if opts else "")


def judge_case(case: Case, seen: dict | None, refs: dict) -> list[dict]:
    name = f"dispatch numerics {case.id}"
    if seen is None or seen.get("error"):
        why = (seen or {}).get("error") or "not run"
        return [{"check": f"{name}: {c}", "result": NA, "detail": why} for c, _ in CHECKS]
    out = [{"check": f"{name}: {c}", "result": r, "detail": d} for c, fn in CHECKS for r, d in [fn(case, seen, refs)]]
    for check, want in refs["also"].items():
        bad, det = counts(seen["out"], want)
        out.append({"check": f"{name}: {check}", "result": FAIL if bad else PASS, "detail": det})
    return out


# ----------------------------------------------------------------------------------------- the run
def _tensors_for(case: Case, layers: dict, tokens: dict) -> tuple[dict, tuple]:
    x, w, ids = make_tokens(tokens=tokens[case.tokens], hidden=H, experts=E, top_k=TOPK, seed=TOKEN_SEED)
    L = layers[case.layer]
    return {"x": x, "topk_weights": w, "topk_ids": ids}, (L, x, w, ids)


def _refs(case: Case, L, x, w, ids) -> dict:
    r = {"main": reference(case, L, x, w, ids), "what": _ref_what(case), "also": {}}
    if case.clamp_probe:
        r["unclamped"] = reference(case, L, x, w, ids, swiglu_limit=None)
    for check, over in case.also.items():
        r["also"][check] = reference(case, L, x, w, ids, **{k: None for k in case.ref}, **over)
    return r


def _validate(case: Case, got: dict | None, tokens: int) -> dict | None:
    if got is None:
        return None
    out = got.get("out")
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (tokens, H) or out.dtype != torch.bfloat16:
        desc = "none" if not isinstance(out, torch.Tensor) else f"{tuple(out.shape)} {out.dtype}"
        raise GateCannotRun(f"dispatch numerics {case.id}: the child returned {desc}, expected ({tokens}, {H}) bfloat16")
    return got


def _def_line(path: Path, name: str) -> str:
    m = re.search(rf"^def {name}\(", read_text_bounded(path, errors="replace"), re.M)
    return "?" if m is None else str(read_text_bounded(path, errors="replace").count("\n", 0, m.start()) + 1)


def run_numerics(tree: Path, sources: list[Path], *, timeout_s: float, deadline=None, env=None) -> tuple[list[dict], list[str]]:
    """(gate rows, notes) for every case of :data:`CASES` against ``tree`` (its merged CSVs ``sources``)."""
    from fp4moe.infra import runner
    from fp4moe.targets.aiter.dispatch import records

    tokens = switch_tokens(tree)
    entry = _def_line(tree / FUSED_MOE, "fused_moe")  # a FAIL row names the tree's entry point
    header, extra_rows, borrowed = small_tuned_rows(sources, tokens)
    cases = [c for c in CASES if c.tuned is None or c.tuned.value in borrowed]
    layers = {k: _layer(k) for k in Layer}
    inputs, args = {}, {}
    for k, L in layers.items():
        inputs[f"layer-{k.value}"] = {n: t.view(torch.uint8) for n, t in L.items()}
    for i, c in enumerate(cases):
        inputs[f"tokens-{i}"], args[c.id] = _tensors_for(c, layers, tokens)
    spec = {"sources": [str(s) for s in sources], "csv_header": header, "csv_rows": extra_rows,
            "cases": [{"id": c.id, "index": i, "layer": c.layer.value, "env": c.env, "pad": c.pad,
                       "swiglu_limit": c.swiglu_limit, "shuffled": c.layer is not Layer.PLAIN} for i, c in enumerate(cases)]}
    inputs[SPEC_INPUT] = {"json": torch.frombuffer(bytearray(json.dumps(spec).encode()), dtype=torch.uint8)}
    res = runner.run_judged(CHILD_MODULE, [str(tree)], label=f"dispatch numerics {tree}", timeout_s=timeout_s,
                             schema=records.NUMERICS_SCHEMA, inputs=inputs, deadline=deadline, env=env)
    got = res.record["cases"]
    if not isinstance(got, list) or [g.get("id") if isinstance(g, dict) else None for g in got] != [c.id for c in cases]:
        raise GateCannotRun(f"dispatch numerics {tree}: the child's record does not hold one entry per case, in order")
    rows = []
    for i, (c, g) in enumerate(zip(cases, got)):
        n = tokens[c.tokens]
        seen = None if g.get("error") else _validate(c, {"out": res.tensors(f"{OUTPUT_PREFIX}{i}").get("out")}, n)
        seen = {**g, "tokens": n, **(seen or {})}
        rows += [{**r, "detail": r["detail"] + f" [{FUSED_MOE}:{entry}]"} if r["result"] == FAIL else r
                 for r in judge_case(c, seen, _refs(c, *args[c.id]) if not g.get("error") else {})]
    for t in Tuned:
        if t.value not in borrowed:
            rows.append({"check": f"dispatch numerics tuned {t.value}: not reached", "result": INFO,
                         "detail": "no tuned row of this tree selects these kernels: the path is not in its table"})
    notes = [f"dispatch numerics: {len(cases)} seeded cases (E {E}, hidden {H}, I {I_PADDED}/{P} in {P}, top-k {TOPK}; "
             f"tokens {tokens}) through the real fused_moe in a child, pad bytes 0x{WEIGHT_PAD_BYTE:X} / e8m0 NaN, fresh "
             f"allocations 0xFF; tuned rows borrowed (shape keys moved to the small layer): "
             + ("; ".join(f"{k}: {v}" for k, v in borrowed.items()) or "none")]
    return rows, notes

