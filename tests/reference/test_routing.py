"""The float64 router model (fp4moe/reference/routing.py) at the points where it could go wrong:

- every score mode against its formula, and an unknown mode refused by name;
- the top-k weights: the scaling factor, the renormalisation per token (never over the batch);
- the selection: each token's slots sorted by expert id within the token, ties at the k-th key
  resolved to the lower expert id even where an unstable sort would not (64 tied experts);
- ``valid_topk`` per token: the range boundaries (-1, 0, E-1, E), distinctness, and one bad
  token never spoiling the verdict of another.
"""

from __future__ import annotations

import pytest
import torch

from fp4moe.model.catalogue import ScoreMode
from fp4moe.reference import routing

LOGITS = torch.tensor([[2.0, -1.0, 0.5, 0.25, -3.0], [-2.0, 1.5, 0.0, 3.0, 0.75], [0.1, 0.2, -0.3, -0.4, 0.9]])


@pytest.mark.parametrize("mode, formula", [
    (ScoreMode.SOFTMAX, lambda x: x),
    (ScoreMode.SQRTSOFTPLUS, lambda x: torch.log1p(torch.exp(x)).sqrt()),
    (ScoreMode.SIGMOID, lambda x: 1 / (1 + torch.exp(-x))),
])
def test_each_score_mode_is_its_formula_in_float64(mode, formula):
    got = routing.scores(LOGITS, mode)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, formula(LOGITS.double()), rtol=1e-14, atol=0)


def test_an_unknown_score_mode_is_refused_by_name():
    with pytest.raises(ValueError, match="score mode must be a ScoreMode, got 'softplus'"):
        routing.scores(LOGITS, "softplus")


@pytest.mark.parametrize("mode", list(ScoreMode))
def test_weights_are_scaled_and_renormalised_per_token(mode):
    ids = torch.tensor([[0, 2], [1, 3], [4, 0]])
    s = torch.gather(routing.scores(LOGITS, mode), 1, ids)
    per_token = torch.softmax(s, -1) if mode is ScoreMode.SOFTMAX else s / s.sum(-1, keepdim=True)
    got = routing.topk_weights(LOGITS, ids, mode, renormalize=True, scaling=2.5)
    torch.testing.assert_close(got, per_token * 2.5, rtol=1e-14, atol=0)
    torch.testing.assert_close(got.sum(-1), torch.full((3,), 2.5, dtype=torch.float64), rtol=1e-14, atol=0)
    # the default scaling is 1
    torch.testing.assert_close(routing.topk_weights(LOGITS, ids, mode, renormalize=True), per_token, rtol=1e-14, atol=0)
    if mode is not ScoreMode.SOFTMAX:  # without renorm: the raw scores times the scaling
        raw = routing.topk_weights(LOGITS, ids, mode, renormalize=False, scaling=2.5)
        torch.testing.assert_close(raw, s * 2.5, rtol=1e-14, atol=0)


def test_each_tokens_slots_are_sorted_by_expert_id_within_the_token():
    w, ids = routing.reference_topk(LOGITS, 3, ScoreMode.SIGMOID, renormalize=False)
    assert ids.tolist() == [[0, 2, 3], [1, 3, 4], [0, 1, 4]]
    torch.testing.assert_close(w, torch.gather(torch.sigmoid(LOGITS.double()), 1, ids), rtol=1e-14, atol=0)


def test_ties_at_the_kth_key_take_the_lower_expert_id_even_among_64():
    # 64 equal keys: an unstable sort on the CPU returns them out of order
    logits = torch.zeros((2, 64))
    logits[1, 40] = 1.0
    _, ids = routing.reference_topk(logits, 3, ScoreMode.SOFTMAX, renormalize=True)
    assert ids.tolist() == [[0, 1, 2], [0, 1, 40]]


def test_valid_topk_judges_each_token_on_its_own():
    keys = routing.selection_keys(LOGITS, ScoreMode.SIGMOID)
    good = torch.tensor([[0, 2], [3, 1], [4, 1]])
    assert routing.valid_topk(keys, good).tolist() == [True, True, True]
    cases = {
        "the last expert E-1 is in range": ([[0, 2], [3, 1], [4, 1]], [True, True, True]),
        # out of range, though clamped into range the set would be the top-k
        "E is out of range": ([[0, 2], [3, 1], [5, 1]], [True, True, False]),
        "-1 is out of range": ([[-1, 2], [3, 1], [4, 1]], [False, True, True]),
        "a repeated expert is not distinct": ([[0, 0], [3, 1], [4, 1]], [False, True, True]),
        "a lower key taken over a higher one": ([[0, 2], [3, 2], [4, 1]], [True, False, True]),
    }
    for what, (ids, want) in cases.items():
        assert routing.valid_topk(keys, torch.tensor(ids)).tolist() == want, what


def test_valid_topk_accepts_the_top_expert_at_the_last_index():
    keys = torch.tensor([[0.0, 0.1, 0.2, 0.9], [0.9, 0.2, 0.1, 0.0]], dtype=torch.float64)
    assert routing.valid_topk(keys, torch.tensor([[3, 2], [0, 1]])).tolist() == [True, True]
    assert routing.valid_topk(keys, torch.tensor([[2, 1], [0, 1]])).tolist() == [False, True]
