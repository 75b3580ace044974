"""The sequential rule's pieces at their boundaries: the spending functions, the look schedule,
the decision at a look (the compare's regression rule at the look's level, futility, the last
look), and what a run records."""

import math

import numpy as np
import pytest
from scipy import stats

from fp4moe.stats import sequential
from fp4moe.stats.compare import REGRESSED, UNCHANGED, compare_samples


@pytest.mark.parametrize("spending", ["pocock", "obrien-fleming"])
def test_spending_is_zero_at_the_start_alpha_at_the_end_and_increasing(spending):
    assert sequential.spent(0.0, 0.01, spending) == 0.0
    assert sequential.spent(1.0, 0.01, spending) == pytest.approx(0.01, rel=1e-12)
    ts = np.linspace(0.05, 1.0, 20)
    vals = [sequential.spent(float(t), 0.01, spending) for t in ts]
    assert all(b > a for a, b in zip(vals, vals[1:]))


def test_spending_values():
    assert sequential.spent(0.5, 0.02, "pocock") == pytest.approx(0.02 * math.log(1 + (math.e - 1) * 0.5), rel=1e-15)
    z = stats.norm.isf(0.01)
    assert sequential.spent(0.25, 0.01, "obrien-fleming") == pytest.approx(stats.norm.sf(z / 0.5), rel=1e-12)


def test_one_look_has_the_fixed_sample_boundary():
    (c,) = sequential.boundaries((30,), 0.01)
    assert c == pytest.approx(stats.norm.isf(0.01), abs=1e-7)
    (c5,) = sequential.boundaries((30,), 0.05, "obrien-fleming")
    assert c5 == pytest.approx(stats.norm.isf(0.05), abs=1e-7)


def test_two_looks_spend_exactly_their_shares():
    c1, c2 = sequential.boundaries((10, 20), 0.01)
    s1 = sequential.spent(0.5, 0.01, "pocock")
    assert stats.norm.sf(c1) == pytest.approx(s1, rel=1e-6)
    # P(Z1 < c1, Z2 >= c2) with corr sqrt(1/2) equals the second share
    rho = math.sqrt(0.5)
    both_below = stats.multivariate_normal(mean=[0, 0], cov=[[1, rho], [rho, 1]]).cdf([c1, c2])
    second = stats.norm.cdf(c1) - both_below
    assert second == pytest.approx(0.01 - s1, rel=5e-3)  # quadrature on a 0.01-sd grid
    assert abs(c2 - c1) < 0.1  # Pocock-type: nearly one z boundary at every look


@pytest.mark.parametrize("looks", [(), (10, 10), (20, 10), (0, 10), (-5, 10)])
def test_looks_must_be_increasing_positive(looks):
    with pytest.raises(ValueError, match="looks: must be increasing positive round counts"):
        sequential.boundaries(looks, 0.01)


def test_looks_of_one_round_are_allowed():
    assert len(sequential.boundaries((1, 2), 0.01)) == 2


def test_design_schedule_and_its_limits():
    d = sequential.make_design(first=10, step=10, max_rounds=30, alpha=0.02, threshold=0.03, beta=0.1)
    assert d.looks == (10, 20, 30) and d.max_rounds == 30
    assert (d.alpha, d.threshold, d.beta, d.spending) == (0.02, 0.03, 0.1, "pocock")
    assert d.nominal == tuple(float(stats.norm.sf(c)) for c in sequential.boundaries((10, 20, 30), 0.02))
    assert sequential.make_design(first=10, step=7, max_rounds=24).looks == (10, 17, 24)
    assert sequential.make_design(first=10, step=7, max_rounds=25).looks == (10, 17, 24, 25)
    assert sequential.make_design(first=10, step=1, max_rounds=10).looks == (10,)
    with pytest.raises(ValueError, match=r"^--first 9: the first look needs at least 10 rounds per side"):
        sequential.make_design(first=9)
    with pytest.raises(ValueError, match=r"^--step 0: must be >= 1"):
        sequential.make_design(step=0)
    sequential.make_design(step=1, max_rounds=12)
    with pytest.raises(ValueError, match=r"^--max-rounds 9: must be >= --first 10"):
        sequential.make_design(max_rounds=9)
    defaults = sequential.make_design()
    assert defaults.looks[0] == 10 and defaults.looks[-1] == 100 and defaults.beta == 0.05


def _design(nominal, threshold=0.05, beta=0.05, looks=None):
    looks = looks or tuple(10 * (i + 1) for i in range(len(nominal)))
    return sequential.SequentialDesign(looks, 0.01, threshold, "pocock", beta, tuple(nominal))


BASE = np.linspace(1.0, 1.2, 10)


def test_a_look_regresses_on_the_compare_rule_at_its_own_level():
    head = BASE * 2.0  # fully separated
    p = compare_samples(BASE, head, alpha=0.4).p_slower
    hit = sequential.judge_look(BASE, head, _design([math.nextafter(p, 1), 0.5]), 0)
    assert hit.decision == REGRESSED and hit.comparison.verdict == REGRESSED and hit.rounds == 10
    assert hit.nominal_alpha == math.nextafter(p, 1)
    at = sequential.judge_look(BASE, head, _design([p, 0.5]), 0)  # p exactly the level: not significant
    assert at.decision is None and at.comparison.verdict == UNCHANGED


