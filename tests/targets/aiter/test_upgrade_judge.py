"""The upgrade diff's judgement (``fp4moe.targets.aiter.judge.upgrade.compare_trees``) on
synthetic saved outputs, on any machine: each row's word and its exact detail, routing and the
kernel budget at their bounds (exactly at the bound, one ulp above), a NaN on either side, a
shape change, and an output only one tree produced."""

from __future__ import annotations

import math

import pytest
import torch

from fp4moe.reference.kernel_budget import KERNEL_COS_DIST, KERNEL_REL_L2
from fp4moe.targets.aiter.judge import upgrade
from fp4moe.targets.aiter.results import Result

KEY = "routing E256 k6 T3"
IDS = torch.tensor([[0.0, 3.0], [1.0, 2.0], [5.0, 4.0]], dtype=torch.float64)
W = torch.tensor([[1.0, 0.0], [0.5, 0.5], [0.7, 0.3]], dtype=torch.float64)


def _one(head: dict, base: dict, *rows) -> tuple[str, Result, str]:
    (r,) = upgrade.compare_trees(head, base, *rows)
    return r.check, r.result, r.detail


def _rows(result: str) -> list[dict]:
    return [{"check": KEY, "result": result}]


@pytest.mark.parametrize("delta, word", [(0.0, Result.WITHIN), (upgrade.ROUTING_WEIGHT_BOUND, Result.WITHIN),
                                         (math.nextafter(upgrade.ROUTING_WEIGHT_BOUND, 1.0), Result.DIFFER)])
def test_the_same_expert_sets_in_another_order_are_judged_by_the_weights_at_their_bound(delta, word):
    ids_b = IDS.clone()
    ids_b[0] = ids_b[0].flip(0)  # token 0's experts in the other order: the same set
    w_b = W.clone()
    w_b[0, 1] += delta  # 0 + delta: the difference is delta exactly
    got = _one({KEY: torch.stack((IDS, W))}, {KEY: torch.stack((ids_b, w_b))})
    assert got == (f"upgrade: {KEY}", word,
                   f"same expert sets, max weight difference {delta:.1e} (bound {upgrade.ROUTING_WEIGHT_BOUND:.0e})")


@pytest.mark.parametrize("head_row, base_row, word, detail", [
    (None, None, Result.DIFFER, "{det}; vs the tie-proof top-k: head ?, base ?"),
    ("pass", None, Result.DIFFER, "{det}; vs the tie-proof top-k: head pass, base ?"),
    (None, "FAIL", Result.DIFFER, "{det}; vs the tie-proof top-k: head ?, base FAIL"),
    ("pass", "FAIL", Result.FIXED, "DIFFER: {det}; head matches the tie-proof top-k, base does not: the upgrade fixes it"),
    ("FAIL", "pass", Result.DIFFER, "{det}; vs the tie-proof top-k: head FAIL, base pass"),
])
def test_other_expert_sets_count_the_tokens_and_say_which_tree_matches_the_top_k(head_row, base_row, word, detail):
    ids_b = IDS.clone()
    ids_b[1, 1], ids_b[2, 0] = 6.0, 7.0  # tokens 1 and 2 routed elsewhere, token 0 as before
    rows = (_rows(head_row) if head_row else [], _rows(base_row) if base_row else [])
    got = _one({KEY: torch.stack((IDS, W))}, {KEY: torch.stack((ids_b, W))}, *rows)
    det = "2/3 tokens routed to different experts (first: token 1)"
    assert got == (f"upgrade: {KEY}", word, detail.format(det=det))


def _budget_pair(y: float) -> tuple[torch.Tensor, torch.Tensor]:
    # ||a - b|| / ||b|| = |y| exactly: b = (1, 0), a = (1, y)
    return torch.tensor([1.0, y], dtype=torch.float64), torch.tensor([1.0, 0.0], dtype=torch.float64)


@pytest.mark.parametrize("y, word", [(KERNEL_REL_L2, Result.WITHIN), (math.nextafter(KERNEL_REL_L2, 1.0), Result.DIFFER),
                                     (1e-3, Result.WITHIN)])
def test_an_output_is_within_the_kernel_budget_up_to_its_rel_l2_bound(y, word):
    a, b = _budget_pair(y)
    cos = 1 - 1 / math.sqrt(1 + y * y)
    got = _one({"k out": a}, {"k out": b})
    assert got[:2] == ("upgrade: k out", word)
    assert got[2] == f"rel L2 {y:.2e}, cos dist {cos:.1e} (kernel budget {KERNEL_REL_L2:g} / {KERNEL_COS_DIST:g})"


def test_an_output_scaled_past_the_rel_l2_bound_differs_though_its_direction_is_the_same():
    b = torch.randn(64, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    _, word, detail = _one({"k out": b * 1.01}, {"k out": b})
    assert word == Result.DIFFER and detail.startswith("rel L2 1.00e-02, cos dist ")


@pytest.mark.parametrize("side", ["head", "base"])
def test_a_nan_on_either_side_differs_and_is_counted(side):
    y = torch.randn(2, 8, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    bad = y.clone()
    bad[1, 3] = float("nan")
    head, base = ({"k y": bad}, {"k y": y}) if side == "head" else ({"k y": y}, {"k y": bad})
    counts = "1 (head) vs 0 (base)" if side == "head" else "0 (head) vs 1 (base)"
    assert _one(head, base) == ("upgrade: k y", Result.DIFFER, f"NaN: {counts} of 16")


def test_a_shape_change_differs_and_names_both_shapes():
    y = torch.randn(2, 8, generator=torch.Generator().manual_seed(2))
    assert _one({"k y": y}, {"k y": y[:1]}) == ("upgrade: k y", Result.DIFFER, "shape (2, 8) (head) != (1, 8) (base)")


def test_an_output_only_the_base_produced_names_the_heads_component_not_judged():
    y = torch.randn(4, generator=torch.Generator().manual_seed(4))
    r, = upgrade.compare_trees({}, {"routing r": y}, [], [], {"routing": "routing.py: symbol 'routing' missing"}, {})
    assert (r.check, r.result) == ("upgrade: routing r", Result.NOT_JUDGED)
    assert r.detail == "only the base tree ran it: the head tree's routing was not judged (routing.py: symbol 'routing' missing)"
