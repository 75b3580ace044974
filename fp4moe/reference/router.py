"""DeepSeek-V4's router in float64: ``sqrtsoftplus`` scoring, bias-steered top-k, renormalisation
with a floor, ``routed_scaling_factor`` applied once; and the hash-layer variant.

Index: :func:`sqrtsoftplus64` (sqrt(log(1 + e^x)) without cancellation or underflow above
float64's own range), :func:`route64` (the scores, the top-k by score + correction bias, the
weights: the unbiased scores of the chosen experts renormalised to sum 1, floored at 0/0, then
times the scaling factor), :func:`hash_weights64` (the hash layers: experts given, weights
renormalised the same way), ``PROBE_X`` (the logits a router implementation is tried on:
[-104, 200], dense around the fp32 underflow edge ``FP32_LOG1P_EDGE``), ``SCORE_RTOL`` /
:func:`score_atol` (what an fp32 implementation may differ by).

DeepSeek-V4's reference gate (its ``inference/model.py`` ``Gate.forward``) scores with
``F.softplus(x).sqrt()``; the weights are the unbiased scores of the chosen experts; the bias
only steers the choice (SGLang PR #34459, flashinfer #5211 describe the same). Pure torch,
float64 throughout; callers cast.
"""

from __future__ import annotations

import math

import torch

#: log(1 + e^x) computed as written in fp32 is exactly 0 from here down: 1 + e^x rounds to 1
#: once e^x < 2^-24 (half an ulp of 1.0), i.e. x < -24 ln 2 = -16.636 (SGLang #34459's "-16.64")
FP32_LOG1P_EDGE = -24 * math.log(2)
#: the smallest positive fp32 (subnormal, 2^-149): a softplus below it is 0 in any fp32 code
FP32_TINY = 2.0 ** -149
#: fp32 sqrtsoftplus vs this float64 one where the fp32 softplus is a normal number: 1e-6
#: relative (~8 ulp of fp32: exp, log1p, sqrt and a renormalising divide each round once, <= 0.5
#: ulp, plus their propagation; SGLang #34459 measured 3.5e-7 worst over [-104, 200] after its fix)
SCORE_RTOL = 1e-6
#: the probe grid: [-104, 200], every point where fp32 code changes regime (the log1p edge,
#: softplus's threshold 20, expf overflow 88.72, fp32 normal/subnormal softplus at -87.34,
#: total underflow at -103.28) on both sides
PROBE_X = tuple(sorted({*(float(v) for v in torch.linspace(-104.0, 200.0, 49, dtype=torch.float64)),
                        FP32_LOG1P_EDGE - 1e-3, FP32_LOG1P_EDGE + 1e-3, -16.64, -16.0, -17.0, -20.0, -30.0, -50.0,
                        -87.0, -87.5, -100.0, -103.0, -103.5, -104.0, -1e-3, 0.0, 1e-3, 1.0, 19.99, 20.0, 20.01,
                        88.7, 88.8, 100.0, 200.0}))


def sqrtsoftplus64(x: torch.Tensor) -> torch.Tensor:
    """sqrt(log(1 + e^x)) in float64: ``max(x, 0) + log1p(e^-|x|)`` (no overflow, no cancellation)."""
    x = x.to(torch.float64)
    return (x.clamp_min(0) + torch.log1p(torch.exp(-x.abs()))).sqrt()


def renormalise64(w: torch.Tensor, scaling: float = 1.0) -> torch.Tensor:
    """``w / sum(w)`` per row, times ``scaling``; a row summing to 0 stays 0 (the floor: never 0/0)."""
    s = w.sum(-1, keepdim=True)
    return torch.where(s > 0, w / torch.where(s > 0, s, 1.0), 0.0) * scaling


def route64(logits: torch.Tensor, bias: torch.Tensor | None, top_k: int, scaling: float = 1.0,
            renormalise: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights float64 [T, k], ids int64 [T, k]): top-k of score + bias (ties: lowest id first),
    weights the unbiased scores of those experts, renormalised (floored), times ``scaling`` once."""
    scores = sqrtsoftplus64(logits)
    choice = scores + (bias.to(torch.float64) if bias is not None else 0.0)
    # stable order: descending choice, then ascending id (torch.topk's tie order is unspecified)
    order = torch.sort(choice, dim=-1, descending=True, stable=True).indices[:, :top_k]
    w = scores.gather(1, order)
    return (renormalise64(w, scaling) if renormalise else w * scaling), order


def hash_weights64(logits: torch.Tensor, ids: torch.Tensor, scaling: float = 1.0) -> torch.Tensor:
    """The hash layers: experts ``ids`` are given (by token id), the weights are their scores
    renormalised (floored) times ``scaling``."""
    return renormalise64(sqrtsoftplus64(logits).gather(1, ids.long()), scaling)


def score_atol(n_summed: int = 1) -> float:
    """Absolute slack of an fp32 score where the fp32 softplus underflows: a softplus below
    ``FP32_TINY`` may come out 0, so its sqrt may be off by sqrt(FP32_TINY) per summed term."""
    return n_summed * math.sqrt(FP32_TINY)
