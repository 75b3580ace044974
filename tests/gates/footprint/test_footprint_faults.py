"""``fp4moe-gate footprint --check-budget`` against options it cannot judge: ``--check-budget`` ignored ``--model``, ``--tp``, ``--align`` and measured every row,
so ``--model nonexistent`` exited 0. Now each option either selects catalogue rows the budget
holds, or is exit 2 naming it; a selection measures exactly the rows it names.

Every refused case fails before a row is measured, and the accepted selection runs with a
stubbed measurement, so the module is CPU-tier cheap (~0.1 s).
"""

from __future__ import annotations

import json

import pytest

from fp4moe.gates import footprint as footprint_gate
from fp4moe.reference import footprint

pytestmark = pytest.mark.reliability


@pytest.fixture
def no_measure(monkeypatch):
    """Measurement stubbed: every row exactly at its budget (the rows judged are what count)."""
    budget = {(e.model, e.tp, e.ep): e.max_bytes_per_layer for e in footprint.load_budget()}
    monkeypatch.setattr(footprint_gate, "measured_row_bytes",
                        lambda cfg, align, gu, **kw: budget[(cfg.model.name, cfg.tp, cfg.ep)])


@pytest.mark.parametrize("argv, words", [
    (["--model", "nonexistent"], ["unknown model 'nonexistent'"]),
    (["--tp", "3"], ["--tp 3", "catalogue tp values"]),
    (["--model", "dsv4-flash", "--tp", "8", "3"], ["--tp 3", "of dsv4-flash"]),
    (["--align", "999"], ["--align 999"]),
    (["--align", "256"], ["--align 256", "align 128"]),
    (["--ep", "3"], ["--ep 3"]),
    (["--ep", "x"], ["--ep 'x'"]),
    (["--no-shuffle"], ["--no-shuffle"]),
    (["--no-gu-interleave"], ["--no-gu-interleave"]),
    (["--shared", "bf16"], ["--shared"]),
], ids=["model-nonexistent", "tp-3", "tp-3-among-8", "align-999", "align-256", "ep-3", "ep-word", "no-shuffle",
        "no-gu-interleave", "shared"])
def test_check_budget_refuses_what_it_cannot_judge(gate, no_measure, tmp_path, argv, words):
    """footprint --check-budget --model nonexistent / --tp 3 / --align 999 exited 0
    (every row was measured, the options were ignored); a stale --json is replaced."""
    out = tmp_path / "fp.json"
    out.write_text(json.dumps({"gate": "footprint", "status": "pass"}))
    gate("footprint", "--check-budget", *argv, "--json", out).cannot_run(*words)
    assert json.loads(out.read_text())["status"] == "cannot-run"


def test_check_budget_measures_exactly_the_rows_selected(gate, no_measure, tmp_path):
    """The other half of the probe: a valid selection judges those rows, and only those."""
    out = tmp_path / "fp.json"
    r = gate("footprint", "--check-budget", "--model", "dsv4-flash", "--tp", "8", "--json", out)
    assert r.rc == 0, r.err
    rows = [row["row"] for row in json.loads(out.read_text())["rows"]]
    assert rows == ["dsv4-flash-tp8-ep1-align128-gu", "dsv4-flash-tp8-ep8-align128-gu"], rows


def test_check_budget_with_no_row_judged_is_cannot_run(gate, monkeypatch):
    """a catalogue with no rows made --check-budget judge nothing and exit 0."""
    monkeypatch.setattr(footprint_gate, "catalogue_rows", lambda: [])
    gate("footprint", "--check-budget").cannot_run("no catalogue row was measured")
