"""The pass/fail rules (fp4moe.gates.accuracy.verdict) and the thresholds fixture."""

import json
import math

import pytest

from fp4moe.gates.accuracy.thresholds import THRESHOLDS_FILE, get_threshold, load_thresholds
from fp4moe.gates.accuracy.verdict import FilterScore, decide


def _score(p, n=1319, name="flexible-extract"):
    # lm-eval's closed-form standard error of a mean of 0/1 outcomes (sample variance)
    return FilterScore(name, p, math.sqrt(p * (1 - p) / (n - 1)), n)


def test_threshold_rule_is_a_floor():
    assert decide(_score(0.93), threshold=0.92).passed
    assert decide(_score(0.92), threshold=0.92).passed  # the floor itself passes
    v = decide(_score(0.54), threshold=0.92)  # the PR #33090 layout bug score
    assert not v.passed and v.z < -20 and not v.noise_limited
    assert "FAIL" in v.line() and "0.5400" in v.line()


def test_threshold_close_call_is_flagged_noise_limited():
    # 0.925 at n=1319 has stderr ~0.0073: 0.7 sigma above 0.92 passes but is flagged
    v = decide(_score(0.925), threshold=0.92)
    assert v.passed and v.noise_limited and "noise-limited" in v.line()


def test_baseline_rule_allows_k_stderr():
    s = _score(0.965)  # 0.965 against a 0.970 baseline
    assert decide(s, baseline=0.970).passed  # 0.005 below is < 2 stderr (~0.010)
    assert not decide(s, baseline=0.970, k_sigma=0.5).passed  # a tighter band rejects it
    v = decide(s, baseline=0.970)
    assert v.bound == pytest.approx(0.970 - 2 * s.stderr, abs=1e-12)
    assert "k=2" in v.line() and "2.3% false-fail" in v.line()
    assert not decide(_score(0.94), baseline=0.970).passed  # ~4 stderr below


def test_zero_stderr_has_infinite_z_and_serialises():
    v = decide(FilterScore("strict-match", 1.0, 0.0, 20), threshold=0.9)
    assert v.passed and math.isinf(v.z)
    assert json.loads(json.dumps(v.to_dict()))["z"] is None


@pytest.mark.parametrize(
    "kw, msg",
    [
        ({}, "exactly one"),
        ({"threshold": 0.9, "baseline": 0.9}, "exactly one"),
        ({"threshold": 92.0}, "--threshold"),
        ({"baseline": -0.1}, "--baseline"),
        ({"threshold": 0.9, "k_sigma": 0.0}, "--k-sigma"),
    ],
)
def test_bad_options_name_themselves(kw, msg):
    with pytest.raises(ValueError, match=msg):
        decide(_score(0.9), **kw)


def test_fixture_has_dsv4_pro_tp8_at_sglang_ci_value():
    t = get_threshold("dsv4-pro", "tp8")
    assert (t.value, t.num_fewshot, t.num_questions) == (0.92, 8, 1319)
    assert "SGLang" in t.source and t.filter == "flexible-extract"
    for model, configs in load_thresholds().items():
        for entry in configs.values():
            assert entry.source.strip(), f"{model}: a threshold without a source"


def test_unknown_key_lists_known_ones():
    with pytest.raises(ValueError, match=r"known: \['dsv4-pro'\]"):
        get_threshold("no-such-model", "tp8")
    with pytest.raises(ValueError, match=r"--parallel 'tp3'.*known: \['tp8'\]"):
        get_threshold("dsv4-pro", "tp3")


def test_bad_fixture_entry_is_named(tmp_path):
    raw = json.loads(THRESHOLDS_FILE.read_text())
    raw["thresholds"]["dsv4-pro"]["tp8"]["value"] = 1.5
    bad = tmp_path / "thresholds.json"
    bad.write_text(json.dumps(raw))
    with pytest.raises(ValueError, match=r"thresholds\.dsv4-pro\.tp8\.value: 1\.5 is greater than the maximum of 1"):
        load_thresholds(bad)
