"""Pass/fail for an accuracy score, with the measurement's noise in view.

A GSM8K score is a mean of n Bernoulli outcomes; lm-eval reports it with its standard error
``sqrt(p(1-p)/(n-1))`` (``lm_eval.api.metrics.mean_stderr``). At n = 1319 and p ~ 0.95 that is
about 0.006, so differences such as 0.970 vs 0.965 are within one standard error.

Two rules:

* **threshold** (an absolute floor, as SGLang's CI asserts ``accuracy > 0.92``): pass when
  ``score >= threshold``. The verdict also states how many standard errors the score sits
  from the floor and flags a result within ``k`` standard errors as noise-limited, so a
  reader knows when a re-run could flip it.
* **baseline** (a known-good score of the same model): pass when
  ``score >= baseline - k * stderr``. ``k = 2`` by default: if the true accuracy equals the
  baseline, a run fails by chance with probability about 2.3 % (one-sided normal tail). The
  baseline is taken as exact; its own error is not added (a caller who has it can lower k).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

#: One-sided normal tail of 2 sigma is ~2.3 %: the false-alarm rate against a true baseline.
DEFAULT_K_SIGMA = 2.0


@dataclass(frozen=True)
class FilterScore:
    """exact_match under one lm-eval filter (``strict-match`` or ``flexible-extract``)."""

    name: str
    score: float
    stderr: float
    n: int


@dataclass(frozen=True)
class Verdict:
    passed: bool
    rule: str  # "threshold" or "baseline"
    filter: str
    score: float
    stderr: float
    n: int
    reference: float  # the threshold or the baseline
    bound: float  # the number the score was compared with
    k_sigma: float
    z: float  # (score - reference) / stderr; inf when stderr is 0
    noise_limited: bool  # |score - reference| < k * stderr
    source: str = ""

    def line(self) -> str:
        """The one-line verdict the CLI prints."""
        status = "PASS" if self.passed else "FAIL"
        if self.rule == "threshold":
            rule = f"threshold {self.reference:.4f}"
        else:
            rule = (
                f"baseline {self.reference:.4f} - {self.k_sigma:g}*stderr = {self.bound:.4f} "
                f"(k={self.k_sigma:g}: ~{_one_sided_tail(self.k_sigma) * 100:.1f}% false-fail rate)"
            )
        z = f"{self.z:+.2f}" if math.isfinite(self.z) else ("+inf" if self.z > 0 else "-inf")  # stderr 0
        note = f"; within {self.k_sigma:g} stderr of the reference: noise-limited" if self.noise_limited else ""
        return (
            f"GSM8K {status}: exact_match[{self.filter}] = {self.score:.4f} +- {self.stderr:.4f} "
            f"(n={self.n}) vs {rule}; z = {z}{note}"
        )

    def to_dict(self) -> dict:
        d = asdict(self)
        d["z"] = None if math.isinf(self.z) else self.z
        d["line"] = self.line()
        return d


def _one_sided_tail(k: float) -> float:
    return 0.5 * math.erfc(k / math.sqrt(2.0))


def _check_fraction(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and 0.0 <= value <= 1.0) or math.isnan(value):
        raise ValueError(f"{name} must be a fraction in [0, 1], got {value!r}")


def decide(
    score: FilterScore,
    *,
    threshold: float | None = None,
    baseline: float | None = None,
    k_sigma: float = DEFAULT_K_SIGMA,
    source: str = "",
) -> Verdict:
    """Apply the threshold rule or the baseline rule (exactly one of them) to ``score``."""
    if (threshold is None) == (baseline is None):
        raise ValueError("give exactly one of --threshold and --baseline")
    if not (k_sigma > 0 and math.isfinite(k_sigma)):
        raise ValueError(f"--k-sigma must be a positive number, got {k_sigma!r}")
    _check_fraction(f"exact_match[{score.name}]", score.score)
    if not (score.stderr >= 0 and math.isfinite(score.stderr)):
        raise ValueError(f"stderr of exact_match[{score.name}] is not a finite number: {score.stderr!r}")
    if threshold is not None:
        _check_fraction("--threshold", threshold)
        rule, reference, bound = "threshold", float(threshold), float(threshold)
    else:
        _check_fraction("--baseline", baseline)
        rule, reference = "baseline", float(baseline)
        bound = reference - k_sigma * score.stderr
    diff = score.score - reference
    z = diff / score.stderr if score.stderr > 0 else math.copysign(math.inf, diff if diff else 1.0)
    return Verdict(
        passed=score.score >= bound,
        rule=rule,
        filter=score.name,
        score=score.score,
        stderr=score.stderr,
        n=score.n,
        reference=reference,
        bound=bound,
        k_sigma=k_sigma,
        z=z,
        noise_limited=abs(diff) < k_sigma * score.stderr,
        source=source,
    )
