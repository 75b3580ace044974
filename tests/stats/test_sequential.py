"""The sequential rule (``fp4moe.stats.sequential``) on the CPU: its boundaries spend exactly
alpha over the looks (checked against a simulated Brownian motion, not against itself), and on
seeded synthetic timings it keeps A/A false regressions under alpha while stopping early."""

import numpy as np
import pytest
from scipy import stats

from fp4moe.stats import sequential


def test_boundaries_spend_alpha_over_all_looks():
    looks = (10, 20, 30, 40, 50)
    c = np.array(sequential.boundaries(looks, 0.01, "pocock"))
    # Brownian motion at the looks: P(cross any boundary) must equal alpha, and the first look
    # alone its spent share; a fixed 1% level at every look would give ~2.9%
    rng = np.random.default_rng(0)
    inc = rng.standard_normal((200_000, len(looks))) * np.sqrt(np.diff((0,) + looks))
    z = np.cumsum(inc, axis=1) / np.sqrt(looks)
    crossed = (z >= c).any(axis=1).mean()
    assert crossed == pytest.approx(0.01, abs=0.0012)  # MC standard error 2.2e-4
    assert (z[:, 0] >= c[0]).mean() == pytest.approx(sequential.spent(0.2, 0.01, "pocock"), abs=0.0008)
    assert (z >= stats.norm.isf(0.01)).any(axis=1).mean() > 0.025
    obf = sequential.boundaries(looks, 0.01, "obrien-fleming")
    assert obf[0] > c[0] and obf[-1] < c[-1]  # OBF spends little early, more at the end


def test_design_and_bad_options():
    d = sequential.make_design(first=10, step=15, max_rounds=50)
    assert d.looks == (10, 25, 40, 50) and all(0 < a < 0.01 for a in d.nominal)
    with pytest.raises(ValueError, match="--first 5: the first look"):
        sequential.make_design(first=5)
    with pytest.raises(ValueError, match="spending"):
        sequential.spent(0.5, 0.01, "haybittle")


def _sampler(rng, shift, sigma=0.02):
    return lambda n: (1e-4 * rng.lognormal(0, sigma, n), 1e-4 * (1 + shift) * rng.lognormal(0, sigma, n))


def test_slowdowns_stop_early_and_identical_sides_do_not_regress():
    # (the alpha bound itself is checked on the boundaries above; lab/studies/perf_study.py measures
    # it on the device over >= 200 A/A comparisons)
    rng = np.random.default_rng(3)
    d = sequential.make_design(threshold=0.02)
    slow = [sequential.run_sequential(_sampler(rng, 0.10), d) for _ in range(10)]
    assert all(r.verdict == "regressed" for r in slow) and np.mean([r.rounds for r in slow]) <= 20
    assert all(r.stopped_early for r in slow) and slow[0].comparison.ratio > 1.05
    same = [sequential.run_sequential(_sampler(rng, 0.0), d) for _ in range(10)]
    assert not any(r.verdict == "regressed" for r in same) and np.mean([r.rounds for r in same]) <= 20
    assert same[0].to_dict()["looks"][0]["rounds"] == 10
    # a 1% change with 2% noise can be neither confirmed nor excluded early: runs to the cap
    small = sequential.run_sequential(_sampler(rng, 0.01, sigma=0.05), sequential.make_design(threshold=0.02, max_rounds=30))
    assert small.rounds == 30 and not small.stopped_early
