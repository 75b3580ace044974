"""An adaptive number of rounds: look at the interleaved A/B samples every ``step`` pairs and
stop as soon as the verdict is clear, with the false-regression rate still bounded.

Method: a one-sided group-sequential test with a Lan-DeMets alpha-spending function (Lan &
DeMets, Biometrika 1983; Jennison & Turnbull, *Group Sequential Methods*, 2000, ch. 7).

- The looks are at n_1 < n_2 < ... < n_K rounds per side (``first``, ``first + step``, ...,
  ``max_rounds``). At look k the statistic is the one-sided Mann-Whitney test that
  ``fp4moe.stats.compare.compare_samples`` computes. Under "no change", with interleaved and
  randomly ordered rounds, the standardised rank-sum statistics at the looks are
  asymptotically jointly normal with corr(Z_i, Z_j) = sqrt(n_i / n_j), the canonical joint
  distribution of group-sequential theory (Jennison & Turnbull, sections 3.1 and 12.1 for rank
  statistics): a Brownian motion observed at information times t_k = n_k / n_K.
- The spending function alpha(t) says how much of the one-sided alpha may be used up by time
  t; the nominal level of look k is the z boundary c_k solving
  P(Z_1 < c_1, ..., Z_{k-1} < c_{k-1}, Z_k >= c_k) = alpha(t_k) - alpha(t_{k-1}),
  computed exactly (up to quadrature) by the recursive numerical integration of Armitage,
  McPherson & Rowe (1969) in ``boundaries``. Hence P(some look crosses) = alpha(1) = alpha
  however many looks are taken: the error rate holds under repeated looks. Looking at a fixed
  level at every look would not (10 looks at 1% give ~4% false alarms).
- Spending: Pocock-type, alpha(t) = alpha * ln(1 + (e - 1) t). Not O'Brien-Fleming: its first
  boundaries (z ~ 8 at t = 0.1 for alpha = 0.01) cannot be reached by a rank statistic with
  10 rounds per side (the largest Mann-Whitney z at 10 + 10 rounds is ~3.8), so a 10%
  regression could never stop early; Pocock's first boundary (z ~ 2.95) can.
- Verdict at a look: **regressed** when the one-sided p-value for "slower" is below the look's
  nominal level AND the Hodges-Lehmann ratio exceeds 1 + threshold (the compare's rule, with
  the look's level in place of alpha). **Unchanged, stop** (futility) when the upper bound of
  the one-sided ``1 - beta`` interval for the ratio is below 1 + threshold: a regression of
  the threshold's size is excluded. Futility stops are non-binding: they can only end a
  sequence without a regression, so they never raise the false-regression rate (they lower
  it). At the last look: regressed or unchanged by the same rule.

The false-regression rate per benchmark is therefore <= alpha (asymptotically; the study in
``lab/studies/perf_study.py`` measures it), and the threshold conjunction lowers it further.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable

import numpy as np
from scipy import optimize, stats

from fp4moe.stats.compare import DEFAULT_ALPHA, DEFAULT_THRESHOLD, REGRESSED, UNCHANGED, Comparison, compare_samples, is_regression

SPENDING = ("pocock", "obrien-fleming")
from fp4moe.stats.defaults import DEFAULT_FIRST, DEFAULT_MAX_ROUNDS, DEFAULT_STEP  # noqa: E402,F401

#: one-sided level of the futility interval: stop "unchanged" once the 95% upper bound of the
#: ratio is below 1 + threshold
DEFAULT_BETA = 0.05
_GRID = 2001  # quadrature points of the recursive integration (spacing 0.01 sd at t = 1)


def spent(t: float, alpha: float, spending: str) -> float:
    """alpha(t): the type-I error spent by information time t in [0, 1]."""
    if spending == "pocock":
        return alpha * math.log(1.0 + (math.e - 1.0) * t)
    if spending == "obrien-fleming":
        z = stats.norm.isf(alpha)
        return float(stats.norm.sf(z / math.sqrt(t))) if t > 0 else 0.0
    raise ValueError(f"spending: must be one of {SPENDING}, got {spending!r}")


@lru_cache(maxsize=64)
def boundaries(looks: tuple[int, ...], alpha: float, spending: str = "pocock") -> tuple[float, ...]:
    """z boundaries c_1..c_K for the looks (rounds per side): the recursive integration of the
    sub-density of the score S_k = Z_k sqrt(n_k) on the continuation region."""
    if not looks or any(b <= a for a, b in zip(looks, looks[1:])) or looks[0] < 1:
        raise ValueError(f"looks: must be increasing positive round counts, got {looks}")
    info = np.asarray(looks, dtype=np.float64) / looks[-1]
    sd_max = math.sqrt(info[-1])
    grid = np.linspace(-10 * sd_max, 10 * sd_max, _GRID)
    ds = grid[1] - grid[0]
    dens = None  # sub-density of S_{k-1} on the continuation region
    prev_t, out = 0.0, []
    for t in info:
        target = spent(float(t), alpha, spending) - spent(prev_t, alpha, spending)
        dt = t - prev_t
        if dens is None:
            def cross(b):
                return float(stats.norm.sf(b / math.sqrt(dt)))
        else:
            def cross(b, dens=dens, dt=dt):
                return float(np.sum(dens * stats.norm.sf((b - grid) / math.sqrt(dt))) * ds)
        sd_t = math.sqrt(t)
        if target <= 0:
            b = 40 * sd_t
        else:
            b = optimize.brentq(lambda v: cross(v) - target, -10 * sd_t, 40 * sd_t, xtol=1e-10)
        out.append(b / sd_t)
        # density of S_k below the boundary
        if dens is None:
            new = stats.norm.pdf(grid / math.sqrt(dt)) / math.sqrt(dt)
        else:
            # uniform grid: the transition kernel is Toeplitz, a convolution
            offsets = np.arange(-(_GRID - 1), _GRID) * ds
            kernel = stats.norm.pdf(offsets / math.sqrt(dt)) / math.sqrt(dt)
            new = np.convolve(dens, kernel)[_GRID - 1 : 2 * _GRID - 1] * ds
        dens = np.where(grid < b, new, 0.0)
        prev_t = float(t)
    return tuple(float(c) for c in out)


@dataclass(frozen=True)
class SequentialDesign:
    """Looks (rounds per side), one-sided alpha, spending, the compare's threshold, and the
    futility level; ``nominal[k]`` is look k's one-sided p-value level."""

    looks: tuple[int, ...]
    alpha: float = DEFAULT_ALPHA
    threshold: float = DEFAULT_THRESHOLD
    spending: str = "pocock"
    beta: float = DEFAULT_BETA
    nominal: tuple[float, ...] = field(default=())

    @property
    def max_rounds(self) -> int:
        return self.looks[-1]


