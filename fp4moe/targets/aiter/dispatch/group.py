"""The ``dispatch`` group of ``aiter-check``: run the child, build the table, judge the contracts.

Index: :func:`applies` (the tree's ``aiter/fused_moe.py`` holds the dispatch), :func:`preflight` (a
missing ``csrc/`` folder or a file the tree reads: cannot-run naming it), :func:`lacking_keywords`
(DeepSeek-V4's keywords an older ``fused_moe`` does not take: the group is ``absent``),
:func:`run_group` (rows as ``{"check", "result", "detail"}`` dicts plus notes; with a base tree,
the row-by-row upgrade diff), :func:`diff_tables`, :func:`attach_base` (each row's time and
bytes before, for ``--json``). Row words are ``results.Result``'s.
"""

from __future__ import annotations

from pathlib import Path

from fp4moe.infra.files import read_text_bounded
from fp4moe.targets.aiter.dispatch import contracts, numerics, table
from fp4moe.targets.aiter.results import Result, TreeLacks

#: upgrade rows listed one by one at most; the rest are counted in one row
MAX_DIFF_ROWS = 40


#: what makes a ``fused_moe.py`` the dispatch these checks execute (a signature stub has none of it)
DISPATCH_MARK = "def get_2stage_cfgs("


def _fused_moe_file(tree: str | Path) -> Path | None:
    p = Path(tree)
    for f in (p / table.FUSED_MOE, p / "fused_moe.py" if p.name == "aiter" else None):
        if f is not None and f.is_file():
            return f
    return None


def applies(tree: str | Path) -> bool:
    """The source (a folder holding ``aiter/``, or the ``aiter`` package folder) has an
    ``aiter/fused_moe.py`` that holds the dispatch (``get_2stage_cfgs``)."""
    f = _fused_moe_file(tree)
    try:
        return f is not None and DISPATCH_MARK in read_text_bounded(f, errors="replace")
    except OSError:
        return False


def preflight(tree: str | Path) -> None:
    """Before any child starts: a tree whose ``fused_moe.py`` holds the dispatch and that lacks
    ``csrc/`` (beside ``aiter/`` or in ``aiter_meta/``), or a file of it fused_moe needs at import,
    or a tuned CSV that is no regular file or past its size cap (``loader.check_tuned_csvs``), is a
    cannot-run naming the folder or the file."""
    from fp4moe.targets.aiter.dispatch.loader import (
        DispatchTreeError,
        check_tuned_csvs,
        csrc_home,
        locate,
        needed_csrc,
    )

    if not applies(tree):
        return
    f = _fused_moe_file(tree).absolute()
    needed = needed_csrc(f.parent.parent)
    if needed and csrc_home(tree) is None:
        raise DispatchTreeError(f"{f.parent.parent / 'csrc'}: no such folder (nor aiter_meta/csrc/): this tree's aiter/ "
                                f"reads {' and '.join(needed)}; give the checkout that holds them, or --no-dispatch")
    check_tuned_csvs(tuned_sources(locate(tree).root))


def tuned_sources(root: Path) -> list[Path]:
    """The tuned CSVs aiter's AITER_CONFIG merge reads (configs/ first, then model_configs/)."""
    from fp4moe.targets.aiter.dispatch.loader import tuned_csvs

    return tuned_csvs(root)


#: the keywords of DeepSeek-V4's call (SGLang's) that every dispatch row passes to ``fused_moe``
CALL_KEYWORDS = ("hidden_pad", "intermediate_pad", "gate_mode", "swiglu_limit")


def lacking_keywords(root: Path) -> list[str]:
    """The keywords of :data:`CALL_KEYWORDS` this tree's ``def fused_moe`` does not take (``ast``)."""
    from fp4moe.targets.aiter.source import function_params

    params = function_params(read_text_bounded(root / table.FUSED_MOE, errors="replace"), "fused_moe") or []
    return [] if any(p.startswith("**") for p in params) else [k for k in CALL_KEYWORDS if k not in params]


def _tree_facts(tree: Path, scope: table.Scope, timeout_s: float, deadline=None) -> tuple[list[dict], dict]:
    from fp4moe.targets.aiter.dispatch.loader import locate

    root = locate(tree).root  # a missing csrc file: exit 2 naming it, before any child starts
    lacking = lacking_keywords(root)
    if lacking:  # an older tree: DeepSeek-V4's call cannot be made (every row would be a TypeError)
        raise TreeLacks(f"{root / table.FUSED_MOE}: fused_moe takes no keyword {', '.join(lacking)} "
                        "(DeepSeek-V4's call passes it)")
    rows = table.build_rows(root, tuned_sources(root), scope)
    rec, data = table.run_dispatch(str(root), rows, timeout_s=timeout_s, deadline=deadline)
    idx = table.csv_index(root, rec["config_sources"])
    return [table.facts(r.to_child(), d, idx) for r, d in zip(rows, data["rows"])], rec


def _bytes(f: dict):
    return (f.get("cost") or {}).get("bytes")


