"""Differential conformance: aiter's own pure-torch reference functions against ``fp4moe``.

aiter's tests take as ground truth a handful of pure-torch functions: ``torch_moe_stage1``,
``torch_moe_stage2``, ``torch_moe`` (and the MXFP4 dequant helper beside them) in
``aiter/fused_moe.py``; ``per_1x32_f4_quant`` and ``per_1x32_f8_scale_f8_quant`` in
``aiter/ops/quant.py``; ``mxfp4_to_f32`` and ``e8m0_to_f32`` in ``aiter/utility/fp4_utils.py``.
Here those functions are executed from the aiter sources under check (``fp4moe.targets.aiter.source.
SourceModules``: loaded from the files, the aiter package never imported, only aiter's JIT and
ROCm parts stubbed) on a seeded grid, and compared with ``fp4moe``:

- codecs: every e8m0 byte, every packed e2m1 byte, MXFP4 dequantization;
- quantizers, on edge blocks (ties at every rounding midpoint, saturation, tiny, subnormal and
  huge amax, all-zero and -0.0 blocks, mixed binades): MXFP4 weight quant in each scale mode
  and the a8w4 MXFP8 activation quant, scale bytes and element bytes;
- the MoE, a16w4 and a8w4, with and without ``doweight_stage1``, ``swiglu_limit`` (None, 0.0,
  a limit that bites), ``intermediate_pad`` and ``hidden_pad`` (fp4moe on padded weights with
  garbage and 0xFF scale bytes in the pads, told the pads; aiter on the unpadded weights):
  stage 1 (``torch_moe_stage1`` vs the reference's stage-1 output), stage 2 (aiter's
  ``torch_moe_stage2`` fed the reference's stage-1 output), the full two-stage chain, and the
  single-function ``torch_moe`` (float semantics, ``expert_mask`` with global expert ids).

Each check reports ``bitwise``, ``within`` a stated tolerance, or ``differ`` with where. The
documented divergences (docs/reference.md, "Semantics" points 4 and 5) are pinned: they must
hold exactly as documented, and a change in them fails the check too -- any change in aiter's
reference semantics between two aiter versions shows up here as a failed check naming the
aiter function and its file:line.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from fp4moe.mx import e8m0, mxfp4, mxfp8
from fp4moe.reference import inputs, kernel_budget, moe, weight_path
from fp4moe.targets.aiter.source import STUB_MARK, AiterSource, SourceModules, note_stage

BITWISE, WITHIN, DIFFER, MISSING_FN = "bitwise", "within", "differ", "missing"
SEED = 1111
#: Full-MoE outputs (bf16) may differ from aiter's reference by float32 summation order only
#: if aiter reorders a sum: that flips a bf16 rounding of an output on a fraction
#: ~ 1e-7 / 2^-9 ~ 5e-5 of elements (each off by 2^-8 relative): rel. L2 ~ 2^-8 * sqrt(5e-5)
#: ~ 3e-5. 1e-4 leaves room for that and is 17x below the smallest semantic change measured
#: (the bf16 stage-1 rounding removed: 1.7e-3 a16w4, 1.5e-2 a8w4; doweight placement ~0.4).
MOE_REL_L2 = 1e-4
#: The documented divergences of aiter's torch scale helper (docs/reference.md points 4, 5).
TINY_AITER_BYTE, TINY_OURS_BYTE = 0x01, 0x00
HUGE_EVEN_AITER_BYTE, HUGE_EVEN_OURS_BYTE = 0xFF, 0xFD


@dataclass
class Diff:
    """One differential check: what was compared, the outcome, the figure, where."""

    check: str
    outcome: str  # bitwise | within | differ | missing
    detail: str
    aiter_fn: str  # "torch_moe_stage1 (aiter/fused_moe.py:3532)"


class AiterRefs:
    """aiter's reference functions of one source tree, loaded from its files."""

    FUNCS = {
        "e8m0_to_f32": "aiter.utility.fp4_utils",
        "mxfp4_to_f32": "aiter.utility.fp4_utils",
        "f32_to_mx_e8m0_scale": "aiter.utility.fp4_utils",
        "_mxfp4_per_1x32_weight_expert_to_f32": "aiter.fused_moe",
        "per_1x32_f4_quant": "aiter.ops.quant",
        "per_1x32_f8_scale_f8_quant": "aiter.ops.quant",
        "torch_moe_stage1": "aiter.fused_moe",
        "torch_moe_stage2": "aiter.fused_moe",
        "torch_moe": "aiter.fused_moe",
    }

    def __init__(self, src: AiterSource):
        self.mods = SourceModules(src)
        self.fn: dict = {}
        with self.mods.active():
            for name, mod in self.FUNCS.items():
                self.fn[name] = self.mods.function(mod, name)
            self.dtypes = self.mods.module("aiter.utility.dtypes")
            enum = self.mods.module("aiter.ops.enum")
            self.QuantType, self.ActivationType = enum.QuantType, enum.ActivationType

    def where(self, name: str) -> str:
        return f"{name} ({self.mods.where(self.FUNCS[name], name)})"

    def params(self, name: str) -> set[str]:
        import inspect

        f = self.fn.get(name)
        return set(inspect.signature(f).parameters) if f is not None else set()