def make_design(*, first: int = DEFAULT_FIRST, step: int = DEFAULT_STEP, max_rounds: int = DEFAULT_MAX_ROUNDS,
                alpha: float = DEFAULT_ALPHA, threshold: float = DEFAULT_THRESHOLD, spending: str = "pocock",
                beta: float = DEFAULT_BETA) -> SequentialDesign:
    """Looks at first, first + step, ..., max_rounds (the last look is always max_rounds)."""
    if first < 10:
        raise ValueError(f"--first {first}: the first look needs at least 10 rounds per side")
    if step < 1:
        raise ValueError(f"--step {step}: must be >= 1")
    if max_rounds < first:
        raise ValueError(f"--max-rounds {max_rounds}: must be >= --first {first}")
    looks = list(range(first, max_rounds + 1, step))
    if looks[-1] != max_rounds:
        looks.append(max_rounds)
    looks_t = tuple(looks)
    nominal = tuple(float(stats.norm.sf(c)) for c in boundaries(looks_t, float(alpha), spending))
    return SequentialDesign(looks_t, float(alpha), float(threshold), spending, float(beta), nominal)


@dataclass
class Look:
    rounds: int
    nominal_alpha: float
    comparison: Comparison
    upper: float  # one-sided (1 - beta) upper bound of the ratio
    decision: str | None  # REGRESSED / UNCHANGED when the sequence stops here, else None


@dataclass
class SequentialResult:
    verdict: str
    rounds: int  # rounds per side actually timed
    stopped_early: bool
    comparison: Comparison  # at the stopping look
    looks: list[Look]
    base: np.ndarray
    head: np.ndarray

    def to_dict(self) -> dict:
        return {
            "verdict": self.verdict,
            "rounds": self.rounds,
            "stopped_early": self.stopped_early,
            "comparison": self.comparison.to_dict(),
            "looks": [{"rounds": lk.rounds, "nominal_alpha": lk.nominal_alpha, "p_slower": lk.comparison.p_slower,
                       "ratio": lk.comparison.ratio, "upper": lk.upper, "decision": lk.decision} for lk in self.looks],
        }


def judge_look(base, head, design: SequentialDesign, k: int, name: str = "benchmark") -> Look:
    """The decision at look ``k`` (0-based) on all rounds so far."""
    level = design.nominal[k]
    c = compare_samples(base, head, name=name, threshold=design.threshold, alpha=min(level, 0.49), min_samples=10)
    futility = compare_samples(base, head, name=name, threshold=design.threshold, alpha=design.beta, min_samples=10)
    decision = None
    if is_regression(c.p_slower, c.ratio, threshold=design.threshold, alpha=level):
        decision = REGRESSED
    elif futility.ci_high < 1.0 + design.threshold or k == len(design.looks) - 1:
        decision = UNCHANGED
    # the reported comparison keeps the compare's verdict field consistent with ours
    c.verdict = decision or UNCHANGED
    return Look(len(base), level, c, futility.ci_high, decision)


def run_sequential(sample: Callable[[int], tuple[np.ndarray, np.ndarray]], design: SequentialDesign,
                   name: str = "benchmark") -> SequentialResult:
    """Collect rounds with ``sample(n) -> (base[n], head[n])`` (n more interleaved pairs) until a
    look decides. Returns the verdict, the rounds used and every look."""
    base, head = np.empty(0), np.empty(0)
    looks: list[Look] = []
    for k, n in enumerate(design.looks):
        b, h = sample(n - base.size)
        base, head = np.concatenate([base, np.asarray(b, float)]), np.concatenate([head, np.asarray(h, float)])
        look = judge_look(base, head, design, k, name)
        looks.append(look)
        if look.decision is not None:
            return SequentialResult(look.decision, int(base.size), k < len(design.looks) - 1, look.comparison, looks, base, head)
    raise AssertionError("the last look always decides")  # pragma: no cover
