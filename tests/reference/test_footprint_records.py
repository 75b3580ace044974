"""The footprint model's records and edges, pinned by value (fp4moe/reference/footprint.py):

- the non-routed terms of every assumption, on a row whose sizes are no multiple of the fp8
  block (128) so every ceiling shows, each figure an ``int``;
- ``to_dict`` of a layer, a tensor and a term: every key with its value;
- the budget fixture is what the model computes today, ``pad_summary`` per row;
- the overrides' and options' boundaries (hidden 0 / 32, align 1), their messages;
- ``extrapolate_experts`` on unshuffled measurements and on a measurement that does not divide.
"""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest

from fp4moe.reference import footprint as fp

#: a row with sizes off every block: S = 3000 / 8 = 375 shared columns per rank, H = 7200
ODD = SimpleNamespace(model=SimpleNamespace(moe_intermediate=3000, hidden=7200, routed_experts=10), tp=8)
SHARED_WHY = "ASSUMED 1 shared expert(s) of width 3000, TP-sharded /8, {}"
ROUTER_WHY = "ASSUMED router gate replicated on every rank, {}"

SHARED_TERMS = {
    "bf16": [("shared.gate_up", (750, 7200), "bf16", 2 * 750 * 7200), ("shared.down", (7200, 375), "bf16", 2 * 7200 * 375)],
    "mxfp4": [("shared.gate_up", (750, 3600), "fp4x2", 2_700_000), ("shared.gate_up_scale", (750, 225), "e8m0", 168_750),
              ("shared.down", (7200, 187), "fp4x2", 1_350_000), ("shared.down_scale", (7200, 11), "e8m0", 84_375)],
    # gate and up: two grids of ceil(375 / 128) = 3 row blocks; ceil(7200 / 128) = 57 column blocks
    "fp8-block128": [("shared.gate_up", (750, 7200), "fp8_e4m3", 5_400_000), ("shared.gate_up_scale_inv", (6, 57), "fp32", 4 * 342),
                     ("shared.down", (7200, 375), "fp8_e4m3", 2_700_000), ("shared.down_scale_inv", (57, 3), "fp32", 4 * 171)],
    "none": [],
}
ROUTER_TERMS = {"bf16": [("router.weight", (10, 7200), "bf16", 144_000)],
                "fp32": [("router.weight", (10, 7200), "fp32", 288_000)], "none": []}
BIAS_TERM = ("router.e_score_correction_bias", (10,), "fp32", 40)


def _rows(terms):
    return [(t.name, t.shape, t.dtype, t.nbytes) for t in terms]


@pytest.mark.parametrize("assumption", fp.all_non_routed_assumptions(), ids=lambda a: a.label)
def test_every_non_routed_term_is_exact_and_an_integer(assumption):
    terms = assumption.terms(ODD)
    want = SHARED_TERMS[assumption.shared] + ROUTER_TERMS[assumption.router] + ([BIAS_TERM] if assumption.router_bias else [])
    assert _rows(terms) == want
    for t in terms:
        assert all(type(d) is int for d in t.shape) and type(t.nbytes) is int, t
        shared = t.name.startswith("shared.")
        why = SHARED_WHY.format(assumption.shared) if shared else ROUTER_WHY.format(assumption.router)
        assert t.assumption == why + (" + fp32 bias" if t.name.endswith("_bias") else "")


def test_the_assumptions_are_every_combination_but_a_bias_without_a_router():
    got = {(a.shared, a.router, a.router_bias) for a in fp.all_non_routed_assumptions()}
    assert len(got) == 4 * 3 * 2 - 4 and len(fp.all_non_routed_assumptions()) == len(got)
    assert not any(b and r == "none" for _, r, b in got) and ("none", "bf16", True) in got


def test_a_shared_width_that_tp_does_not_divide_is_refused_by_name():
    cfg = SimpleNamespace(model=SimpleNamespace(moe_intermediate=3001, hidden=7200, routed_experts=10), tp=8)
    with pytest.raises(ValueError, match=r"^shared expert width 3001 not divisible by --tp 8$"):
        fp.NonRoutedAssumption(shared="bf16").terms(cfg)
    with pytest.raises(ValueError, match=r"^router dtype 'fp16' unknown; valid: none, bf16, fp32$"):
        fp.NonRoutedAssumption(router="fp16")


