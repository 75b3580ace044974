"""The real kernel: ``aiter.fused_moe`` on gfx950 against this project's reference.

Runs only where aiter imports and the GPU is a gfx950 (conftest tiers; ``--require
gfx950,aiter`` makes a missing one a usage error instead of a skip). Never executed on the
machines this suite was written on: it is as right as reading aiter's code allows
(``aiter/fused_moe.py``, ``aiter/ops/shuffle.py``, SGLang's aiter MoE runner); see docs/aiter.md.

Grid: DeepSeek-V4-Pro/Flash per-rank shapes (full hidden and per-partition intermediate,
experts reduced to 8) x TP {1, 2, 4, 8, 16} x align {128, 256} x tokens {1 ... 4096} x
act_mode {a8w4 (AITER_BF16_FP8_MOE_BOUND=0, production), a16w4}.

Thresholds: relative L2 <= ``fp4moe.reference.inputs.KERNEL_REL_L2`` (6e-3) and cosine distance <=
``KERNEL_COS_DIST`` (2e-5) against the reference's bf16 output (``fp4moe.reference.moe``: aiter's
semantics -- the bf16 stage-1 buffer, the run-time MXFP8 activation quant -- with float32
accumulation), plus bitwise repeatability and a finite output. The derivation is in
``fp4moe.reference.inputs`` and docs/reference.md ("Kernel budget"): a correct kernel differs from the
reference by summation order and at most a bf16 accumulation of the top-k partials (4.4e-3
measured on these shapes); a kernel that skips the bf16 stage-1 buffer in a8w4 is at 1.5e-2,
outside. The previous budget, 4e-2 against a float32 reference without that rounding, would
have hidden it.
"""

from __future__ import annotations

import functools
import itertools
import zlib

import pytest
import torch

from fp4moe.model.catalogue import get_model, parallel_config
from fp4moe.model.checkpoint import RawMoEWeights
from fp4moe.mx import mxfp4
from fp4moe.reference.expert_weights import ShuffledExpertWeights
from fp4moe.reference.kernel_budget import KERNEL_COS_DIST, KERNEL_REL_L2, cosine_distance, rel_l2
from fp4moe.reference.moe import fused_moe_unshuffled, route
from fp4moe.reference.quant_info import build_quant_info, call_fused_moe
from fp4moe.reference.weight_path import process_fp4_moe_weights
from fp4moe.targets.aiter.backend import AiterBackend

pytestmark = [pytest.mark.gfx950, pytest.mark.aiter]

MODELS = ("dsv4-pro", "dsv4-flash")
TPS = (1, 2, 4, 8, 16)
ALIGNS = (128, 256)
TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 512, 4096)
ACT_MODES = ("a8w4", "a16w4")
EXPERTS = 8  # reduced from 384/256: the per-expert shapes are what the kernels tile
REL_L2_MAX = KERNEL_REL_L2
COS_DIST_MAX = KERNEL_COS_DIST
# align 256 + pad vs align 128 on the kernel: the pad channels have zero weights, so the
# results differ only by accumulation order / tile config: at worst two different bf16
# accumulations of the top-k partials, sqrt(2) x 4.4e-3 = 6.2e-3 (fp4moe.reference.inputs); x1.3 margin.
EQUIV_REL_L2_MAX = 8e-3
EQUIV_COS_DIST_MAX = 4e-5
DEVICE = "cuda"  # ROCm torch exposes HIP devices as "cuda"


def _seed(*parts) -> int:
    """A fixed seed per test case (crc32, not hash(): str hashes change between processes)."""
    return zlib.crc32("/".join(map(str, parts)).encode())


@functools.lru_cache(maxsize=1)
def raw_layer(model: str, tp: int) -> RawMoEWeights:
    """Seeded random MXFP4 experts at this rank's full shape, quantized on the GPU (the CPU
    would take minutes for DeepSeek-V4-Pro TP1)."""
    spec = get_model(model)
    i_p = parallel_config(spec, tp).intermediate_per_partition
    g = torch.Generator(device=DEVICE).manual_seed(1000 + 17 * tp + (0 if model == "dsv4-pro" else 1))
    w13 = torch.randn((EXPERTS, 2 * i_p, spec.hidden), generator=g, device=DEVICE) * 0.02
    w2 = torch.randn((EXPERTS, spec.hidden, i_p), generator=g, device=DEVICE) * 0.02
    p13, s13 = mxfp4.quantize(w13, "round_up", name="w13")
    p2, s2 = mxfp4.quantize(w2, "round_up", name="w2")
    return RawMoEWeights(p13, s13, p2, s2, tuple(range(EXPERTS)))


@functools.lru_cache(maxsize=2)
def processed_layer(model: str, tp: int, align: int):
    raw = raw_layer(model, tp)
    return process_fp4_moe_weights(raw.w13, raw.w13_scale, raw.w2, raw.w2_scale, align=align, gu_interleave=True)


def make_inputs(model: str, tokens: int, seed: int):
    spec = get_model(model)
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    x = torch.randn((tokens, spec.hidden), generator=g, device=DEVICE).to(torch.bfloat16)
    logits = torch.randn((tokens, EXPERTS), generator=g, device=DEVICE)
    w, ids = route(logits, spec.top_k)
    return x, w, ids


