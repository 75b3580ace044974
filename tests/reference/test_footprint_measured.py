"""The byte model equals what the real weight path allocates.

``fp4moe.reference.weight_path.process_fp4_moe_weights`` runs on seeded uint8 raw tensors with the real
per-rank I_p of every catalogue row, at a reduced expert count and hidden size so it is fast;
the model is asked about the SAME configuration (``experts`` / ``hidden`` overrides) and must
agree on every tensor's shape and nbytes exactly. Scaling to the full expert count is checked
separately, including the non-interleaved 256-row scale rounding that is not linear in E.
"""

from __future__ import annotations

import pytest

from fp4moe.model.catalogue import catalogue_rows
from fp4moe.reference.footprint import ROUTED_TENSORS, extrapolate_experts, layer_footprint, measure_processed, run_weight_path

ROWS = catalogue_rows()
SMALL_E, SMALL_H = 2, 256  # H: smallest hidden every layout accepts (GU weight shuffle: K/2 % 64)


@pytest.mark.parametrize("gu", [True, False], ids=["gu", "nogu"])
@pytest.mark.parametrize("align", [128, 256])
@pytest.mark.parametrize("cfg", ROWS, ids=[c.label for c in ROWS])
def test_model_equals_measured_nbytes(cfg, align, gu):
    processed = run_weight_path(cfg.model, cfg.tp, cfg.ep, align, gu, experts=SMALL_E, hidden=SMALL_H, seed=cfg.tp)
    measured = measure_processed(processed)
    fp = layer_footprint(cfg.model, cfg.tp, cfg.ep, align, gu, experts=SMALL_E, hidden=SMALL_H)
    for name in ROUTED_TENSORS:
        t = fp.tensor(name)
        assert measured[name].shape == t.shuffled_shape, f"{cfg.label} align {align} {name} shape"
        assert measured[name].nbytes == t.shuffled_nbytes, f"{cfg.label} align {align} {name} nbytes"
    assert sum(m.nbytes for m in measured.values()) == fp.routed_bytes
    assert (processed.padded_intermediate, processed.intermediate_pad) == (fp.padded_intermediate, fp.intermediate_pad)


@pytest.mark.parametrize("cfg", [r for r in ROWS if r.model.name == "dsv4-pro" and r.tp == 8], ids=lambda c: c.label)
def test_model_equals_measured_without_shuffle(cfg):
    processed = run_weight_path(cfg.model, cfg.tp, cfg.ep, 256, True, experts=SMALL_E, hidden=SMALL_H, shuffle=False)
    measured = measure_processed(processed)
    fp = layer_footprint(cfg.model, cfg.tp, cfg.ep, 256, True, experts=SMALL_E, hidden=SMALL_H, shuffle=False)
    assert {n: m.shape for n, m in measured.items()} == {t.name: t.shape for t in fp.tensors}
    assert sum(m.nbytes for m in measured.values()) == fp.routed_bytes == fp.routed_bytes_before_shuffle


# Pro TP16: I_p = 192. Without GU-interleave, align 64 keeps P = 192 so w13's per-expert scale
# rows 2P = 384 are NOT a multiple of 256, and hidden 64 gives w2 rows H = 64: the shuffle rounds
# E*N up to 256, so bytes are not linear in E (64 is the smallest hidden the plain shuffle takes).
# The GU-interleaved shuffle needs K/2 % 64 == 0 (P, H multiples of 128) and never rounds rows.
SHAPES = {False: dict(align=64, hidden=64), True: dict(align=128, hidden=128)}


def _measured_total(gu: bool, experts: int) -> int:
    s = SHAPES[gu]
    processed = run_weight_path("dsv4-pro", 16, 1, s["align"], gu, experts=experts, hidden=s["hidden"], seed=experts)
    return measure_processed(processed)


@pytest.mark.parametrize("gu", [False, True], ids=["nogu", "gu"])
def test_scale_rows_rounding_is_modelled_exactly_at_several_expert_counts(gu):
    per_e = {}
    for e in (1, 2, 3):
        measured = sum(m.nbytes for m in _measured_total(gu, e).values())
        fp = layer_footprint("dsv4-pro", 16, 1, SHAPES[gu]["align"], gu, experts=e, hidden=SHAPES[gu]["hidden"])
        assert measured == fp.routed_bytes, f"E={e}"
        per_e[e] = measured
    linear = per_e[2] - per_e[1] == per_e[3] - per_e[2] == per_e[1]
    # without GU, rows: w13 E*384 -> 512, 768, 1280; w2 E*64 -> 256 each: visibly non-linear
    assert linear is gu


@pytest.mark.parametrize("gu", [False, True], ids=["nogu", "gu"])
def test_extrapolating_a_small_measurement_equals_measuring_the_bigger_one(gu):
    small, big = _measured_total(gu, 1), _measured_total(gu, 3)
    assert extrapolate_experts(small, 1, 3, gu_interleave=gu) == {n: m.nbytes for n, m in big.items()}


def test_extrapolation_to_full_size_equals_model():
    """Measured at 1 expert with the real hidden, scaled to the real expert count, without GU
    (the budget test does every row with GU); TP >= 8 without EP keeps one expert < 4 MB."""
    for cfg in [r for r in ROWS if r.tp >= 8 and r.ep == 1]:
        processed = run_weight_path(cfg.model, cfg.tp, cfg.ep, 256, False, experts=1, seed=0)
        full = extrapolate_experts(measure_processed(processed), 1, cfg.local_experts, gu_interleave=False)
        assert sum(full.values()) == layer_footprint(cfg.model, cfg.tp, cfg.ep, 256, False).routed_bytes, cfg.label


def test_extrapolation_refuses_a_measurement_that_breaks_the_shuffle_rule():
    measured = measure_processed(run_weight_path("dsv4-pro", 16, 1, 64, False, experts=1, hidden=64))
    # claim it was interleaved: rows 512 != 1 * 384 -> the rule does not fit, say so
    with pytest.raises(ValueError, match="w13_scale: measured rows 512"):
        extrapolate_experts(measured, 1, 384, gu_interleave=True)


def test_measuring_leaves_nothing_modified():
    """run_weight_path builds its own inputs; the record it returns is a fresh allocation."""
    a = run_weight_path("dsv4-flash", 8, 1, 128, True, experts=1, hidden=256, seed=7)
    b = run_weight_path("dsv4-flash", 8, 1, 128, True, experts=1, hidden=256, seed=7)
    assert all(getattr(a, n).equal(getattr(b, n)) for n in ROUTED_TENSORS)  # seeded: reproducible
    assert int(a.w13.max()) > 0  # not all zeros
