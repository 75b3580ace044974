"""SGLang's own ``fused_moe`` call driven into a tree's executed dispatch (``sglang-check --aiter-src``).

Index: :func:`rows_from_sglang` (each SGLang row's recorded call -- the keywords SGLang's
``AiterRunnerCore.run`` passed, the shapes of its inputs, the weights' attributes -- as dispatch
rows: the scaled row exactly as driven, and the same keywords at the model's full per-rank shape,
where aiter's tuned configs apply), :func:`judge` (the contracts on the executed dispatch as
``sglang-check`` checks; a keyword this ``fused_moe`` does not take fails naming both files).

The parent never imports aiter or SGLang here: the SGLang child's record comes in, the dispatch
child (:mod:`fp4moe.targets.aiter.dispatch.table`) runs the tree, the verdicts are made here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from fp4moe.model.catalogue import parallel_config
from fp4moe.reference.footprint import padded_intermediate
from fp4moe.targets.aiter.dispatch import contracts, table

#: the file of SGLang's call (``AiterRunnerCore.run`` -> ``fused_moe``)
SGLANG_CALL_FILE = "sglang/srt/layers/moe/moe_runner/aiter.py"
#: the keywords a dispatch Row models itself; every other keyword SGLang passed goes in ``extra``
MODELLED = frozenset({"quant_type", "activation", "w1_scale", "w2_scale", "hidden_pad", "intermediate_pad", "gate_mode",
                      "swiglu_limit"})
#: SGLang's weight alignment for the processed layer (the SGLang gate's rows: align 128)
SGLANG_ALIGN = 128
UNEXPECTED_RE = re.compile(r"unexpected keyword argument '([^']+)'")


@dataclass(frozen=True)
class SGLangRow:
    label: str
    model: str
    tp: int
    ep: int
    experts: int
    hidden: int
    ip: int


def _extra(kwargs: dict, full_experts: int | None) -> dict:
    out = {}
    for k, v in kwargs.items():
        if k in MODELLED:
            continue
        if isinstance(v, dict) and v.get("tensor") is True:
            shape = [full_experts] if k == "expert_mask" and full_experts else v["shape"]
            v = {"tensor": shape, "dtype": v["dtype"]}
        out[k] = v
    return out


def rows_from_sglang(records: list[dict], rows: list[SGLangRow]) -> tuple[list[table.Row], list[str]]:
    """(dispatch rows, labels not translated: SGLang's own call never reached fused_moe)."""
    by = {r["label"]: r for r in records}
    out, skipped = [], []
    for row in rows:
        rec = by.get(row.label) or {}
        kw, inputs = rec.get("fused_moe_kwargs"), rec.get("aiter_inputs")
        if not kw or not inputs:
            skipped.append(row.label)
            continue
        tokens, width = inputs["topk_ids"]["shape"]
        act = rec.get("act_mode") or "a16w4"
        common = dict(act=act, tokens=tokens, topk=width, activation=(kw.get("activation") or {}).get("name", "Silu"),
                      gate_mode=kw.get("gate_mode") or "separated", swiglu_limit=kw.get("swiglu_limit"),
                      hidden_pad=int(kw.get("hidden_pad") or 0),
                      is_shuffled=bool(((rec.get("w_attrs") or {}).get("w1") or {}).get("is_shuffled") is True))
        ipad = int(kw.get("intermediate_pad") or 0)
        out.append(table.Row(f"sglang {row.label} (as driven)", row.model, row.tp, row.ep, SGLANG_ALIGN, experts=row.experts,
                             hidden=row.hidden, inter=row.ip, inter_padded=row.ip + ipad, intermediate_pad=ipad,
                             extra=_extra(kw, None), routed_topk=width, **common))
        pc = parallel_config(row.model, row.tp, row.ep)
        ip = pc.intermediate_per_partition
        P = padded_intermediate(ip, SGLANG_ALIGN)
        out.append(table.Row(f"sglang {row.label} (full size)", row.model, row.tp, row.ep, SGLANG_ALIGN,
                             experts=pc.local_experts, hidden=pc.model.hidden, inter=ip, inter_padded=P,
                             intermediate_pad=P - ip, extra=_extra(kw, pc.model.routed_experts),
                             routed_topk=pc.model.top_k, **{**common, "topk": pc.model.top_k}))
    return out, skipped


def _refused_keyword(error: str | None) -> str | None:
    m = UNEXPECTED_RE.search(error or "")
    return m.group(1) if m else None


def judge(tree: str, records: list[dict], rows: list[SGLangRow], *, timeout_s: float, deadline=None) -> list[dict]:
    """``[{"name", "row", "ok", "compared", "detail"}]`` (sglang-check's check shape); ``deadline``:
    the run's one total (``harness.Deadline``), which the dispatch child's limit is cut to."""
    drows, skipped = rows_from_sglang(records, rows)
    out = [{"name": "aiter dispatch", "row": label, "ok": False, "compared": "SGLang's call driven into the executed dispatch",
            "detail": "not judged: SGLang's own call never reached fused_moe, so no keywords were recorded (its drive "
                      "row says why)"} for label in skipped]
    if not drows:
        return out
    rec, data = table.run_dispatch(tree, drows, timeout_s=timeout_s, deadline=deadline)
    root = Path(rec["tree"])
    idx = table.csv_index(root, rec["config_sources"])
    cites = contracts.cited_lines(root)
    for r, d in zip(drows, data["rows"]):
        f = table.facts(r.to_child(), d, idx)
        label = r.id.removeprefix("sglang ")
        refused = _refused_keyword(f.get("error"))
        if refused:
            out.append({"name": "aiter dispatch", "row": label, "ok": False, "compared": "SGLang's keywords vs this fused_moe",
                        "detail": f"{SGLANG_CALL_FILE} passes {refused}=...; {root / table.FUSED_MOE}'s fused_moe does not "
                                  f"take it ({f['error']})"})
            continue
        where = (f.get("tuned") or {}).get("where", "heuristic")
        for name, res, det in contracts.judge_row(f):
            out.append({"name": f"aiter dispatch: {name}", "row": label, "ok": res in (contracts.PASS, contracts.INFO),
                        "compared": f"{f['path']}, kernels {f['kernels']} ({where}) [{cites.get(name)}]",
                        "detail": f"{res}: {det}"})
    return out