def test_records_as_dicts():
    lf = fp.layer_footprint("dsv4-pro", 8, align=256, gu_interleave=False, hidden=256, experts=3,
                            non_routed=fp.NonRoutedAssumption(shared="none", router="bf16"))
    d = lf.to_dict()
    head = {k: d[k] for k in ("label", "model", "tp", "ep", "align", "gu_interleave", "shuffle", "experts_per_rank",
                              "hidden", "intermediate_per_partition", "padded_intermediate", "intermediate_pad", "moe_layers")}
    assert head == {"label": "dsv4-pro-tp8-ep1-align256-nogu", "model": "dsv4-pro", "tp": 8, "ep": 1, "align": 256,
                    "gu_interleave": False, "shuffle": True, "experts_per_rank": 3, "hidden": 256,
                    "intermediate_per_partition": 384, "padded_intermediate": 512, "intermediate_pad": 128, "moe_layers": 61}
    # the router term takes the hidden override
    assert d["non_routed"]["terms"] == {"router.weight": {"shape": [384, 256], "dtype": "bf16", "bytes": 2 * 384 * 256,
                                                          "assumption": ROUTER_WHY.format("bf16")}}
    # w2_scale [3 * 256, 512 / 32 = 16] rows rounded 768 -> 768, w13_scale [3 * 1024, 8]
    assert d["tensors"]["w2_scale"] == {"shape": [3, 256, 16], "bytes": 3 * 256 * 16, "shuffled_shape": [768, 16],
                                        "shuffled_bytes": 768 * 16}
    assert d["tensors"]["w13"] == {"shape": [3, 1024, 128], "bytes": 3 * 1024 * 128, "shuffled_shape": [3, 1024, 128],
                                   "shuffled_bytes": 3 * 1024 * 128}
    assert all(type(x) is int for t in lf.tensors for x in (*t.shape, *t.shuffled_shape))
    layer = {"routed_before_shuffle": lf.routed_bytes_before_shuffle, "routed": lf.routed_bytes,
             "shuffle_growth": lf.shuffle_growth_bytes, "unpadded": lf.unpadded_bytes, "waste": lf.waste_bytes,
             "total_with_non_routed": lf.layer_bytes}
    assert d["per_layer"] == {**{k: fp.units(v) for k, v in layer.items()}, "waste_pct": lf.waste_pct}
    assert d["non_routed"]["per_layer"] == fp.units(2 * 384 * 256) and d["non_routed"]["assumption"] == "shared=none,router=bf16"
    model = {"routed_before_shuffle": lf.routed_bytes_before_shuffle * 61, "routed": lf.routed_bytes * 61,
             "waste": lf.waste_bytes * 61, "total_with_non_routed": lf.layer_bytes * 61}
    assert d["per_model"] == {k: fp.units(v) for k, v in model.items()}
    assert lf.waste_bytes > 0  # the align-256 pad: 128 channels of each expert


def test_the_budget_fixture_is_what_the_model_computes():
    assert fp.budget_entries_for_today() == [dataclasses.asdict(e) for e in fp.load_budget()]


@pytest.mark.parametrize("args, want", [(("dsv4-pro", 8), (384, 384, 0)), (("dsv4-pro", 8, 1, 256), (384, 512, 128)),
                                        (("dsv4-pro", 8, 2), (768, 768, 0)), (("dsv4-flash", 16, 1, 256), (128, 256, 128))])
def test_pad_summary_per_row(args, want):
    assert fp.pad_summary(*args) == want


def test_override_and_option_boundaries():
    assert fp.layer_footprint("dsv4-pro", 8, hidden=32).hidden == 32  # the smallest valid hidden
    with pytest.raises(ValueError, match=r"^hidden override must be a positive multiple of 32, got 0$"):
        fp.layer_footprint("dsv4-pro", 8, hidden=0)
    assert fp.layer_footprint("dsv4-pro", 8).gu_interleave is True  # the default
    assert fp.layer_footprint("dsv4-pro", 8, gu_interleave=1).gu_interleave is True
    assert fp.padded_intermediate(384, 1) == 384  # align 1 is a positive integer
    with pytest.raises(ValueError, match=r"^--align must be a positive integer, got 0; valid: 128, 256$"):
        fp.padded_intermediate(384, 0)


def test_budget_violation_names_both_growths():
    e = fp.BudgetEntry("m", 8, 1, 128, True, "budget", 100, 1000)
    assert fp.budget_violation(e, 100, 10) is None
    assert fp.budget_violation(e, 101, 10) == ("m-tp8-ep1-align128-gu: per layer 101 B > budget 100 B (+1 B, +1.000%); "
                                               "per model 1,010 B > budget 1,000 B (+10 B, +1.000%)")


def test_a_budget_file_keys_rows_by_gu_interleave_and_names_itself(tmp_path):
    row = {"model": "dsv4-pro", "tp": 8, "ep": 1, "align": 128, "role": "budget", "max_bytes_per_layer": 1,
           "max_bytes_per_model": 61}
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps({"entries": [dict(row, gu_interleave=True), dict(row, gu_interleave=False)]}))
    assert [e.gu_interleave for e in fp.load_budget(ok)] == [True, False]
    dup = tmp_path / "dup.json"
    dup.write_text(json.dumps({"entries": [dict(row, gu_interleave=True), dict(row, gu_interleave=True)]}))
    with pytest.raises(Exception, match="footprint budget file"):
        fp.load_budget(dup)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"entries": [dict(row, gu_interleave="true")]}))
    with pytest.raises(Exception, match="footprint budget file"):
        fp.load_budget(bad)


