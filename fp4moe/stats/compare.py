"""Decide "regressed / improved / unchanged" from two timing samples, with statistics.

Method (docs/perf-gate.md explains the choices):

* Timing noise is multiplicative (clock boosts, contention scale a whole kernel), so every
  estimate is made on ``log(seconds)`` and reported as a ratio head/base.
* Test: one-sided Mann-Whitney U (``scipy.stats.mannwhitneyu``), "head slower" for a
  regression and "head faster" for an improvement. It is distribution-free, and with
  interleaved, randomly ordered rounds (``fp4moe.gates.perf.abtest``) the base/head labels are
  exchangeable under "no change", which is exactly the test's null.
* Estimate and interval: Hodges-Lehmann, the median of all pairwise ``log(head_j/base_i)``,
  with the distribution-free interval obtained by inverting the same Mann-Whitney test
  (Lehmann, *Nonparametrics*, 1975, ch. 2). The interval therefore agrees with the test: at
  confidence ``1 - 2*alpha`` its lower bound is above 1 exactly when the one-sided test is
  significant at ``alpha`` (up to the normal approximation). It costs one sort of ``n*m``
  numbers, no resampling, so the study can run thousands of compares in seconds; a bootstrap of
  a median with 30 rounds is also known to under-cover (the median's bootstrap distribution is
  lumpy for small n).
* Verdict, modelled on asv's rule (ratio beyond a factor AND Mann-Whitney significant; asv uses
  a factor of 1.1 and a two-sided p < 0.002): **regressed** iff the one-sided p-value for
  "slower" is below ``alpha`` (default 0.01) AND the Hodges-Lehmann ratio exceeds
  ``1 + threshold`` (default 5%). **improved** symmetrically on the log scale
  (p "faster" < alpha AND ratio < ``1/(1+threshold)``). Otherwise unchanged.
  The point estimate (not the interval's lower bound) is held against the threshold: requiring
  the whole interval above 1.05 would detect a true 10% slowdown only when the interval is
  narrower than +-5%, i.e. it would trade most of the power for protection that the
  significance test already gives; the conjunction keeps the A/A false-alarm rate below alpha.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
from scipy import stats

# DEFAULT_MIN_SAMPLES: with fewer than ~5 rounds per side the one-sided Mann-Whitney test cannot
# reach p < 0.01 at all (1/C(8,4) = 0.014); 10 leaves room for ties and gives an interval.
from fp4moe.stats.defaults import DEFAULT_ALPHA, DEFAULT_MIN_SAMPLES, DEFAULT_THRESHOLD  # noqa: E402,F401

REGRESSED = "regressed"
IMPROVED = "improved"
UNCHANGED = "unchanged"


@dataclass
class Comparison:
    """One benchmark's verdict. Ratios are head/base (> 1 means head is slower)."""

    name: str
    n_base: int
    n_head: int
    base_median: float
    head_median: float
    median_ratio: float  # ratio of medians, for reading alongside the medians
    ratio: float  # Hodges-Lehmann estimate of head/base: the one the verdict uses
    ci_low: float
    ci_high: float
    confidence: float
    p_slower: float
    p_faster: float
    threshold: float
    alpha: float
    verdict: str
    notes: list[str] = field(default_factory=list)

    @property
    def regressed(self) -> bool:
        return self.verdict == REGRESSED

    def to_dict(self) -> dict:
        return asdict(self)


def parse_threshold(value: str | float) -> float:
    """``'5%'``, ``'5'`` and ``'0.05'`` all mean five percent; returns the fraction 0.05.

    A value with ``%`` is a percentage. A bare number >= 1 is read as a percentage (``5`` ->
    5%), a bare number < 1 as a fraction (``0.05`` -> 5%); so ``0.5`` means 50%, write
    ``0.5%`` for half a percent. The result must lie in (0, 1).
    """
    text = str(value).strip()
    try:
        if text.endswith("%"):
            frac = float(text[:-1]) / 100.0
        else:
            number = float(text)
            frac = number / 100.0 if number >= 1 else number
    except ValueError:
        raise ValueError(f"--threshold: cannot read {value!r}; write e.g. 5%, 5 or 0.05") from None
    if not (0 < frac < 1) or not math.isfinite(frac):
        raise ValueError(f"--threshold: {value!r} is {frac:.4g} as a fraction; it must be between 0% and 100%")
    return frac


