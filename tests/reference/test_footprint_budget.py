"""The footprint budget gate: the real weight path must not grow any catalogue row's bytes.

``fp4moe/data/footprint_budget.json`` holds, per model x (tp, ep), the exact routed bytes per rank
per layer and per model at align 128 + GU-interleave (role "budget", gated), and the align-256
pre-#31450 footprint (role "reference", informative). Each row is measured through
``fp4moe.reference.weight_path`` at one expert with the real hidden and I_p, then scaled to the real
expert count (``extrapolate_experts``, exact including the 256-row scale rounding).
Comparisons are exact integers: a single byte of growth fails.
"""

from __future__ import annotations

import json

import pytest

from fp4moe.model.catalogue import catalogue_rows
from fp4moe.reference.footprint import BUDGET_FILE, BudgetEntry, budget_violation, layer_footprint, load_budget, measured_row_bytes

ROWS = catalogue_rows()
ENTRIES = load_budget()
BUDGET = {e.key: e for e in ENTRIES if e.role == "budget"}
REFERENCE = {e.key: e for e in ENTRIES if e.role == "reference"}


def test_fixture_covers_every_catalogue_row_exactly_once():
    want = {(c.model.name, c.tp, c.ep, 128, True) for c in ROWS}
    assert set(BUDGET) == want
    assert {(m, tp, ep, 256, gu) for (m, tp, ep, _, gu) in want} == set(REFERENCE)
    assert len(ENTRIES) == 2 * len(ROWS)  # no duplicates


@pytest.mark.parametrize("cfg", ROWS, ids=[c.label for c in ROWS])
def test_real_weight_path_stays_within_budget(cfg):
    entry = BUDGET[(cfg.model.name, cfg.tp, cfg.ep, 128, True)]
    measured = measured_row_bytes(cfg, entry.align, entry.gu_interleave, experts_measured=1, seed=cfg.tp)
    msg = budget_violation(entry, measured, cfg.model.moe_layers)
    assert msg is None, f"weight-path footprint grew: {msg}"
    assert entry.max_bytes_per_model == entry.max_bytes_per_layer * cfg.model.moe_layers


def test_budget_is_todays_exact_model_value_and_below_the_pre_31450_reference():
    for key, entry in BUDGET.items():
        model, tp, ep, align, gu = key
        assert entry.max_bytes_per_layer == layer_footprint(model, tp, ep, align, gu).routed_bytes, entry.label
        ref = REFERENCE[(model, tp, ep, 256, gu)]
        assert ref.max_bytes_per_layer >= entry.max_bytes_per_layer, entry.label
    pro8 = BUDGET[("dsv4-pro", 8, 1, 128, True)], REFERENCE[("dsv4-pro", 8, 1, 256, True)]
    # after growth: 1,684,537,344 + 384*7168*4 (w2 scale columns 12 -> 16) vs 2,246,049,792
    assert pro8[0].max_bytes_per_layer == 1_684_537_344 + 384 * 7168 * 4
    assert pro8[1].max_bytes_per_layer == 2_246_049_792


def test_violation_message_names_row_and_growth_in_bytes_and_percent():
    entry = BudgetEntry("dsv4-pro", 8, 1, 128, True, "budget", 1_000_000, 61_000_000)
    assert budget_violation(entry, 1_000_000, 61) is None
    msg = budget_violation(entry, 1_250_000, 61)
    assert "dsv4-pro-tp8-ep1-align128-gu" in msg
    assert "+250,000 B, +25.000%" in msg  # per layer
    assert "+15,250,000 B, +25.000%" in msg  # per model


def test_padding_creeping_back_is_caught():
    """Simulate the regression the gate exists for: align 256 measured against the align-128
    budget for Pro TP8 must fail with the PR's 561,512,448 B less the shuffle growth."""
    cfg = next(c for c in ROWS if c.label == "dsv4-pro-tp8-ep1")
    entry = BUDGET[("dsv4-pro", 8, 1, 128, True)]
    measured = measured_row_bytes(cfg, 256, True, experts_measured=1)
    msg = budget_violation(entry, measured, 61)
    grow = 2_246_049_792 - (1_684_537_344 + 384 * 7168 * 4)
    assert msg is not None and f"+{grow:,} B" in msg


@pytest.mark.parametrize(
    "content,needle",
    [
        ("{not json", "invalid JSON"),
        (json.dumps({"entries": []}), r"entries: \[\] should be non-empty"),
        (json.dumps({"entries": [{"model": "dsv4-pro"}]}), r"entries\[0\]: 'tp' is a required property"),
    ],
)
def test_bad_budget_file_errors_name_the_file(tmp_path, content, needle):
    f = tmp_path / "budget.json"
    f.write_text(content)
    with pytest.raises(ValueError, match=needle) as ei:
        load_budget(f)
    assert str(f) in str(ei.value)
    assert BUDGET_FILE.name == "footprint_budget.json"
