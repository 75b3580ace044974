"""SGLang PR #31450's DeepSeek-V4-Pro TP8 figures, recomputed from first principles.

Every expected number here is written as arithmetic on the model's dimensions (E = 384 local
experts, H = 7168, I_p = 3072 / 8 = 384, P = padded I_p), never taken from ``fp4moe.reference.footprint``,
so the test checks the model against an independent derivation. Byte counts are exact integers:
no tolerance. Comparisons with the PR's printed GiB figures allow half a unit in their last
printed digit (they are rounded to 3 decimals; 61-layer totals to 2).
"""

from __future__ import annotations

import pytest

from fp4moe.model.catalogue import parallel_config
from fp4moe.reference.footprint import GB, GIB, NonRoutedAssumption, all_non_routed_assumptions, layer_footprint
from fp4moe.reference.pads import round_up, shuffled_scale_shape

E, H, I_P, LAYERS = 384, 7168, 3072 // 8, 61


def routed_bytes(p: int) -> int:
    """w13 (E, 2P, H/2) + w13_scale (E, 2P, H/32) + w2 (E, H, P/2) + w2_scale (E, H, P/32)."""
    return E * 2 * p * H // 2 + E * 2 * p * H // 32 + E * H * p // 2 + E * H * p // 32


# the brief's numbers, as literals, and the derivation they must equal
PR_ALIGN256_BYTES = 2_246_049_792
PR_ALIGN128_BYTES = 1_684_537_344
PR_PER_LAYER_GIB = {256: 2.105, 128: 1.582}  # PR #31450, "MoE weight memory per layer"
PR_TOTAL_GIB = (159.07, 112.36)  # PR #31450, total weight memory after load, before -> after


def test_brief_arithmetic_matches_first_principles():
    assert 512 == round_up(I_P, 256) and 384 == round_up(I_P, 128)
    assert routed_bytes(512) == PR_ALIGN256_BYTES
    assert routed_bytes(384) == PR_ALIGN128_BYTES
    # the same as one factored product: 3 * E * H * P * (1/2 + 1/32) = E * H * P * 51/32
    assert E * H * 512 * 51 // 32 == PR_ALIGN256_BYTES