def oracle(processed, info, x, w, ids, act_mode: str) -> torch.Tensor:
    """The reference on the same processed (shuffled) weights, read through the inverse layouts:
    float32 accumulation, the kernel's rounding points, output in the kernel's dtype (bf16)."""
    ew = ShuffledExpertWeights(processed.w13, processed.w2, processed.w13_scale, processed.w2_scale, "interleave")
    return fused_moe_unshuffled(
        x, ew, w, ids, hidden_pad=info.hidden_pad, intermediate_pad=info.intermediate_pad,
        act_mode=act_mode, compute_dtype=torch.float32,
    ).to(x.dtype).float()


def assert_close_to_oracle(out: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    assert torch.isfinite(out).all(), f"{what}: non-finite output"
    r, c = rel_l2(out.float(), ref), cosine_distance(out.float(), ref)
    assert r <= REL_L2_MAX, f"{what}: relative L2 {r:.3e} > {REL_L2_MAX}"
    assert c <= COS_DIST_MAX, f"{what}: cosine distance {c:.3e} > {COS_DIST_MAX}"


# model/tp/align vary slowest so the cached layer is reused across tokens and act modes
GRID = list(itertools.product(MODELS, TPS, ALIGNS, ACT_MODES, TOKENS))


@pytest.mark.parametrize("model, tp, align, act_mode, tokens", GRID, ids=[f"{m}-tp{t}-a{a}-{am}-T{n}" for m, t, a, am, n in GRID])
def test_aiter_matches_reference(model, tp, align, act_mode, tokens):
    processed = processed_layer(model, tp, align)
    info = build_quant_info(processed)
    x, w, ids = make_inputs(model, tokens, _seed(model, tp, tokens))
    backend = AiterBackend()
    out = call_fused_moe(backend, x, w, ids, info, act_mode=act_mode)
    again = call_fused_moe(backend, x, w, ids, info, act_mode=act_mode)
    assert out.shape == x.shape
    assert torch.equal(out, again), "aiter.fused_moe is not bitwise repeatable on identical inputs"
    assert_close_to_oracle(out, oracle(processed, info, x, w, ids, act_mode), f"{model} tp{tp} align{align} {act_mode} T{tokens}")


EQUIV_GRID = list(itertools.product(MODELS, TPS, (1, 32, 512)))


@pytest.mark.parametrize("model, tp, tokens", EQUIV_GRID, ids=[f"{m}-tp{t}-T{n}" for m, t, n in EQUIV_GRID])
def test_align256_with_pad_equals_align128(model, tp, tokens):
    """Same raw weights, two paddings: the recorded pad must make the kernel skip the zero channels
    (or compute zeros) so the two results agree; DSV4-Pro TP8 (384 -> 512) and DSV4-Flash TP16
    (128 -> 256) are the rows where align 256 adds a pad that align 128 does not."""
    p128, p256 = processed_layer(model, tp, 128), processed_layer(model, tp, 256)
    assert p256.intermediate_pad == p256.padded_intermediate - p256.intermediate
    x, w, ids = make_inputs(model, tokens, _seed("equiv", model, tp, tokens))
    i128, i256 = build_quant_info(p128), build_quant_info(p256)
    out128 = call_fused_moe(AiterBackend(), x, w, ids, i128, act_mode="a8w4")
    out256 = call_fused_moe(AiterBackend(), x, w, ids, i256, act_mode="a8w4")
    ref = oracle(p128, i128, x, w, ids, "a8w4")
    assert_close_to_oracle(out128, ref, "align 128")
    assert_close_to_oracle(out256, ref, "align 256")
    r, c = rel_l2(out256.float(), out128.float()), cosine_distance(out256.float(), out128.float())
    assert r <= EQUIV_REL_L2_MAX and c <= EQUIV_COS_DIST_MAX, f"align256+pad vs align128: rel L2 {r:.3e}, cos dist {c:.3e}"


SPY_ROWS = [("dsv4-pro", 8, 256), ("dsv4-pro", 8, 128), ("dsv4-pro", 16, 128), ("dsv4-flash", 16, 256)]


@pytest.mark.parametrize("model, tp, align", SPY_ROWS, ids=[f"{m}-tp{t}-a{a}" for m, t, a in SPY_ROWS])
def test_spy_sees_recorded_pads(monkeypatch, model, tp, align):
    """Wrap the real aiter.fused_moe.fused_moe: the pads that reach it equal the layer record."""
    import aiter
    import aiter.fused_moe as fm

    real = fm.fused_moe
    seen = []

    @functools.wraps(real)
    def spy(*args, **kwargs):
        seen.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(fm, "fused_moe", spy)
    processed = processed_layer(model, tp, align)
    info = build_quant_info(processed)
    x, w, ids = make_inputs(model, 16, _seed("spy", model, tp))
    out = call_fused_moe(AiterBackend(), x, w, ids, info, act_mode="a8w4")
    assert len(seen) == 1
    kw = seen[0]
    assert kw["intermediate_pad"] == processed.intermediate_pad == info.intermediate_pad
    assert kw["hidden_pad"] == processed.hidden_pad == 0
    assert kw["gate_mode"] == "interleave"
    assert kw["quant_type"] == aiter.QuantType.per_1x32 and kw["activation"] == aiter.ActivationType.Silu
    assert getattr(kw["w1"], "is_shuffled", False) and kw["w1"].dtype == aiter.dtypes.fp4x2
    assert kw["w1_scale"].dtype == aiter.dtypes.fp8_e8m0
    assert_close_to_oracle(out, oracle(processed, info, x, w, ids, "a8w4"), f"spy {model} tp{tp} align{align}")
