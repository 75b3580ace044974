"""The ``dispatch`` group of ``aiter-check``: run the child, build the table, judge the contracts.

Index: :func:`applies` (the tree's ``aiter/fused_moe.py`` holds the dispatch), :func:`preflight` (a
missing ``csrc/`` folder or file: cannot-run naming it), :func:`run_group` (rows as
``{"check", "result", "detail"}`` dicts plus notes; the known-defects registry applied; with a
base tree, the row-by-row upgrade diff), :func:`diff_tables`.
"""

from __future__ import annotations

from pathlib import Path

from fp4moe.targets.aiter.dispatch import contracts, numerics, table
from fp4moe.targets.aiter.kernels import defects as known_defects

FIXED, KNOWN = "fixed", "known"
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
        return f is not None and DISPATCH_MARK in f.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def preflight(tree: str | Path) -> None:
    """Before any child starts: a tree whose ``fused_moe.py`` holds the dispatch and that lacks
    ``csrc/`` (beside ``aiter/`` or in ``aiter_meta/``), or a file of it fused_moe needs at import,
    is a cannot-run naming the folder or the file."""
    from fp4moe.targets.aiter.dispatch.loader import (
        REQUIRED_CSRC,
        DispatchTreeError,
        csrc_home,
        locate,
    )

    if not applies(tree):
        return
    if csrc_home(tree) is None:
        f = _fused_moe_file(tree).absolute()
        raise DispatchTreeError(f"{f.parent.parent / 'csrc'}: no such folder (nor aiter_meta/csrc/): {f} imports "
                                f"{' and '.join(REQUIRED_CSRC)}; give the checkout that holds both, or --no-dispatch")
    locate(tree)


def tuned_sources(root: Path) -> list[Path]:
    """The tuned CSVs aiter's AITER_CONFIG merge reads (configs/ first, then model_configs/)."""
    return [root / "aiter/configs/tuned_fmoe.csv"] + sorted(
        p for p in (root / "aiter/configs/model_configs").glob("*tuned_fmoe*.csv") if "untuned" not in p.name)


def _tree_facts(tree: Path, scope: table.Scope, timeout_s: float, deadline=None) -> tuple[list[dict], dict]:
    from fp4moe.targets.aiter.dispatch.loader import locate

    root = locate(tree).root  # a missing csrc file: exit 2 naming it, before any child starts
    rows = table.build_rows(root, tuned_sources(root), scope)
    rec, data = table.run_dispatch(str(root), rows, timeout_s=timeout_s, deadline=deadline)
    idx = table.csv_index(root, rec["config_sources"])
    return [table.facts(r.to_child(), d, idx) for r, d in zip(rows, data["rows"])], rec


def apply_registry(rows: list[dict], registry, accepted: bool) -> list[dict]:
    registry = [d for d in registry or [] if known_defects.for_dispatch(d)]  # the kernel group judges the others
    if not registry:
        return rows
    by = {r["check"]: r for r in rows}
    out = list(rows)
    for st in known_defects.match(rows, registry, accepted):
        d = st.defect
        for name in st.failing:
            by[name]["result"] = KNOWN if accepted else by[name]["result"]
            by[name]["detail"] += f" [known defect {d.id}]"
        for name, why in st.differing.items():  # matched by name, failing otherwise: stays FAIL, says why
            by[name]["detail"] += f" [{why}]"
        where = ", ".join(d.aiter_lines)
        if st.state in (known_defects.KNOWN, known_defects.REPRODUCED):
            res, det = (KNOWN if accepted else "FAIL"), f"reproduces ({len(st.failing)} row(s)): {d.summary} [{where}]"
        elif st.state == known_defects.STALE:
            res, det = "FAIL", f"stale: no longer reproduces; remove it from the registry [{where}]"
        elif st.state == known_defects.DIFFERS:
            res, det = "FAIL", f"its rows fail otherwise than registered ({len(st.differing)} row(s)) [{where}]"
        else:
            res, det = "info", "not judged: none of its rows ran"
        out.append({"check": f"known defect: {d.id}", "result": res, "detail": det})
    return out


