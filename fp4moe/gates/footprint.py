"""The footprint gate: every catalogue row measured through the real weight path against
``fp4moe/data/footprint_budget.json``. Returns a :class:`BudgetVerdict`; no argparse here."""

from __future__ import annotations

from dataclasses import dataclass, field

from fp4moe.infra.errors import GateCannotRun, exit_code_of
from fp4moe.model.catalogue import catalogue_rows
from fp4moe.reference.footprint import BUDGET_FILE, DEFAULT_ALIGN, budget_violation, load_budget, measured_row_bytes


@dataclass
class BudgetVerdict:
    rows: list[dict] = field(default_factory=list)  # row, measured_bytes_per_layer, budget, ok
    failures: list[str] = field(default_factory=list)
    unbudgeted: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return exit_code_of(regressed=bool(self.failures))

    def to_dict(self) -> dict:
        return {"budget_file": str(BUDGET_FILE), "rows": self.rows, "failures": self.failures, "unbudgeted": self.unbudgeted}


def check_budget(rows=None) -> BudgetVerdict:
    """Measure each catalogue row (or each of ``rows``) at the default alignment; a row without
    a budget entry is could-not-run (``GateCannotRun``), unless another row already regressed."""
    entries = {e.key: e for e in load_budget()}
    v = BudgetVerdict()
    for cfg in catalogue_rows() if rows is None else rows:
        key = (cfg.model.name, cfg.tp, cfg.ep, DEFAULT_ALIGN, True)
        entry = entries.get(key)
        if entry is None:  # nothing to judge this row against: could not run, not a regression
            v.unbudgeted.append(f"{cfg.label}: no budget entry in {BUDGET_FILE.name} (add one)")
            continue
        measured = measured_row_bytes(cfg, entry.align, entry.gu_interleave)
        msg = budget_violation(entry, measured, cfg.model.moe_layers)
        v.rows.append({"row": entry.label, "measured_bytes_per_layer": measured, "budget": entry.max_bytes_per_layer,
                       "ok": msg is None})
        if msg:
            v.failures.append(msg)
    return v


def require_judged(v: BudgetVerdict) -> None:
    """Raise ``GateCannotRun`` when rows went unjudged and nothing regressed, or when no row
    was judged at all (a pass over nothing is no pass)."""
    if not v.rows and not v.failures:
        raise GateCannotRun("no catalogue row was measured against the budget: nothing to judge")
    if v.unbudgeted and not v.failures:
        raise GateCannotRun(f"{len(v.unbudgeted)} catalogue row(s) have no budget entry: " + "; ".join(v.unbudgeted))
