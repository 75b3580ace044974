"""The contract checks on the executed dispatch: ONE table of small named functions (parent only).

Index: :data:`CONTRACTS` (name, the tree file:line it cites, the check), :func:`judge_row`
(every contract on one row's facts from :func:`fp4moe.targets.aiter.dispatch.table.facts`),
:func:`summarise` (per contract and path: one gate row, ``pass`` / ``FAIL`` / ``n/a``),
:data:`REFERENCE_INTER_DTYPE` (the stage-2 input ``fp4moe.reference.moe`` models per mode).

Results: ``pass``, ``FAIL`` (with the first row that shows it), ``info`` (the contract does not
apply to the row: no pad given, no limit given, an op that takes no gate-mode argument), and
``n/a`` for a row the dispatch could not finish (an op with no stand-in, the tree raising): the
aiter-check rule makes ``n/a`` fail unless ``--allow-missing``, so a row never passes unchecked.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fp4moe.infra.files import read_text_bounded
from fp4moe.targets.aiter.results import Result

PASS, FAIL, NA, INFO = Result.PASS, Result.FAIL, Result.NA, Result.INFO  # the one set of row words
FUSED_MOE = "aiter/fused_moe.py"
#: the stage-2 input dtype fp4moe.reference.moe models (a16w4: the bf16 stage-1 output; a8w4: MXFP8 of it)
REFERENCE_INTER_DTYPE = {"a16w4": "torch.bfloat16", "a8w4": "torch.float8_e4m3fn"}
#: the stage-1 input dtype each mode means
MODE_ACT_DTYPE = {"a16w4": "torch.bfloat16", "a8w4": "torch.float8_e4m3fn"}


@dataclass(frozen=True)
class Contract:
    name: str
    cites: str  # a regex whose first match in aiter/fused_moe.py is the line cited
    check: Callable[[dict], tuple[str, str]]


def _stages(f: dict, n: int) -> list[dict]:
    return [s for s in f["stages"] if s["stage"] == n]


def pad_reaches_stages(f: dict) -> tuple[str, str]:
    pad = f["row"]["intermediate_pad"]
    if not pad:
        return INFO, "no intermediate_pad given (pad 0 at this align)"
    if not f["stages"]:
        return FAIL, f"intermediate_pad={pad} given to fused_moe; no kernel stage ran, so it reached none"
    lost = []
    for s in f["stages"]:
        pads = s["pads"]
        if pads is None:
            lost.append(f"stage {s['stage']} {s['op']} takes no pad argument")
        elif not any(isinstance(v, int) and v > 0 for v in pads.values()):
            lost.append(f"stage {s['stage']} {s['op']} got {pads}")
    if lost:
        return FAIL, f"intermediate_pad={pad} given to fused_moe; " + "; ".join(lost)
    return PASS, f"intermediate_pad={pad} reaches " + ", ".join(f"{s['op']} {s['pads']}" for s in f["stages"])


def swiglu_limit_at_activation(f: dict) -> tuple[str, str]:
    limit = f["row"].get("swiglu_limit")
    if limit is None:
        return INFO, "no swiglu_limit given"
    if f.get("activation_op"):
        return FAIL, f"swiglu_limit={limit} given; the activation is computed by {f['activation_op']}, which takes no limit"
    s1 = _stages(f, 1)
    if not s1:
        return FAIL, "no stage-1 op ran"
    got = s1[0]["swiglu_limit"]
    if got == "no parameter":
        return FAIL, f"swiglu_limit={limit} given; stage 1 {s1[0]['op']} (computes the activation) takes no limit"
    if got != limit:
        return FAIL, f"swiglu_limit={limit} given; stage 1 {s1[0]['op']} got {got!r}"
    return PASS, f"{s1[0]['op']} swiglu_limit={got}"


def act_dtype_follows_bound(f: dict) -> tuple[str, str]:
    want = MODE_ACT_DTYPE[f["row"]["act"]]
    s1 = _stages(f, 1)
    got = s1[0]["act_dtype"] if s1 else None
    bound = f["row"]["env"]
    if got != want:
        return FAIL, f"{f['row']['act']} ({bound}) should feed {want} to stage 1; {s1[0]['op'] if s1 else '-'} read {got}"
    return PASS, f"stage 1 reads {got} under {bound}"


def block_m_equals_sort_unit(f: dict) -> tuple[str, str]:
    unit = (f.get("sorting") or {}).get("unit")
    if unit is None:
        return FAIL, "no sorting op ran"
    seen = {"metadata": f["block_m"], **{f"stage {s['stage']} {s['op']}": s["block_m"] for s in f["stages"]
                                         if s["block_m"] is not None and "tile_m" not in s["op"] and s["path"] != "FlyDSL"}}
    bad = {k: v for k, v in seen.items() if v != unit}
    if bad:
        return FAIL, f"sorting unit {unit}; block_m " + ", ".join(f"{k}={v}" for k, v in bad.items())
    return PASS, f"sorting unit {unit} = block_m of " + ", ".join(seen)


def gate_mode_matches_layout(f: dict) -> tuple[str, str]:
    want = f["row"]["gate_mode"]
    s1 = _stages(f, 1)
    if not s1:
        return FAIL, "no stage-1 op ran"
    got = s1[0]["gate_mode"]
    if got == "no parameter":
        return INFO, (f"{s1[0]['op']} takes no gate-mode argument (module {s1[0]['module']}): the layout it assumes "
                      "is fixed in the kernel; to confirm on a gfx950")
    return (PASS, f"{s1[0]['op']} gate_mode={got}") if got == want else \
        (FAIL, f"weights are {want}; {s1[0]['op']} got gate_mode={got!r}")


def is_shuffled_honoured(f: dict) -> tuple[str, str]:
    want = f["row"]["is_shuffled"]
    if f["is_shuffled_read"] != want:
        return FAIL, f"weights marked is_shuffled={want}; get_2stage_cfgs was told {f['is_shuffled_read']}"
    bad = [f"{s['op']} is_shuffled={s['is_shuffled_arg']}" for s in f["stages"]
           if s["is_shuffled_arg"] is not None and bool(s["is_shuffled_arg"]) != want]
    bad += [f"{s['op']} module {s['module']}" for s in f["stages"] if s["module"] and "preshuffle_o" in s["module"]
            and ("preshuffle_on" in s["module"]) != want]
    if bad:
        return FAIL, f"weights marked is_shuffled={want}; " + "; ".join(bad)
    return PASS, f"read as {want}" + "".join(f"; {s['op']} is_shuffled={s['is_shuffled_arg']}" for s in f["stages"]
                                            if s["is_shuffled_arg"] is not None)


def inter_stage_dtype_is_reference(f: dict) -> tuple[str, str]:
    want = REFERENCE_INTER_DTYPE[f["row"]["act"]]
    got = f["inter_dtype"]
    if got != want:
        return FAIL, f"stage 2 reads {got}; fp4moe.reference.moe models {want} for {f['row']['act']}"
    return PASS, f"stage 2 reads {got}"


def tuned_key_is_routed_topk(f: dict) -> tuple[str, str]:
    want = f["row"].get("routed_topk") or f["row"]["topk"]
    got = f.get("key_topk")
    if got != want:
        why = (f"expert_mask given, so the lookup drops one top-k slot as aiter's EP fake expert; topk_ids is "
               f"{f['row']['topk']} wide") if f.get("is_ep") else "the lookup key's top-k differs"
        tuned = (f.get("tuned") or {}).get("where", "none (heuristic)")
        return FAIL, f"tuned-config key top-k {got}, the model routes top-{want}: {why}; tuned row: {tuned}"
    return PASS, f"key top-k {got}" + (" (expert_mask given, fake slot appended)" if f.get("is_ep") else "")


def _extent(s: dict) -> str:
    told = ", ".join(f"{k}={v}" for k, v in (s["pads_told"] or {}).items()) or "takes no pad"
    return f"stage {s['stage']} {s['op']} computes N {s['n']} x K {s['k']} ({told}), the unpadded N {s['n_min']} x K {s['k_min']}"


def reads_unpadded_bytes(f: dict) -> tuple[str, str]:
    """Each stage launch computes the unpadded extents (from its recorded arguments, :mod:`.cost`):
    handed the padded extent where the caller gave the pad, it reads R times the bytes."""
    c = f.get("cost") or {}
    if c.get("error"):
        return NA, f"the cost of a launch cannot be derived: {c['error']}"
    if not c.get("stages"):
        return FAIL, "no kernel stage ran"
    off = [s for s in c["stages"] if (s["n"], s["k"]) != (s["n_min"], s["k_min"])]
    over = any(s["bytes"] > s["min_bytes"] for s in off)
    short = any(s["n"] < s["n_min"] or s["k"] < s["k_min"] for s in off)
    mb = lambda b: f"{b / 1e6:.1f} MB"
    if over or short:
        pads = f"intermediate_pad={f['row']['intermediate_pad']}, hidden_pad={f['row'].get('hidden_pad', 0)} given"
        what = ([f"reads {c['ratio']:g} times the bytes ({mb(c['bytes'])} of weights and scales for {c['experts_read']} "
                 f"experts, the unpadded problem {mb(c['min_bytes'])}; {pads})"] if over else []) + \
               (["computes fewer than the real channels"] if short else [])
        return FAIL, "; ".join(what) + ": " + "; ".join(map(_extent, off))
    return PASS, (f"reads {mb(c['bytes'])} for {c['experts_read']} experts, the unpadded minimum: "
                  + ", ".join(f"{s['op']} N {s['n']} x K {s['k']}" for s in c["stages"]))


CONTRACTS = (
    Contract("pad reaches every stage", r"intermediate_pad=intermediate_pad", pad_reaches_stages),
    Contract("swiglu_limit applied at the activation", r'extra_stage1_args\["swiglu_limit"\]', swiglu_limit_at_activation),
    Contract("activation dtype follows the bound", r"AITER_BF16_FP8_MOE_BOUND", act_dtype_follows_bound),
    Contract("block_m equals the sorting unit", r"block_size_M = metadata\.block_m", block_m_equals_sort_unit),
    Contract("kernel gate mode equals the weights' layout", r"gate_mode = GateMode\(gate_mode\)", gate_mode_matches_layout),
    Contract("is_shuffled read and honoured", r'isShuffled = getattr\(w1, "is_shuffled"', is_shuffled_honoured),
    Contract("inter-stage dtype is the reference's", r"a2, a2_scale = fused_dynamic_mxfp4_quant_moe_sort", inter_stage_dtype_is_reference),
    Contract("tuned-config key is the routed top-k", r"topk -= int\(is_ep\)", tuned_key_is_routed_topk),
    Contract("stage reads the unpadded bytes", r"intermediate_pad=intermediate_pad", reads_unpadded_bytes),
)


def cited_lines(tree: Path) -> dict[str, str]:
    """{contract name: ``aiter/fused_moe.py:LINE``} of its first match in this tree (``:?`` when absent)."""
    text = read_text_bounded(tree / FUSED_MOE)
    out = {}
    for c in CONTRACTS:
        m = re.search(c.cites, text)
        out[c.name] = f"{FUSED_MOE}:{text[: m.start()].count(chr(10)) + 1}" if m else f"{FUSED_MOE}:?"
    return out


def judge_row(f: dict) -> list[tuple[str, str, str]]:
    """[(contract, result, detail)] for one row; ``n/a`` for all when the dispatch did not finish."""
    if f.get("error") or f.get("unmodelled"):
        why = f"op {f['unmodelled'][0]} has no stand-in" if f.get("unmodelled") else f"the dispatch raised {f['error']}"
        return [(c.name, NA, why) for c in CONTRACTS]
    return [(c.name, *c.check(f)) for c in CONTRACTS]


def summarise(fs: list[dict], cites: dict[str, str]) -> list[dict]:
    """One gate row per (contract, path): ``dispatch <path>: <contract>``; the worst result wins
    (FAIL > n/a > pass > info), its detail names the first row showing it and the row counts."""
    rank = {FAIL: 3, NA: 2, PASS: 1, INFO: 0}
    groups: dict = {}
    for f in fs:
        for name, res, det in judge_row(f):
            key = (name, f["path"] if not (f.get("error") or f.get("unmodelled")) else "not finished")
            g = groups.setdefault(key, {"counts": {}, "worst": None})
            g["counts"][res] = g["counts"].get(res, 0) + 1
            if g["worst"] is None or rank[res] > rank[g["worst"][0]]:
                g["worst"] = (res, f"{f['id']}: {det}")
    out = []
    for (name, path), g in groups.items():
        res, det = g["worst"]
        counts = ", ".join(f"{v} {k}" for k, v in sorted(g["counts"].items()))
        out.append({"check": f"dispatch {path}: {name}", "result": res,
                    "detail": f"{counts} row(s); {det} [{cites.get(name, FUSED_MOE)}]"})
    return out
