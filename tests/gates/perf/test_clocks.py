"""Clock attribution: nvidia-smi/amd-smi/rocm-smi read through a fake tool on PATH (this CPU has
none), a hung tool bounded, and ``perf ab`` refusing (exit 2) arms that ran at different clocks."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest

from fp4moe.gates.perf import ab, clocks

FAKE_NVIDIA = textwrap.dedent("""\
    #!/bin/sh
    # answers like nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,clocks_throttle_reasons.active
    cat "$(dirname "$0")/ANSWER"
""")


def _tool(tmp_path, name="nvidia-smi", answer="1980, 2619, 351.20, 0x0000000000000001", script=FAKE_NVIDIA):
    d = tmp_path / "bin"
    d.mkdir(exist_ok=True)
    (d / name).write_text(script)
    (d / name).chmod(0o755)
    (d / "ANSWER").write_text(answer + "\n")
    return d


def test_nvidia_smi_is_found_on_path_and_read(tmp_path):
    probe = clocks.ClockProbe.find(path=str(_tool(tmp_path)))
    assert probe.name == "nvidia-smi" and "--format=csv,noheader,nounits" in probe.command()
    assert probe.sample() == {"sm_mhz": 1980.0, "mem_mhz": 2619.0, "power_w": 351.2, "throttle": []}  # idle bit dropped
    (tmp_path / "bin" / "ANSWER").write_text("1410, 2619, 699.0, 0x0000000000000044\n")
    assert probe.sample()["throttle"] == ["hw_thermal_slowdown", "sw_power_cap"]
    assert clocks.ClockProbe.find(path=str(tmp_path / "none")) is None


def test_rocm_smi_json_is_read_by_key_name(tmp_path):
    answer = json.dumps({"card0": {"sclk clock speed:": "(2100Mhz)", "mclk clock speed:": "(1300Mhz)",
                                   "Average Graphics Package Power (W)": "812.0"}})
    probe = clocks.ClockProbe.find(path=str(_tool(tmp_path, "rocm-smi", answer, FAKE_NVIDIA)))
    assert probe.name == "rocm-smi"
    assert probe.sample() == {"sm_mhz": 2100.0, "mem_mhz": 1300.0, "power_w": 812.0, "throttle": []}


@pytest.mark.parametrize("script, words", [
    ("#!/bin/sh\nsleep 30\n", "took more than"),
    ("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n", "exit 9"),
    ("#!/bin/sh\necho garbage\n", "expected 4 fields"),
], ids=["hangs", "fails", "garbage"])
def test_a_tool_that_hangs_fails_or_babbles_gives_an_error_sample(tmp_path, monkeypatch, script, words):
    monkeypatch.setattr(clocks, "QUERY_TIMEOUT_S", 0.3)
    got = clocks.ClockProbe(str(_tool(tmp_path, script=script) / "nvidia-smi")).sample()
    assert words in got["error"], got


S = {"sm_mhz": 1980.0, "mem_mhz": 2619.0, "power_w": 350.0, "throttle": []}


@pytest.mark.parametrize("head, why", [
    ([S] * 5, None),
    ([{**S, "sm_mhz": 1995.0}] * 5, None),  # 0.76% apart: within 1%
    ([{**S, "sm_mhz": 2010.0}] * 5, "median SM clock base 1980 MHz, head 2010 MHz (1.5% apart"),
    ([S, S, {**S, "throttle": ["sw_power_cap"]}], "throttle reasons differ"),
    ([{"error": "x"}] * 3, "no SM clock read for an arm"),
], ids=["same", "within-1pct", "1.5pct-apart", "throttled-once", "head-unread"])
def test_judge(head, why):
    got = clocks.judge([S] * 5, head)
    assert got is None if why is None else why in got, got
    assert clocks.judge([], []) is None


class _FakeWorker:
    def __init__(self, name):
        self.name = name

    def request(self, req, timeout_s):
        return {"seconds": 1e-3}


class _ArmProbe:
    """A probe that knows which arm just ran: the head at a lower clock."""

    def __init__(self, arms):
        self.arms, self.name = arms, "fake-smi"

    def sample(self):
        return {**S, "sm_mhz": 1800.0 if self.arms[-1] == "head" else 1980.0}


def test_time_pairs_samples_each_arm_after_its_call(monkeypatch):
    """One sample per arm per look, taken right after that arm's call: a head run at a lower
    clock shows up in the head's samples and the judge names it."""
    arms = []
    base, head = _FakeWorker("base"), _FakeWorker("head")
    for w in (base, head):
        w.request = (lambda w: lambda req, timeout_s: arms.append(w.name) or {"seconds": 1e-3})(w)
    samples = {"base": [], "head": []}
    sample = ab.time_pairs(base, head, "b", np.random.default_rng(0), [0], 10, probe=_ArmProbe(arms), clock_samples=samples)
    for n in (10, 10, 10):
        sample(n)
    assert len(samples["base"]) == len(samples["head"]) == 3
    assert "1980 MHz, head 1800 MHz" in clocks.judge(samples["base"], samples["head"])
