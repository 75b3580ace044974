"""The compare's rules pinned at their boundaries: the verdict rule (exactly at the threshold and
at alpha, one ulp each side, both directions), the option parsers, the sample checks, and the
order statistics checked against the full pairwise matrix they avoid building."""

import math

import numpy as np
import pytest
from scipy import stats

from fp4moe.stats import compare
from fp4moe.stats.compare import (
    IMPROVED,
    REGRESSED,
    UNCHANGED,
    check_min_samples,
    compare_samples,
    is_regression,
    kth_pairwise_difference,
    min_samples_floor,
    parse_alpha,
    parse_threshold,
    pytest_benchmark_rule_fails,
    usable_rounds,
    verdict_of,
)

T, A = 0.05, 0.01
UP = math.nextafter(1.0 + T, math.inf)
DOWN = math.nextafter(1.0 + T, -math.inf)
FAST_EDGE = 1.0 / (1.0 + T)


@pytest.mark.parametrize("p, ratio, want", [
    (math.nextafter(A, 0), UP, True),  # both strictly past their bound
    (A, UP, False),  # p exactly alpha: not significant
    (math.nextafter(A, 0), 1.0 + T, False),  # ratio exactly 1 + threshold: within it
    (math.nextafter(A, 0), DOWN, False),
    (math.nextafter(A, 1), UP, False),
    (0.0, 10.0, True),
    (0.0, 0.5, False),  # faster is never a regression, however significant
])
def test_regression_rule_at_its_boundaries(p, ratio, want):
    assert is_regression(p, ratio, threshold=T, alpha=A) is want
    assert (verdict_of(p, 1.0, ratio, threshold=T, alpha=A) == REGRESSED) is want


@pytest.mark.parametrize("p, ratio, want", [
    (math.nextafter(A, 0), math.nextafter(FAST_EDGE, 0), IMPROVED),
    (A, math.nextafter(FAST_EDGE, 0), UNCHANGED),
    (math.nextafter(A, 0), FAST_EDGE, UNCHANGED),
    (math.nextafter(A, 0), math.nextafter(FAST_EDGE, 1), UNCHANGED),
])
def test_improvement_rule_mirrors_the_regression_rule(p, ratio, want):
    assert verdict_of(1.0, p, ratio, threshold=T, alpha=A) == want


def test_regression_takes_precedence_and_each_side_reads_its_own_p():
    # p_faster small but the ratio says slower: not improved; p_slower small, ratio faster: not regressed
    assert verdict_of(1.0, 0.0, 2.0, threshold=T, alpha=A) == UNCHANGED
    assert verdict_of(0.0, 1.0, 0.5, threshold=T, alpha=A) == UNCHANGED
    assert verdict_of(0.0, 0.0, 2.0, threshold=T, alpha=A) == REGRESSED


@pytest.mark.parametrize("text, want", [
    ("5%", 0.05), ("5", 0.05), ("0.05", 0.05), ("1", 0.01), ("0.99", 0.99), ("99.5%", 0.995),
    ("0.5%", 0.005), (" 7% ", 0.07), (0.2, 0.2), (20, 0.2),
])
def test_threshold_forms(text, want):
    assert parse_threshold(text) == pytest.approx(want, rel=1e-15)


@pytest.mark.parametrize("text, match", [
    ("1e400", "between 0% and 100%"), ("nan", "between"), ("inf%", "between"), ("100", "between"),
    ("0%", "between"), ("1%%", "cannot read"), ("", "cannot read"),
])
def test_threshold_refusals_name_the_option_and_the_value(text, match):
    with pytest.raises(ValueError, match=match) as e:
        parse_threshold(text)
    assert str(e.value).startswith("--threshold: ") and repr(text) in str(e.value)


@pytest.mark.parametrize("value, ok", [
    (0.01, True), (math.nextafter(0.5, 0), True), (5e-324, True), ("0.2", True),
    (0.5, False), (0.0, False), (-0.01, False), (float("nan"), False),
])
def test_alpha_is_a_one_sided_level_strictly_inside_0_and_half(value, ok):
    if ok:
        assert parse_alpha(value) == float(value)
    else:
        with pytest.raises(ValueError, match=r"^--alpha: .* must be a one-sided significance level in \(0, 0.5\)"):
            parse_alpha(value)


@pytest.mark.parametrize("value", ["x", None, [0.1]])
def test_alpha_that_is_no_number_says_so(value):
    with pytest.raises(ValueError, match=r"^--alpha: cannot read .*; write a significance level"):
        parse_alpha(value)


