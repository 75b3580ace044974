"""The perf workloads and relational decisions on the CPU (tiny experts, hidden 128).

Checks what the GPU benchmarks rely on but cannot check themselves: the workloads run through
the one call site, the pad reaching the kernel follows ``propagate_pad`` and a patched
``quant_info.build_quant_info`` (the zoo's mutant), inputs rotate and are the same for both
sides of an A/B pair, ``meta`` carries the compare's validity keys, the byte counts equal a
hand computation, and the relational verdicts decide known synthetic shifts correctly.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from fp4moe.gates.perf import moe_bytes, workloads
from fp4moe.gates.perf.baseline import MEASUREMENT_KEYS
from fp4moe.gates.perf.timer import DeviceTimer
from fp4moe.reference import kernel_budget, quant_info
from fp4moe.reference.inputs import SpyBackend

H = 128  # reduced hidden; the per-rank I_p stays real (Pro TP8: 384, padded 512 at align 256)
TINY = dict(model="dsv4-pro", tp=8, hidden=H, device="cpu")


def test_moe_workload_runs_and_meta_has_the_compare_keys():
    fn, inputs, meta = workloads.make_moe_workload(**TINY, align=128, experts=6, tokens=4, n_inputs=2)
    out = fn(inputs[1])
    assert out.shape == (4, H) and out.dtype == torch.bfloat16
    assert bool(torch.isfinite(out).all()) and float(out.abs().max()) > 0
    # the compare refuses runs whose measurement keys differ; the timer adds 'timer' itself
    assert set(MEASUREMENT_KEYS) <= set(meta) | set(DeviceTimer("cpu").metadata())
    assert meta["shape"] == "dsv4-pro-tp8-ep1-align128-E6-T4-a16w4-H128"
    assert (meta["backend"], meta["hidden_pad"], meta["intermediate_pad"], meta["padded_intermediate"]) == ("reference", 0, 0, 384)
    assert workloads.DEFAULT_EXPERTS["reference"] < workloads.DEFAULT_EXPERTS["aiter"]


def test_bytes_moved_equals_the_hand_count():
    # Pro TP8 at align 256, H=128, 6 experts, top_k 6, 2 tokens: every token routes to all 6.
    # Per expert with n channels: w13 2n*H/2 + scales 2n*H/32, w2 H*n/2 + scales H*n/32.
    #   n=384: 49152 + 3072 + 24576 + 1536 = 78336;  n=512: 65536 + 4096 + 32768 + 2048 = 104448
    # activations 2 tokens * 128 * 2 bytes, in and out = 1024; ids+weights 2*6*(4+4) = 96
    kw = dict(**TINY, align=256, experts=6, tokens=2, n_inputs=1)
    assert workloads.make_moe_workload(**kw)[2]["bytes_moved"] == 6 * 78336 + 1024 + 96
    assert workloads.make_moe_workload(**kw, propagate_pad=False)[2]["bytes_moved"] == 6 * 104448 + 1024 + 96
    # one token over 8 experts touches exactly its top 6: only those are counted
    meta = workloads.make_moe_workload(**TINY, align=256, experts=8, tokens=1, n_inputs=1)[2]
    assert meta["touched_experts"] == 6 and meta["bytes_moved"] == 6 * 78336 + 2 * 128 * 2 + 6 * 8
    assert moe_bytes.expert_weight_bytes(7168, 384) == 384 * 7168 * 51 // 32  # (1 + 1/16 + 1/2 + 1/32)


def test_propagate_pad_sets_the_pad_that_reaches_the_kernel():
    outs = {}
    for propagate in (True, False):
        spy = SpyBackend()
        fn, inputs, meta = workloads.make_moe_workload(**TINY, align=256, experts=6, tokens=3, n_inputs=1,
                                                       backend=spy, propagate_pad=propagate)
        outs[propagate] = fn(inputs[0])
        assert [c["intermediate_pad"] for c in spy.calls] == [128 if propagate else 0]
        assert spy.calls[0]["hidden_pad"] == 0 and meta["backend"] == "spy"
        assert meta["intermediate_pad"] == 128 and meta["kernel_intermediate_pad"] == (128 if propagate else 0)
        assert meta["shape"].endswith("-H128") and ("padoblivious" in meta["shape"]) != propagate
    # the pad channels are zeros: computing them changes only float32 summation order, at most
    # one bf16 rounding flip (relative 2^-8) in the output
    assert kernel_budget.rel_l2(outs[False].float(), outs[True].float()) <= 2**-8


def test_a_patched_build_quant_info_reaches_the_workload(monkeypatch):
    """The zoo's "pad not propagated" mutant patches quant_info.build_quant_info; the workload
    must look it up on the module, so the mutant changes what the benchmarks time."""
    real = quant_info.build_quant_info
    monkeypatch.setattr(quant_info, "build_quant_info", lambda pw, **kw: dataclasses.replace(real(pw, **kw), intermediate_pad=0))
    spy = SpyBackend()
    fn, inputs, meta = workloads.make_moe_workload(**TINY, align=256, experts=6, tokens=2, n_inputs=1, backend=spy)
    fn(inputs[0])
    assert spy.calls[0]["intermediate_pad"] == 0
    assert meta["kernel_intermediate_pad"] == 0 and meta["intermediate_pad"] == 128  # recorded vs reached
    stage_meta = workloads.make_stage_workload("stage1", **TINY, align=256, tokens=2, n_inputs=1)[2]
    assert stage_meta["kernel_intermediate_pad"] == 0


def test_inputs_rotate_and_both_ab_sides_get_the_same_batches():
    _, a, _ = workloads.make_moe_workload(**TINY, align=128, experts=6, tokens=5, n_inputs=3, seed=4)
    _, b, _ = workloads.make_moe_workload(**TINY, align=256, experts=6, tokens=5, n_inputs=3, seed=4, propagate_pad=False)
    _, c, _ = workloads.make_moe_workload(**TINY, align=128, experts=6, tokens=5, n_inputs=3, seed=5)
    for i in range(3):  # same seed -> identical batches whatever the align/pad (an A/B pair)
        assert all(torch.equal(x, y) for x, y in zip(a[i], b[i]))
    assert not torch.equal(a[0][0], a[1][0]) and not torch.equal(a[1][0], a[2][0])  # rotation
    assert not torch.equal(a[0][0], c[0][0])  # the seed matters


def test_stage_workloads_compute_the_told_channels():
    for propagate, n in ((True, 384), (False, 512)):
        fn, inputs, meta = workloads.make_stage_workload("stage1", **TINY, align=256, tokens=4, n_inputs=2, propagate_pad=propagate)
        out = fn(inputs[0])
        assert out.shape == (4, n) and bool(torch.isfinite(out).all()) and float(out.abs().max()) > 0
        fn2, inputs2, meta2 = workloads.make_stage_workload("stage2", **TINY, align=256, tokens=4, n_inputs=2, propagate_pad=propagate)
        assert inputs2[0].shape == (4, n) and fn2(inputs2[1]).shape == (4, H)
    # by hand, n=384, H=128, T=4: w13 2*384*(64+4) = 52224, w2 128*(192+12) = 26112, acts 4*(128+384)*2 = 4096
    assert meta["bytes_moved"] == 2 * 512 * (64 + 4) + 4 * (128 + 512) * 2  # last loop: pad-oblivious, n=512
    assert moe_bytes.stage_bytes_moved("stage1", hidden=128, channels=384, tokens=4) == 52224 + 4096
    assert moe_bytes.stage_bytes_moved("stage2", hidden=128, channels=384, tokens=4) == 26112 + 4096
    assert meta["shape"] == "dsv4-pro-tp8-ep1-align256-E1-T4-a16w4-stage1-padoblivious-H128"


def test_weight_path_workload_times_the_weight_path():
    fn, inputs, meta = workloads.make_weight_path_workload(**TINY, align=256, experts=2, n_inputs=2)
    pw = fn(inputs[0])
    assert pw.shuffled and (pw.intermediate_pad, pw.padded_intermediate) == (128, 512) == (meta["intermediate_pad"], meta["padded_intermediate"])
    assert not torch.equal(inputs[0].w13, inputs[1].w13)
    scales = torch.cat([inputs[0].w13_scale.flatten(), inputs[0].w2_scale.flatten()])
    assert int(scales.min()) >= 118 and int(scales.max()) <= 124  # realistic e8m0, never 0xFF
    # raw 2 * 78336; out w13 2*1024*64 + w2 2*128*256 + scales [2048, 8] (K/32 = 4 padded to 8) + [256, 16]
    assert meta["bytes_moved"] == 2 * 78336 + 131072 + 65536 + 2048 * 8 + 256 * 16
    assert meta["shape"] == "dsv4-pro-tp8-ep1-align256-E2-weightpath-H128"


def test_study_adapter_returns_fn_and_inputs():
    fn, inputs = workloads.moe_study_workload("cpu", 2, experts=6, hidden=H, n_inputs=2)
    assert len(inputs) == 2 and fn(inputs[0]).shape == (2, H)


def test_bad_options_are_named():
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device: 'cuda'"):
            workloads.make_moe_workload(hidden=H, experts=6, device="cuda")
    with pytest.raises(ValueError, match="experts: 4 is fewer than dsv4-pro's top_k 6"):
        workloads.make_moe_workload(**TINY, experts=4)
    with pytest.raises(ValueError, match="unknown backend 'nope'"):
        workloads.make_moe_workload(**TINY, experts=6, backend="nope")
    with pytest.raises(ValueError, match="n_inputs"):
        workloads.make_moe_workload(**TINY, experts=6, n_inputs=0)
    with pytest.raises(ValueError, match="act_mode"):
        workloads.make_moe_workload(**TINY, experts=6, act_mode="fp8")
    with pytest.raises(ValueError, match="stage: must be one of"):
        workloads.make_stage_workload("stage3", **TINY)
    with pytest.raises(ValueError, match="channels"):
        moe_bytes.expert_weight_bytes(128, 100)


def test_bench_backend_comes_from_the_environment():
    assert workloads.bench_backend_from_env({}) == ("reference", None)
    with pytest.raises(ValueError, match="FP4MOE_BENCH_BACKEND='cutlass'"):
        workloads.bench_backend_from_env({"FP4MOE_BENCH_BACKEND": "cutlass"})
    name, reason = workloads.bench_backend_from_env({"FP4MOE_BENCH_BACKEND": "aiter"})
    assert name == "aiter"
    from fp4moe.infra.capabilities import probe_aiter

    assert (reason is None) == probe_aiter()[0]  # no aiter here -> skipped with the import's error


def _rounds(seed, scale, n=30):
    """Seeded lognormal rounds, 3% noise (device-timed rounds are about that noisy)."""
    return 30e-3 * scale * np.random.default_rng(seed).lognormal(0, 0.03, n)


def test_relational_verdicts_on_known_shifts():
    base = _rounds(0, 1.0)
    ok, c, msg = workloads.pad_speedup_verdict(base, _rounds(1, 0.80), required_speedup=0.125)
    assert ok and c.ci_high < 0.875 and "CI" in msg and "0.875" in msg
    # the mutant: head == base -> must fail, with the numbers in the message
    ok, c, msg = workloads.pad_speedup_verdict(base, _rounds(2, 1.0), required_speedup=0.125)
    assert not ok and "FAILED" in msg and f"{c.ratio:.3f}" in msg
    assert workloads.equal_time_verdict(base, _rounds(3, 1.01), tolerance=0.05)[0]
    ok, _, msg = workloads.equal_time_verdict(base, _rounds(4, 1.25), tolerance=0.05)  # mutant at align 256
    assert not ok and "[0.950, 1.050]" in msg
    with pytest.raises(ValueError, match="required_speedup"):
        workloads.pad_speedup_verdict(base, base, required_speedup=12.5)


def test_roofline_info_arithmetic():
    info = workloads.roofline_info({"bytes_moved": 2e9}, 1e-3, {"bytes_per_s": 4e12, "timer": "device-events"})
    assert info["roofline_fraction"] == pytest.approx(0.5) and info["roofline_seconds"] == pytest.approx(5e-4)
    with pytest.raises(ValueError, match="seconds"):
        workloads.roofline_info({"bytes_moved": 1}, 0.0, {"bytes_per_s": 1.0})
