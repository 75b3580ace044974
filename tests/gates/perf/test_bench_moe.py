"""pytest-benchmark benchmarks of the MXFP4 MoE path on DeepSeek-V4 shapes (GPU, device time).

What runs (``fp4moe.gates.perf.workloads``; real hidden and per-rank I_p, reduced expert count):
- ``test_fused_moe``: one fused MoE through ``quant_info.call_fused_moe`` for DeepSeek-V4 Pro
  and Flash at TP8, align 128 and 256, token buckets 1, 16, 128, 512, 4096;
- ``test_stage``: the reference's stage 1 / stage 2 on one expert (reference backend only);
- ``test_weight_path``: ``weight_path.process_fp4_moe_weights`` on one layer.

Every round is timed with device events (``DeviceClock`` + ``pedantic_rounds``, so
``stats.data`` holds device seconds), inputs rotate over 4 seeded batches, and a 512 MiB scratch
write before each round (untimed) evicts the previous round's data from the H200's 50 MB L2
and MI355X's 256 MB Infinity Cache. ``extra_info`` carries the shape label, backend, pads,
timer, GPU, software versions, ``bytes_moved`` and ``roofline_fraction`` (bytes over median
time over the copy bandwidth measured once per module); the fraction is reported, not asserted:
the reference dequantizes to float32 and is far from the roofline by design.

Backend: ``FP4MOE_BENCH_BACKEND=reference`` (default) or ``aiter`` (skipped, with the import's
error, unless aiter imports). Run:
    python3 -m pytest tests/perf -m perf --benchmark-json=bench.json
Budget (reference, H200, estimated): ~10 s of device time for this module.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fp4moe.gates.perf import workloads
from fp4moe.gates.perf.roofline import measure_bandwidth
from fp4moe.gates.perf.timer import DEVICE_EVENTS, DeviceClock, DeviceTimer, pedantic_rounds

#: None picks cuda when visible; on a machine without a GPU these tests are skipped (gpu marker)
CLOCK = DeviceClock(DeviceTimer())
pytestmark = [pytest.mark.perf, pytest.mark.gpu, pytest.mark.benchmark(timer=CLOCK)]

DEVICE = "cuda"
# 50 rounds: on the H200 study (docs/perf-gate.md) R=30 caught a true ~10% slowdown only
# 92-95% of the time, R=50 caught 8.1% 95% of the time.
ROUNDS, WARMUP = 50, 3
FLUSH_BYTES = 512 << 20  # above MI355X's 256 MB Infinity Cache (and the H200's 50 MB L2)

SHAPES = [
    pytest.param(("dsv4-pro", 8, 128), id="dsv4-pro-tp8-align128"),
    pytest.param(("dsv4-pro", 8, 256), id="dsv4-pro-tp8-align256"),  # I_p 384 -> 512: 25% pad
    pytest.param(("dsv4-flash", 8, 128), id="dsv4-flash-tp8-align128"),
    pytest.param(("dsv4-flash", 8, 256), id="dsv4-flash-tp8-align256"),  # I_p 256: no pad either way
]
# decode (1, 16), small and large batches, prefill (4096). At 4096 the reference's float32
# matmuls make a round ~15 ms (8 experts, ~3k rows each), still cheap enough to keep.
TOKEN_BUCKETS = [1, 16, 128, 512, 4096]
STAGE_TOKENS = [16, 512]


@pytest.fixture(scope="module")
def bandwidth() -> dict:
    """Device-to-device copy bandwidth, measured once for the module's roofline fractions."""
    bw = measure_bandwidth(DEVICE)
    assert bw["timer"] == DEVICE_EVENTS and bw["bytes_per_s"] > 0
    return bw


def _bench(benchmark, fn, inputs_list, meta, bandwidth, extra=None):
    if CLOCK.timer.kind != DEVICE_EVENTS:
        pytest.fail(f"device timer is {CLOCK.timer.kind!r}, not {DEVICE_EVENTS!r}: the GPU was not visible at import")
    benchmark.extra_info.update(meta)
    benchmark.extra_info.update(extra or {})
    measured = pedantic_rounds(benchmark, CLOCK, fn, inputs_list, rounds=ROUNDS, warmup=WARMUP, flush_bytes=FLUSH_BYTES)
    if not measured:  # --benchmark-disable: ran once, nothing timed
        return
    assert len(measured) == ROUNDS and min(measured) > 0
    benchmark.extra_info.update(workloads.roofline_info(meta, float(np.median(measured)), bandwidth))


@pytest.mark.parametrize("tokens", TOKEN_BUCKETS, ids=[f"T{t}" for t in TOKEN_BUCKETS])
@pytest.mark.parametrize("shape", SHAPES)
def test_fused_moe(benchmark, bench_backend, bandwidth, shape, tokens):
    model, tp, align = shape
    fn, inputs_list, meta = workloads.make_moe_workload(
        model=model, tp=tp, align=align, tokens=tokens, backend=bench_backend, device=DEVICE
    )
    out = fn(inputs_list[0])  # the timed thing computes something real (and warms up)
    assert out.shape == inputs_list[0][0].shape and bool(torch.isfinite(out).all()) and bool(out.abs().max() > 0)
    assert meta["kernel_intermediate_pad"] == meta["intermediate_pad"], "the recorded pad did not reach the kernel"
    _bench(benchmark, fn, inputs_list, meta, bandwidth, workloads.backend_software_info(bench_backend))


@pytest.mark.parametrize("tokens", STAGE_TOKENS, ids=[f"T{t}" for t in STAGE_TOKENS])
@pytest.mark.parametrize("shape", SHAPES[:3])
@pytest.mark.parametrize("stage", workloads.STAGES)
def test_stage(benchmark, bench_backend, bandwidth, stage, shape, tokens):
    if bench_backend != "reference":
        pytest.skip(f"backend {bench_backend!r} exposes no per-stage entry point (only the reference's fp4moe.reference.moe.stage1/2)")
    model, tp, align = shape
    fn, inputs_list, meta = workloads.make_stage_workload(stage, model=model, tp=tp, align=align, tokens=tokens, device=DEVICE)
    out = fn(inputs_list[0])
    assert bool(torch.isfinite(out).all()) and bool(out.abs().max() > 0)
    _bench(benchmark, fn, inputs_list, meta, bandwidth)


@pytest.mark.parametrize("shape", SHAPES)
def test_weight_path(benchmark, bandwidth, shape):
    model, tp, align = shape
    fn, inputs_list, meta = workloads.make_weight_path_workload(model=model, tp=tp, align=align, device=DEVICE)
    processed = fn(inputs_list[0])
    assert processed.intermediate_pad == meta["intermediate_pad"] and processed.shuffled
    _bench(benchmark, fn, inputs_list, meta, bandwidth)