@pytest.mark.parametrize("alpha, floor", [
    (0.01, 5), (0.05, 4), (0.2, 2), (0.49, 2), (0.001, 7),
    (1 / 70, 5), (math.nextafter(1 / 70, 1), 4),  # 1/C(8,4): exactly at it needs one round more
    (1 / 6, 3), (math.nextafter(1 / 6, 1), 2),
])
def test_min_samples_floor_is_where_complete_separation_first_reaches_alpha(alpha, floor):
    assert min_samples_floor(alpha) == floor
    assert 1 / math.comb(2 * floor, floor) < alpha <= 1 / math.comb(2 * floor - 2, floor - 1)


def test_check_min_samples_at_its_floor():
    assert check_min_samples(5, 0.01) == 5
    assert check_min_samples(10) == 10
    with pytest.raises(ValueError, match=r"^--min-samples 4: below 5, the fewest rounds .* alpha = 0.01 "):
        check_min_samples(4, 0.01)
    for bad in (True, 5.0, "10", None):
        with pytest.raises(ValueError, match=r"^--min-samples: .* is not a whole number of rounds"):
            check_min_samples(bad)


def test_usable_rounds_accepts_exactly_the_minimum_and_names_what_is_wrong():
    got = usable_rounds([[1e-3, 2e-3], [3e-3, 4e-3]], "base", "moe", 4)
    assert got.dtype == np.float64 and got.shape == (4,) and got.tolist() == [1e-3, 2e-3, 3e-3, 4e-3]
    with pytest.raises(ValueError, match=r"^moe: the head sample has 3 rounds; at least 4 are needed"):
        usable_rounds([1.0, 2.0, 3.0], "head", "moe", 4)
    with pytest.raises(ValueError, match=r"^moe: the base sample is empty"):
        usable_rounds([], "base", "moe", 1)
    for bad, first in (([1.0, 0.0, -1.0], "0.0"), ([1.0, float("nan")], "nan"), ([float("inf"), 1.0], "inf"),
                       ([-2.0, 1.0], "-2.0")):
        with pytest.raises(ValueError, match=rf"^moe: the base sample has \d non-finite or non-positive timings "
                                             rf"\(first: (np.float64\()?{first}"):
            usable_rounds(bad, "base", "moe", 1)
    with pytest.raises(ValueError, match="has 2 non-finite"):
        usable_rounds([1.0, 0.0, -1.0], "base", "moe", 1)


def _all_differences(x, y):
    return np.sort((x[None, :] - y[:, None]).ravel())