def parse_alpha(value: str | float) -> float:
    try:
        alpha = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"--alpha: cannot read {value!r}; write a significance level such as 0.01") from None
    if not (0 < alpha < 0.5):
        raise ValueError(f"--alpha: {value!r} must be a one-sided significance level in (0, 0.5)")
    return alpha


def min_samples_floor(alpha: float) -> int:
    """Fewest rounds per side with which the one-sided Mann-Whitney test can reach ``p < alpha``
    at all: complete separation of n vs n rounds has exact p = 1 / C(2n, n) (0.014 for n = 4,
    0.004 for n = 5), so below this even a 10x slowdown could never be called a regression."""
    n = 1
    while 1.0 / math.comb(2 * n, n) >= alpha:
        n += 1
    return n


def check_min_samples(min_samples, alpha: float = DEFAULT_ALPHA) -> int:
    """``--min-samples``: an int at or above :func:`min_samples_floor` for ``alpha``."""
    if isinstance(min_samples, bool) or not isinstance(min_samples, int):
        raise ValueError(f"--min-samples: {min_samples!r} is not a whole number of rounds")
    floor = min_samples_floor(alpha)
    if min_samples < floor:
        raise ValueError(f"--min-samples {min_samples}: below {floor}, the fewest rounds per side with which a "
                         f"one-sided Mann-Whitney test can reach p < alpha = {alpha:g} (no regression could be found)")
    return min_samples


def usable_rounds(sample, what: str, name: str, min_samples: int) -> np.ndarray:
    """The sample as float64 seconds; ValueError naming ``name`` if empty, too short or not
    all finite and positive."""
    arr = np.asarray(sample, dtype=np.float64).ravel()
    if arr.size == 0:
        raise ValueError(f"{name}: the {what} sample is empty (no timing rounds)")
    bad = ~np.isfinite(arr) | (arr <= 0)
    if bad.any():
        raise ValueError(
            f"{name}: the {what} sample has {int(bad.sum())} non-finite or non-positive timings "
            f"(first: {arr[bad][0]!r}); timings must be positive seconds"
        )
    if arr.size < min_samples:
        raise ValueError(
            f"{name}: the {what} sample has {arr.size} rounds; at least {min_samples} are needed "
            f"for a verdict (raise the benchmark's rounds)"
        )
    return arr


def _count_le(x: np.ndarray, y: np.ndarray, t: float) -> np.ndarray:
    """Per row ``i``: how many ``j`` have ``fl(x[j] - y[i]) <= t`` (``x`` sorted ascending).

    Rounded subtraction is monotone in ``x[j]``, so each row is sorted and the count is a
    position; ``searchsorted(x, y + t)`` finds it up to rounding of ``y + t``, and the loop
    moves each row's position across whole runs of equal ``x`` until it is exact.
    """
    m = x.size
    p = np.searchsorted(x, y + t, side="right")
    for _ in range(64):
        ahead = np.minimum(p, m - 1)
        behind = np.maximum(p - 1, 0)
        fwd = (p < m) & ((x[ahead] - y) <= t)
        bwd = (p > 0) & ((x[behind] - y) > t)
        if not (fwd.any() or bwd.any()):
            return p
        p = np.where(fwd, np.searchsorted(x, x[ahead], side="right"), p)
        p = np.where(bwd, np.searchsorted(x, x[behind], side="left"), p)
    raise ArithmeticError("pairwise-difference count did not settle (non-finite timings?)")


