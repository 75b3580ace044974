"""Rows and runs for the dispatch tests: the e4048607 tree, catalogue rows by id, the SGLang
gate's scaled rows, one child run (fp4moe.targets.aiter.dispatch.table.run_dispatch)."""

from __future__ import annotations

from pathlib import Path

from fp4moe.targets.aiter.dispatch import table
from fp4moe.targets.aiter.dispatch.loader import REQUIRED_CSRC
from fp4moe.targets.sglang import target as sg

TREE = Path(__file__).resolve().parents[4].parent / "shared" / "aiter" / "e4048607"
HAVE_TREE = (TREE / "aiter" / "fused_moe.py").is_file()
CK_ROW = "dsv4-pro tp8/ep1 align256 a16w4 M=32"
FLY_ROW = "dsv4-pro tp8/ep1 align256 a8w4 M=32"


def scaled(label: str, tokens: int, **over) -> table.Row:
    """An SGLang-gate scaled row (4 local experts, hidden 512, top-k 2, the real I_p padded to 128)."""
    ip = {"dsv4-flash-tp8-ip320": 320}.get(label) or (3072 // 16 if label.startswith("dsv4-pro-tp16") else 2048 // 8)
    P = -(-ip // 128) * 128
    kw = dict(id=f"{label} M={tokens}", model=label, tp=8, ep=1, align=128, act="auto", tokens=tokens,
              experts=sg.SCALED_EXPERTS, hidden=sg.SCALED_HIDDEN, inter=ip, inter_padded=P, topk=sg.TOP_K,
              intermediate_pad=P - ip, swiglu_limit=sg.DSV4_SWIGLU_LIMIT)
    kw.update(over)
    return table.Row(**kw)


def catalogue_rows(ids) -> list[table.Row]:
    rows = {r.id: r for r in table.build_rows(TREE, [TREE / "aiter/configs/tuned_fmoe.csv"], table.Scope.DEFAULT)}
    return [rows[i] for i in ids]


def run(tree: Path, rows: list[table.Row]) -> dict:
    rec, data = table.run_dispatch(str(tree), rows, timeout_s=300)
    idx = table.csv_index(Path(rec["tree"]), rec["config_sources"])
    return {r.id: table.facts(r.to_child(), d, idx) for r, d in zip(rows, data["rows"])}


def fast_rows() -> list[table.Row]:
    from fp4moe.targets.sglang import modes

    b = modes.AITER_DEFAULT_BOUND
    return [*catalogue_rows([CK_ROW, FLY_ROW]),
            scaled("bound", b - 1), scaled("bound", b), scaled("separated", b, gate_mode="separated"),
            scaled("dsv4-pro-tp16", sg.ROW_TOKENS["dsv4-pro-tp16"]), scaled("dsv4-flash-tp8", sg.ROW_TOKENS["dsv4-flash-tp8"]),
            *(scaled("dsv4-flash-tp8-ip320", M, id=f"nt M={M}") for M in (64, 65, 127, 128)),
            scaled("unshuffled", 32, is_shuffled=False),
            scaled("quant_dtype_a", 32, extra={"quant_dtype_a": "torch.float8_e4m3fn"})]




def linked_tree(tmp_path: Path, drop: str | None = None, edit=None, edited: str = "aiter/fused_moe.py") -> Path:
    """A tree of read-only symlinks into TREE (top-level entries of aiter/ and each folder on the
    way to ``edited``), except ``edited`` rewritten by ``edit`` and without the csrc file ``drop``."""
    root = tmp_path / "tree"
    parts = Path(edited).parts
    def mirror(src: Path, dst: Path, depth: int) -> None:
        dst.mkdir(parents=True, exist_ok=True)
        for p in src.iterdir():
            if edit is not None and depth < len(parts) and p.name == parts[depth]:
                if depth == len(parts) - 1:
                    (dst / p.name).write_text(edit(p.read_text()))
                else:
                    mirror(p, dst / p.name, depth + 1)
            else:
                (dst / p.name).symlink_to(p)
    mirror(TREE / "aiter", root / "aiter", 1)
    for rel in REQUIRED_CSRC:
        if rel != drop:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).symlink_to(TREE / rel)
    return root