@pytest.mark.parametrize("align,padded", [(256, 512), (128, 384)])
def test_model_routed_bytes_before_shuffle_equal_the_pr_numbers(align, padded):
    fp = layer_footprint("dsv4-pro", 8, 1, align)
    assert (fp.intermediate, fp.padded_intermediate, fp.intermediate_pad) == (I_P, padded, padded - I_P)
    assert fp.experts == E and fp.hidden == H
    assert fp.tensor("w13").nbytes == E * (2 * padded) * (H // 2)
    assert fp.tensor("w13_scale").nbytes == E * (2 * padded) * (H // 32)
    assert fp.tensor("w2").nbytes == E * H * (padded // 2)
    assert fp.tensor("w2_scale").nbytes == E * H * (padded // 32)
    assert fp.routed_bytes_before_shuffle == routed_bytes(padded)


def test_align128_after_shuffle_grows_w2_scale_columns_12_to_16():
    """P = 384 gives K/32 = 12 scale columns for w2; the gfx950 shuffle rounds columns to 8s,
    so today's aiter (PR #4130 and later) holds 16: +E*H*4 bytes per layer. Align 256 (K/32 = 16)
    and w13 (K/32 = 224) do not grow; no row grows (E*2P and E*H are multiples of 256)."""
    fp128 = layer_footprint("dsv4-pro", 8, 1, 128, gu_interleave=True)
    assert fp128.tensor("w2_scale").shuffled_shape == (E * H, 16)
    assert fp128.shuffle_growth_bytes == E * H * (16 - 12)
    assert fp128.routed_bytes == PR_ALIGN128_BYTES + E * H * 4 == 1_695_547_392
    assert layer_footprint("dsv4-pro", 8, 1, 128, gu_interleave=False).routed_bytes == 1_695_547_392
    fp256 = layer_footprint("dsv4-pro", 8, 1, 256)
    assert fp256.shuffle_growth_bytes == 0 and fp256.routed_bytes == PR_ALIGN256_BYTES


def test_shuffle_growth_rules():
    assert shuffled_scale_shape(384 * 1, 12, is_guinterleave=True) == (384, 16)
    assert shuffled_scale_shape(384 * 1, 12, is_guinterleave=False) == (512, 16)
    assert shuffled_scale_shape(256 * 3, 16, is_guinterleave=False) == (768, 16)


def test_units_are_explicit_and_pr_per_layer_gib_are_in_2_pow_30():
    assert GIB == 2**30 and GB == 10**9
    assert PR_ALIGN256_BYTES / 2**30 == pytest.approx(2.091796875, abs=0)  # exact in binary
    assert PR_ALIGN128_BYTES / 2**30 == pytest.approx(1.56884765625, abs=0)
    d = layer_footprint("dsv4-pro", 8, 1, 256).to_dict()["per_layer"]["routed_before_shuffle"]
    assert d == {"bytes": PR_ALIGN256_BYTES, "GiB": PR_ALIGN256_BYTES / 2**30, "GB": PR_ALIGN256_BYTES / 1e9}


def test_per_layer_ratio_and_saving():
    saving = PR_ALIGN256_BYTES - PR_ALIGN128_BYTES
    assert saving == E * H * (512 - 384) * 51 // 32 == 561_512_448
    # 512/384 exactly: every routed tensor is linear in P
    assert PR_ALIGN256_BYTES * 3 == PR_ALIGN128_BYTES * 4
    f256, f128 = layer_footprint("dsv4-pro", 8, 1, 256), layer_footprint("dsv4-pro", 8, 1, 128)
    assert f256.routed_bytes_before_shuffle / f128.routed_bytes_before_shuffle == 4 / 3
    # the PR's own per-layer ratio agrees with 4/3 to its 3-decimal rounding (2.105/1.582=1.3306)
    # only after the non-routed part is removed: (2.105 - x) / (1.582 - x) = 4/3 at x = 0.013
    x = 4 * PR_PER_LAYER_GIB[128] - 3 * PR_PER_LAYER_GIB[256]
    assert x == pytest.approx(0.013, abs=0.004)  # +-0.0005 rounding in each PR figure, x7


def test_whole_model_saving_is_31_9_gib_from_routed_tensors_not_the_prs_46_7():
    """61 layers x 561,512,448 B = 34,252,259,328 B = 31.90 GiB (34.25 GB). The PR's per-layer
    figures give the same (61 x 0.523 GiB = 31.9); its total 159.07 -> 112.36 GiB (46.71 GiB) is
    NOT reproducible from tensor shapes: the extra ~14.8 GiB is not in the routed weights (see
    lab/studies/gpu_memory.py for the allocator cache and docs/footprint.md)."""
    saving = 61 * (PR_ALIGN256_BYTES - PR_ALIGN128_BYTES)
    assert saving == 34_252_259_328
    f256, f128 = layer_footprint("dsv4-pro", 8, 1, 256), layer_footprint("dsv4-pro", 8, 1, 128, shuffle=False)
    assert f256.moe_layers == LAYERS
    assert f256.routed_bytes_before_shuffle * LAYERS - f128.model_routed_bytes == saving
    assert round(saving / 2**30, 2) == 31.90
    assert round(LAYERS * (PR_PER_LAYER_GIB[256] - PR_PER_LAYER_GIB[128]), 1) == 31.9
    pr_total_saving = PR_TOTAL_GIB[0] - PR_TOTAL_GIB[1]
    assert pr_total_saving == pytest.approx(46.71, abs=0.01)
    unexplained = pr_total_saving - saving / 2**30
    assert unexplained > 14.0, "the PR's 46.71 GiB saving exceeds what tensor shapes give by > 14 GiB"


def test_which_non_routed_assumption_reproduces_2_105_and_1_582():
    """The PR's per-layer GiB (3 decimals) include ~0.0128 GiB around the routed experts. Of all
    assumption combinations, only an FP8 (e4m3 + fp32 128x128 block scales) TP-sharded shared
    expert plus a replicated bf16 router gate reproduce BOTH figures, and only with routed bytes
    BEFORE the shuffle growth (with today's +11,010,048 B at align 128 none does)."""
    cfg = parallel_config("dsv4-pro", 8)
    s = 3072 // 8  # shared expert intermediate per rank (assumed: 1 expert of width 3072, /tp)
    fp8_shared = 2 * s * H + (2 * (s // 128)) * (H // 128) * 4 + H * s + (H // 128) * (s // 128) * 4
    bf16_router = 384 * H * 2
    assumed = NonRoutedAssumption(shared="fp8-block128", router="bf16")
    assert sum(t.nbytes for t in assumed.terms(cfg)) == fp8_shared + bf16_router == 13_764_576

    def reproduces(extra: int, growth128: int) -> bool:
        return (
            round((PR_ALIGN256_BYTES + extra) / 2**30, 3) == PR_PER_LAYER_GIB[256]
            and round((PR_ALIGN128_BYTES + growth128 + extra) / 2**30, 3) == PR_PER_LAYER_GIB[128]
        )

    matches = [a.label for a in all_non_routed_assumptions() if reproduces(sum(t.nbytes for t in a.terms(cfg)), 0)]
    assert matches == ["shared=fp8-block128,router=bf16", "shared=fp8-block128,router=bf16+bias"]
    grown = [a.label for a in all_non_routed_assumptions() if reproduces(sum(t.nbytes for t in a.terms(cfg)), E * H * 4)]
    assert grown == []
    fp = layer_footprint("dsv4-pro", 8, 1, 256, non_routed=assumed)
    assert fp.layer_bytes == PR_ALIGN256_BYTES + 13_764_576
    assert "ASSUMED" in fp.to_dict()["non_routed"]["terms"]["router.weight"]["assumption"]


def test_waste_is_padding_plus_growth():
    f256 = layer_footprint("dsv4-pro", 8, 1, 256)
    assert f256.waste_bytes == routed_bytes(512) - routed_bytes(384)
    assert f256.waste_pct == pytest.approx(25.0, abs=1e-12)  # 128 of 512 padded columns: exact
    f128 = layer_footprint("dsv4-pro", 8, 1, 128)
    assert f128.waste_bytes == E * H * 4  # growth only


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        (dict(model="dsv4-ultra", tp=8), "valid models: dsv4-flash, dsv4-pro"),
        (dict(model="dsv4-pro", tp=5), "valid moe_tp values"),
        (dict(model="dsv4-pro", tp=14, ep=7), "valid ep values"),
        (dict(model="dsv4-pro", tp=8, align=0), "--align"),
        (dict(model="dsv4-pro", tp=8, align=40), "multiple of the MXFP4 block"),
        (dict(model="dsv4-pro", tp=8, hidden=100), "hidden override"),
        (dict(model="dsv4-pro", tp=8, experts=0), "experts override"),
    ],
)
def test_bad_input_errors_name_the_option(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        layer_footprint(**kwargs)


def test_non_routed_assumption_rejects_unknown_dtypes():
    with pytest.raises(ValueError, match="valid: none, fp8-block128, bf16, mxfp4"):
        NonRoutedAssumption(shared="fp16")
    with pytest.raises(ValueError, match="router dtype"):
        NonRoutedAssumption(router="int8")
