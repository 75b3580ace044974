"""The ``dispatch`` group of ``aiter-check``: run the child, build the table, judge the contracts.

Index: :func:`applies` (the tree has ``aiter/fused_moe.py``), :func:`run_group` (rows as
``{"check", "result", "detail"}`` dicts plus notes; the known-defects registry applied; with a
base tree, the row-by-row upgrade diff), :func:`diff_tables`.
"""

from __future__ import annotations

from pathlib import Path

from fp4moe.targets.aiter.dispatch import contracts, table
from fp4moe.targets.aiter.kernels import defects as known_defects

FIXED, KNOWN = "fixed", "known"
#: upgrade rows listed one by one at most; the rest are counted in one row
MAX_DIFF_ROWS = 40


def applies(tree: str | Path) -> bool:
    """The source (a folder holding ``aiter/``, or the ``aiter`` package folder) has ``aiter/fused_moe.py``."""
    p = Path(tree)
    return (p / table.FUSED_MOE).is_file() or (p.name == "aiter" and (p / "fused_moe.py").is_file())


def preflight(tree: str | Path) -> None:
    """Before any child starts: a tree with ``fused_moe.py`` and a ``csrc/`` that lacks a file
    fused_moe needs at import is a cannot-run naming that file (a source with no ``csrc/`` at
    all gets the ``n/a`` row of :func:`no_csrc_row` instead)."""
    from fp4moe.targets.aiter.dispatch.loader import csrc_home, locate

    if applies(tree) and csrc_home(tree) is not None:
        locate(tree)


def no_csrc_row(tree: str | Path) -> dict | None:
    """The ``n/a`` row for a source with ``aiter/fused_moe.py`` but no ``csrc/`` folder (e.g. a copy
    of ``aiter/`` alone): fused_moe cannot be imported, so nothing of the dispatch is judged."""
    from fp4moe.targets.aiter.dispatch.loader import REQUIRED_CSRC, csrc_home

    if not applies(tree) or csrc_home(tree) is not None:
        return None
    return {"check": "dispatch: aiter fused_moe", "result": "n/a",
            "detail": f"{tree}: aiter/fused_moe.py without a csrc/ beside it (nor aiter_meta/csrc/): it imports "
                      f"{' and '.join(REQUIRED_CSRC)}; the dispatch is not judged (--allow-missing accepts it, "
                      "--no-dispatch skips it)"}


def _tree_facts(tree: Path, scope: table.Scope, timeout_s: float, deadline=None) -> tuple[list[dict], dict]:
    from fp4moe.targets.aiter.dispatch.loader import locate

    root = locate(tree).root  # a missing csrc file: exit 2 naming it, before any child starts
    srcs = ["aiter/configs/tuned_fmoe.csv"] + sorted(str(p.relative_to(root)) for p in
                                                     (root / "aiter/configs/model_configs").glob("*tuned_fmoe*.csv")
                                                     if "untuned" not in p.name)
    rows = table.build_rows(root, [root / s for s in srcs], scope)
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
        where = ", ".join(d.aiter_lines)
        if st.state in (known_defects.KNOWN, known_defects.REPRODUCED):
            res, det = (KNOWN if accepted else "FAIL"), f"reproduces ({len(st.failing)} row(s)): {d.summary} [{where}]"
        elif st.state == known_defects.STALE:
            res, det = "FAIL", f"stale: no longer reproduces; remove it from the registry [{where}]"
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
              scope: table.Scope = table.Scope.DEFAULT, deadline=None) -> tuple[list[dict], list[str], list[dict]]:
    """(gate rows, notes, the head tree's per-row facts for --json)."""
    missing = no_csrc_row(tree)
    if missing is not None:
        return [missing], [f"dispatch checks: not run ({missing['detail']})"], []
    fs, rec = _tree_facts(Path(tree), scope, timeout_s, deadline)
    root = Path(rec["tree"])
    rows = contracts.summarise(fs, contracts.cited_lines(root))
    notes = [f"dispatch checks: {rec['tree']}/aiter/fused_moe.py executed unmodified in a child, {rec['rows']} rows "
             f"({scope.value}), meta tensors; a16w4/a8w4 by {table.act_mechanism(root)}; tuned configs merged by aiter's "
             f"own AITER_CONFIG from {len(rec['config_sources'])} CSVs; stand-ins: fp4moe/targets/aiter/dispatch/standins.py"
             + (f"; computing stand-ins: {', '.join(rec['computed'])}" if rec["computed"] else "; recording only")]
    rows = apply_registry(rows, registry, accepted)
    if base:
        bfs, brec = _tree_facts(Path(base), scope, timeout_s, deadline)
        brows = contracts.summarise(bfs, contracts.cited_lines(Path(brec["tree"])))
        rows += [{**r, "check": f"base: {r['check']}"} for r in brows]
        rows += diff_tables(fs, bfs, rows, brows)
        notes.append(f"dispatch base tree: {brec['tree']}, {brec['rows']} rows")
    return rows, notes, fs
