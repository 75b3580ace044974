"""The parent side of driving SGLang: inputs, one child run, and what it left behind.

For each catalogue row (default: DeepSeek-V4-Pro and -Flash at TP 8 and 16) the parent
writes a real DeepSeek-V4-format safetensors checkpoint of the row's layer scaled down in
experts and hidden size, with the real per-partition intermediate ``I_p`` (``fp4moe.model.checkpoint``
writer), and seeded tokens and routing. One child (``python -m fp4moe.targets.sglang.child.drive``, through
``fp4moe.infra.runner.run_judged``) drives every row through the SGLang under test and returns its
record (``fp4moe.targets.sglang.record``) plus the tensors SGLang made.
Nothing of SGLang, its stubs or its patches is imported here.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import torch

from fp4moe.infra import files, runner
from fp4moe.infra.errors import GateCannotRun
from fp4moe.infra.files import read_text_bounded
from fp4moe.model.catalogue import parallel_config
from fp4moe.model.checkpoint import load_moe_layer, write_dsv4_checkpoint
from fp4moe.reference.inputs import make_tokens
from fp4moe.targets.sglang import CHILD_TIMEOUT_S, record, router_numerics
from fp4moe.targets.sglang.modes import MODES, Mode
from fp4moe.targets.sglang.source import (
    FP8_FILE,
    SGLangSource,
    has_fp4_aiter_branch,
    install_hint,
    missing_deps,
    missing_module_line,
)

DEFAULT_ROWS = (("dsv4-pro", 8), ("dsv4-pro", 16), ("dsv4-flash", 8), ("dsv4-flash", 16))
#: Scaled-down row: real I_p, fewer experts, smaller hidden (H/32 = 16 scale columns, so the
#: gfx950 scale shuffle tiles it like the full model's 7168/32 = 224).
SCALED_EXPERTS, SCALED_HIDDEN, TOP_K, TOKENS = 4, 512, 2, 16
#: DeepSeek-V4 config.json ``swiglu_limit`` (both -Pro and -Flash).
DSV4_SWIGLU_LIMIT = 10.0


@dataclass(frozen=True)
class Row:
    model: str
    tp: int
    experts: int = SCALED_EXPERTS
    hidden: int = SCALED_HIDDEN
    #: the layer's ``fp8_activations`` (what SGLang's deepseek_v4.py sets for deepseek_v41
    #: checkpoints): the runner passes ``quant_dtype_a`` = fp8 and aiter runs a8w4
    fp8_activations: bool = False
    #: expert parallelism of the routing: rank 0 holds ``experts`` of ``experts * ep`` global
    #: experts; the tokens carry global ids and ``expert_mask`` has zeros for the others
    ep: int = 1
    #: None: the checkpoint holds rank 0's partition (I_p rows), copied into SGLang's parameters.
    #: r: the checkpoint holds the whole layer (I = I_p * tp) and SGLang's own
    #: ``FusedMoE.weight_loader`` takes TP rank r's shard (fp4moe.targets.sglang.child.layer.sglang_loader)
    tp_rank: int | None = None
    #: None: the real per-partition intermediate I_p; n: a scaled-down one, not a multiple of
    #: the alignment, so the row pads (every model, at TP and EP, gets a padded row)
    intermediate: int | None = None
    #: tokens of the batch (ROW_TOKENS: each default row on one side of a path switch)
    tokens: int = TOKENS

    @cached_property
    def pc(self):
        """The catalogue's parallel config, read once per row: a drive in a worker thread never
        reads the catalogue again while the main thread may be swapping it (the data-file tests)."""
        return parallel_config(self.model, self.tp, 1)

    @property
    def ip(self) -> int:
        return self.intermediate or self.pc.intermediate_per_partition

    @property
    def label(self) -> str:
        return f"{self.model}-tp{self.tp}" + ("-a8w4" if self.fp8_activations else "") + (f"-ep{self.ep}" if self.ep > 1 else "") \
            + (f"-rank{self.tp_rank}" if self.tp_rank is not None else "") + (f"-ip{self.intermediate}" if self.intermediate else "")

    @property
    def expert_mask(self) -> list[int]:
        return [1] * self.experts + [0] * (self.experts * (self.ep - 1))


#: Variants of the default rows: SGLang's a8w4 path (fp8 activations reaching fused_moe), an
#: expert-parallel routing (mask with zeros, global ids), and the whole layer's checkpoint sharded
#: by SGLang's own expert weight loader for a rank other than 0.
#: The padded rows: at align 128 only DeepSeek-V4-Pro TP16 (I_p 192) pads among the real
#: shapes; these scale I_p down to a non-multiple of 128 for Flash at TP and for both models
#: under EP (320 -> 384, 96 -> 128, 160 -> 256).
VARIANT_ROWS = (Row("dsv4-pro", 8, fp8_activations=True), Row("dsv4-flash", 16, ep=2, intermediate=96),
                Row("dsv4-flash", 8, tp_rank=5), Row("dsv4-flash", 8, intermediate=320),
                Row("dsv4-pro", 8, ep=2, intermediate=160))


#: Token counts of the default rows: on both sides of every token-count threshold where SGLang
#: 0.5.23 or aiter e4048607 switch paths for this layer (scaled rows: top-k 2, 4 local experts;
#: P = tokens x top-k). Every row also runs an empty batch (SGLang's runner returns early at 0
#: tokens, moe_runner/aiter.py ``hidden_states.shape[0] == 0``). docs/sglang.md lists them.
ROW_TOKENS = {
    "dsv4-pro-tp16": 1,  # decode; aiter get_ksplit: P <= experts (fused_moe.py:1262)
    "dsv4-flash-tp8": 3,  # P 6 > 4 experts: no k-split
    "dsv4-flash-tp16": 32,  # SGLang small sort: P 64 <= 64 (moe_sorting_small.py:384)
    "dsv4-pro-tp8-a8w4": 33,  # P 66 > 64; fp8 activations below aiter's bf16/fp8 bound
    # aiter use_nt is asked with the padded count (get_2stage_cfgs(get_padded_M(M)), fused_moe.py:882,
    # :2425, :1248): 64 -> 64, 64 x 2 // 4 = 32 < 64: non-temporal loads; 65..128 -> 128: none
    "dsv4-flash-tp8-ip320": 64,
    "dsv4-pro-tp8-ep2-ip160": 128,  # padded 128: no nt; P 256 <= 256 (moe_sorting_small.py:378, :555)
    "dsv4-flash-tp8-rank5": 129,  # P 258 > 256
    "dsv4-flash-tp16-ep2-ip96": 255,  # AITER_BF16_FP8_MOE_BOUND 256: bf16 activations (fused_moe.py:768, :792)
    "dsv4-pro-tp8": 256,  # at the bound: interleaved gate/up on gfx950 runs a8w4 (fp8 activations)
}


def with_tokens(row: Row) -> Row:
    """``row`` with its ROW_TOKENS count (rows not listed keep TOKENS)."""
    import dataclasses

    return dataclasses.replace(row, tokens=ROW_TOKENS.get(row.label, row.tokens))


@dataclass
class Drive:
    """One child run: its record, the tensors per row, and the inputs the parent made."""

    source: SGLangSource
    aiter_src: str | None
    mutant: str | None
    rows: list[Row]
    record: dict
    work: Path
    seconds: float
    tensors: dict = field(default_factory=dict)  # label -> {"processed": {...}, "output": T}
    inputs: dict = field(default_factory=dict)  # label -> {"checkpoint": dir, "tokens": (x, w, ids)}


def default_labels() -> list[str]:
    """Labels of the rows ``parse_rows(None, None)`` drives (the pytest parametrisation)."""
    return [Row(m, t).label for m, t in DEFAULT_ROWS] + [v.label for v in VARIANT_ROWS]


def seed_of(row: Row) -> int:
    return 1000 + 17 * row.tp + (0 if row.model == "dsv4-pro" else 7) + 101 * row.fp8_activations + 211 * (row.ep - 1) + 307 * (row.tp_rank or 0) + 401 * (row.intermediate or 0)


def write_inputs(row: Row, work: Path) -> dict:
    ip = row.ip
    ckpt = work / f"ckpt-{row.label}"
    full_i = ip if row.tp_rank is None else ip * row.tp
    write_dsv4_checkpoint(ckpt, hidden=row.hidden, intermediate=full_i, experts=row.experts, seed=seed_of(row))
    write_model_config(ckpt, row)
    x, w, ids = telling_tokens(row)
    tok = work / f"tokens-{row.label}.pt"
    torch.save({"hidden_states": x, "topk_weights": w, "topk_ids": ids, **routing_inputs(row)}, tok)
    spec = row.pc.model
    return {
        "label": row.label, "model": row.model, "tp": row.tp, "experts": row.experts, "hidden": row.hidden,
        "intermediate_per_partition": ip, "top_k": TOP_K, "checkpoint": str(ckpt), "tokens": str(tok),
        "fp8_activations": row.fp8_activations, "expert_mask": row.expert_mask, "tp_rank": row.tp_rank,
        "routed_scaling_factor": ROUTED_SCALING,
        "full": {"experts": row.pc.local_experts, "hidden": spec.hidden, "intermediate_per_partition": row.pc.intermediate_per_partition},
    }


#: the row's model config (written into the checkpoint's config.json beside n_routed_experts;
#: the gate's expectations are read from there, never from what SGLang passed): DeepSeek-V4
#: ``swiglu_limit`` 10; ``model_type`` ``deepseek_v41`` where the row asks for MXFP8 activations
#: (what SGLang's deepseek_v4.py turns into ``fp8_activations``), else ``deepseek_v4``;
#: ``routed_scaling_factor``: not in this project's catalogue for DeepSeek-V4, so a stand-in
#: (ROUTED_SCALING) != 1 that makes the top-k weights fused_moe gets sum to it, not to 1
ROUTED_SCALING = 1.5
#: tokens scaled by CLAMP_BOOST (a power of two: exact in bf16) so their gate/up
#: pre-activations pass the swiglu clamp (|pre-act| ~ 2 at the rows' std-0.02 weights -> ~14 > 10)
CLAMP_BOOST, CLAMP_TOKENS = 8.0, 4
#: tokens whose two top-k weights are tied (equal)
TIE_TOKENS = (0, 1)


def tied_tokens(tokens: int) -> tuple:
    """TIE_TOKENS that leave the batch at least one untied token (a tie of two weights summing
    to ROUTED_SCALING is 0.75 each, exact in bf16: the untied ones must show a bf16 cast)."""
    return TIE_TOKENS[:max(0, tokens - 1)]


def model_config(row: Row) -> dict:
    return {"model_type": "deepseek_v41" if row.fp8_activations else "deepseek_v4", "swiglu_limit": DSV4_SWIGLU_LIMIT,
            "routed_scaling_factor": ROUTED_SCALING, "hidden_act": "silu", "num_experts_per_tok": TOP_K}


def write_model_config(ckpt: Path, row: Row) -> None:
    cfg_file = ckpt / "config.json"
    cfg = json.loads(read_text_bounded(cfg_file))
    cfg.update(model_config(row))
    files.atomic_write_json(cfg_file, cfg)


def telling_tokens(row: Row):
    """Seeded tokens and routing that expose transformations: top-k weights summing to
    ROUTED_SCALING (a renormalisation shows), float32 values that bf16 cannot hold (a bf16
    cast shows), tied weights on TIE_TOKENS, and the last CLAMP_TOKENS tokens past the clamp."""
    x, w, ids = make_tokens(tokens=row.tokens, hidden=row.hidden, experts=row.experts * row.ep, top_k=TOP_K, seed=seed_of(row) + 1)
    w = w * ROUTED_SCALING
    for t in tied_tokens(row.tokens):
        w[t] = w[t].mean()
    x = x.clone()
    x[-CLAMP_TOKENS:] = (x[-CLAMP_TOKENS:].float() * CLAMP_BOOST).to(torch.bfloat16)
    return x, w, ids


#: The routed batch (``fp4moe.targets.sglang.child.routing``): the row's tokens padded up to the
#: next multiple of ROUTING_PAD past them (a CUDA-graph / DP-attention batch: always >= 1 pad row)
ROUTING_PAD = 8
#: logits of the padded rows: far above any real one, so a padded row routed as a real token
#: takes experts with weights that show
PAD_LOGIT = 50.0
#: real token 0's logits all lie below this (past fp32's log(1 + e^x) underflow edge, -16.64):
#: its weights are still the reference's, renormalised, never 0 or NaN
UNDERFLOW_LOGIT = -20.0


def routing_inputs(row: Row) -> dict:
    """Seeded router logits over the row's global experts for a padded batch, a correction bias,
    and ``num_token_non_padded`` (what SGLang's router gets from the forward batch)."""
    g = torch.Generator().manual_seed(seed_of(row) + 2)
    n_exp, real = row.experts * row.ep, row.tokens
    padded = real + ROUTING_PAD - real % ROUTING_PAD
    logits = torch.randn(padded, n_exp, generator=g, dtype=torch.float64) * 3
    logits[0] = UNDERFLOW_LOGIT - 10 * torch.rand(n_exp, generator=g, dtype=torch.float64)
    logits[real:] = PAD_LOGIT + torch.rand(padded - real, n_exp, generator=g, dtype=torch.float64)
    bias = torch.randn(n_exp, generator=g, dtype=torch.float64) * 0.5
    return {"router_logits": logits.float(), "correction_bias": bias.float(),
            "num_token_non_padded": torch.tensor(real, dtype=torch.int32)}


#: The child, started by module name (never imported here).
CHILD_MODULE = "fp4moe.targets.sglang.child.drive"
#: ``auto``: the child picks gfx950 (real aiter, nothing patched) where it sees a ROCm torch on a
#: gfx950 GPU with an importable aiter, else cpu (fp4moe.targets.sglang.child.drive)
MODE_ENV = "FP4MOE_SGLANG_MODE"


def require_fp4_branch(src) -> None:
    """SGLang's fp8.py has the DeepSeek-V4 FP4 aiter branch, else exit 2 naming the file. The one
    place this is asked (the child imports the same file from the same root), before any input
    is written or any child starts."""
    try:
        found = has_fp4_aiter_branch(src.fp8_text)
    except (OSError, UnicodeDecodeError) as e:
        raise GateCannotRun(f"sglang {src.version} ({src.origin}): {src.root / FP8_FILE}: cannot read it: "
                            f"{type(e).__name__}: {' '.join(str(e).split())[:200]}") from e
    except SyntaxError as e:
        raise GateCannotRun(f"sglang {src.version} ({src.origin}): {src.root / FP8_FILE}: syntax error "
                            f"at line {e.lineno}: {e.msg}") from e
    if not found:
        raise GateCannotRun(f"sglang {src.version} ({src.origin}): {FP8_FILE} has no DeepSeek-V4 FP4 aiter branch "
                            "(no `if _use_aiter and ... is_fp4_expert`)")


def drive(source: SGLangSource, rows, *, aiter_src: str | None = None, mutant: str | None = None,
          work: str | Path | None = None, timeout_s: float = CHILD_TIMEOUT_S, mode: str | None = None,
          deadline=None, aiter_dispatch: bool = False) -> Drive:
    """Run the child once for all rows. GateCannotRun when it produced no verdict. ``deadline``:
    the run's one total (``fp4moe.infra.deadline.Deadline``): the child gets what is left of it; ``aiter_dispatch``:
    the child loads ``aiter_src`` with the dispatch loader and SGLang's call runs into its real
    ``fused_moe`` (fp4moe.targets.sglang.child.dispatch_aiter)."""
    mode = mode or os.environ.get(MODE_ENV) or Mode.AUTO
    if mode not in MODES:
        raise ValueError(f"--mode / {MODE_ENV}: {mode!r} is not one of {', '.join(MODES)}")
    deps = missing_deps()
    if deps:
        raise GateCannotRun(f"the SGLang child needs {', '.join(deps)} installed: {install_hint(deps)}")
    if aiter_src is not None and not (Path(aiter_src) / "aiter" / "ops" / "shuffle.py").is_file() and not (
        Path(aiter_src) / "ops" / "shuffle.py"
    ).is_file():
        raise ValueError(f"--aiter-src {aiter_src}: no aiter/ops/shuffle.py there")
    runner.check_timeout("--timeout", timeout_s, allow_none=False)
    rows = list(rows)
    for r in rows:
        r.pc  # validates (ValueError names the option) before any directory is made
    require_fp4_branch(source)
    own = work is None  # a work directory made here is removed when the drive ends, however it ends
    work = Path(tempfile.mkdtemp(prefix="fp4moe-sglang-")) if own else Path(work)
    try:
        work.mkdir(parents=True, exist_ok=True)
        return _drive_in(source, rows, work, aiter_src=aiter_src, mutant=mutant, timeout_s=timeout_s, mode=mode,
                         deadline=deadline, aiter_dispatch=aiter_dispatch)
    finally:
        if own:
            shutil.rmtree(work, ignore_errors=True)


def _drive_in(source: SGLangSource, rows: list, work: Path, *, aiter_src, mutant, timeout_s, mode,
              deadline=None, aiter_dispatch: bool = False) -> Drive:
    """The child run in ``work``; everything the judge needs is read back into memory (the
    tensors, the tokens and the reference's reading of each checkpoint) so ``work`` can go."""
    from safetensors import SafetensorError

    try:  # a full or read-only TMPDIR is named, not an "internal error" of the checkpoint writer
        reqrows = [write_inputs(r, work) for r in rows]
        req = {"sglang_root": str(source.root), "sglang_version": source.version, "aiter_src": str(Path(aiter_src).resolve()) if aiter_src else None,
               "rows": reqrows, "swiglu_limit": DSV4_SWIGLU_LIMIT, "mutant": mutant, "mode": mode,
               "aiter_dispatch": bool(aiter_dispatch), "router_probes": router_numerics.probes()}
        files.atomic_write_json(work / "request.json", req)
    except (OSError, SafetensorError) as e:
        raise GateCannotRun(f"TMPDIR {tempfile.gettempdir()}: cannot write the SGLang child's inputs in {work}: "
                            f"{' '.join(str(e).split())[:200]} (free space there, or set TMPDIR)") from e
    label = f"sglang {source.version} ({source.origin}): the SGLang child"
    out = runner.run_judged(CHILD_MODULE, [str(work / "request.json")], label=label, timeout_s=timeout_s,
                             schema=record.SCHEMA, env=child_env(os.environ), deadline=deadline)
    rows_rec = record.validate_rows(out.record, label)
    d = Drive(source=source, aiter_src=aiter_src, mutant=mutant, rows=rows, record=dict(out.record, rows=rows_rec),
              work=work, seconds=out.result.seconds)
    for rr in reqrows:
        if f"{rr['label']}.safetensors" in out.files:
            t = out.tensors(f"{rr['label']}.safetensors")  # safetensors: never an object of the child unpickled
            d.tensors[rr["label"]] = {"processed": {k.split(".", 1)[1]: v for k, v in t.items() if k.startswith("processed.")},
                                      "output": t["output"], "moe_path_output": t.get("moe_path_output")}
        tok = torch.load(rr["tokens"], weights_only=True)
        # this project's own reading of the checkpoint (rank 0's partition file as is, or
        # rank tp_rank's TP shard of the whole layer), independent of SGLang's loader
        raw = (load_moe_layer(rr["checkpoint"], 0) if rr["tp_rank"] is None
               else load_moe_layer(rr["checkpoint"], 0, tp_size=rr["tp"], tp_rank=rr["tp_rank"]))
        config = json.loads(read_text_bounded(Path(rr["checkpoint"]) / "config.json"))
        d.inputs[rr["label"]] = {"checkpoint": rr["checkpoint"], "raw": raw, "config": config, "tp": rr["tp"], "tp_rank": rr["tp_rank"],
                                 "tokens": (tok["hidden_states"], tok["topk_weights"], tok["topk_ids"]),
                                 "routing": {k: tok[k] for k in ("router_logits", "correction_bias", "num_token_non_padded")},
                                 "routed_scaling_factor": rr["routed_scaling_factor"]}
    return d


def child_env(environ: dict) -> dict:
    """What the SGLang child gets beyond ``runner.run_judged``'s scratch env: one thread unless told (the
    parent's expectation runs single-threaded too) and no bytecode in the tree under test."""
    return {"OMP_NUM_THREADS": environ.get("OMP_NUM_THREADS", "1"), "PYTHONDONTWRITEBYTECODE": "1"}


#: Seconds for the child to import SGLang's FP4 MoE path (``import_check``): ~2-5 s on a loaded CPU.
IMPORT_CHECK_TIMEOUT_S = 300.0


def import_check(source: SGLangSource, timeout_s: float = IMPORT_CHECK_TIMEOUT_S) -> str | None:
    """Can the child import SGLang's FP4 MoE modules (``fp8``, the aiter runner) with its stubs?
    None when it can, else one line naming what failed (a missing package with its extra).
    What ``pytest --require sglang`` runs before any test (``fp4moe.targets.capability_probes``)."""
    deps = missing_deps()
    if deps:
        return f"{source.origin}: the SGLang child needs {', '.join(deps)} installed: {install_hint(deps)}"
    label = f"sglang {source.version} ({source.origin}): the SGLang child"
    with tempfile.TemporaryDirectory(prefix="fp4moe-sglang-import-") as work:
        req = {"sglang_root": str(source.root), "sglang_version": source.version, "aiter_src": None, "rows": [],
               "mutant": None, "mode": "cpu", "import_only": True}
        files.atomic_write_json(Path(work) / "request.json", req)
        try:
            rec = runner.run_judged(CHILD_MODULE, [str(Path(work) / "request.json")], label=label, timeout_s=timeout_s,
                                     schema=record.SCHEMA, env=child_env(os.environ)).record
        except GateCannotRun as e:
            return str(e)
    if rec["missing_module"]:
        return missing_module_line(rec["missing_module"], source.version)
    if rec["error"] or rec["stage"] != "imported":
        return f"{label} failed at {rec['stage']}: {rec['error']}"
    return None


def parse_rows(model: str | None, tp: int | None, tp_rank: int | None = None) -> list[Row]:
    if tp_rank is not None:  # every selected row through SGLang's loader as rank tp_rank
        rows = [Row(r.model, r.tp, tp_rank=tp_rank) for r in parse_rows(model, tp) if r.label == f"{r.model}-tp{r.tp}"]
        for r in rows:
            if not 0 <= tp_rank < r.tp:
                raise ValueError(f"--tp-rank {tp_rank}: out of range for {r.label} (TP {r.tp})")
        return rows
    if model is None and tp is None:
        return [with_tokens(r) for r in [Row(m, t) for m, t in DEFAULT_ROWS] + list(VARIANT_ROWS)]
    if tp is not None and tp < 1:  # 0 used to mean "the default rows" (falsy)
        raise ValueError(f"--tp {tp}: must be a positive TP size (leave it out for the default rows)")
    models = [model] if model is not None else sorted({m for m, _ in DEFAULT_ROWS})
    tps = [tp] if tp is not None else sorted({t for _, t in DEFAULT_ROWS})
    rows = [Row(m, t) for m in models for t in tps]
    rows += [v for v in VARIANT_ROWS if v.model in models and v.tp in tps]
    rows = [with_tokens(r) for r in rows]
    for r in rows:
        r.pc  # validates (ValueError names the option)
    return rows


if __name__ == "__main__":  # pragma: no cover - debugging aid
    from fp4moe.targets.sglang.source import resolve

    d = drive(resolve(), parse_rows(None, None)[:1])
    print(json.dumps({k: v for k, v in d.record.items() if k != "rows"}, indent=1)[:3000], file=sys.stderr)
