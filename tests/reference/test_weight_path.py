"""SGLang's post-load FP4 MoE processing (``fp4moe.reference.weight_path``) on every DeepSeek-V4 row.

The pad table is written by hand (the issue's examples) and by the arithmetic
ceil(I_p / align) * align computed here from the models' literal sizes; the processing is run
for real on each row scaled down (real I_p, 2 experts, hidden 128) and compared against padded
tensors built here by hand.
"""

from __future__ import annotations

from functools import lru_cache

import pytest
import torch

from fp4moe.model import catalogue
from fp4moe.reference import inputs, layout, pads, weight_path

ALIGNS = (128, 256)
MOE_INTERMEDIATE = {"dsv4-pro": 3072, "dsv4-flash": 2048}  # config.json moe_intermediate_size
SCALED_EXPERTS, SCALED_HIDDEN = 2, 128

# (model, tp, ep, align) -> (I_p, padded, pad): the issue's examples, by hand
ISSUE_EXAMPLES = {
    ("dsv4-pro", 8, 1, 128): (384, 384, 0),
    ("dsv4-pro", 8, 1, 256): (384, 512, 128),
    ("dsv4-pro", 16, 1, 128): (192, 256, 64),
    ("dsv4-pro", 16, 1, 256): (192, 256, 64),
}

ROWS = catalogue.catalogue_rows()
ROW_GRID = [(pc, a) for pc in ROWS for a in ALIGNS]