def test_a_look_within_the_threshold_is_not_a_regression_however_significant():
    look = sequential.judge_look(BASE, BASE * 1.04, _design([0.2, 0.2]), 0)
    assert look.decision is None or look.decision == UNCHANGED
    assert look.comparison.ratio == pytest.approx(1.04) and look.decision != REGRESSED


def test_futility_stops_unchanged_once_the_upper_bound_is_below_the_threshold():
    same = sequential.judge_look(BASE, BASE.copy(), _design([1e-3, 1e-3]), 0)
    assert same.decision == UNCHANGED and same.upper < 1.05 and same.comparison.verdict == UNCHANGED
    # a ratio of ~1.04 with a wide interval: neither regressed nor excluded at look 0, decided at the last
    rng = np.random.default_rng(5)
    b = rng.lognormal(0, 0.2, 10)
    h = b[rng.permutation(10)] * 1.04
    first = sequential.judge_look(b, h, _design([1e-3, 1e-3]), 0)
    assert first.decision is None and first.upper >= 1.05
    last = sequential.judge_look(b, h, _design([1e-3, 1e-3]), 1)
    assert last.decision == UNCHANGED


def test_futility_uses_the_design_beta():
    rng = np.random.default_rng(8)
    b = rng.lognormal(0, 0.02, 10)
    h = b[rng.permutation(10)] * 1.01
    tight = sequential.judge_look(b, h, _design([1e-3, 1e-3], beta=0.45), 0)
    loose = sequential.judge_look(b, h, _design([1e-3, 1e-3], beta=1e-4), 0)
    assert tight.upper < loose.upper


def test_run_records_rounds_looks_and_whether_it_stopped_early():
    calls = []

    def sample(n):
        calls.append(n)
        return BASE[:n] if n <= 10 else np.resize(BASE, n), (BASE[:n] if n <= 10 else np.resize(BASE, n)) * 3.0

    d = sequential.make_design(first=10, step=10, max_rounds=30)
    r = sequential.run_sequential(sample, d, name="moe")
    assert r.verdict == REGRESSED and r.rounds == 10 and r.stopped_early and calls == [10]
    assert r.comparison.name == "moe" and len(r.looks) == 1 and r.base.size == r.head.size == 10
    rec = r.to_dict()
    assert rec["verdict"] == REGRESSED and rec["rounds"] == 10 and rec["stopped_early"] is True
    assert rec["looks"] == [{"rounds": 10, "nominal_alpha": d.nominal[0], "p_slower": r.looks[0].comparison.p_slower,
                             "ratio": r.looks[0].comparison.ratio, "upper": r.looks[0].upper, "decision": REGRESSED}]
    assert rec["comparison"]["verdict"] == REGRESSED


def test_run_without_a_decision_goes_to_the_last_look_and_asks_only_for_new_rounds():
    rng = np.random.default_rng(21)
    calls = []

    def sample(n):
        calls.append(n)
        b = rng.lognormal(0, 0.3, n)
        return b, b[rng.permutation(n)] * 1.03

    d = sequential.make_design(first=10, step=10, max_rounds=30, threshold=0.02)
    r = sequential.run_sequential(sample, d)
    assert calls[0] == 10 and all(c == 10 for c in calls) and sum(calls) == r.rounds
    if not r.stopped_early:
        assert r.rounds == 30 and len(r.looks) == 3 and r.looks[-1].decision is not None


def test_stopping_at_the_look_before_the_last_is_early_and_the_default_name_is_benchmark():
    d = sequential.make_design(first=10, step=10, max_rounds=20)  # two looks
    r = sequential.run_sequential(lambda n: (BASE[:n], BASE[:n] * 3.0), d)
    assert r.verdict == REGRESSED and r.rounds == 10 and r.stopped_early is True
    assert r.comparison.name == "benchmark"


def test_the_design_uses_its_spending_function():
    d = sequential.make_design(first=10, step=10, max_rounds=30, spending="obrien-fleming")
    assert d.spending == "obrien-fleming"
    assert d.nominal == tuple(float(stats.norm.sf(c)) for c in sequential.boundaries((10, 20, 30), 0.01, "obrien-fleming"))
    assert d.nominal != sequential.make_design(first=10, step=10, max_rounds=30).nominal


def test_a_look_compares_at_its_level_with_the_designs_threshold_and_caps_the_level():
    look = sequential.judge_look(BASE, BASE * 1.01, _design([0.02, 0.02], threshold=0.03), 0)
    assert look.comparison.threshold == 0.03 and look.comparison.alpha == 0.02 and look.comparison.name == "benchmark"
    capped = sequential.judge_look(BASE, BASE * 1.01, _design([0.495, 0.495]), 0)
    assert capped.comparison.alpha == 0.49


def test_futility_needs_the_upper_bound_strictly_below_the_threshold():
    rng = np.random.default_rng(12)
    b = rng.lognormal(0, 0.05, 10)
    h = b[rng.permutation(10)] * 1.02
    upper = sequential.judge_look(b, h, _design([1e-3, 1e-3]), 0).upper
    t = upper - 1.0
    assert 1.0 + t == upper  # the bound lands exactly on 1 + threshold
    at = sequential.judge_look(b, h, _design([1e-3, 1e-3], threshold=t), 0)
    assert at.upper == upper and at.decision is None  # not strictly below: go on
    t_up = math.nextafter(upper, 2) - 1.0  # one ulp of the bound higher
    assert 1.0 + t_up == math.nextafter(upper, 2)
    above = sequential.judge_look(b, h, _design([1e-3, 1e-3], threshold=t_up), 0)
    assert above.decision == UNCHANGED
