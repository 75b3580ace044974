"""SGLang's own ``fused_moe`` call into a tree's executed dispatch (``sglang-check --aiter-dispatch``).

Index: :func:`rows_from_sglang` (each SGLang row's recorded call -- the keywords SGLang's
``AiterRunnerCore.run`` passed, the shapes of its inputs, the weights' attributes -- as dispatch
rows: the scaled row exactly as driven, and the same keywords at the model's full per-rank shape,
where aiter's tuned configs apply), :func:`judge` (the contracts on the executed dispatch as
``sglang-check`` checks; a keyword this ``fused_moe`` does not take fails naming both files,
SGLang's call site and the tree's ``def fused_moe`` line), :func:`sglang_call_site`,
:func:`fused_moe_def_line`.

One child computes: the SGLang child, whose ``aiter`` is the dispatch loader's
(``fp4moe.targets.sglang.child.dispatch_aiter``), runs SGLang's layer and runner into the tree's
real ``fused_moe`` (the row as driven, on real tensors) and then SGLang's recorded keywords at
full size on ``meta`` in the same process; its record carries both call records (``dispatch``,
``dispatch_full``). The verdicts are made here, in the parent, which never imports aiter or SGLang.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from fp4moe.infra.errors import GateCannotRun
from fp4moe.infra.files import read_text_bounded
from fp4moe.model.catalogue import parallel_config
from fp4moe.reference.footprint import padded_intermediate
from fp4moe.targets.aiter.dispatch import contracts, records, table

#: the file of SGLang's call (``AiterRunnerCore.run`` -> ``fused_moe``)
SGLANG_CALL_FILE = "sglang/srt/layers/moe/moe_runner/aiter.py"
#: the keywords a dispatch Row models itself; every other keyword SGLang passed goes in ``extra``
MODELLED = frozenset({"quant_type", "activation", "w1_scale", "w2_scale", "hidden_pad", "intermediate_pad", "gate_mode",
                      "swiglu_limit"})
#: SGLang's weight alignment for the processed layer (the SGLang gate's rows: align 128)
SGLANG_ALIGN = 128
UNEXPECTED_RE = re.compile(r"unexpected keyword argument '([^']+)'")
#: the two dispatch rows of one SGLang row (id suffixes) and the child record key holding each
AS_DRIVEN, FULL_SIZE = " (as driven)", " (full size)"
RECORD_KEY = {AS_DRIVEN: "dispatch", FULL_SIZE: "dispatch_full"}
CHECK = "aiter dispatch"


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
        out.append(table.Row(f"sglang {row.label}{AS_DRIVEN}", row.model, row.tp, row.ep, SGLANG_ALIGN, experts=row.experts,
                             hidden=row.hidden, inter=row.ip, inter_padded=row.ip + ipad, intermediate_pad=ipad,
                             extra=_extra(kw, None), routed_topk=width, **common))
        pc = parallel_config(row.model, row.tp, row.ep)
        ip = pc.intermediate_per_partition
        P = padded_intermediate(ip, SGLANG_ALIGN)
        out.append(table.Row(f"sglang {row.label}{FULL_SIZE}", row.model, row.tp, row.ep, SGLANG_ALIGN,
                             experts=pc.local_experts, hidden=pc.model.hidden, inter=ip, inter_padded=P,
                             intermediate_pad=P - ip, extra=_extra(kw, pc.model.routed_experts),
                             routed_topk=pc.model.top_k, **{**common, "topk": pc.model.top_k}))
    return out, skipped


def _refused_keyword(error: str | None) -> str | None:
    m = UNEXPECTED_RE.search(error or "")
    return m.group(1) if m else None


def sglang_call_site(where: list[str] | None) -> str:
    """SGLang's ``fused_moe`` call site as file:line, from a failed row's frames (innermost last;
    ``srt/...:N in run``), else the file alone."""
    for frame in reversed(where or []):
        if SGLANG_CALL_FILE.removeprefix("sglang/") + ":" in frame:
            return "sglang/" + frame.split(" in ")[0]
    return SGLANG_CALL_FILE


def fused_moe_def_line(root: Path) -> str:
    """The tree's ``aiter/fused_moe.py:N`` of ``def fused_moe`` (read with ast), else the file."""
    import ast

    f = root / table.FUSED_MOE
    try:
        for node in ast.parse(read_text_bounded(f)).body:
            if isinstance(node, ast.FunctionDef) and node.name == "fused_moe":
                return f"{f}:{node.lineno}"
    except (OSError, SyntaxError, UnicodeDecodeError):
        pass
    return str(f)