def _expected_plan(model: str, tp: int, ep: int, align: int) -> tuple[int, int, int]:
    i_p = MOE_INTERMEDIATE[model] // (tp // ep)
    padded = -(-i_p // align) * align
    return i_p, padded, padded - i_p


@pytest.mark.parametrize("key,want", ISSUE_EXAMPLES.items(), ids=["-".join(map(str, k)) for k in ISSUE_EXAMPLES])
def test_issue_examples(key, want):
    model, tp, ep, align = key
    plan = weight_path.pad_table(model, tp, ep, align)
    assert (plan.intermediate, plan.padded, plan.intermediate_pad) == want
    assert _expected_plan(*key) == want  # the arithmetic used for every row agrees with the issue


@pytest.mark.parametrize("pc,align", ROW_GRID, ids=[f"{pc.label}-a{a}" for pc, a in ROW_GRID])
def test_pad_table_every_catalogue_row(pc, align):
    plan = weight_path.pad_table(pc.model, pc.tp, pc.ep, align)
    assert (plan.intermediate, plan.padded, plan.intermediate_pad) == _expected_plan(pc.model.name, pc.tp, pc.ep, align)
    assert plan.padded % align == 0 and 0 <= plan.intermediate_pad < align


def test_default_align_is_128_since_sglang_31450():
    assert weight_path.DEFAULT_ALIGN == pads.DEFAULT_ALIGN == 128 and pads.LEGACY_ALIGN == 256


# ---------------------------------------------------------------- the real processing, scaled down
@lru_cache(maxsize=None)
def _raw(i_p: int):
    return inputs.make_raw_layer(experts=SCALED_EXPERTS, hidden=SCALED_HIDDEN, intermediate=i_p, seed=1000 + i_p)


def _padded_by_hand(raw, i_p: int, padded: int):
    """What the kernel must receive before the shuffle: gate [0, I_p), up [padded, padded+I_p),
    w2's K padded at its end; weight pad bytes 0, scale pad bytes 0x00."""
    e, h = SCALED_EXPERTS, SCALED_HIDDEN
    w13 = torch.zeros((e, 2 * padded, h // 2), dtype=torch.uint8)
    s13 = torch.zeros((e, 2 * padded, h // 32), dtype=torch.uint8)
    w13[:, :i_p], w13[:, padded : padded + i_p] = raw.w13[:, :i_p], raw.w13[:, i_p:]
    s13[:, :i_p], s13[:, padded : padded + i_p] = raw.w13_scale[:, :i_p], raw.w13_scale[:, i_p:]
    w2 = torch.zeros((e, h, padded // 2), dtype=torch.uint8)
    s2 = torch.zeros((e, h, padded // 32), dtype=torch.uint8)
    w2[..., : i_p // 2], s2[..., : i_p // 32] = raw.w2, raw.w2_scale
    return w13, s13, w2, s2


# one scaled-down run per distinct (I_p, align); the ids name the catalogue rows it stands for
_BY_IP: dict[tuple[int, int], list[str]] = {}
for _pc, _a in ROW_GRID:
    _BY_IP.setdefault((_pc.intermediate_per_partition, _a), []).append(_pc.label)
PROCESS_GRID = sorted(_BY_IP)


def test_process_grid_covers_every_catalogue_row():
    covered = {label for labels in _BY_IP.values() for label in labels}
    assert covered == {pc.label for pc in ROWS} and len(PROCESS_GRID) >= 2 * len({pc.intermediate_per_partition for pc in ROWS})


@pytest.mark.parametrize(
    "i_p,align", PROCESS_GRID, ids=[f"Ip{i}-a{a}[{'+'.join(_BY_IP[(i, a)])}]" for i, a in PROCESS_GRID]
)
@pytest.mark.parametrize("gu_interleave", [True, False], ids=["gu-itlv", "gguu"])
def test_process_real_row_scaled_down(i_p, align, gu_interleave):
    raw = _raw(i_p)
    before = [t.clone() for t in raw.tensors()]
    _, padded, pad = _expected_plan_from_ip(i_p, align)
    pw = weight_path.process_fp4_moe_weights(*raw.tensors(), align=align, gu_interleave=gu_interleave)

    # the pads are recorded ALWAYS, also when nothing is padded
    assert (pw.intermediate, pw.padded_intermediate, pw.intermediate_pad) == (i_p, padded, pad)
    assert pw.hidden_pad == 0 and isinstance(pw.hidden_pad, int)
    assert (pw.experts, pw.hidden, pw.align, pw.gu_interleave, pw.shuffled) == (2, 128, align, gu_interleave, True)

    w13, s13, w2, s2 = weight_path.unshuffled_views(pw)
    # weight and scale pad dims agree
    assert w13.shape[1] == s13.shape[1] == 2 * padded
    assert w2.shape[2] * 2 == s2.shape[2] * 32 == padded
    # gate at [0, I_p), up at [padded, padded + I_p), equal to the raw rows
    assert torch.equal(w13[:, :i_p], raw.w13[:, :i_p]) and torch.equal(w13[:, padded : padded + i_p], raw.w13[:, i_p:])
    assert torch.equal(s13[:, :i_p], raw.w13_scale[:, :i_p])
    assert torch.equal(s13[:, padded : padded + i_p], raw.w13_scale[:, i_p:])
    assert torch.equal(w2[..., : i_p // 2], raw.w2) and torch.equal(s2[..., : i_p // 32], raw.w2_scale)
    # pad rows/cols: zero weight bytes, scale bytes exactly 0x00 (never 0xFF)
    for pad_w in (w13[:, i_p:padded], w13[:, padded + i_p :], w2[..., i_p // 2 :]):
        assert not bool(pad_w.any())
    for pad_s in (s13[:, i_p:padded], s13[:, padded + i_p :], s2[..., i_p // 32 :]):
        assert not bool(pad_s.any())
    assert not bool((pw.w13_scale == 0xFF).any()) and not bool((pw.w2_scale == 0xFF).any())

    # the shuffled tensors are exactly aiter's layouts of the hand-padded tensors
    hw13, hs13, hw2, hs2 = _padded_by_hand(raw, i_p, padded)
    assert torch.equal(pw.w13, layout.shuffle_weight(hw13, is_guinterleave=gu_interleave, gate_up=True))
    assert torch.equal(pw.w2, layout.shuffle_weight(hw2, is_guinterleave=gu_interleave, gate_up=False))
    assert torch.equal(pw.w13_scale, layout.shuffle_scale(hs13.reshape(-1, 4), 2, gu_interleave, True))
    assert torch.equal(pw.w2_scale, layout.shuffle_scale(hs2.reshape(2 * 128, -1), 2, gu_interleave, False))

    # shuffle=False: the padded, unshuffled tensors
    plain = weight_path.process_fp4_moe_weights(*raw.tensors(), align=align, gu_interleave=gu_interleave, shuffle=False)
    assert not plain.shuffled and plain.intermediate_pad == pad and plain.hidden_pad == 0
    for got, want in zip((plain.w13, plain.w13_scale, plain.w2, plain.w2_scale), (hw13, hs13, hw2, hs2)):
        assert got.dtype == torch.uint8 and torch.equal(got, want)
    assert all(torch.equal(a, b) for a, b in zip(raw.tensors(), before)), "caller's tensors modified"


def _expected_plan_from_ip(i_p: int, align: int):
    padded = -(-i_p // align) * align
    return i_p, padded, padded - i_p


# ---------------------------------------------------------------- caller's data and dtypes
def _small(seed=3, i_p=64):
    return inputs.make_raw_layer(experts=2, hidden=128, intermediate=i_p, seed=seed)


@pytest.mark.parametrize("shuffle", [True, False], ids=["shuffled", "unshuffled"])
@pytest.mark.parametrize("i_p", [128, 64], ids=["no-pad", "pad"])
def test_success_leaves_callers_tensors_untouched_and_unaliased(shuffle, i_p):
    raw = _small(i_p=i_p)
    ins = list(raw.tensors())
    before = [t.clone() for t in ins]
    pw = weight_path.process_fp4_moe_weights(*ins, align=128, shuffle=shuffle)
    assert pw.intermediate_pad == 128 - i_p
    assert all(torch.equal(a, b) for a, b in zip(ins, before))
    for out in (pw.w13, pw.w13_scale, pw.w2, pw.w2_scale):
        out.fill_(0x55)  # writing the outputs must not reach the caller's tensors
    assert all(torch.equal(a, b) for a, b in zip(ins, before))


def test_checkpoint_dtypes_give_the_same_bytes():
    raw = _small()
    ref = weight_path.process_fp4_moe_weights(*raw.tensors(), align=128)
    typed = (
        raw.w13.view(torch.int8),
        raw.w13_scale.view(torch.float8_e8m0fnu),
        raw.w2.view(torch.float4_e2m1fn_x2),
        raw.w2_scale.view(torch.float8_e8m0fnu),
    )
    pw = weight_path.process_fp4_moe_weights(*typed, align=128)
    for a, b in ((pw.w13, ref.w13), (pw.w13_scale, ref.w13_scale), (pw.w2, ref.w2), (pw.w2_scale, ref.w2_scale)):
        assert torch.equal(a.view(torch.uint8), b)


# ---------------------------------------------------------------- bad input
def _bad_inputs():
    """(id, mutate(list of 4 tensors) -> list, exception, message regex)."""

    def set_(i, fn):
        return lambda ts: [fn(t) if j == i else t for j, t in enumerate(ts)]

    def ff_scale(t):
        t = t.clone()
        t[1, 5, 0] = 0xFF
        return t

    return [
        ("float32-w13", set_(0, lambda t: t.float()), TypeError, r"w13: expected packed FP4 bytes"),
        ("float32-w2", set_(2, lambda t: t.float()), TypeError, r"w2: expected packed FP4 bytes"),
        ("float32-w2_scale", set_(3, lambda t: t.float()), TypeError, r"w2_scale: expected e8m0 bytes"),
        ("k-not-32", lambda ts: [ts[0][..., :24].contiguous(), ts[1][..., :1].contiguous(), ts[2][:, :48].contiguous(), ts[3][:, :48].contiguous()],
         ValueError, r"w13: K = hidden = 48 \(packed 24\) is not a multiple of 32"),
        ("odd-w13-rows", set_(0, lambda t: t[:, :127].contiguous()), ValueError, r"w13: rows 127 must be even"),
        ("odd-w2-packed", set_(2, lambda t: t[..., :31].contiguous()), ValueError, r"w2: shape \(2, 128, 31\) does not match"),
        ("intermediate-not-32", lambda ts: [ts[0][:, 16:112].contiguous(), ts[1][:, 16:112].contiguous(), ts[2][..., :24].contiguous(), ts[3][..., :1].contiguous()],
         ValueError, r"w13: intermediate 48 is not a multiple of 32"),
        ("w13_scale-shape", set_(1, lambda t: t[:, :64].contiguous()), ValueError, r"w13_scale: shape \(2, 64, 4\) does not match"),
        ("w2_scale-shape", set_(3, lambda t: t[..., :1].contiguous()), ValueError, r"w2_scale: shape \(2, 128, 1\) does not match"),
        ("0xFF-in-real-block", set_(1, ff_scale), ValueError, r"w13_scale: 1 scale byte\(s\) are 0xFF.*\[1, 5, 0\]"),
        ("w2-2d", set_(2, lambda t: t[0]), ValueError, r"w2: expected 3 dims \[E, rows, cols\], got shape \(128, 32\)"),
        ("w13-4d", set_(0, lambda t: t.unsqueeze(0)), ValueError, r"w13: expected 3 dims"),
        ("not-a-tensor", set_(3, lambda t: t.numpy()), TypeError, r"w2_scale: expected a torch.Tensor, got ndarray"),
    ]


BAD = _bad_inputs()


@pytest.mark.parametrize("mutate,exc,pattern", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_names_the_tensor_and_leaves_it_untouched(mutate, exc, pattern):
    ins = mutate(list(_small().tensors()))
    before = [t.clone() if isinstance(t, torch.Tensor) else t.copy() for t in ins]
    with pytest.raises(exc, match=pattern):
        weight_path.process_fp4_moe_weights(*ins, align=128)
    for a, b in zip(ins, before):
        assert (torch.equal(a, b) if isinstance(a, torch.Tensor) else (a == b).all())


@pytest.mark.parametrize("align", [100, 0, -128, 48], ids=lambda a: f"align{a}")
def test_align_must_be_a_positive_multiple_of_32(align):
    raw = _small()
    before = [t.clone() for t in raw.tensors()]
    with pytest.raises(ValueError, match=rf"align: must be a positive multiple of 32, got {align}"):
        weight_path.process_fp4_moe_weights(*raw.tensors(), align=align)
    assert all(torch.equal(a, b) for a, b in zip(raw.tensors(), before))


UNTILEABLE = [
    # (hidden, I_p, align, tensor the error must name): shapes the checks accept but the
    # GU-interleaved shuffle cannot tile (K/2 % 64 != 0)
    (128, 64, 64, "w2"),  # padded 64 -> w2 K/2 = 32
    (96, 64, 128, "w13"),  # hidden 96 -> w13 K/2 = 48
]


@pytest.mark.parametrize("hidden,i_p,align,name", UNTILEABLE, ids=["w2-k64", "w13-k64"])
def test_untileable_shapes_name_the_tensor(hidden, i_p, align, name):
    raw = inputs.make_raw_layer(experts=2, hidden=hidden, intermediate=i_p, seed=4)
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        weight_path.process_fp4_moe_weights(*raw.tensors(), align=align, gu_interleave=True)