def diff_tables(head: list[dict], base: list[dict], head_rows: list[dict], base_rows: list[dict]) -> list[dict]:
    """Row by row: kernels / path / tuned CSV row changed (with the CSV's us figures); per contract
    group: ``fixed`` where the head passes what the base failed."""
    out: list[dict] = []
    b_by = {f["id"]: f for f in base}
    changed = []
    for f in head:
        b = b_by.get(f["id"])
        if b is None:
            continue
        ht, bt = (f["tuned"] or {}).get("where", "heuristic"), (b["tuned"] or {}).get("where", "heuristic")
        if (f["path"], f["kernels"], ht) != (b["path"], b["kernels"], bt):
            us = lambda x: f"us {x['tuned']['us']}" if x["tuned"] else "no tuned time"
            changed.append({"check": f"upgrade dispatch: {f['id']}", "result": "info",
                            "detail": f"base {b['path']} {b['kernels']} ({bt}, {us(b)}) -> head {f['path']} {f['kernels']} "
                                      f"({ht}, {us(f)})"})
    out += changed[:MAX_DIFF_ROWS]
    if len(changed) > MAX_DIFF_ROWS:
        out.append({"check": "upgrade dispatch: more rows changed", "result": "info",
                    "detail": f"{len(changed) - MAX_DIFF_ROWS} more row(s) select other kernels (see --json)"})
    base_res = {r["check"]: r["result"] for r in base_rows}
    for r in head_rows:
        if base_res.get(r["check"]) == "FAIL" and r["result"] == "pass":
            out.append({"check": f"upgrade {r['check']}", "result": FIXED, "detail": "base FAIL -> head pass: " + r["detail"]})
    out.append({"check": "upgrade dispatch: rows compared", "result": "info",
                "detail": f"{sum(1 for f in head if f['id'] in b_by)} row(s); {len(changed)} select other kernels"})
    return out


def run_group(tree: str, *, timeout_s: float, registry=None, accepted: bool = False, base: str | None = None,
              scope: table.Scope = table.Scope.DEFAULT, deadline=None,
              numerics_on: bool = True) -> tuple[list[dict], list[str], list[dict]]:
    """(gate rows, notes, the head tree's per-row facts for --json): the contracts on the meta-tensor
    table, then (``numerics_on``) the seeded cases of :mod:`.numerics` in a second child under the
    same deadline, then the registry."""
    preflight(tree)
    fs, rec = _tree_facts(Path(tree), scope, timeout_s, deadline)
    root = Path(rec["tree"])
    rows = contracts.summarise(fs, contracts.cited_lines(root))
    notes = [f"dispatch checks: {rec['tree']}/aiter/fused_moe.py executed unmodified in a child, {rec['rows']} rows "
             f"({scope.value}), meta tensors; a16w4/a8w4 by {table.act_mechanism(root)}; tuned configs merged by aiter's "
             f"own AITER_CONFIG from {len(rec['config_sources'])} CSVs; stand-ins: fp4moe/targets/aiter/dispatch/standins.py"
             + (f"; computing stand-ins: {', '.join(rec['computed'])}" if rec["computed"] else "; recording only")]
    if numerics_on:
        nrows, nnotes = numerics.run_numerics(root, tuned_sources(root), timeout_s=timeout_s, deadline=deadline)
        rows += nrows
        notes += nnotes
    rows = apply_registry(rows, registry, accepted)
    if base:
        bfs, brec = _tree_facts(Path(base), scope, timeout_s, deadline)
        brows = contracts.summarise(bfs, contracts.cited_lines(Path(brec["tree"])))
        rows += [{**r, "check": f"base: {r['check']}"} for r in brows]
        rows += diff_tables(fs, bfs, rows, brows)
        notes.append(f"dispatch base tree: {brec['tree']}, {brec['rows']} rows")
    return rows, notes, fs
