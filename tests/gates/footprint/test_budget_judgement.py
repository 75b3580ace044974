"""The footprint gate's judgement with the measurement stubbed out (the judge, not the bytes):
each row measured at its entry's alignment and layout, held against its own entry, an
unbudgeted row named and skipped (the rows after it still judged), a violation named."""

from types import SimpleNamespace

from fp4moe.gates import footprint as gate
from fp4moe.reference.footprint import DEFAULT_ALIGN, BudgetEntry


def _cfg(name, tp, ep=1, layers=3):
    return SimpleNamespace(model=SimpleNamespace(name=name, moe_layers=layers), tp=tp, ep=ep, label=f"{name}-tp{tp}")


def _entry(name, tp, cap):
    return BudgetEntry(name, tp, 1, DEFAULT_ALIGN, True, "budget", cap, cap * 3)


def test_rows_are_measured_at_their_entry_and_judged_against_it(monkeypatch):
    calls = []
    monkeypatch.setattr(gate, "load_budget", lambda: [_entry("a", 8, 1000), _entry("b", 8, 10)])
    monkeypatch.setattr(gate, "measured_row_bytes", lambda cfg, align, gu: calls.append((cfg.label, align, gu)) or 100)
    v = gate.check_budget([_cfg("a", 8), _cfg("nobudget", 4), _cfg("b", 8)])
    assert calls == [("a-tp8", DEFAULT_ALIGN, True), ("b-tp8", DEFAULT_ALIGN, True)]  # after the unbudgeted row too
    assert v.unbudgeted == ["nobudget-tp4: no budget entry in footprint_budget.json (add one)"]
    assert [(r["measured_bytes_per_layer"], r["budget"], r["ok"]) for r in v.rows] == [(100, 1000, True), (100, 10, False)]
    assert len(v.failures) == 1 and isinstance(v.failures[0], str) and v.failures[0]
    assert v.exit_code == 1