def test_extrapolation_of_unshuffled_measurements_is_linear():
    processed = fp.run_weight_path("dsv4-pro", 8, experts=2, hidden=256, shuffle=False)
    m = fp.measure_processed(processed)
    got = fp.extrapolate_experts(m, 2, 6, gu_interleave=False)  # a 3-D scale: linear even with shuffle=True
    assert got == {k: v.nbytes * 3 for k, v in m.items()} and all(type(v) is int for v in got.values())
    assert fp.extrapolate_experts(m, 2, 6, gu_interleave=True, shuffle=False) == got
    bad = {**m, "w2_scale": fp.MeasuredTensor("w2_scale", (1, 3, 1), 3)}
    with pytest.raises(ValueError, match=r"^w2_scale: 3 bytes not divisible by 2 experts$"):
        fp.extrapolate_experts(bad, 2, 6, gu_interleave=False)
    bad = {**m, "w13": fp.MeasuredTensor("w13", (1, 3, 1), 3)}
    with pytest.raises(ValueError, match=r"^w13: 3 bytes not divisible by 2 experts$"):
        fp.extrapolate_experts(bad, 2, 6, gu_interleave=False)


def test_measured_row_bytes_default_to_the_gu_interleaved_layout():
    from fp4moe.model.catalogue import ModelSpec, ParallelConfig

    # E * H = 3 * 384 scale rows: no multiple of 256, so the two scale layouts differ in size
    toy = ModelSpec("toy", "toy", hidden=384, moe_intermediate=128, routed_experts=3, top_k=1, moe_layers=2,
                    tp=(1,), ep=(1,))
    cfg = ParallelConfig(toy, 1, 1)
    gu = fp.layer_footprint(toy, 1, 1, 128, True).routed_bytes
    assert fp.measured_row_bytes(cfg) == gu != fp.layer_footprint(toy, 1, 1, 128, False).routed_bytes
    assert fp.measured_row_bytes(cfg, gu_interleave=False) == fp.layer_footprint(toy, 1, 1, 128, False).routed_bytes


def test_the_shuffled_w13_scale_shape_follows_the_layout_where_the_rows_are_no_multiple_of_256():
    # dsv4-pro TP16 at align 64: P = 192, one expert's w13 scale has 2P = 384 rows
    gu = fp.layer_footprint("dsv4-pro", 16, align=64, experts=1)
    assert gu.tensor("w13_scale").shuffled_shape == (384, 224)
    assert fp.layer_footprint("dsv4-pro", 16, align=64, experts=1, gu_interleave=False).tensor("w13_scale").shuffled_shape == (512, 224)


def test_the_fp8_gate_up_scale_grid_is_two_grids_of_its_own():
    # S = 300: two grids of ceil(300 / 128) = 3 row blocks each, not ceil(600 / 128) = 5
    cfg = SimpleNamespace(model=SimpleNamespace(moe_intermediate=2400, hidden=7200, routed_experts=10), tp=8)
    terms = {t.name: t for t in fp.NonRoutedAssumption(router="none").terms(cfg)}
    assert terms["shared.gate_up_scale_inv"].shape == (6, 57) and terms["shared.down_scale_inv"].shape == (57, 3)


def test_the_real_weight_path_run_defaults_and_measures():
    processed = fp.run_weight_path("dsv4-pro", 8, experts=1, hidden=256)
    assert (processed.intermediate, processed.gu_interleave, processed.shuffled) == (384, True, True)
    m = fp.measure_processed(processed)
    assert {k: (v.name, v.shape, v.nbytes) for k, v in m.items()} == {
        "w13": ("w13", (1, 768, 128), 768 * 128), "w13_scale": ("w13_scale", (768, 8), 768 * 8),
        "w2": ("w2", (1, 256, 192), 256 * 192), "w2_scale": ("w2_scale", (256, 16), 256 * 16)}
    full = fp.extrapolate_experts(m, 1, 5, gu_interleave=True)
    assert all(type(v) is int for v in full.values())


def test_a_broken_budget_file_error_starts_with_what_it_is(tmp_path):
    bad = tmp_path / "b.json"
    bad.write_text(json.dumps({"entries": [{"model": "x"}]}))
    with pytest.raises(Exception, match=rf"^footprint budget file {bad}: entries\[0\]"):
        fp.load_budget(bad)
