"""The GSM8K rules exactly at their bounds and one ulp each side, in both directions: the
threshold floor, the baseline band, the noise-limited flag, z's sign with no spread, and every
refused value."""

import math

import pytest

from fp4moe.gates.accuracy.verdict import FilterScore, decide

DOWN, UP = -math.inf, math.inf


def _s(p, se=0.01):
    return FilterScore("flexible-extract", p, se, 1319)


def test_threshold_floor_at_one_ulp():
    t = 0.92
    assert decide(_s(t), threshold=t).passed
    assert decide(_s(math.nextafter(t, UP)), threshold=t).passed
    assert not decide(_s(math.nextafter(t, DOWN)), threshold=t).passed
    v = decide(_s(t), threshold=t)
    assert (v.rule, v.reference, v.bound, v.z) == ("threshold", t, t, 0.0)


def test_baseline_band_at_one_ulp():
    s = _s(0.95, 0.0125)
    bound = 0.97 - 2.0 * 0.0125
    at = decide(FilterScore("f", bound, 0.0125, 10), baseline=0.97)
    assert at.passed and at.bound == bound and at.rule == "baseline" and at.reference == 0.97
    assert not decide(FilterScore("f", math.nextafter(bound, DOWN), 0.0125, 10), baseline=0.97).passed
    assert decide(s, baseline=0.97, k_sigma=1.6).passed is (0.95 >= 0.97 - 1.6 * 0.0125)
    assert decide(s, baseline=0.94).passed  # above the baseline itself


def test_noise_limited_is_strictly_inside_k_stderr():
    # |diff| == k * stderr exactly (binary-exact numbers): not noise-limited; a hair inside: it is
    assert decide(_s(0.75, 0.125), threshold=0.5).noise_limited is False  # diff 0.25 = 2 * 0.125
    assert decide(_s(math.nextafter(0.75, DOWN), 0.125), threshold=0.5).noise_limited is True
    assert decide(_s(0.25, 0.125), threshold=0.5).noise_limited is False  # below, same distance
    assert decide(_s(math.nextafter(0.25, UP), 0.125), threshold=0.5).noise_limited is True
    assert decide(_s(0.75, 0.125), threshold=0.5, k_sigma=3.0).noise_limited is True


def test_z_is_signed_and_infinite_without_spread():
    assert decide(_s(0.9, 0.02), threshold=0.8).z == pytest.approx(5.0)
    assert decide(_s(0.7, 0.02), threshold=0.8).z == pytest.approx(-5.0)
    assert decide(_s(0.9, 0.0), threshold=0.8).z == math.inf
    assert decide(_s(0.7, 0.0), threshold=0.8).z == -math.inf
    assert decide(_s(0.8, 0.0), threshold=0.8).z == math.inf  # no difference, no spread: +inf, passes
    assert decide(_s(0.8, 0.0), threshold=0.8).noise_limited is False


def test_verdict_carries_its_inputs():
    v = decide(FilterScore("strict-match", 0.9, 0.01, 250), threshold=0.8, k_sigma=2.5, source="fixtures/x.json")
    assert (v.filter, v.score, v.stderr, v.n, v.k_sigma, v.source) == ("strict-match", 0.9, 0.01, 250, 2.5, "fixtures/x.json")


@pytest.mark.parametrize("kw, text", [
    ({"threshold": 1.0}, None), ({"threshold": 0.0}, None),
    ({"threshold": math.nextafter(1.0, UP)}, r"^--threshold must be a fraction in \[0, 1\], got 1.0000000000000002$"),
    ({"threshold": math.nextafter(0.0, DOWN)}, r"^--threshold must be a fraction in \[0, 1\]"),
    ({"threshold": math.nan}, r"^--threshold must be a fraction"),
    ({"threshold": "0.9"}, r"^--threshold must be a fraction"),
    ({"baseline": 1.5}, r"^--baseline must be a fraction in \[0, 1\], got 1.5$"),
    ({"threshold": 0.9, "k_sigma": -1.0}, r"^--k-sigma must be a positive number, got -1.0$"),
    ({"threshold": 0.9, "k_sigma": math.inf}, r"^--k-sigma must be a positive number"),
    ({"threshold": 0.9, "k_sigma": math.nan}, r"^--k-sigma must be a positive number"),
    ({"threshold": None, "baseline": None}, r"^give exactly one of --threshold and --baseline$"),
])
def test_refused_options(kw, text):
    if text is None:
        decide(_s(0.5), **kw)
        return
    with pytest.raises(ValueError, match=text):
        decide(_s(0.5), **kw)


@pytest.mark.parametrize("score, se, text", [
    (1.01, 0.01, r"^exact_match\[flexible-extract\] must be a fraction in \[0, 1\], got 1.01$"),
    (math.nan, 0.01, r"^exact_match\[flexible-extract\] must be a fraction"),
    (0.5, -0.01, r"^stderr of exact_match\[flexible-extract\] is not a finite number: -0.01$"),
    (0.5, math.nan, r"^stderr of exact_match\[flexible-extract\] is not a finite number"),
    (0.5, math.inf, r"^stderr of exact_match\[flexible-extract\] is not a finite number: inf$"),
])
def test_refused_scores(score, se, text):
    with pytest.raises(ValueError, match=text):
        decide(FilterScore("flexible-extract", score, se, 10), threshold=0.5)


def test_source_defaults_to_empty():
    assert decide(_s(0.9), threshold=0.5).source == ""
