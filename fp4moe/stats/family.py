"""Per-benchmark noise thresholds and family-wise error control over one run's benchmarks.

Thresholds: each benchmark's own regression threshold comes from an archive of its A/A ratios
(head/base of a revision against itself, e.g. nightly A/A rows of a ``--history`` file):
``exp(Q3 + 3 * IQR)`` of the log-ratios, minus 1 -- Tukey's far-out fence, which an A/A ratio
exceeds with probability ~1e-6 for normal log-ratios (Q3 + 3 IQR = 4.72 sd) and which stays put
when a few A/As are hit by a stall. PyTorch's instruction-count gate sets 1.5-2.5% per benchmark
the same way, by measured noise. ``fp4moe-gate perf calibrate ARCHIVE --out thresholds.json``
writes them with the command that regenerates them; ``--thresholds`` of ``perf compare`` and
``perf ab`` reads them.

Family-wise error: a run judges m benchmarks; at alpha each, the chance of at least one false
alarm grows to ~m * alpha. ``perf compare`` applies Holm's step-down (Holm 1979: sort the
p-values, the i-th smallest is held against alpha / (m - i + 1), stop at the first that fails;
uniformly more powerful than Bonferroni, same guarantee, no independence needed) to the
one-sided p(slower) of every benchmark before the threshold rule. ``perf ab`` decides each
benchmark by a sequential design, for which Holm's later steps have no ready boundaries; it
spends alpha / m per benchmark (Bonferroni, Holm's first step), which gives the same guarantee.
Holm is 6 lines; statsmodels (``multipletests(method="holm")``) is not needed for it.
"""

from __future__ import annotations

import math

import numpy as np

from fp4moe.infra.files import read_text_bounded

#: Tukey's far-out fence on the A/A log-ratios
IQR_FACTOR = 3.0
#: fewest A/A ratios from which a benchmark's threshold is calibrated
MIN_AA_RUNS = 20
#: a calibrated threshold is never below this (a fence of 0.01% would call timer rounding a regression)
MIN_THRESHOLD = 0.002


def holm_adjust(pvalues) -> np.ndarray:
    """Holm-adjusted p-values (the smallest family-wise level at which each is rejected), in the
    input's order; works on the last axis, so a (runs, m) array is adjusted run by run."""
    p = np.asarray(pvalues, dtype=np.float64)
    m = p.shape[-1]
    order = np.argsort(p, axis=-1, kind="stable")
    ranked = np.take_along_axis(p, order, axis=-1) * (m - np.arange(m))
    ranked = np.minimum(np.maximum.accumulate(ranked, axis=-1), 1.0)
    out = np.empty_like(ranked)
    np.put_along_axis(out, order, ranked, axis=-1)
    return out


def calibrated_threshold(ratios) -> dict:
    """One benchmark's threshold from its A/A ratios: ``exp(Q3 + 3 IQR of log ratio) - 1``,
    at least :data:`MIN_THRESHOLD`. ValueError with fewer than :data:`MIN_AA_RUNS` finite
    positive ratios."""
    r = np.asarray(ratios, dtype=np.float64)
    r = r[np.isfinite(r) & (r > 0)]
    if r.size < MIN_AA_RUNS:
        raise ValueError(f"{r.size} usable A/A ratios, at least {MIN_AA_RUNS} are needed")
    q1, q3 = np.percentile(np.log(r), [25, 75])
    fence = q3 + IQR_FACTOR * (q3 - q1)
    return {"threshold": max(math.expm1(fence), MIN_THRESHOLD), "n": int(r.size), "q1": float(q1), "q3": float(q3),
            "iqr": float(q3 - q1)}


def suite_verdicts(p_slower, ratio, thresholds, alpha: float, family: str = "holm") -> np.ndarray:
    """Which benchmarks regressed: (family-adjusted) p(slower) < alpha AND ratio > 1 + threshold,
    on the last axis (one run's m benchmarks; leading axes are runs)."""
    p = np.asarray(p_slower, dtype=np.float64)
    adj = holm_adjust(p) if family == "holm" else p
    return (adj < alpha) & (np.asarray(ratio) > 1.0 + np.asarray(thresholds))


def load_thresholds(path) -> dict[str, float]:
    """``--thresholds FILE`` (``perf calibrate``'s output): benchmark -> threshold fraction;
    ValueError naming the file and the benchmark on anything else."""
    import json
    from pathlib import Path

    p = Path(path)
    try:
        doc = json.loads(read_text_bounded(p))  # a regular file within 64 MiB: never a FIFO or /dev/zero
    except OSError as e:
        raise ValueError(f"--thresholds {path}: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"--thresholds {path}: not JSON ({e.msg}, line {e.lineno})") from None
    benches = doc.get("benchmarks") if isinstance(doc, dict) else None
    if not isinstance(benches, dict):
        raise ValueError(f"--thresholds {path}: no 'benchmarks' object (write it with fp4moe-gate perf calibrate)")
    out = {}
    for name, rec in benches.items():
        t = rec.get("threshold") if isinstance(rec, dict) else None
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t < 1:
            raise ValueError(f"--thresholds {path}: {name}: threshold {t!r} is not a fraction in (0, 1)")
        out[str(name)] = float(t)
    return out
