"""CPU checks of ``lab/studies/perf_study.py``'s core: the verdict rates on synthetic samples and a
tiny end-to-end run with the host timer (the GPU study itself is run by hand: lab/h200_tier.sh)."""

from __future__ import annotations

import importlib

import numpy as np

from fp4moe.gates.perf.timer import DeviceTimer


def _load_study():
    return importlib.import_module("lab.studies.perf_study")


def test_study_core_on_synthetic_samples():
    study = _load_study()
    rng = np.random.default_rng(0)
    aa = [(rng.lognormal(0, 0.03, 30), rng.lognormal(0, 0.03, 30)) for _ in range(50)]
    slow = [(rng.lognormal(0, 0.03, 30), 1.1 * rng.lognormal(0, 0.03, 30)) for _ in range(50)]
    rows = [{"slowdown_pct": 0.0, **study.judge(aa)}, {"slowdown_pct": 10.0, **study.judge(slow)}]
    assert rows[0]["rate_ours"] <= 0.02 and rows[1]["rate_ours"] >= 0.95
    assert study.smallest_detected(rows, "rate_ours") == 10.0
    md = study.markdown(rows, {"workload": "synthetic", "device_name": "cpu", "timer": "host", "n": 50, "rounds": 30,
                               "base_median_s": 1.0, "threshold": 0.05, "alpha": 0.01})
    assert "| 0% (A/A) |" in md and "pytest-benchmark mean:5%" in md


def test_study_runs_end_to_end_on_cpu(tmp_path):
    study = _load_study()
    # pure-Python work (see above); the matmul workload itself is exercised by --quick in the report
    inputs = [list(np.random.default_rng(s).random(3000)) for s in range(2)]
    fn = sum
    rows, samples, base = study.run_study(fn, inputs, DeviceTimer("cpu"), slowdowns=[0.0, 50.0], n=3, rounds=10,
                                          warmup=1, seed=0, threshold=0.05, alpha=0.01, log=lambda m: None)
    assert [r["slowdown_pct"] for r in rows] == [0.0, 50.0] and base > 0
    assert rows[1]["measured_ratio_median"] > rows[0]["measured_ratio_median"]  # injection adds time
    assert len(samples["50"]) == 3 and len(samples["50"][0][1]) == 10