def attach_base(head: list[dict], base: list[dict]) -> None:
    """Each head row's facts get ``base``: the base tree's kernels, tuned-CSV time and bytes read
    for the same row (``--json`` then holds the row's time and cost before and after)."""
    b_by = {f["id"]: f for f in base}
    for f in head:
        b = b_by.get(f["id"])
        if b is not None:
            f["base"] = {"path": b["path"], "kernels": b["kernels"], "tuned_us": table.tuned_us(b), "bytes": _bytes(b),
                         "ratio": (b.get("cost") or {}).get("ratio")}


def diff_tables(head: list[dict], base: list[dict], head_rows: list[dict], base_rows: list[dict]) -> list[dict]:
    """Row by row: kernels / path / tuned CSV row / bytes read changed, with the row's tuned-CSV
    time and cost before and after; per contract group: ``fixed`` where the head passes what the
    base failed. Each head row's facts get their ``base`` (:func:`attach_base`)."""
    from fp4moe.targets.aiter.dispatch.cost import cost_text

    attach_base(head, base)
    out: list[dict] = []
    b_by = {f["id"]: f for f in base}
    changed = []
    for f in head:
        b = b_by.get(f["id"])
        if b is None:
            continue
        ht, bt = (f["tuned"] or {}).get("where", "heuristic"), (b["tuned"] or {}).get("where", "heuristic")
        if (f["path"], f["kernels"], ht, _bytes(f)) != (b["path"], b["kernels"], bt, _bytes(b)):
            side = lambda x, where: f"{x['path']} {x['kernels']} ({where}, {table.tuned_us(x)}; reads {cost_text(x.get('cost'))})"
            changed.append({"check": f"upgrade dispatch: {f['id']}", "result": Result.INFO,
                            "detail": f"base {side(b, bt)} -> head {side(f, ht)}"})
    out += changed[:MAX_DIFF_ROWS]
    if len(changed) > MAX_DIFF_ROWS:
        out.append({"check": "upgrade dispatch: more rows changed", "result": Result.INFO,
                    "detail": f"{len(changed) - MAX_DIFF_ROWS} more row(s) select other kernels or read other bytes "
                              "(see --json: each row's base)"})
    base_res = {r["check"]: r["result"] for r in base_rows}
    for r in head_rows:
        if base_res.get(r["check"]) == Result.FAIL and r["result"] == Result.PASS:
            out.append({"check": f"upgrade {r['check']}", "result": Result.FIXED, "detail": "base FAIL -> head pass: " + r["detail"]})
    out.append({"check": "upgrade dispatch: rows compared", "result": Result.INFO,
                "detail": f"{sum(1 for f in head if f['id'] in b_by)} row(s); {len(changed)} select other kernels or read "
                          "other bytes"})
    return out


def run_group(tree: str, *, timeout_s: float, base: str | None = None,
              scope: table.Scope = table.Scope.DEFAULT, deadline=None,
              numerics_on: bool = True) -> tuple[list[dict], list[str], list[dict]]:
    """(gate rows, notes, the head tree's per-row facts for --json): the contracts on the meta-tensor
    table, then (``numerics_on``) the seeded cases of :mod:`.numerics` in a second child under the
    same deadline (the registry is applied by the gate, once, to every group's rows)."""
    preflight(tree)
    fs, rec = _tree_facts(Path(tree), scope, timeout_s, deadline)
    root = Path(rec["tree"])
    rows = contracts.summarise(fs, contracts.cited_lines(root))
    notes = [f"dispatch checks: {rec['tree']}/aiter/fused_moe.py executed unmodified in a child, {rec['rows']} rows "
             f"({scope.value}), meta tensors; a16w4/a8w4 by {table.act_mechanism(root)}; tuned configs merged by aiter's "
             f"own AITER_CONFIG from {len(rec['config_sources'])} CSVs; stand-ins: fp4moe/targets/aiter/dispatch/standins.py"
             + (f"; computing stand-ins: {', '.join(rec['computed'])}" if rec["computed"] else "; recording only")]
    if numerics_on:
        try:
            nrows, nnotes = numerics.run_numerics(root, tuned_sources(root), timeout_s=timeout_s, deadline=deadline)
        except TreeLacks as e:  # an older tree: the numerics cases read a structure it does not have
            nrows, nnotes = [{"check": "dispatch numerics", "result": Result.ABSENT, "detail": str(e)}], []
        rows += nrows
        notes += nnotes
    if base:
        try:
            bfs, brec = _tree_facts(Path(base), scope, timeout_s, deadline)
        except TreeLacks as e:  # an older base: its dispatch cannot take DeepSeek-V4's call; nothing to compare
            rows.append({"check": "base: dispatch: aiter fused_moe", "result": Result.ABSENT, "detail": str(e)})
            return rows, notes, fs
        brows = contracts.summarise(bfs, contracts.cited_lines(Path(brec["tree"])))
        rows += [{**r, "check": f"base: {r['check']}"} for r in brows]
        rows += diff_tables(fs, bfs, rows, brows)
        notes.append(f"dispatch base tree: {brec['tree']}, {brec['rows']} rows")
    return rows, notes, fs