# ---------------------------------------------------------------------- comparing
def _bits(t: torch.Tensor) -> torch.Tensor:
    """Bit patterns for an exact comparison (NaN payloads differ between codecs: all NaN -> one)."""
    if t.dtype.is_floating_point and t.element_size() == 4:
        b = t.contiguous().view(torch.int32).clone()
        b[torch.isnan(t)] = 0x7FC00000
        return b
    if t.dtype.is_floating_point and t.element_size() == 2:
        return t.float().contiguous().view(torch.int32)
    return t.contiguous().view(torch.uint8) if t.element_size() == 1 else t


def compare_exact(ours: torch.Tensor, theirs: torch.Tensor) -> tuple[int, str]:
    """(number of differing elements, where the first one is) for a bitwise comparison."""
    if tuple(ours.shape) != tuple(theirs.shape):
        return -1, f"shape {tuple(theirs.shape)} (aiter) != {tuple(ours.shape)} (fp4moe)"
    a, b = _bits(ours), _bits(theirs)
    bad = a != b
    n = int(bad.sum())
    if not n:
        return 0, ""
    idx = [int(i) for i in bad.nonzero()[0].tolist()]
    return n, f"first at {idx}: aiter {theirs[tuple(idx)].item()!r}, fp4moe {ours[tuple(idx)].item()!r}"


def _moe_outcome(ours: torch.Tensor, theirs: torch.Tensor, tol: float) -> tuple[str, str]:
    """Bitwise, within ``tol`` (rel. L2 of aiter's output against fp4moe's), or differ."""
    n, where = compare_exact(ours, theirs)
    if n == 0:
        return BITWISE, f"{ours.numel()} values bitwise"
    if n < 0:
        return DIFFER, where
    if not bool(torch.isfinite(theirs.float()).all()):
        return DIFFER, f"{n} of {ours.numel()} differ, aiter's output has NaN/Inf; {where}"
    d = kernel_budget.rel_l2(theirs.float(), ours.float())
    if d <= tol:
        return WITHIN, f"rel. L2 {d:.2e} <= {tol:.0e} ({n} of {ours.numel()} not bitwise; {where})"
    return DIFFER, f"rel. L2 {d:.3e} > {tol:.0e}: {n} of {ours.numel()} differ; {where}"


