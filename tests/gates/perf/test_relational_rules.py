"""The GPU tier's relational decisions (pad propagation must speed the kernel up, two layouts
must take equal time) judged on the CPU at their bounds: the interval's end exactly at the
limit and one ulp each side, with the compare's interval fixed so the rule alone is tested."""

import math

import pytest

from fp4moe.gates.perf import workloads
from fp4moe.stats import compare
from fp4moe.stats.compare import UNCHANGED, Comparison


def _fixed(monkeypatch, lo, hi, ratio=1.0):
    seen = {}

    def fake(base, head, *, name, alpha, **kw):
        seen.update(name=name, alpha=alpha)
        return Comparison(name=name, n_base=10, n_head=10, base_median=2e-3, head_median=1e-3, median_ratio=ratio,
                          ratio=ratio, ci_low=lo, ci_high=hi, confidence=1 - 2 * alpha, p_slower=0.5, p_faster=0.5,
                          threshold=0.05, alpha=alpha, verdict=UNCHANGED)

    monkeypatch.setattr(compare, "compare_samples", fake)
    return seen


@pytest.mark.parametrize("hi, ok", [(math.nextafter(0.875, 0), True), (0.875, False), (math.nextafter(0.875, 1), False)])
def test_pad_speedup_needs_the_upper_bound_strictly_below_one_minus_the_speedup(monkeypatch, hi, ok):
    seen = _fixed(monkeypatch, 0.5, hi, ratio=0.8)
    got, c, msg = workloads.pad_speedup_verdict([1.0], [1.0], required_speedup=0.125)
    assert got is ok and c.ci_high == hi and seen == {"name": "pad propagation", "alpha": compare.DEFAULT_ALPHA}
    assert msg.endswith("required: CI upper bound < 0.875 (head at least 12.5% faster) -> " + ("ok" if ok else "FAILED"))
    assert msg.startswith("pad propagation: head/base = 0.800 (Hodges-Lehmann), 98% CI [0.500, ")
    assert "medians base 2.000 ms / head 1.000 ms, 10+10 rounds" in msg


@pytest.mark.parametrize("lo, hi, ok", [
    (0.95, 1.05, True), (math.nextafter(0.95, 0), 1.0, False), (1.0, math.nextafter(1.05, 2), False),
    (math.nextafter(0.95, 1), math.nextafter(1.05, 0), True),
])
def test_equal_time_needs_the_interval_inside_the_band_ends_included(monkeypatch, lo, hi, ok):
    seen = _fixed(monkeypatch, lo, hi)
    got, _, msg = workloads.equal_time_verdict([1.0], [1.0], tolerance=0.05, alpha=0.02, name="layouts")
    assert got is ok and seen == {"name": "layouts", "alpha": 0.02}
    assert msg.endswith("required: CI inside [0.950, 1.050] -> " + ("ok" if ok else "FAILED"))
    assert msg.startswith("layouts: head/base = 1.000")


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.1, 1.5])
def test_fractions_outside_0_1_are_refused(bad):
    with pytest.raises(ValueError, match=rf"^required_speedup: must be a fraction in \(0, 1\), got {bad!r}$"):
        workloads.pad_speedup_verdict([1.0], [1.0], required_speedup=bad)
    with pytest.raises(ValueError, match=rf"^tolerance: must be a fraction in \(0, 1\), got {bad!r}$"):
        workloads.equal_time_verdict([1.0], [1.0], tolerance=bad)


def test_an_explicit_alpha_is_used_and_equal_time_names_itself(monkeypatch):
    seen = _fixed(monkeypatch, 0.5, 0.6, ratio=0.55)
    workloads.pad_speedup_verdict([1.0], [1.0], required_speedup=0.125, alpha=0.03)
    assert seen["alpha"] == 0.03
    seen = _fixed(monkeypatch, 0.99, 1.01)
    _, _, msg = workloads.equal_time_verdict([1.0], [1.0], tolerance=0.05)
    assert seen == {"name": "equal time", "alpha": compare.DEFAULT_ALPHA}
    assert msg.startswith("equal time: head/base = 1.000") and "medians base 2.000 ms / head 1.000 ms, 10+10 rounds" in msg
