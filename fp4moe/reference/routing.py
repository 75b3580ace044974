"""The router, modelled in float64: scores, the top-k selection and the top-k weights.

- :func:`scores`: the scoring function on the logits (``ScoreMode``): softmax selects on the
  raw logits (the softmax is monotone) and weights with the softmax over the selected logits
  (aiter's ``routing()`` default, ``APPLY_SOFTMAX``); sqrtsoftplus is ``sqrt(softplus(x))``
  (DeepSeek-V4); sigmoid ``1 / (1 + exp(-x))``;
- :func:`selection_keys`: what the top-k selects on: the score plus the correction bias
  (``noaux_tc``), when there is one;
- :func:`topk_weights`: the weights of a chosen expert set: the unbiased scores, renormalised
  to sum 1 when asked, times the routed scaling factor (aiter: ``y / sum(y) * scaling`` with
  renorm, ``y * scaling`` without);
- :func:`valid_topk`: is a chosen set a top-k of the keys? Under exact ties every set that
  takes all keys above the k-th and any of the tied ones is; so ties are judged by this
  rule, never by one tie-break.
"""

from __future__ import annotations

import torch

from fp4moe.model.catalogue import ScoreMode


def scores(logits: torch.Tensor, mode: ScoreMode) -> torch.Tensor:
    """float64 [T, E] scores of the logits (softmax: the logits themselves, see the module doc)."""
    x = logits.double()
    if mode is ScoreMode.SOFTMAX:
        return x
    if mode is ScoreMode.SQRTSOFTPLUS:
        return torch.nn.functional.softplus(x).sqrt()
    if mode is ScoreMode.SIGMOID:
        return torch.sigmoid(x)
    raise ValueError(f"score mode must be a ScoreMode, got {mode!r}")


def selection_keys(logits: torch.Tensor, mode: ScoreMode, bias: torch.Tensor | None = None) -> torch.Tensor:
    s = scores(logits, mode)
    return s if bias is None else s + bias.double()[None, :]


def topk_weights(logits: torch.Tensor, ids: torch.Tensor, mode: ScoreMode, *, renormalize: bool,
                 scaling: float = 1.0) -> torch.Tensor:
    """float64 [T, k] weights of the experts ``ids`` [T, k] (any slot order)."""
    s = torch.gather(scores(logits, mode), 1, ids.long())
    if mode is ScoreMode.SOFTMAX:
        return torch.softmax(s, dim=-1) * scaling
    if renormalize:
        s = s / s.sum(-1, keepdim=True)
    return s * scaling


def reference_topk(logits: torch.Tensor, k: int, mode: ScoreMode, *, renormalize: bool, scaling: float = 1.0,
                   bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights float64 [T, k], ids int64 [T, k]) with each token's slots sorted by expert id;
    on exact ties at the k-th key the lower expert id is taken (one valid choice of many)."""
    keys = selection_keys(logits, mode, bias)
    order = torch.argsort(keys, dim=-1, descending=True, stable=True)
    ids = order[:, :k].sort(-1).values
    return topk_weights(logits, ids, mode, renormalize=renormalize, scaling=scaling), ids


def valid_topk(keys: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """bool [T]: ``ids`` [T, k] are k distinct in-range experts whose keys are each >= every
    key left out (so any tie-break is accepted, and nothing else)."""
    t, e = keys.shape
    k = ids.shape[1]
    ids = ids.long()
    in_range = ((ids >= 0) & (ids < e)).all(-1)
    safe = ids.clamp(0, e - 1)
    chosen = torch.zeros((t, e), dtype=torch.bool).scatter_(1, safe, True)
    distinct = chosen.sum(-1) == k
    low_in = torch.gather(keys, 1, safe).min(-1).values
    high_out = keys.masked_fill(chosen, float("-inf")).max(-1).values
    return in_range & distinct & (low_in >= high_out)