def kth_pairwise_difference(x: np.ndarray, y: np.ndarray, k: int, *, seed: int = 0, materialize_below: int | None = None) -> float:
    """The ``k``-th smallest (0-based) of the ``len(x) * len(y)`` numbers ``x[j] - y[i]``,
    exactly as ``np.partition`` of the full matrix would give it, without building it.

    Randomized selection over the implicitly sorted rows (Monahan, "Fast computation of the
    Hodges-Lehmann location estimator", ACM TOMS 10(3), 1984): keep per row the column range
    still holding candidates, split on a random candidate, recount with :func:`_count_le`.
    Memory O(n + m); expected time O((n + m) log(n + m) log(nm)). ``x`` and ``y`` sorted.
    Once at most ``materialize_below`` candidates are left (default ``max(4096, 4(n+m))``)
    they are partitioned directly.
    """
    n, m = y.size, x.size
    if not 0 <= k < n * m:
        raise ValueError(f"order statistic {k} out of range for {n} x {m} differences")
    rng = np.random.default_rng(seed)
    lo = np.zeros(n, dtype=np.int64)  # columns < lo[i]: below the answer
    hi = np.full(n, m, dtype=np.int64)  # columns >= hi[i]: above the answer
    small = max(4096, 4 * (n + m)) if materialize_below is None else materialize_below  # then np.partition them
    while True:
        width = hi - lo
        total = int(width.sum())
        below = int(lo.sum())
        if total <= small:
            rows = np.repeat(np.arange(n), width)
            cols = np.arange(total) - np.repeat(np.cumsum(width) - width, width) + lo[rows]
            cand = x[cols] - y[rows]
            return float(np.partition(cand, k - below)[k - below])
        r = int(rng.integers(total))
        row = int(np.searchsorted(np.cumsum(width), r, side="right"))
        col = int(lo[row] + r - (int(width[:row].sum())))
        pivot = x[col] - y[row]
        le = _count_le(x, y, pivot)
        lt = _count_le(x, y, np.nextafter(pivot, -np.inf))
        if lt.sum() <= k < le.sum():
            return float(pivot)
        if le.sum() <= k:
            lo = np.maximum(lo, le)
        else:
            hi = np.minimum(hi, lt)


