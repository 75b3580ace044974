"""The dispatch table: per row, what the tree's ``fused_moe`` selects and passes to each stage.

Index:

- :func:`tree_switches` -- the token counts where the tree switches paths, read from its source
  text (``ast``, never imported): the bf16/fp8 bound's default, ``get_padded_M``'s tiers, every
  ``token <op> N`` comparison in ``get_2stage_cfgs``, the ksplit rule (``token * topk > expert``),
  and the tuned CSVs' token keys for the row's shape.
- :func:`act_mechanism` -- how this tree's caller selects a16w4 / a8w4 (a keyword when
  ``fused_moe`` takes one, else ``AITER_BF16_FP8_MOE_BOUND``).
- :func:`build_rows` -- DeepSeek-V4-Pro/Flash x every catalogue (tp, ep) x align 128/256 x
  a16w4/a8w4 x the derived token counts (``Scope.DEFAULT``: TP8 rows; ``Scope.FULL``: all).
- :func:`run_dispatch` -- the child (:data:`records.CHILD_MODULE`) through the harness.
- :func:`facts` -- one row's facts from its call records: path, stage kernels with their CSV
  file:line (or ``heuristic``) and measured us (MI355X), the cost of each stage launch on
  paper (:mod:`.cost`: extents, block/split, bytes read, R against the unpadded problem),
  block_m, ksplit, sorting unit and sizes, dtypes into each stage, pad and swiglu_limit and
  gate mode at each stage, ``is_shuffled`` as read.
- :func:`format_table` -- text, ``markdown``; ``--json`` writes :func:`facts` as is.
"""

from __future__ import annotations

import ast
import csv
import enum
import io
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from fp4moe.infra.files import read_text_bounded
from fp4moe.model.catalogue import catalogue_rows
from fp4moe.reference.footprint import padded_intermediate
from fp4moe.targets.aiter.dispatch import cost

FUSED_MOE = "aiter/fused_moe.py"
BOUND_ENV = "AITER_BF16_FP8_MOE_BOUND"
#: the values the bound is set to for one row (a16w4: never reached; a8w4: from M = 0)
BOUND_A16W4, BOUND_A8W4 = "2147483647", "0"
ALIGNS = (128, 256)
#: SGLang's DeepSeek-V4 keywords (fp4moe.targets.sglang.modes / the model's config.json)
SGLANG_ACTIVATION, SGLANG_GATE_MODE, SGLANG_SWIGLU_LIMIT = "Silu", "interleave", 10.0
MAX_TOKENS = 131073
DEFAULT_TP = 8


class Scope(enum.Enum):
    DEFAULT = "default"  # TP8 rows (ep 1 and 8): the CPU tier and the CI step
    FULL = "full"  # every catalogue row


class ActMode(enum.Enum):
    A16W4 = "a16w4"
    A8W4 = "a8w4"


@dataclass(frozen=True)
class Switches:
    bound_default: int | None
    bound_line: int | None
    padded_tiers: tuple[int, ...]
    cfg_thresholds: tuple[int, ...]  # padded-token comparisons in get_2stage_cfgs
    csv_tokens: dict  # (model_dim, inter_dim, expert, topk) -> sorted token keys


def _source(tree: Path) -> str:
    return read_text_bounded(tree / FUSED_MOE)


def tree_switches(tree: Path, csv_files: list[Path]) -> Switches:
    text = _source(tree)
    mod = ast.parse(text)
    m = re.search(rf"""{BOUND_ENV}["']\s*,\s*["'](\d+)["']""", text)
    bound = int(m.group(1)) if m else None
    bound_line = text[: m.start()].count("\n") + 1 if m else None
    tiers: tuple[int, ...] = ()
    thresholds: set[int] = set()
    for node in mod.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_PADDED_M_TIERS" for t in node.targets):
            tiers = tuple(int(x) for x in ast.literal_eval(node.value))
        if isinstance(node, ast.FunctionDef) and node.name == "get_2stage_cfgs":
            for c in ast.walk(node):
                if isinstance(c, ast.Compare) and isinstance(c.left, ast.Name) and c.left.id == "token":
                    for comp in c.comparators:
                        if isinstance(comp, ast.Constant) and isinstance(comp.value, int):
                            thresholds.add(comp.value)
    keys: dict = {}
    for f in csv_files:
        for _, r in read_csv_rows(f):
            try:
                k = (int(r["model_dim"]), int(r["inter_dim"]), int(r["expert"]), int(r["topk"]))
                keys.setdefault(k, set()).add(int(r["token"]))
            except (KeyError, ValueError):
                continue
    return Switches(bound, bound_line, tiers, tuple(sorted(thresholds)), {k: tuple(sorted(v)) for k, v in keys.items()})