def valid_call(d: dict, label: str) -> dict:
    """One call's records as the SGLang child returned them, schema-checked (the call, each op,
    each config answer): GateCannotRun naming the row and the key otherwise (exit 2)."""
    def check(schema, body, where):
        if not isinstance(body, dict):
            raise GateCannotRun(f"{where}: is {type(body).__name__}, not an object")
        return schema.validate({"schema": schema.name, "schema_version": schema.version, **body}, where)

    check(records.CALL_SCHEMA, d, label)
    for i, op in enumerate(d["calls"]):
        check(records.OP_SCHEMA, op, f"{label}: calls[{i}]")
    for i, cfg in enumerate(d["cfgs"]):
        check(records.CFG_SCHEMA, cfg, f"{label}: cfgs[{i}]")
    return d


def _not_judged(label: str, why: str) -> dict:
    return {"name": CHECK, "row": label, "ok": False, "compared": "SGLang's call into the executed dispatch",
            "detail": f"not judged: {why}"}


def _judge_one(r: table.Row, d: dict, row_rec: dict, root: Path, idx: list, cites: dict) -> list[dict]:
    f = table.facts(r.to_child(), d, idx)
    label = r.id.removeprefix("sglang ")
    refused = _refused_keyword(f.get("error"))
    if refused:
        return [{"name": CHECK, "row": label, "ok": False, "compared": "SGLang's keywords vs this fused_moe",
                 "detail": f"{sglang_call_site(row_rec.get('where'))} passes {refused}=...; {fused_moe_def_line(root)}: "
                           f"this fused_moe does not take it ({f['error']})"}]
    if not f["stages"]:  # no kernel stage ran: nothing to judge at the kernel stages (never a pass)
        return [_not_judged(label, f"no kernel stage ran in the recorded call ({f.get('error') or 'no error recorded'}; "
                                   f"ops {f['ops'][:8]})")]
    where = (f.get("tuned") or {}).get("where", "heuristic")
    return [{"name": f"{CHECK}: {name}", "row": label, "ok": res in (contracts.PASS, contracts.INFO),
             "compared": f"{f['path']}, kernels {f['kernels']} ({where}) [{cites.get(name)}]", "detail": f"{res}: {det}"}
            for name, res, det in contracts.judge_row(f)]


def judge(drive_record: dict, rows: list[SGLangRow]) -> list[dict]:
    """``[{"name", "row", "ok", "compared", "detail"}]`` (sglang-check's check shape) from the
    SGLang child's record: each row's ``dispatch`` (as driven) and ``dispatch_full`` (full size)."""
    info = drive_record.get("dispatch")
    if not isinstance(info, dict):
        return [_not_judged(r.label, "the SGLang child loaded no aiter tree (its record has no dispatch)") for r in rows]
    root = Path(info["tree"])
    idx = table.csv_index(root, info["config_sources"])
    cites = contracts.cited_lines(root)
    by = {r["label"]: r for r in drive_record.get("rows", [])}
    drows, skipped = rows_from_sglang(list(by.values()), rows)
    out = [_not_judged(label, "SGLang's own call never reached fused_moe, so no keywords were recorded (its drive row "
                              "says why)") for label in skipped]
    for r in drows:
        label = r.id.removeprefix("sglang ")
        suffix = AS_DRIVEN if r.id.endswith(AS_DRIVEN) else FULL_SIZE
        row_rec = by[label.removesuffix(suffix)]
        d = row_rec.get(RECORD_KEY[suffix])
        if d is None:
            out.append(_not_judged(label, f"the SGLang child's record has no {RECORD_KEY[suffix]} call record for it"))
            continue
        valid_call(d, f"the SGLang child's record: row {label}: {RECORD_KEY[suffix]}")
        out.extend(_judge_one(r, d, row_rec, root, idx, cites))
    return out
