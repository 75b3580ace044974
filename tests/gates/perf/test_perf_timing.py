"""Timer, interleaved A/B and roofline, on the CPU (host timer). The perf study's own tests: lab/tests/."""

import json

import numpy as np
import pytest

from fp4moe.commands.main import main
from fp4moe.gates.perf.abtest import interleaved_ab, write_ab_json
from fp4moe.gates.perf.roofline import (
    achieved_fraction,
    measure_bandwidth,
    roofline_seconds,
)
from fp4moe.gates.perf.timer import (
    HOST,
    DeviceClock,
    DeviceTimer,
    pedantic_rounds,
    time_rounds,
)

CPU_CLOCK = DeviceClock(DeviceTimer("cpu"))


def test_cpu_timer_is_labelled_host_and_refusable():
    t = DeviceTimer("cpu")
    assert t.kind == HOST and t.metadata()["timer"] == HOST
    with pytest.raises(RuntimeError, match="allow_host=False"):
        DeviceTimer("cpu", allow_host=False)


def test_time_rounds_rotates_inputs_and_skips_warmup():
    seen = []
    secs = time_rounds(seen.append, ["a", "b", "c"], rounds=5, warmup=2, timer=DeviceTimer("cpu"))
    assert seen == ["a", "b", "c", "a", "b", "c", "a"]  # 2 warm-up + 5 timed, rotating
    assert len(secs) == 5 and all(s > 0 for s in secs)
    with pytest.raises(ValueError, match="inputs_list is empty"):
        time_rounds(seen.append, [], rounds=1)


def test_interleaved_ab_randomises_order_reproducibly():
    calls = []
    t = DeviceTimer("cpu")
    ab = interleaved_ab(lambda x: calls.append(("A", x)), lambda x: calls.append(("B", x)), [0, 1], 40, 0, seed=5, timer=t)
    assert ab.base.shape == ab.head.shape == (40,)
    assert 5 < ab.head_first.sum() < 35  # both orders occur
    for i, first in enumerate(ab.head_first):  # each pair: both sides, same input, drawn order
        pair = calls[2 * i : 2 * i + 2]
        assert [c[0] for c in pair] == (["B", "A"] if first else ["A", "B"]) and pair[0][1] == pair[1][1]
    again = interleaved_ab(lambda x: None, lambda x: None, [0], 40, 0, seed=5, timer=t)
    assert np.array_equal(again.head_first, ab.head_first)


def test_ab_json_round_trips_through_compare(tmp_path):
    t = DeviceTimer("cpu")
    # pure-Python work: torch's CPU thread pool stalls for tens of ms on a loaded 2-core box
    work = list(np.random.default_rng(0).random(2000))
    ab = interleaved_ab(sum, sum, [work], 20, 2, seed=0, timer=t)
    write_ab_json({"mm64": ab}, tmp_path / "b.json", tmp_path / "h.json", extra_info={"shape": "mm64"})
    doc = json.loads((tmp_path / "b.json").read_text())
    assert doc["benchmarks"][0]["stats"]["data"] == ab.base.tolist()
    # A/A of the same function on a busy 2-core box: never a regression, at most a note
    assert main(["perf", "compare", str(tmp_path / "b.json"), str(tmp_path / "h.json"), "--threshold", "50%"]) == 0


@pytest.mark.benchmark(timer=CPU_CLOCK)
def test_pedantic_rounds_records_clock_time_in_pytest_benchmark(benchmark):
    data = list(range(1000))
    measured = pedantic_rounds(benchmark, CPU_CLOCK, sum, [data], rounds=5, warmup=1)
    if benchmark.disabled:
        pytest.skip("--benchmark-disable: nothing is timed")
    # the fixture's durations are differences of the virtual clock: equal up to float rounding
    assert list(benchmark.stats.stats.data) == pytest.approx(measured, rel=1e-9) and len(measured) == 5
    assert benchmark.extra_info["timer"] == HOST


def test_roofline_arithmetic_and_errors():
    # 4.8 TB/s HBM, 2.4 GB moved in 1 ms -> 2.4 TB/s -> half the roofline
    assert achieved_fraction(2.4e9, 1e-3, 4.8e12) == pytest.approx(0.5)
    assert roofline_seconds(4.8e9, 4.8e12) == pytest.approx(1e-3)
    with pytest.raises(ValueError, match="seconds"):
        achieved_fraction(1.0, 0.0, 1.0)
    bw = measure_bandwidth("cpu", nbytes=4 << 20, rounds=3, warmup=1)
    assert bw["timer"] == HOST and bw["bytes_per_s"] >= bw["median_bytes_per_s"] > 0