def read_csv_rows(path: Path):
    """(line number, row dict) of a tuned CSV (line 1 is the header); read bounded (a FIFO, a
    device or a file past ``loader.TUNED_CSV_MAX_BYTES``: an OSError naming it, never waited on)."""
    from fp4moe.targets.aiter.dispatch.loader import TUNED_CSV_MAX_BYTES

    yield from enumerate(csv.DictReader(io.StringIO(read_text_bounded(path, TUNED_CSV_MAX_BYTES), newline="")), start=2)


def act_mechanism(tree: Path) -> str:
    """``"keyword quant_dtype_a"`` when this ``fused_moe`` takes it, else the environment bound."""
    from fp4moe.targets.aiter.source import function_params

    params = function_params(_source(tree), "fused_moe") or []
    return "keyword quant_dtype_a" if "quant_dtype_a" in params else f"environment {BOUND_ENV}"


def token_counts(sw: Switches, shape: tuple[int, int, int, int]) -> list[int]:
    """Token counts crossing every switch for one (model_dim, inter_dim, expert, topk)."""
    H, I, E, topk = shape
    out = {1}
    if sw.bound_default:
        out |= {sw.bound_default - 1, sw.bound_default}
    for t in (*sw.padded_tiers, *sw.cfg_thresholds):  # compared with the padded M: both sides of it
        out |= {t // 2 + 1, t, t + 1} if t > 1 else {t, t + 1}
    out |= {max(1, E // topk), E // topk + 1}  # get_ksplit: 0 once token * topk > expert
    for t in sw.csv_tokens.get((H, I, E, topk), ()):
        out |= {t, t + 1}
    return sorted(x for x in out if 1 <= x <= MAX_TOKENS)


@dataclass(frozen=True)
class Row:
    id: str
    model: str
    tp: int
    ep: int
    align: int
    act: str
    tokens: int
    experts: int
    hidden: int
    inter: int
    inter_padded: int
    topk: int
    intermediate_pad: int
    hidden_pad: int = 0
    activation: str = SGLANG_ACTIVATION
    gate_mode: str = SGLANG_GATE_MODE
    swiglu_limit: float | None = SGLANG_SWIGLU_LIMIT
    is_shuffled: bool = True
    env: dict = field(default_factory=dict)
    #: further keywords to pass (a caller's, e.g. SGLang's ``quant_dtype_a``): a value "torch.NAME"
    #: is that torch dtype
    extra: dict = field(default_factory=dict)
    #: the model's routed top-k (``topk`` is the width of the topk_ids the caller passes: one more
    #: when the caller appends aiter's EP fake-expert slot)
    routed_topk: int | None = None

    def to_child(self) -> dict:
        return asdict(self)


def build_rows(tree: Path, csv_files: list[Path], scope: Scope = Scope.DEFAULT, max_rows: int | None = None) -> list[Row]:
    sw = tree_switches(tree, csv_files)
    rows: list[Row] = []
    for pc in catalogue_rows():
        if scope is Scope.DEFAULT and pc.tp != DEFAULT_TP:
            continue
        m = pc.model
        for align in ALIGNS:
            ip = pc.intermediate_per_partition
            P = padded_intermediate(ip, align)
            shape = (m.hidden, P, pc.local_experts, m.top_k)
            for act in ActMode:
                env = {BOUND_ENV: BOUND_A16W4 if act is ActMode.A16W4 else BOUND_A8W4}
                for M in token_counts(sw, shape):
                    rid = f"{m.name} tp{pc.tp}/ep{pc.ep} align{align} {act.value} M={M}"
                    rows.append(Row(rid, m.name, pc.tp, pc.ep, align, act.value, M, pc.local_experts, m.hidden, ip, P,
                                    m.top_k, P - ip, env=env))
    return rows[:max_rows] if max_rows else rows


# ----------------------------------------------------------------------------------------- stage ops
@dataclass(frozen=True)
class StageOp:
    stage: int
    path: str
    act_in: str  # the argument holding the activation the stage reads
    pads: tuple[str, ...]  # the pad arguments this op takes (empty: it takes none)
    limit: str | None  # the swiglu_limit argument (None: the op takes none)
    gate: str | None  # the gate-mode argument (None: the op takes none)


#: the compiled ops / launches that are a kernel stage, by op name (standins.STANDINS names)
STAGE_OPS = {
    "ck_moe_stage1": StageOp(1, "CK 2-stage", "hidden_states", (), None, None),
    "ck_moe_stage2": StageOp(2, "CK 2-stage", "inter_states", (), None, None),
    "moe_cktile2stages_gemm1_ck": StageOp(1, "CK-tile", "XQ", ("n_padded_zeros", "k_padded_zeros"), None, None),
    "moe_cktile2stages_gemm2_ck": StageOp(2, "CK-tile", "XQ", ("n_padded_zeros", "k_padded_zeros"), None, None),
    "flydsl_moe_stage1": StageOp(1, "FlyDSL", "a", ("inter_dim_pad", "model_dim_pad"), "swiglu_limit", "gate_mode"),
    "flydsl_moe_stage2": StageOp(2, "FlyDSL", "inter_states", ("inter_dim_pad", "model_dim_pad"), None, None),
    "_opus_moe_stage1_a8w4_fwd_raw": StageOp(1, "Opus", "hidden_states", ("inter_dim_pad",), "swiglu_limit", None),
    "_opus_moe_stage2_a8w4_decode_fwd_raw": StageOp(2, "Opus", "inter_states", ("inter_dim_pad",), None, None),
    "_opus_moe_stage2_a8w4_fwd_raw": StageOp(2, "Opus", "inter_states", ("inter_dim_pad",), None, None),
}
#: ops that compute the activation apart from a GEMM stage (the CK-tile split-k post-activation)
ACTIVATION_OPS = {"flydsl_silu_and_mul_interleaved": None, "flydsl_swiglu_and_mul_interleaved": None}
SORT_OPS = ("moe_sorting_opus_fwd", "moe_sorting_fwd", "mxfp4_moe_sort")
#: the stage-1 / stage-2 Python wrappers of fused_moe.py (MOEMetadata.stage1/2), by function name
KERNEL_NAME_KEYS = ("kernelName", "kernelName1", "kernelName2")


def _dtype(arg) -> str | None:
    return arg.get("dtype") if isinstance(arg, dict) else None


def _csv_key(r: dict) -> tuple | None:
    """A tuned CSV row's lookup key: (model_dim, inter_dim, expert, topk, dtype, q_dtype_a,
    q_dtype_w, q_type); None for a row no lookup takes (a field that is not a number, another
    arch or CU count)."""
    try:
        int(r["token"])
        shape = (int(r["model_dim"]), int(r["inter_dim"]), int(r["expert"]), int(r["topk"]))
    except (KeyError, ValueError):
        return None
    if r.get("gfx", "gfx950") not in ("gfx950", "", None) or str(r.get("cu_num")) != "256":
        return None
    return (*shape, r.get("dtype"), r.get("q_dtype_a"), r.get("q_dtype_w"), r.get("q_type"))


class CsvIndex(list):
    """[(file:line, row)] over the tuned CSVs, in merge order (:func:`csv_index`), with the rows
    grouped by :func:`_csv_key` once, in that order: each dispatch row's lookup reads its group,
    not every tuned row."""

    def group(self, key: tuple) -> list:
        by = self.__dict__.get("_by")
        if by is None:
            by = self.__dict__["_by"] = {}
            for where, r in self:
                k = _csv_key(r)
                if k is not None:
                    by.setdefault(k, []).append((where, r))
        return by.get(key, [])


def csv_row_for(cfg_args: list, kernel1: str, kernel2: str, csv_rows: list) -> dict | None:
    """The tuned CSV row (file:line, us1, us2) whose kernels fused_moe selected for its key: the
    row at the padded token count, else (aiter's tier fallback above the first tier) the row at
    the largest smaller token count holding both selected kernels."""
    if len(cfg_args) < 12:
        return None
    key = tuple(cfg_args[i] for i in range(9))  # token, model_dim, inter_dim, expert, topk, dtype, qa, qw, qt
    token, want = key[0], key[1:]
    try:
        indexed = isinstance(csv_rows, CsvIndex) and hash(want) is not None
    except TypeError:  # a recorded argument that is not hashable (a dict): compared row by row
        indexed = False
    rows = csv_rows.group(want) if indexed else [(where, r) for where, r in csv_rows if _csv_key(r) == want]
    best = None
    for where, r in rows:
        t = int(r["token"])
        k1, k2 = (r.get("kernelName1") or "").strip(), (r.get("kernelName2") or "").strip()
        hit = {"where": where, "us1": r.get("us1"), "us2": r.get("us2"), "us": r.get("us"), "token": t,
               "kernelName1": k1, "kernelName2": k2}
        if t == token and (k1 == kernel1 or k2 == kernel2):
            return hit
        if t < token and (k1, k2) == (kernel1, kernel2) and (best is None or t > best["token"]):
            best = {**hit, "where": f"{where} (tier fallback from token {token})"}
    return best


def _kernel_name(stage: dict) -> str:
    kw = stage.get("keywords", {})
    for k in KERNEL_NAME_KEYS:
        if isinstance(kw.get(k), str) and kw[k]:
            return kw[k]
    return ""


def facts(row: dict, rec: dict, csv_rows: list) -> dict:
    """One row's facts from the child's call records ``rec`` for it (see records.ROWS_OUTPUT)."""
    calls = rec.get("calls", [])
    stages = [(STAGE_OPS[c["op"]], c) for c in calls if c["op"] in STAGE_OPS]
    f: dict = {"id": row["id"], "row": row, "ops": [c["op"] for c in calls], "error": rec.get("error"),
               "unmodelled": [c["op"] for c in calls if c.get("unmodelled")]}
    md = rec["cfgs"][-1]["metadata"] if rec.get("cfgs") else None
    cfg_args = rec["cfgs"][-1]["cfg_args"] if rec.get("cfgs") else []
    f["cfg_key"] = cfg_args[:9]
    f["block_m"] = md["block_m"] if md else None
    f["ksplit"] = md["ksplit"] if md else None
    f["wrappers"] = [md["stage1"]["func"], md["stage2"]["func"]] if md else []
    f["is_shuffled_read"] = cfg_args[14] if len(cfg_args) > 14 else None
    cfg_kwargs = rec["cfgs"][-1]["cfg_kwargs"] if rec.get("cfgs") else {}
    f["is_ep"] = bool(cfg_kwargs.get("is_ep"))
    f["key_topk"] = cfg_args[4] - int(f["is_ep"]) if len(cfg_args) > 4 else None  # get_2stage_cfgs: topk -= int(is_ep)
    k1, k2 = (_kernel_name(md["stage1"]), _kernel_name(md["stage2"])) if md else ("", "")
    tuned = csv_row_for(cfg_args, k1, k2, csv_rows) if md else None
    f["tuned"] = tuned
    f["kernels"] = [k1 or "heuristic", k2 or "heuristic"]
    sort = next((c for c in calls if c["op"] in SORT_OPS), None)
    f["sorting"] = None if sort is None else {"op": sort["op"], "unit": sort["args"].get("unit_size"),
                                              "sorted_ids": (sort["args"].get("sorted_token_ids") or {}).get("tensor")}
    f["stages"] = []
    for op, c in stages:
        a = c["args"]
        f["stages"].append({
            "stage": op.stage, "op": c["op"], "path": op.path, "module": c.get("module"),
            "act_dtype": _dtype(a.get(op.act_in)),
            "pads": {p: a.get(p) for p in op.pads} if op.pads else None,
            "swiglu_limit": a.get(op.limit) if op.limit else "no parameter",
            "gate_mode": a.get(op.gate) if op.gate else "no parameter",
            "block_m": a.get("block_m", a.get("tile_m")),
            "w_is_shuffled": (a.get("w1") or a.get("w2") or a.get("WQ") or {}).get("is_shuffled")
            if isinstance(a.get("w1") or a.get("w2") or a.get("WQ"), dict) else None,
            "is_shuffled_arg": a.get("is_shuffled"),
            "nt": a.get("use_non_temporal_load"),
        })
    f["cost"] = cost.row_cost(row, [(c["op"], op.stage, c["args"]) for op, c in stages])
    act = [c for c in calls if c["op"] in ACTIVATION_OPS]
    f["activation_op"] = act[0]["op"] if act else None
    s1 = [s for s in f["stages"] if s["stage"] == 1]
    s2 = [s for s in f["stages"] if s["stage"] == 2]
    f["path"] = " + ".join(x[0]["path"] for x in (s1, s2) if x) or "none"
    f["inter_dtype"] = s2[0]["act_dtype"] if s2 else None
    return f


def csv_index(tree: Path, sources: list[str]) -> CsvIndex:
    """[(file:line, row)] over the tuned CSVs fused_moe merges, in merge order."""
    out = CsvIndex()
    for rel in sources:
        p = tree / rel
        for line, r in read_csv_rows(p):
            out.append((f"{rel}:{line}", r))
    return out


def run_dispatch(tree: str, rows: list[Row], *, timeout_s: float, deadline=None) -> tuple[dict, dict]:
    """(child record, rows output) for ``rows`` against ``tree``; GateCannotRun naming it otherwise."""
    import torch

    from fp4moe.infra import runner
    from fp4moe.targets.aiter.dispatch import records

    payload = json.dumps([r.to_child() for r in rows], separators=(",", ":")).encode()
    inputs = {records.ROWS_INPUT: {"json": torch.frombuffer(bytearray(payload), dtype=torch.uint8)}}
    out = runner.run_judged(records.CHILD_MODULE, [str(Path(tree).resolve())], label=f"dispatch {tree}",
                             timeout_s=timeout_s, schema=records.SCHEMA, deadline=deadline, inputs=inputs)
    data = out.json(records.ROWS_OUTPUT)
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list) or len(data["rows"]) != len(rows):
        from fp4moe.infra.errors import GateCannotRun

        raise GateCannotRun(f"dispatch {tree}: {records.ROWS_OUTPUT}: not one record per row")
    for want, got in zip(rows, data["rows"]):
        if not isinstance(got, dict) or got.get("id") != want.id or not isinstance(got.get("calls"), list):
            from fp4moe.infra.errors import GateCannotRun

            raise GateCannotRun(f"dispatch {tree}: {records.ROWS_OUTPUT}: record for {want.id!r} missing or malformed")
    return out.record, data


def _pads_text(s: dict) -> str:
    if s["pads"] is None:
        return "none taken"
    return ",".join(f"{k}={v}" for k, v in s["pads"].items())


def table_line(f: dict) -> list[str]:
    st = {s["stage"]: s for s in f["stages"]}
    t = f["tuned"]
    kern = " | ".join(f["kernels"])
    src = f"{t['where']} (us1 {t['us1']}, us2 {t['us2']})" if t else "heuristic"
    before = f.get("base")
    us = tuned_us(f) + (f" (base {before['tuned_us']})" if before and before["tuned_us"] != tuned_us(f) else "")
    return [f["id"], f["path"], kern, us, src, cost.cost_text(f.get("cost")), str(f["block_m"]), str(f["ksplit"]),
            f"{(f['sorting'] or {}).get('unit')}/{(f['sorting'] or {}).get('sorted_ids')}",
            " -> ".join(str(st[i]["act_dtype"]) for i in (1, 2) if i in st),
            " / ".join(_pads_text(st[i]) for i in (1, 2) if i in st),
            str(st[1]["swiglu_limit"]) if 1 in st else "-", str(st[1]["gate_mode"]) if 1 in st else "-",
            str(f["is_shuffled_read"])]


def tuned_us(f: dict) -> str:
    """aiter's own tuned-CSV time for the kernels the row selects (its MI355X figure), or ``heuristic``."""
    t = f.get("tuned")
    return f"{t['us']} us" if t and t.get("us") not in (None, "") else "heuristic"


TABLE_HEAD = ["row", "path", "kernels (stage 1 | stage 2)", "MI355X us (tuned CSV)", "CSV file:line",
              "weights+scales read (R)", "block_m", "ksplit", "sort unit/ids",
              "act dtype s1 -> s2", "pad s1 / s2", "swiglu_limit s1", "gate mode s1", "is_shuffled"]


def format_table(fs: list[dict], fmt: str = "text") -> str:
    lines = [table_line(f) if not f.get("error") else [f["id"], "error", f["error"]] + [""] * (len(TABLE_HEAD) - 3) for f in fs]
    if fmt == "markdown":
        out = ["| " + " | ".join(TABLE_HEAD) + " |", "|" + " --- |" * len(TABLE_HEAD)]
        out += ["| " + " | ".join(x.replace("|", "/") for x in ln) + " |" for ln in lines]
        return "\n".join(out)
    return "\n".join("  ".join(ln) for ln in [TABLE_HEAD, *lines])