# ---------------------------------------------------------------------- edge grids
def edge_blocks(elem_max: float, midpoints: list[float], seed: int = SEED) -> torch.Tensor:
    """[B, 32] float32 blocks covering what a block-scale quantizer can get wrong."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    f32 = torch.finfo(torch.float32)

    def block(amax: float, fill: torch.Tensor | None = None) -> torch.Tensor:
        b = (torch.rand(32, generator=g) * 2 - 1) * amax if fill is None else fill.clone()
        b[int(torch.randint(0, 32, (1,), generator=g))] = amax * (1 if torch.rand(1, generator=g) < 0.5 else -1)
        return b

    for e in list(range(-149, -120, 2)) + list(range(-20, 21, 3)) + list(range(118, 128)):  # tiny .. huge
        for sig in (1.0, 1.25, 1.5, 1.5 + 2**-20, 1.75, 1.75 - 2**-20, 1.9999999):
            a = sig * 2.0**e
            if 0 < a <= f32.max:
                rows.append(block(a))
    rows.append(block(f32.max))
    for k in (-126, -10, 0, 5, 100):  # an exact amax = elem_max * 2^k, and just above it
        rows.append(block(elem_max * 2.0**k))
        rows.append(block(elem_max * 2.0**k * (1 + 2**-23)))
    for k in (-127, -128, -130, -135, -140):  # amax / elem_max at and below 2^-127
        rows.append(block(elem_max * 2.0**k))
    scale = 2.0 ** torch.randint(-8, 8, (len(midpoints) * 4,), generator=g).float()
    for i, m in enumerate(midpoints * 4):  # ties: every element on a rounding midpoint
        s = float(scale[i])
        signs = torch.where(torch.rand(32, generator=g) < 0.5, -1.0, 1.0)
        b = signs * m * s
        b[0] = elem_max * s  # pins the block scale to s (round_up and floor agree at elem_max)
        rows.append(b)
    rows.append(torch.zeros(32))
    rows.append(-torch.zeros(32))
    mixed = torch.randn(32, generator=g) * 2.0 ** torch.randint(-30, 30, (32,), generator=g).float()
    rows.append(mixed)
    rows += [torch.randn(32, generator=g) * 2.0 ** float(torch.randint(-20, 20, (1,), generator=g)) for _ in range(64)]
    return torch.stack(rows).to(torch.float32)


def _e2m1_midpoints():
    return [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]


def _e4m3_midpoints():
    vals = sorted({abs(float(v)) for v in torch.arange(0, 256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn).float() if math.isfinite(v)})
    return [(a + b) / 2 for a, b in zip(vals[::7], vals[1::7])]


# ---------------------------------------------------------------------- codec and quantizer checks
def check_e8m0_decode(r: AiterRefs) -> Diff:
    fn = "e8m0_to_f32"
    note_stage(f"calling {r.where(fn)}")
    if r.fn[fn] is None:
        return Diff("codec: e8m0 decode", MISSING_FN, "this aiter has no such function", r.where(fn))
    b = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    n, where = compare_exact(e8m0.decode(b), r.fn[fn](b.clone()))
    return Diff("codec: e8m0 decode, all 256 bytes", BITWISE if n == 0 else DIFFER, "256 bytes bitwise (0xFF NaN both)" if n == 0 else f"{n} differ; {where}", r.where(fn))


def check_e2m1_decode(r: AiterRefs) -> Diff:
    fn = "mxfp4_to_f32"
    note_stage(f"calling {r.where(fn)}")
    if r.fn[fn] is None:
        return Diff("codec: e2m1 decode", MISSING_FN, "this aiter has no such function", r.where(fn))
    b = torch.arange(256, dtype=torch.int32).to(torch.uint8).reshape(16, 16)
    n, where = compare_exact(mxfp4.decode_e2m1(mxfp4.unpack_nibbles(b)), r.fn[fn](b.clone()))
    return Diff("codec: e2m1 decode + nibble order, all 256 bytes", BITWISE if n == 0 else DIFFER, "512 values bitwise (signed zeros included)" if n == 0 else f"{n} differ; {where}", r.where(fn))


def check_mxfp4_dequant(r: AiterRefs) -> Diff:
    fn = "_mxfp4_per_1x32_weight_expert_to_f32"
    note_stage(f"calling {r.where(fn)}")
    g = torch.Generator().manual_seed(SEED)
    rows, cols = 255, 64
    packed = torch.randint(0, 256, (2, rows, cols // 2), generator=g, dtype=torch.uint8)
    scale = torch.arange(255, dtype=torch.int32).to(torch.uint8).repeat(2, cols // 32, 1).permute(0, 2, 1).contiguous()  # every byte but NaN
    if r.fn[fn] is None or r.fn["e8m0_to_f32"] is None:
        return Diff("dequant: MXFP4 weights", MISSING_FN, "this aiter has no such helper", r.where(fn))
    with r.mods.active():
        theirs = r.fn[fn](packed.view(r.dtypes.fp4x2), r.fn["e8m0_to_f32"](scale.clone()), 1, rows, cols)
    n, where = compare_exact(mxfp4.dequantize(packed[1], scale[1]), theirs)
    return Diff("dequant: MXFP4 weights, scale bytes 0x00..0xFE", BITWISE if n == 0 else DIFFER, f"{rows * cols} values bitwise" if n == 0 else f"{n} differ; {where}", r.where(fn))


def _quant_check(name, fn_where, ours_scale, ours_elems, theirs_scale, theirs_elems, amax, pinned) -> Diff:
    """Compare per-block scale bytes and element bytes; ``pinned`` (mask, aiter byte, our byte,
    what) lists documented divergences that must hold exactly."""
    s_o, s_t = ours_scale.reshape(-1), theirs_scale.reshape(-1)
    e_o, e_t = ours_elems.reshape(s_o.numel(), -1), theirs_elems.reshape(s_t.numel(), -1)
    expected = torch.zeros_like(s_o, dtype=torch.bool)
    notes, changed = [], []
    for mask, a_byte, o_byte, what in pinned:
        m = mask.reshape(-1)
        off = m & ((s_t != a_byte) | (s_o != o_byte))
        if bool(off.any()):
            i = int(off.nonzero()[0])
            changed.append(f"documented divergence changed ({what}) on {int(off.sum())} of {int(m.sum())} blocks, e.g. block {i} "
                           f"amax {float(amax[i]):.3e}: aiter 0x{int(s_t[i]):02X}, fp4moe 0x{int(s_o[i]):02X} (documented 0x{a_byte:02X} / 0x{o_byte:02X})")
        elif int(m.sum()):
            notes.append(f"{int(m.sum())} {what} blocks: aiter 0x{a_byte:02X} / fp4moe 0x{o_byte:02X} as documented")
        expected |= m
    keep = ~expected
    bad_s = keep & (s_o != s_t)
    bad_e = keep & (e_o != e_t).any(dim=1)
    if bool(bad_s.any()) or bool(bad_e.any()):
        i = int((bad_s | bad_e).nonzero()[0])
        changed.insert(0, f"{int(bad_s.sum())} scale bytes and {int(bad_e.sum())} blocks of elements differ; first block {i} "
                          f"(amax {float(amax[i]):.3e}): scale aiter 0x{int(s_t[i]):02X} fp4moe 0x{int(s_o[i]):02X}")
    if changed:
        return Diff(name, DIFFER, "; ".join(changed), fn_where)
    return Diff(name, BITWISE, f"{int(keep.sum())} blocks: scales and elements bitwise" + ("; " + "; ".join(notes) if notes else ""), fn_where)


def check_mxfp4_quant(r: AiterRefs) -> list[Diff]:
    fn = "per_1x32_f4_quant"
    note_stage(f"calling {r.where(fn)}")
    if r.fn[fn] is None:
        return [Diff("quant: MXFP4 weights", MISSING_FN, "this aiter has no per_1x32_f4_quant", r.where(fn))]
    x = edge_blocks(mxfp4.E2M1_MAX, _e2m1_midpoints())
    amax = x.abs().amax(1)
    q6, q4 = amax / mxfp4.E2M1_MAX, amax / 2.0**mxfp4.E2M1_EMAX  # the float32 quotients aiter's helper reads
    tiny = (q6 > 0) & (q6 <= 2.0**-127)
    huge = amax >= 1.75 * 2.0**127
    floor_up = (amax < 2.0**-124) & (q4 >= 2.0**-126)  # amax/4 rounds up into the normal range
    has_modes = "round_mode" in r.params(fn)
    # aiter's MxScaleRoundMode ints (aiter/utility/mx_types.py): 0 RoundDown, 1 RoundUp, 2 Even
    modes = [("round_up", 1, [(tiny, TINY_AITER_BYTE, TINY_OURS_BYTE, "amax/6 <= 2^-127")]),
             ("floor", 0, [(floor_up, 0x01, 0x00, "amax/4 rounded up to 2^-126")]),
             ("even", 2, [(huge, HUGE_EVEN_AITER_BYTE, HUGE_EVEN_OURS_BYTE, "amax >= 1.75*2^127")])]
    if not has_modes:
        modes = [("round_up", None, [(tiny, TINY_AITER_BYTE, TINY_OURS_BYTE, "amax/6 <= 2^-127")])]
    out = []
    for ours_mode, aiter_mode, pinned in modes:
        kw = {} if aiter_mode is None else {"round_mode": aiter_mode}
        with r.mods.active():
            tp, ts = r.fn[fn](x.clone(), **kw)
        op, os_ = mxfp4.quantize(x, ours_mode)
        mode_txt = f"round_mode={aiter_mode}" if aiter_mode is not None else "default mode (no round_mode keyword)"
        d = _quant_check(f"quant: MXFP4 {ours_mode} vs per_1x32_f4_quant({mode_txt})", r.where(fn), os_, op, ts.view(torch.uint8), tp.view(torch.uint8), amax, pinned)
        if ours_mode == "round_up" and d.outcome == BITWISE:  # the run-time rule equals aiter on every block
            f_p, f_s = mxfp4.quantize(x, "round_up_f32")
            if not (torch.equal(f_s, ts.view(torch.uint8).reshape(f_s.shape)) and torch.equal(f_p, tp.view(torch.uint8).reshape(f_p.shape))):
                d = Diff(d.check, DIFFER, "fp4moe round_up_f32 does not reproduce aiter on every block", d.aiter_fn)
            else:
                d.detail += f"; fp4moe round_up_f32 = aiter on all {x.shape[0]} blocks"
        out.append(d)
    return out


def check_mxfp8_quant(r: AiterRefs) -> Diff:
    fn = "per_1x32_f8_scale_f8_quant"
    note_stage(f"calling {r.where(fn)}")
    if r.fn[fn] is None:
        return Diff("quant: MXFP8 activations (a8w4)", MISSING_FN, "this aiter has no per_1x32_f8_scale_f8_quant (no a8w4 reference)", r.where(fn))
    x = edge_blocks(mxfp8.E4M3_MAX, _e4m3_midpoints())
    amax = x.abs().amax(1)
    with r.mods.active():
        te, ts = r.fn[fn](x.clone(), quant_dtype=r.dtypes.fp8, scale_type=r.dtypes.fp8_e8m0)
    oe, os_ = mxfp8.quantize(x, mxfp8.ACT_SCALE_MODE)
    d = _quant_check(f"quant: MXFP8 a8w4 activations ({mxfp8.ACT_SCALE_MODE}) vs per_1x32_f8_scale_f8_quant(e8m0)", r.where(fn),
                     os_, oe.view(torch.uint8), ts.view(torch.uint8), te.view(torch.uint8), amax, [])
    if d.outcome == BITWISE:
        _, exact = mxfp8.quantize(x, "round_up")
        q = amax / mxfp8.E4M3_MAX
        tiny = (q > 0) & (q <= 2.0**-127)
        n = int((exact.reshape(-1) != ts.view(torch.uint8).reshape(-1)).sum())
        d.detail += f"; the OCP-exact round_up differs on {n} blocks (amax/448 <= 2^-127: {int(tiny.sum())})"
    return d


# ---------------------------------------------------------------------- MoE checks
@dataclass(frozen=True)
class MoeCase:
    act: str
    doweight_stage1: bool
    swiglu_limit: float | None
    pad: str  # none | intermediate | hidden

    @property
    def label(self) -> str:
        return f"{self.act} doweight_stage1={int(self.doweight_stage1)} swiglu_limit={self.swiglu_limit} pad={self.pad}"


EXPERTS, TOKENS, TOP_K, HIDDEN, INTER, ALIGN, HIDDEN_PAD = 4, 12, 2, 256, 192, 128, 32
LIMIT = 0.25  # gate/up have std ~0.3 here (weights std 0.02, H 256): the clamp bites


def moe_cases(acts=("a16w4", "a8w4")) -> list[MoeCase]:
    return [MoeCase(a, dw, lim, pad) for a in acts for dw in (False, True) for lim in (None, 0.0, LIMIT) for pad in ("none", "intermediate", "hidden")]


@functools.lru_cache(maxsize=4)
def _raw_layer(h_used: int):
    return inputs.make_raw_layer(experts=EXPERTS, hidden=h_used, intermediate=INTER, seed=SEED + 1)


def _layer_and_tokens(case: MoeCase):
    """(aiter inputs at real dims, fp4moe ExpertWeights with pads, hidden_pad, intermediate_pad, x_padded)."""
    h_used = HIDDEN - (HIDDEN_PAD if case.pad == "hidden" else 0)
    raw = _raw_layer(h_used)
    x, w, ids = inputs.make_tokens(tokens=TOKENS, hidden=h_used, experts=EXPERTS, top_k=TOP_K, seed=SEED + 2)
    x[3] = 0  # an all-zero token
    x[5] = x[5] * 2.0**14  # an outlier token
    g = torch.Generator().manual_seed(SEED + 3)
    if case.pad == "intermediate":
        pw = weight_path.process_fp4_moe_weights(*raw.tensors(), align=ALIGN, shuffle=False)
        ew = moe.ExpertWeights(pw.w13, pw.w13_scale, pw.w2, pw.w2_scale)
        return raw, (x, w, ids), ew, 0, pw.intermediate_pad, x
    if case.pad == "hidden":  # garbage bytes and NaN scales in the hidden padding: must never be read
        def widen(t, extra, dim, fill=None):
            shape = list(t.shape)
            shape[dim] = extra
            pad = torch.randint(0, 256, shape, generator=g, dtype=torch.uint8) if fill is None else torch.full(shape, fill, dtype=torch.uint8)
            return torch.cat((t, pad), dim=dim)
        ew = moe.ExpertWeights(widen(raw.w13, HIDDEN_PAD // 2, 2), widen(raw.w13_scale, HIDDEN_PAD // 32, 2, e8m0.E8M0_NAN),
                               widen(raw.w2, HIDDEN_PAD, 1), widen(raw.w2_scale, HIDDEN_PAD, 1, e8m0.E8M0_NAN))
        xp = torch.cat((x, torch.full((TOKENS, HIDDEN_PAD), 1e4, dtype=x.dtype)), dim=1)
        return raw, (x, w, ids), ew, HIDDEN_PAD, 0, xp
    return raw, (x, w, ids), moe.ExpertWeights(raw.w13, raw.w13_scale, raw.w2, raw.w2_scale), 0, 0, x


def _aiter_stage1(r: AiterRefs, raw, x, w, ids, case: MoeCase):
    d, q = r.dtypes, r.QuantType.per_1x32
    kw = dict(dtype=torch.bfloat16, activation=r.ActivationType.Silu, quant_type=q, w1_scale=raw.w13_scale.view(d.fp8_e8m0), doweight=case.doweight_stage1)
    if "swiglu_limit" in r.params("torch_moe_stage1"):
        kw["swiglu_limit"] = case.swiglu_limit
    elif case.swiglu_limit:
        return None
    if case.act == "a8w4":
        a_q, a_s = r.fn["per_1x32_f8_scale_f8_quant"](x, quant_dtype=d.fp8, scale_type=d.fp8_e8m0)
        return r.fn["torch_moe_stage1"](a_q, raw.w13.view(d.fp4x2), raw.w2.view(d.fp4x2), w, ids, a1_scale=a_s, **kw)
    return r.fn["torch_moe_stage1"](x, raw.w13.view(d.fp4x2), raw.w2.view(d.fp4x2), w, ids, **kw)


def _aiter_stage2(r: AiterRefs, raw, a1, w, ids, case: MoeCase):
    d = r.dtypes
    kw = dict(dtype=torch.bfloat16, quant_type=r.QuantType.per_1x32, w2_scale=raw.w2_scale.view(d.fp8_e8m0), doweight=not case.doweight_stage1)
    if case.act == "a8w4":
        a2, a2_s = r.fn["per_1x32_f8_scale_f8_quant"](a1, quant_dtype=d.fp8, scale_type=d.fp8_e8m0)
        return r.fn["torch_moe_stage2"](a2.view(a1.shape), raw.w13.view(d.fp4x2), raw.w2.view(d.fp4x2), w, ids, a2_scale=a2_s, **kw)
    return r.fn["torch_moe_stage2"](a1, raw.w13.view(d.fp4x2), raw.w2.view(d.fp4x2), w, ids, **kw)


def _run_case(r: AiterRefs, case: MoeCase) -> dict[str, tuple[str, str]]:
    raw, (x, w, ids), ew, hidden_pad, inter_pad, xp = _layer_and_tokens(case)
    trace: dict = {}
    ours = moe.fused_moe_unshuffled(xp, ew, w, ids, hidden_pad=hidden_pad, intermediate_pad=inter_pad, swiglu_limit=case.swiglu_limit,
                                    act_mode=case.act, doweight_stage1=case.doweight_stage1, trace=trace)
    h_used = HIDDEN - hidden_pad
    if hidden_pad and bool(ours[:, h_used:].ne(0).any()):
        return {k: (DIFFER, "fp4moe wrote into the hidden padding") for k in ("stage1", "stage2", "full")}
    ours = ours[:, :h_used].to(torch.bfloat16)
    out = {}
    note_stage(f"calling {r.where('torch_moe_stage1')} / {r.where('torch_moe_stage2')} [{case.label}]")
    with r.mods.active():
        a1 = _aiter_stage1(r, raw, x, w, ids, case)
        if a1 is None:
            return {k: (MISSING_FN, "this aiter's torch_moe_stage1 has no swiglu_limit") for k in ("stage1", "stage2", "full")}
        out["stage1"] = _moe_outcome(trace["stage1"], a1, 0.0)
        out["stage2"] = _moe_outcome(ours, _aiter_stage2(r, raw, trace["stage1"], w, ids, case), MOE_REL_L2)
        out["full"] = _moe_outcome(ours, _aiter_stage2(r, raw, a1, w, ids, case), MOE_REL_L2)
    return out


def check_moe(r: AiterRefs, cases: list[MoeCase] | None = None) -> list[Diff]:
    cases = moe_cases() if cases is None else cases
    need = ["torch_moe_stage1", "torch_moe_stage2"] + (["per_1x32_f8_scale_f8_quant"] if any(c.act == "a8w4" for c in cases) else [])
    missing = [f for f in need if r.fn[f] is None]
    results: dict[tuple[str, str], list[tuple[MoeCase, str, str]]] = {}
    for case in cases:
        if case.act == "a8w4" and r.fn["per_1x32_f8_scale_f8_quant"] is None or r.fn["torch_moe_stage1"] is None or r.fn["torch_moe_stage2"] is None:
            continue
        for stage, (outcome, detail) in _run_case(r, case).items():
            results.setdefault((case.act, stage), []).append((case, outcome, detail))
    fn_of = {"stage1": "torch_moe_stage1", "stage2": "torch_moe_stage2", "full": "torch_moe_stage2"}
    what = {"stage1": "stage 1 (bf16 stage-1 output)", "stage2": "stage 2 fed fp4moe's stage-1 output", "full": "full two-stage chain"}
    out = [Diff(f"moe: needs {f}", MISSING_FN, "this aiter has no such function", r.where(f)) for f in missing]
    for (act, stage), rows in results.items():
        where = r.where(fn_of[stage]) if stage != "full" else f"{r.where('torch_moe_stage1')} -> {r.where('torch_moe_stage2')}"
        bad = [(c, o, d) for c, o, d in rows if o in (DIFFER, MISSING_FN)]
        within = [(c, o, d) for c, o, d in rows if o == WITHIN]
        name = f"moe: {act} {what[stage]}"
        if bad:
            differ = [x for x in bad if x[1] == DIFFER]
            c, o, d = (differ or bad)[0]
            n_ok = len(rows) - len(bad)
            out.append(Diff(name, DIFFER if differ else MISSING_FN,
                            f"{len(differ)} of {len(rows)} configs differ, {len(bad) - len(differ)} not checkable, {n_ok} agree; first: {c.label}: {d}", where))
        elif within:
            c, o, d = max(within, key=lambda t: t[2])
            out.append(Diff(name, WITHIN, f"{len(rows)} configs, {len(within)} not bitwise; e.g. {c.label}: {d}", where))
        else:
            grid = f" (doweight_stage1 x swiglu_limit None/0.0/{LIMIT} x pad none/intermediate/hidden)" if len(rows) == len(moe_cases()) // 2 else ""
            out.append(Diff(name, BITWISE, f"{len(rows)} configs{grid} bitwise", where))
    return out


def check_torch_moe(r: AiterRefs) -> Diff:
    """aiter's single-function ``torch_moe`` (float stage-1 output, expert_mask with global ids)
    against fp4moe with ``stage1_dtype=None``, a16w4."""
    fn = "torch_moe"
    note_stage(f"calling {r.where(fn)}")
    if r.fn[fn] is None:
        return Diff("moe: torch_moe", MISSING_FN, "this aiter has no torch_moe", r.where(fn))
    raw = inputs.make_raw_layer(experts=EXPERTS, hidden=HIDDEN, intermediate=INTER, seed=SEED + 4)
    x, w, ids = inputs.make_tokens(tokens=TOKENS, hidden=HIDDEN, experts=EXPERTS, top_k=TOP_K, seed=SEED + 5)
    mask = torch.tensor([0, 1] * EXPERTS, dtype=torch.int32)  # this rank holds the odd global ids
    gids = ids * 2 + 1
    gids[::3, 1] = 0  # some second choices routed to a remote expert
    ew = moe.ExpertWeights(raw.w13, raw.w13_scale, raw.w2, raw.w2_scale)
    ours = moe.fused_moe_unshuffled(x, ew, w, gids, expert_mask=mask, stage1_dtype=None).to(torch.bfloat16)
    w1 = mxfp4.dequantize(raw.w13, raw.w13_scale)
    w2 = mxfp4.dequantize(raw.w2, raw.w2_scale)
    with r.mods.active():
        theirs = r.fn[fn](x, w1, w2, w, gids.long(), expert_mask=mask)
    o, d = _moe_outcome(ours, theirs, MOE_REL_L2)
    return Diff("moe: torch_moe a16w4, float stage-1, expert_mask with global ids", o, d, r.where(fn))


def _guarded(name: str, r: AiterRefs, fn_names: list[str], check) -> list[Diff]:
    """Run one check; aiter code that raises on the documented arguments is a difference
    (its interface or semantics changed), named with its file:line. Stub-only gaps are n/a."""
    try:
        out = check()
        return out if isinstance(out, list) else [out]
    except Exception as e:  # noqa: BLE001 -- SystemExit / KeyboardInterrupt propagate (could not run)
        msg = " ".join(f"{type(e).__name__}: {e}".split())[:300]
        where = ", ".join(r.where(f) for f in fn_names)
        if STUB_MARK in msg:
            return [Diff(name, MISSING_FN, f"needs aiter's compiled runtime, not checkable from source: {msg}", where)]
        if isinstance(e, NotImplementedError) and "not implemented for" in msg:  # torch has no CPU kernel for it
            return [Diff(name, MISSING_FN, f"needs a torch kernel this CPU build lacks (a GPU runs it; not the "
                                           f"compiled runtime's fault, not checkable here): {msg}", where)]
        return [Diff(name, DIFFER, f"raises {msg}", where)]


def run_differential(src: AiterSource, cases: list[MoeCase] | None = None, refs=None) -> list[Diff]:
    """Every differential check. ``refs``: aiter's functions (default: :class:`AiterRefs`
    loaded here)."""
    note_stage("loading aiter's reference functions (aiter/fused_moe.py, aiter/ops/quant.py, aiter/utility/fp4_utils.py)")
    r = refs if refs is not None else AiterRefs(src)
    q4, q8, s1, s2 = "per_1x32_f4_quant", "per_1x32_f8_scale_f8_quant", "torch_moe_stage1", "torch_moe_stage2"
    out = _guarded("codec: e8m0 decode", r, ["e8m0_to_f32"], lambda: check_e8m0_decode(r))
    out += _guarded("codec: e2m1 decode", r, ["mxfp4_to_f32"], lambda: check_e2m1_decode(r))
    out += _guarded("dequant: MXFP4 weights", r, ["_mxfp4_per_1x32_weight_expert_to_f32"], lambda: check_mxfp4_dequant(r))
    out += _guarded("quant: MXFP4 weights", r, [q4], lambda: check_mxfp4_quant(r))
    out += _guarded("quant: MXFP8 activations (a8w4)", r, [q8], lambda: check_mxfp8_quant(r))
    out += _guarded("moe: two-stage references", r, [s1, s2, q8], lambda: check_moe(r, cases))
    out += _guarded("moe: torch_moe", r, ["torch_moe"], lambda: check_torch_moe(r))
    return out