@pytest.mark.parametrize("seed, n, m, ties", [(0, 7, 9, False), (1, 12, 5, True), (2, 1, 1, False), (3, 30, 30, True)])
@pytest.mark.parametrize("materialize_below", [0, 40, None])  # 40: narrowed first, then partitioned
def test_kth_pairwise_difference_equals_the_full_matrix(seed, n, m, ties, materialize_below):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=m)
    y = rng.normal(size=n)
    if ties:
        x, y = np.round(x, 1), np.round(y, 1)
    x, y = np.sort(x), np.sort(y)
    full = _all_differences(x, y)
    for k in sorted({0, 1, n * m // 3, (n * m - 1) // 2, n * m // 2, n * m - 2, n * m - 1} & set(range(n * m))):
        assert kth_pairwise_difference(x, y, k, materialize_below=materialize_below) == full[k], k


def test_kth_pairwise_difference_refuses_an_order_statistic_out_of_range():
    x = y = np.arange(3.0)
    kth_pairwise_difference(x, y, 8)
    for k in (-1, 9):
        with pytest.raises(ValueError, match=rf"order statistic {k} out of range for 3 x 3"):
            kth_pairwise_difference(x, y, k)


def test_count_le_is_exact_across_runs_of_equal_values():
    x = np.sort(np.array([0.1, 0.2, 0.2, 0.2, 0.3, 0.7, 0.7, 1.0]))
    y = np.array([0.0, 0.1, 0.5, -0.3, 0.2])
    for t in (-1.0, 0.0, 0.1, 0.2 - 0.1, 0.5, 1e-17, 2.0, float(x[2] - y[1])):
        want = [(np.subtract(x, yi) <= t).sum() for yi in y]
        assert compare._count_le(x, y, t).tolist() == want, t


def test_count_le_starts_at_the_rounded_position_and_steps_back_where_it_overshot():
    # y + t rounds up onto x[0] (t a little over half an ulp of 1.0) while fl(x[0] - y) = 2^-52 > t:
    # the first position is one too far and the loop must step back to 0
    x, y, t = np.array([1.0 + 2.0**-52, 2.0]), np.array([1.0]), 2.0**-53 + 2.0**-60
    assert (x - y[0] <= t).sum() == 0 and compare._count_le(x, y, t).tolist() == [0]
    # a threshold far to the right of most x: searchsorted lands there at once (walking run by run
    # from the left would take 91 passes)
    wide = np.arange(100.0)
    assert compare._count_le(wide, np.array([0.0, 5.0]), 90.0).tolist() == [91, 96]


#: fl(x - 1e16) = -1e16 for every x in [0, 1) (the ulp at 1e16 is 2): every x counts, while
#: searchsorted(x, 1e16 + -1e16 = 0, "right") stops after x[0] = 0; the loop then walks one run of
#: equal x per pass, so m distinct x need m - 1 passes and one to settle
def _distinct_below_one(m):
    return np.concatenate([[0.0], np.sort(np.random.default_rng(m).uniform(0.01, 0.99, m - 1))])


def test_count_le_settles_in_its_64_passes_and_says_so_past_them():
    x = _distinct_below_one(64)
    assert np.unique(x).size == 64 and compare._count_le(x, np.array([1e16]), -1e16).tolist() == [64]
    x65 = _distinct_below_one(65)
    with pytest.raises(ArithmeticError, match=r"^pairwise-difference count did not settle \(non-finite timings\?\)$"):
        compare._count_le(x65, np.array([1e16]), -1e16)


def test_hodges_lehmann_is_the_median_of_pairwise_log_ratios_with_the_inverted_interval():
    rng = np.random.default_rng(11)
    base, head = rng.lognormal(0, 0.1, 13), rng.lognormal(0.05, 0.1, 10)
    d = _all_differences(np.sort(np.log(head)), np.sort(np.log(base)))
    nm = d.size
    est, lo, hi = compare.hodges_lehmann_log_ratio(base, head, 0.98)
    assert est == pytest.approx(float(np.median(d)), abs=0, rel=1e-15)
    z = stats.norm.ppf(0.99)
    k = int(math.floor(nm / 2 - z * math.sqrt(13 * 10 * 24 / 12)))
    assert (lo, hi) == (d[k], d[nm - 1 - k])
    assert lo < est < hi
    # a confidence so low that k would pass the middle is clamped to the median pair
    est0, lo0, hi0 = compare.hodges_lehmann_log_ratio(base, head, 0.0)
    assert (lo0, hi0) == (d[(nm - 1) // 2], d[nm - 1 - (nm - 1) // 2])


def test_comparison_fields_and_notes():
    base = np.linspace(1.0, 1.1, 20)
    head = base * 1.03  # significant but within 5%
    c = compare_samples(base, head, name="moe")
    assert (c.name, c.n_base, c.n_head, c.verdict) == ("moe", 20, 20, UNCHANGED)
    assert c.base_median == pytest.approx(1.05) and c.head_median == pytest.approx(1.05 * 1.03)
    assert c.median_ratio == pytest.approx(1.03) and c.confidence == pytest.approx(0.98)
    assert (c.threshold, c.alpha) == (0.05, 0.01)
    assert c.notes == [f"slower by {c.ratio - 1:.1%}, significant but within the 5.0% threshold"]
    assert not c.regressed and c.to_dict()["verdict"] == UNCHANGED
    # over the threshold but not significant: two rounds of the head are far faster, most far slower
    rng = np.random.default_rng(3)
    b = rng.lognormal(0, 0.5, 10)
    h = b * 1.08
    c2 = compare_samples(b, h, name="noisy")
    assert c2.verdict == UNCHANGED and c2.ratio > 1.05 and c2.p_slower >= 0.01
    assert c2.notes == [f"estimate {c2.ratio - 1:+.1%} exceeds the threshold but is not significant (p={c2.p_slower:.3g})"]
    c3 = compare_samples(b, b, name="same")
    assert c3.notes == [] and c3.verdict == UNCHANGED and c3.ratio == 1.0


def test_a_clear_regression_is_regressed_and_carries_no_note():
    base = np.linspace(1.0, 1.1, 12)
    c = compare_samples(base, base * 1.5)
    assert c.verdict == REGRESSED and c.regressed and c.notes == []
    assert compare_samples(base * 1.5, base).verdict == IMPROVED


@pytest.mark.parametrize("threshold", [0.0, 1.0, -0.1, 1.5])
def test_compare_refuses_a_threshold_outside_0_1(threshold):
    with pytest.raises(ValueError, match=r"threshold must be a fraction in \(0, 1\)"):
        compare_samples(np.ones(10), np.ones(10), threshold=threshold)


def test_compare_checks_alpha_and_min_samples_before_the_samples():
    with pytest.raises(ValueError, match="--alpha"):
        compare_samples(np.ones(10), np.ones(10), alpha=0.5)
    with pytest.raises(ValueError, match="--min-samples 4"):
        compare_samples(np.ones(10), np.ones(10), min_samples=4)
    c = compare_samples(np.linspace(1, 2, 5), np.linspace(1, 2, 5) * 3, min_samples=5)
    assert c.n_base == 5 and c.verdict == REGRESSED  # 5 rounds reach p < 0.01 when fully separated


def test_pytest_benchmark_mean_rule_at_five_percent():
    base = np.array([1.0, 1.0, 1.0, 1.0])
    assert pytest_benchmark_rule_fails(base, base * 1.06) is True
    assert pytest_benchmark_rule_fails(base, base * 1.04) is False
    assert pytest_benchmark_rule_fails(base, base * 1.04, "mean:3%") is True
    assert pytest_benchmark_rule_fails(base, np.array([1.0, 1.0, 1.0, 1.3]), "median:5%") is False
    assert pytest_benchmark_rule_fails(base, np.array([1.0, 1.0, 1.0, 1.3]), "max:5%") is True
    assert pytest_benchmark_rule_fails(base, np.array([1.2, 1.0, 1.0, 1.0]), "min:5%") is False
    assert pytest_benchmark_rule_fails(np.array([1.0, 1.2]), np.array([1.1, 1.3]), "stddev:5%") is False
    assert pytest_benchmark_rule_fails(np.array([1.0, 1.2]), np.array([1.0, 1.5]), "stddev:5%") is True
    assert pytest_benchmark_rule_fails(np.array([1.0]), np.array([2.0]), "mean:5%") is True  # one round: stddev 0


def test_pytest_benchmark_iqr_rule_reads_the_quartiles():
    # the head's IQR 2.09 against 2.0: 4.5% wider, within 5%; quartiles read at 26% or 76%
    # would put it past 5% (2.09 / 1.92) or call a wide top tail a wider IQR ([..., 4, 10])
    assert pytest_benchmark_rule_fails([1, 2, 4, 4, 5], [1, 1.91, 1.91, 4, 5], "iqr:5%") is False
    assert pytest_benchmark_rule_fails([1, 2, 3, 4, 5], [1, 2, 3, 4, 10], "iqr:5%") is False
    assert pytest_benchmark_rule_fails([1, 2, 3, 4, 5], [1, 1.5, 3, 4, 5], "iqr:5%") is True


def test_pytest_benchmark_rule_reads_both_samples_in_float64():
    # pytest-benchmark's statistics are Python floats: a float16 sample's mean is 1.05005 in
    # float64 (above 5%) where float16 arithmetic would round it to 1.05 (not above)
    narrow = np.array([1.0, 1.0, 1.0, 1.2], dtype=np.float16)
    assert pytest_benchmark_rule_fails(np.ones(4, dtype=np.float16), narrow) is True
    # the same on the base side: 1.10252 / 1.05005 is 4.997% slower, 1.10252 / 1.05 would be 5.002%
    assert pytest_benchmark_rule_fails(narrow, np.full(4, 1.10252)) is False


def test_pytest_benchmark_stddev_of_one_round_is_zero_as_pytest_benchmark_reads_it():
    # a base stddev of 0 makes pytest-benchmark's percentage check infinite: it fails; a NaN
    # (ddof=1 over one round) or any non-zero stand-in would not
    assert pytest_benchmark_rule_fails(np.array([1.0]), np.array([1.0]), "stddev:5%") is True
    assert pytest_benchmark_rule_fails(np.array([1.0]), np.array([1.0]), "stddev:0.5") is False


def test_hodges_lehmann_interval_of_too_few_rounds_is_the_whole_range():
    # 2 x 2 rounds at 98%: k = floor(2 - 2.33 * sqrt(20 / 12)) = -1, clamped to 0: the interval
    # runs from the smallest pairwise log-ratio to the largest, never one order statistic inside
    base, head = np.array([1.0, 2.0]), np.array([3.0, 5.0])
    d = _all_differences(np.log(head), np.log(base))
    est, lo, hi = compare.hodges_lehmann_log_ratio(base, head, 0.98)
    assert (lo, hi) == (d[0], d[-1]) and lo < d[1] and est == 0.5 * (d[1] + d[2])


def test_hodges_lehmann_works_in_float64_whatever_the_samples_dtype():
    rng = np.random.default_rng(5)
    base, head = rng.lognormal(0, 0.1, 12).astype(np.float32), rng.lognormal(0.1, 0.1, 11).astype(np.float32)
    narrow = compare.hodges_lehmann_log_ratio(base, head, 0.98)
    wide = compare.hodges_lehmann_log_ratio(base.astype(np.float64), head.astype(np.float64), 0.98)
    assert narrow == wide  # bitwise: the logs are taken in float64, not in the samples' float32


def test_hodges_lehmann_clamps_a_too_low_confidence_to_the_median_of_an_odd_count():
    rng = np.random.default_rng(12)
    base, head = rng.lognormal(0, 0.1, 13), rng.lognormal(0.05, 0.1, 11)  # 143 pairs: one middle
    d = _all_differences(np.sort(np.log(head)), np.sort(np.log(base)))
    est, lo, hi = compare.hodges_lehmann_log_ratio(base, head, 0.0)
    assert lo == hi == est == d[71]


def test_compare_p_values_are_the_two_one_sided_mann_whitney_tests():
    base = np.linspace(1.0, 1.1, 12)
    head = base * 1.02
    c = compare_samples(base, head)
    assert c.p_slower == stats.mannwhitneyu(head, base, alternative="greater").pvalue
    assert c.p_faster == stats.mannwhitneyu(head, base, alternative="less").pvalue
    assert c.p_slower < 0.5 < c.p_faster  # not the two-sided p, on either side


def test_compare_default_name_and_min_samples_checked_at_the_given_alpha():
    base = np.linspace(1.0, 2.0, 4)
    assert compare_samples(np.ones(10), np.ones(10)).name == "benchmark"
    c = compare_samples(base, base * 3, alpha=0.05, min_samples=4)  # 4 rounds reach p < 0.05, not p < 0.01
    assert (c.n_base, c.alpha, c.verdict) == (4, 0.05, REGRESSED)


def test_compare_notes_at_their_boundaries():
    base = np.linspace(1.0, 1.1, 20)
    c = compare_samples(base, base * 1.03)
    assert c.notes and c.p_slower < 0.01
    # p exactly alpha: not significant, and 3% is within the threshold: nothing to note
    assert compare_samples(base, base * 1.03, alpha=c.p_slower).notes == []
    # significant but a ratio of exactly 1 (55 of 100 head rounds tie the base): not "slower"
    tied = compare_samples(np.ones(100), np.array([1.0] * 55 + [2.0] * 45))
    assert tied.ratio == 1.0 and tied.p_slower < 1e-10 and tied.notes == [] and tied.verdict == UNCHANGED
    # not significant, ratio exactly 1 + threshold: within it, nothing to note
    rng = np.random.default_rng(3)
    b = rng.lognormal(0, 0.5, 10)
    noisy = compare_samples(b, b * 1.08)
    assert noisy.p_slower >= 0.01 and noisy.notes
    at = compare_samples(b, b * 1.08, threshold=noisy.ratio - 1.0)
    assert 1.0 + at.threshold == at.ratio and at.notes == [] and at.verdict == UNCHANGED


@pytest.mark.parametrize("n, m, materialize_below, selects", [
    (64, 64, None, False),  # 4096 differences: exactly the default floor, partitioned at once
    (17, 241, None, True),  # 4097: one past it, selected first
    (3, 1500, None, False),  # 4500 <= 4 (n + m) = 6012: the floor grows with the rows
    (5, 1100, None, True),  # 5500 > 4 (n + m) = 4420
    (4, 4, 0, True), (4, 4, 16, False), (4, 4, 15, True),  # a given bound, at and one below n * m
])
def test_kth_pairwise_difference_partitions_directly_exactly_up_to_its_bound(monkeypatch, n, m, materialize_below, selects):
    calls = []
    count = compare._count_le
    monkeypatch.setattr(compare, "_count_le", lambda *a: calls.append(1) or count(*a))
    rng = np.random.default_rng(n * m)
    x, y = np.sort(rng.normal(size=m)), np.sort(rng.normal(size=n))
    k = n * m // 2
    got = kth_pairwise_difference(x, y, k, materialize_below=materialize_below)
    assert got == np.partition((x[None, :] - y[:, None]).ravel(), k)[k]
    assert bool(calls) is selects


def test_usable_rounds_are_float64_whatever_they_were_given_as():
    for given in (np.array([1.5, 2.5], dtype=np.float32), [1, 2], np.array([3, 4], dtype=np.int32)):
        got = usable_rounds(given, "base", "moe", 2)
        assert got.dtype == np.float64 and got.tolist() == [float(v) for v in np.asarray(given)]


def test_min_samples_floor_of_a_level_above_one_half_is_one_round():
    # one round per side: complete separation has p = 1 / C(2, 1) = 0.5
    assert min_samples_floor(math.nextafter(0.5, 1)) == 1 and min_samples_floor(0.5) == 2