def hodges_lehmann_log_ratio(base: np.ndarray, head: np.ndarray, confidence: float) -> tuple[float, float, float]:
    """Hodges-Lehmann estimate of ``log(head/base)`` and its Mann-Whitney-inverted interval.

    The interval's ends are order statistics ``k`` and ``n*m-1-k`` (0-based) of the ``n*m``
    pairwise log-differences, ``k`` from the normal approximation to the U distribution
    (``scipy.stats.norm``), accurate for the >= 10 rounds per side that we require. The order
    statistics are selected without the ``n*m`` matrix (:func:`kth_pairwise_difference`):
    memory O(n + m), so 100k rounds per side cost a few MB, not 74 GiB.
    """
    x = np.sort(np.log(np.asarray(head, dtype=np.float64)))
    y = np.sort(np.log(np.asarray(base, dtype=np.float64)))
    n, m = y.size, x.size
    nm = n * m
    z = stats.norm.ppf(0.5 + confidence / 2.0)
    k = int(math.floor(nm / 2.0 - z * math.sqrt(n * m * (n + m + 1) / 12.0)))
    k = min(max(k, 0), (nm - 1) // 2)
    mid_lo, mid_hi = (nm - 1) // 2, nm // 2
    at = {q: kth_pairwise_difference(x, y, q) for q in sorted({k, nm - 1 - k, mid_lo, mid_hi})}
    estimate = 0.5 * (at[mid_lo] + at[mid_hi])
    return float(estimate), at[k], at[nm - 1 - k]


def is_regression(p_slower: float, ratio: float, *, threshold: float, alpha: float) -> bool:
    """The regression rule, one copy (the compare and every sequential look use it): the
    one-sided p for "slower" strictly below ``alpha`` AND the ratio strictly above
    ``1 + threshold``. A ratio of exactly 1 + threshold, or p exactly alpha, is not a regression."""
    return p_slower < alpha and ratio > 1.0 + threshold


def verdict_of(p_slower: float, p_faster: float, ratio: float, *, threshold: float, alpha: float) -> str:
    """REGRESSED by :func:`is_regression`; IMPROVED symmetrically on the log scale (p "faster"
    strictly below ``alpha`` AND ratio strictly below ``1 / (1 + threshold)``); else UNCHANGED."""
    if is_regression(p_slower, ratio, threshold=threshold, alpha=alpha):
        return REGRESSED
    if p_faster < alpha and ratio < 1.0 / (1.0 + threshold):
        return IMPROVED
    return UNCHANGED


def compare_samples(
    base,
    head,
    *,
    name: str = "benchmark",
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = DEFAULT_ALPHA,
    min_samples: int = DEFAULT_MIN_SAMPLES,
) -> Comparison:
    """Compare two samples of per-round seconds. Raises ValueError (naming ``name``) on empty,
    too-short or non-positive samples: a sample that cannot be judged never passes."""
    if not (0 < threshold < 1):
        raise ValueError(f"threshold must be a fraction in (0, 1), got {threshold!r}")
    alpha = parse_alpha(alpha)
    check_min_samples(min_samples, alpha)
    b = usable_rounds(base, "base", name, min_samples)
    h = usable_rounds(head, "head", name, min_samples)
    confidence = 1.0 - 2.0 * alpha
    log_est, log_lo, log_hi = hodges_lehmann_log_ratio(b, h, confidence)
    # one-sided tests; 'auto' picks the exact distribution for tiny tie-free samples
    p_slower = float(stats.mannwhitneyu(h, b, alternative="greater").pvalue)
    p_faster = float(stats.mannwhitneyu(h, b, alternative="less").pvalue)
    ratio = math.exp(log_est)
    notes: list[str] = []
    verdict = verdict_of(p_slower, p_faster, ratio, threshold=threshold, alpha=alpha)
    if verdict == UNCHANGED:
        if p_slower < alpha and ratio > 1.0:
            notes.append(f"slower by {ratio - 1:.1%}, significant but within the {threshold:.1%} threshold")
        elif ratio > 1.0 + threshold:
            notes.append(f"estimate {ratio - 1:+.1%} exceeds the threshold but is not significant (p={p_slower:.3g})")
    bm, hm = float(np.median(b)), float(np.median(h))
    return Comparison(
        name=name,
        n_base=int(b.size),
        n_head=int(h.size),
        base_median=bm,
        head_median=hm,
        median_ratio=hm / bm,
        ratio=ratio,
        ci_low=math.exp(log_lo),
        ci_high=math.exp(log_hi),
        confidence=confidence,
        p_slower=p_slower,
        p_faster=p_faster,
        threshold=threshold,
        alpha=alpha,
        verdict=verdict,
        notes=notes,
    )


def pytest_benchmark_rule_fails(base, head, rule: str = "mean:5%") -> bool:
    """What ``pytest --benchmark-compare-fail=RULE`` would decide on the same two samples,
    using pytest-benchmark's own rule parser (one number against one number)."""
    from pytest_benchmark.utils import parse_compare_fail

    check = parse_compare_fail(rule)
    b, h = np.asarray(base, dtype=np.float64), np.asarray(head, dtype=np.float64)

    def summary(x):
        q1, q3 = np.percentile(x, [25, 75])
        return {
            "min": float(x.min()),
            "max": float(x.max()),
            "mean": float(x.mean()),
            "median": float(np.median(x)),
            "stddev": float(x.std(ddof=1)) if x.size > 1 else 0.0,
            "iqr": float(q3 - q1),
        }

    return bool(check.fails(summary(h), summary(b)))
