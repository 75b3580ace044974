"""The kernel checks' judge: aiter's kernel outputs (from the child) against the reference.

Runs in the parent, which never imports aiter: the child (``fp4moe.targets.aiter.child.
kernel_checks``) only computes (``kernels.compute``); :func:`judge_all` rebuilds every job's
inputs (``kernels.cases``, seeded) and references and makes every row. A tree that patches
this module, the reference or the row writer patches them in a process whose rows nobody reads.

Rows per GEMM job (kernel x scale layout x shape), each with its figure:

- ``vs reference``: ``fp4moe.reference.moe.fused_moe_reference`` at the model's SwiGLU limit,
  within the kernel budget (``fp4moe.reference.kernel_budget``);
- ``vs per-slot-bf16 reference``: the reference with aiter Triton's rounding points
  (``slot_dtype=bf16``) at the ulp level (``SLOT_ULP_MAX``);
- ``bitwise repeat``; ``pad told == untold (zero pads)``; ``pad poison (told) == clean``; every
  run with every buffer the wrappers allocate starting as NaN (an unwritten value shows);
- ``pad honoured`` on both sides of the first block_m switch, every allocation poisoned, and
  ``told pad never computed``: the stage-1 buffer's columns past the output tile that holds
  the last told column still hold their poison; ``told K pad never read``: stage 2 alone on the
  gate's input whose pad columns (and, a8w4/a4w4, their scale groups) are NaN == the zero-pad run
  (a4w4, MXFP4 x MXFP4: its pad and told-pad rows alone, on activations the gate quantizes);
- ``N and K tails``: a shape whose widths do not divide the tiles;
- the fused MXFP8 output quant and the FP4 activation quant (``n/a`` with the reason where the
  CPU interpreter cannot run them);
- ``reduce_grouped`` at top-6 and top-8 on random values, bitwise;
- ``routing``: aiter's ``routing()`` with its defaults and with the model's settings
  (``reference.routing``): a valid top-k (ties: any valid choice), the weights, the tables; and
  its top-k stage alone.

Anything computed from aiter's outputs that cannot be computed (an index out of range, a wrong
shape) is a named FAIL row of that job; one job's failure never hides another's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from fp4moe.reference.kernel_budget import KERNEL_COS_DIST, KERNEL_REL_L2, cosine_distance, rel_l2
from fp4moe.reference.moe import ExpertWeights, fused_moe_reference
from fp4moe.targets.aiter.kernels import cases
from fp4moe.targets.aiter.kernels.cases import BF16, Job, Kind
from fp4moe.targets.aiter.results import Result

#: the row words (one set for aiter-check: ``fp4moe.targets.aiter.results.Result``); NOT_JUDGED: a
#: component that could not be loaded or called, its row naming the file and symbol/keyword
PASS, FAIL, INFO, NA, NOT_JUDGED, ABSENT = Result.PASS, Result.FAIL, Result.INFO, Result.NA, Result.NOT_JUDGED, Result.ABSENT
#: why a component did not load, when the tree lacks what it needs (a later aiter has it): ``absent``
ABSENT_MARKS = ("missing (needed as", "import failed", "takes no keyword", "No module named", "no such file")
KERNELS = cases.KERNELS
#: per-slot-bf16 reference vs the kernel, in bf16 ulps (interpreter and H200 a8w4: bitwise;
#: H200 a16w4: 1 ulp on 0.08% of the values)
SLOT_ULP_MAX = 1
SLOT_ULP_FRACTION = 1e-2
#: a compiled kernel's slot-row rounding flips (see _slot_row): at most this share may differ
SLOT_FLIP_FRACTION_COMPILED = 5e-2
#: routing weights: softmax (defaults) to fp32 precision; the model's sqrtsoftplus, renorm and
#: scaling in float32 transcendental arithmetic (a few ulps per operation, 5 operations)
ROUTING_W_ATOL = 1e-6
ROUTING_W_RTOL_SCORED = 1e-5
#: MXFP8 (e4m3: 3 mantissa bits) elements round to within 2^-4 relative: the fused output
#: quant's dequantized values against the bf16 stage-1 buffer, as rel. L2
MXFP8_REL_L2 = 2.0 ** -4
#: who allocates what: the wrappers allocate every GEMM buffer themselves (``allocate_output``:
#: ``torch.empty``); the gate poisons that allocator, so a NaN there is memory aiter left unwritten
NAN_OWNER = ("NaN from memory aiter left unwritten: every buffer here is allocated by aiter's wrappers "
             "(allocate_output, torch.empty), which the gate poisons with NaN; the gate provides none")


@dataclass
class Row:
    check: str
    result: str
    detail: str
    seconds: float = 0.0


def rows_to_dicts(rows: list[Row]) -> list[dict]:
    return [asdict(r) for r in rows]


# ----------------------------------------------------------------------------- comparisons


def ulp_diff_bf16(a: torch.Tensor, b: torch.Tensor) -> dict:
    """Distance in bf16 ulps (ordered integer representation); NaN counted apart."""
    def ordered(t):
        i = t.contiguous().view(torch.int16).to(torch.int32)
        return torch.where(i < 0, -(i & 0x7FFF), i)
    nan = torch.isnan(a.float()) | torch.isnan(b.float())
    d = (ordered(a) - ordered(b)).abs().masked_fill(nan, 0)
    return {"max_ulp": int(d.max()) if d.numel() else 0, "n_diff": int((d > 0).sum()), "nan": int(nan.sum()), "n": d.numel()}


def ulp_bf16(v: torch.Tensor) -> torch.Tensor:
    """One bf16 ulp at each value's magnitude (float32): 2^(floor(log2|v|) - 7); 2^-133 at zero."""
    _, e = torch.frexp(v.float().abs())
    return torch.where(v == 0, torch.full_like(v.float(), 2.0 ** -133), torch.ldexp(torch.ones_like(v.float()), e - 8))


def _shape_error(y: torch.Tensor, want: tuple) -> str | None:
    if tuple(y.shape) != tuple(want) or y.dtype != BF16:
        return f"output {y.dtype} {tuple(y.shape)}, expected bf16 {tuple(want)}"
    return None


def _same(a: torch.Tensor, b: torch.Tensor, what: str, against: str = "the clean run") -> Row:
    if tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
        return Row(what, FAIL, f"{a.dtype} {tuple(a.shape)} != {against}'s {b.dtype} {tuple(b.shape)}")
    n = a.numel()
    nan = int(torch.isnan(a.float()).sum())
    if torch.equal(a.view(torch.int16), b.view(torch.int16)):
        if nan:  # two runs NaN in the same places are bitwise equal and show nothing was honoured
            return Row(what, FAIL, f"bitwise equal, but {nan}/{n} NaN in both runs: equal NaN proves nothing")
        return Row(what, PASS, f"bitwise equal ({n} values)")
    diff = int((a.view(torch.int16) != b.view(torch.int16)).sum())
    return Row(what, FAIL, f"{diff}/{n} values differ from {against}, {nan}/{n} NaN")


def _budget_row(y, ref, name) -> Row:
    bad = _shape_error(y, tuple(ref.shape))
    if bad:
        return Row(name, FAIL, bad)
    nan = int(torch.isnan(y.float()).sum())
    if nan:
        return Row(name, FAIL, f"{nan}/{y.numel()} NaN in the output; {NAN_OWNER}")
    r, c = rel_l2(y, ref), cosine_distance(y, ref)
    ok = r <= KERNEL_REL_L2 and c <= KERNEL_COS_DIST
    return Row(name, PASS if ok else FAIL, f"rel L2 {r:.2e} (budget {KERNEL_REL_L2:g}), cos dist {c:.1e} (budget {KERNEL_COS_DIST:g})")


def _slot_row(y, ref_slot, name, slots: torch.Tensor | None = None, compiled: bool | None = None) -> Row:
    """Kernel vs the per-slot-bf16 reference; ``compiled`` (a GPU run): the rounding flips
    measured, not judged; the interpreter: to the ulp, or within one rounding flip per slot row
    (the machine's BLAS orders the GEMM's sums), on at most 1% of the values."""
    bad = _shape_error(y, tuple(ref_slot.shape))
    if bad:
        return Row(name, FAIL, bad)
    u = ulp_diff_bf16(y, ref_slot)
    compiled = (y.device.type != "cpu") if compiled is None else compiled
    det = f"max {u['max_ulp']} ulp, {u['n_diff']}/{u['n']} values differ" + (f", {u['nan']} NaN" if u["nan"] else "")
    if slots is None:
        ok = u["nan"] == 0 and u["max_ulp"] <= SLOT_ULP_MAX and u["n_diff"] <= SLOT_ULP_FRACTION * u["n"]
        return Row(name, PASS if ok else FAIL, det + f" (budget {SLOT_ULP_MAX} ulp on <= {SLOT_ULP_FRACTION:.0%})")
    bound = ulp_bf16(slots).sum(1) + ulp_bf16(ref_slot)
    diff = (y.float() - ref_slot.float()).abs()
    outside = int((diff > bound).sum())
    if not compiled:
        # the interpreter's float32 GEMM is numpy's (the machine's BLAS), the reference's torch's:
        # their summation orders differ by machine, so a slot row can round to its neighbouring
        # bf16 value (one flip: up to 32k output ulps where the top-k sum cancels). Allowed: values
        # within SLOT_ULP_MAX ulp, or within one rounding flip per slot row, on <= 1% of the values
        flips = int(((diff > SLOT_ULP_MAX * ulp_bf16(ref_slot)) & (diff <= bound)).sum())
        beyond = int((diff > torch.maximum(bound, SLOT_ULP_MAX * ulp_bf16(ref_slot))).sum())
        ok = u["nan"] == 0 and beyond == 0 and u["n_diff"] <= SLOT_ULP_FRACTION * u["n"]
        return Row(name, PASS if ok else FAIL, det + f", {flips} by one slot-row rounding flip, {beyond} beyond it (budget "
                   f"{SLOT_ULP_MAX} ulp or one flip per slot row, on <= {SLOT_ULP_FRACTION:.0%})")
    if u["nan"]:
        return Row(name, FAIL, det)
    # measured, not judged: a compiled GEMM1's flips in the bf16 stage-1 buffer reach stage 2
    # amplified (H200: 1-464 of 7-29 million values outside at 1024/4096 tokens); the budget row judges
    return Row(name, INFO, det + f", {outside} beyond one rounding flip per slot row (compiled: measured, not judged; "
               f"{'within' if u['n_diff'] <= SLOT_FLIP_FRACTION_COMPILED * u['n'] else 'MORE than'} "
               f"{SLOT_FLIP_FRACTION_COMPILED:.0%} differing)")


def _configs_detail(log: list) -> str:
    parts = []
    for c in log:
        cfg = c.get("config", {})
        src = c.get("source", "?") + (f" in {c['json'].split('/')[-1]}" if c.get("json") else "")
        parts.append(f"n{c.get('n')} k{c.get('k')} bm{c.get('block_m')}: {src}: block_n {cfg.get('block_n')} "
                     f"block_k {cfg.get('block_k')} warps {cfg.get('num_warps')}")
    return "; ".join(parts)


# ----------------------------------------------------------------------------- references


class References:
    """The parent's own inputs and references per (shape, tokens, limit, kernel), cached."""

    def __init__(self, device: str = "cpu"):
        self.device = device  # where the child drew its layer (a GPU draws random bytes there)
        self._layers, self._refs = {}, {}

    def layer(self, shape):
        if shape not in self._layers:
            self._layers = {shape: cases.make_layer(shape, device=self.device)}
        return self._layers[shape]

    def gemm(self, job: Job) -> dict:
        key = (job.shape, job.tokens, job.limit, job.component)
        if key not in self._refs:
            pw = self.layer(job.shape)
            x, w, ids, boost = cases.gemm_inputs(job.shape, job.tokens, pw, job.limit)
            ew = ExpertWeights(pw.w13, pw.w13_scale, pw.w2, pw.w2_scale)
            kw = dict(intermediate_pad=pw.intermediate_pad, act_mode=job.component, swiglu_limit=job.limit)
            xr = x
            if job.component == "a4w4":  # the gate's MXFP4 of x (what the kernel reads), MXFP4 before stage 2
                from fp4moe.mx import mxfp4

                xr = mxfp4.dequantize(*cases.mxfp4_act(x)).to(BF16)
                kw |= dict(act_mode="a16w4", stage2_act="mxfp4")
            trace: dict = {}
            dev = pw.w13.device
            xd, wd, idd = xr.to(dev), w.to(dev), ids.to(dev)
            ref = fused_moe_reference(xd, ew, wd, idd, **kw).cpu()
            ref_slot = fused_moe_reference(xd, ew, wd, idd, slot_dtype=BF16, trace=trace, **kw).cpu()
            slots = trace.get("slots")
            self._refs[key] = (dict(pw=pw, x=x, ref=ref, ref_slot=ref_slot, slots=None if slots is None else slots.cpu(),
                                    boost=boost, clamp=_clamp_share(pw, x, job.limit)))
        return self._refs[key]


def _clamp_share(pw, x, limit) -> str:
    if not limit:
        return "no SwiGLU limit"
    g, u = cases.pre_activations(pw, x)

    def pct(t):
        return f"{float((t > limit).float().mean()):.0%} > L, {float((t < -limit).float().mean()):.0%} < -L"
    return f"SwiGLU limit L={limit:g}: gate {pct(g)}; up {pct(u)}"


# ----------------------------------------------------------------------------- judges per kind


def _t(tensors: dict, name: str) -> torch.Tensor:
    """Output ``name``; one sent as its difference from ``y`` (``compute.delta``) is rebuilt,
    every index checked."""
    if name in tensors:
        return tensors[name]
    if f"{name}@idx" in tensors and f"{name}@val" in tensors and "y" in tensors:
        y = tensors["y"]
        idx, val = tensors[f"{name}@idx"].reshape(-1).long(), tensors[f"{name}@val"].reshape(-1)
        if idx.numel() != val.numel() or val.dtype != y.dtype or bool(((idx < 0) | (idx >= y.numel())).any()):
            raise ValueError(f"the child's difference {name!r} does not fit its clean output ({idx.numel()} positions, "
                             f"{val.numel()} {val.dtype} values for {y.numel()} {y.dtype})")
        out = y.clone().reshape(-1)
        out[idx] = val
        return out.reshape(y.shape)
    raise KeyError(f"the child returned no tensor {name!r} (it returned {sorted(tensors)})")


def judge_gemm(job: Job, tensors: dict, meta: dict, refs: References, compiled: bool) -> list[Row]:
    r = refs.gemm(job)
    tag = job.key
    y = _t(tensors, "y")
    rows = [Row(f"{tag}: configs", INFO, _configs_detail(meta.get("configs", [])))]
    b = _budget_row(y, r["ref"], f"{tag}: vs reference (kernel budget)")
    b.detail += f"; {r['clamp']}, input x{r['boost']:g}"
    rows.append(b)
    rows.append(_slot_row(y, r["ref_slot"], f"{tag}: vs per-slot-bf16 reference", r["slots"], compiled))
    if "y2" in tensors or job.layout is None:
        rows.append(_same(_t(tensors, "y2"), y, f"{tag}: bitwise repeat"))
    if r["pw"].intermediate_pad:
        rows.append(_same(_t(tensors, "yu"), y, f"{tag}: pad told == untold (zero pads)", "the told run"))
        rows.append(_same(_t(tensors, "yp"), y, f"{tag}: pad poison (told) == clean"))
    else:
        rows.append(Row(f"{tag}: pad checks", INFO, f"no pad at this shape (I {job.shape.intermediate} is a multiple "
                        f"of align {job.shape.align})"))
    b.detail += "; every wrapper allocation NaN-poisoned"
    return rows


def _stage1_tile(meta: dict, hidden: int) -> int | None:
    """Output columns per stage-1 tile (block_n / 2: the SwiGLU halves N), from the first
    GEMM1 call's config (k == hidden)."""
    for c in meta.get("configs", []):
        bn = c.get("config", {}).get("block_n")
        if c.get("k") == hidden and isinstance(bn, int) and bn >= 2:
            return bn // 2
    return None


def told_pad_row(tag: str, h: torch.Tensor, told: int, tile: int | None) -> Row:
    """The stage-1 buffer (allocations NaN-poisoned) after the call: columns past the tile
    holding the last told column must still be poison (a told pad never computed)."""
    name = f"{tag}: told pad never computed"
    k_note = "; told K (stage 2) leaves no buffer trace: the 'told K pad never read' row judges it"
    if h.dim() < 2:
        return Row(name, FAIL, f"stage-1 buffer of shape {tuple(h.shape)}: not [rows, columns]")
    width = h.shape[-1]
    if width <= told:
        return Row(name, PASS, f"stage-1 buffer {width} wide = the told {told}: no pad column allocated, none computed"
                   + k_note)
    if tile is None:
        return Row(name, FAIL, f"stage-1 buffer {width} wide (told {told}) and no GEMM1 tile width reported")
    end = min(width, -(-told // tile) * tile)
    if end >= width:
        return Row(name, INFO, f"unobservable: the {tile}-column tile holding told column {told - 1} reaches the "
                   f"buffer's end ({width})" + k_note)
    past = h.reshape(-1, width)[:, end:]
    written = int((~torch.isnan(past.float())).sum())
    det = (f"stage-1 buffer {width} wide (told {told}, tile {tile}): columns {end}..{width - 1} "
           f"{'all still poison' if not written else f'written in {written}/{past.numel()} values'}")
    return Row(name, PASS if not written else FAIL, det + (f"; columns {told}..{end - 1} share the last real tile "
                                                          "(not judged)" if end > told else "") + k_note)


def judge_pad(job: Job, tensors: dict, meta: dict, refs: References, compiled: bool) -> list[Row]:
    r = refs.gemm(job)
    tag, y, h = job.key, _t(tensors, "y"), _t(tensors, "h")
    told = job.shape.intermediate
    p = _same(_t(tensors, "yp"), y, f"{tag}: pad honoured (poisoned pad, told) == clean")
    p.detail += f"; stage-1 buffer {h.shape[-1]} wide (told {told})"
    b = _budget_row(y, r["ref"], f"{tag}: vs reference (kernel budget)")
    b.detail += "; every wrapper allocation NaN-poisoned"
    return [p, b, told_pad_row(tag, h, told, _stage1_tile(meta, job.shape.hidden))]


def judge_stage2(job: Job, tensors: dict, meta: dict, refs: References, compiled: bool) -> list[Row]:
    """``told K pad never read``: GEMM2 alone, told K = I, on the gate's input whose pad columns
    are poison (``cases.stage2_inputs``) equals the run with a zero pad bitwise (the same math when
    the pad is not read) and is finite (every allocation poisoned: every value written)."""
    s = job.shape
    i, p = s.intermediate, s.padded
    name = f"{job.key}: told K pad never read"
    y = _t(tensors, "y")
    elem = {"a8w4": f"e4m3 NaN (0x{cases.E4M3_NAN:02X})", "a4w4": f"e2m1 codes 6.0 (0x{cases.E2M1_PAD_POISON:02X})"}
    poison = (f"bf16 NaN in columns {i}..{p - 1}" if job.component == "a16w4" else
              f"{elem.get(job.component, '?')} in columns {i}..{p - 1} and e8m0 NaN (0x{cases.E8M0_NAN:02X}) in "
              f"their scale groups {-(-i // 32)}..{p // 32 - 1}")
    where = f"; stage 2 alone, told K {i} of {p}, input {job.tokens * s.top_k}x{p} ({poison})"
    nan = int(torch.isnan(y.float()).sum())
    if nan:
        return [Row(name, FAIL, f"{nan}/{y.numel()} NaN in the zero-pad run; {NAN_OWNER}{where}")]
    r = _same(_t(tensors, "yp"), y, name, "the zero-pad run")
    r.detail += where + "; every wrapper allocation NaN-poisoned"
    return [r]


def _tails_detail(meta: dict, shape) -> str:
    parts = []
    for c in meta.get("configs", [])[:2]:
        cfg = c.get("config", {})
        bn, bk = cfg.get("block_n"), cfg.get("block_k")
        if isinstance(bn, int) and isinstance(bk, int) and bn and bk:
            parts.append(f"N {c['n']} % block_n {bn} = {c['n'] % bn}, K {c['k']} % block_k {bk} = {c['k'] % bk} "
                         f"({-(-c['k'] // bk)} K blocks)")
    return "; ".join(parts) or "no configs reported"


def judge_tails(job: Job, tensors: dict, meta: dict, refs: References, compiled: bool) -> list[Row]:
    r = refs.gemm(job)
    tag, y = job.key, _t(tensors, "y")
    det = _tails_detail(meta, job.shape)
    rows = [Row(f"{tag}: tiles", INFO, det + "; CDNA4_SCALE not at this shape (it needs K % 256 == 0)")]
    b = _budget_row(y, r["ref"], f"{tag}: vs reference (kernel budget)")
    b.detail += f"; {r['clamp']}"
    rows.append(b)
    b.detail += "; every wrapper allocation NaN-poisoned"
    rows.append(_slot_row(y, r["ref_slot"], f"{tag}: vs per-slot-bf16 reference", r["slots"], compiled))
    return rows


def judge_quant(job: Job, tensors: dict, meta: dict, refs: References, compiled: bool) -> list[Row]:
    from fp4moe.mx import mxfp4, mxfp8

    name = f"{job.key}: vs the gate's OCP MX quant"
    if job.component == "a8w4":
        h, q, qs = _t(tensors, "h"), _t(tensors, "q"), _t(tensors, "qs")
        if q.shape != h.shape or qs.shape[-1] * 32 != h.shape[-1]:
            return [Row(name, FAIL, f"fp8 {tuple(q.shape)} / scales {tuple(qs.shape)} for a stage-1 buffer {tuple(h.shape)}")]
        # the buffer is allocated padded, the told pad is not computed: only the told columns are
        # judged (the pad columns' fp8 bytes keep their allocation poison, as the pad contract allows)
        told = min(job.shape.intermediate, h.shape[-1])
        if told % 32:
            return [Row(name, FAIL, f"told width {told} is not a whole number of 32-wide MX blocks")]
        got_all = mxfp8.dequantize(q.view(torch.float8_e4m3fn), qs)
        pad_nan = int(torch.isnan(got_all[..., told:]).sum())
        got, hh, qq = got_all[..., :told], h[..., :told].float(), q[..., :told]
        bad = int(torch.isnan(got).sum())
        e = rel_l2(got, hh) if not bad else float("nan")
        wq, ws = mxfp8.quantize(hh)
        same = float((wq.view(torch.uint8) == qq).float().mean())
        ok = not bad and e <= MXFP8_REL_L2
        pad = (f"; pad columns {told}..{h.shape[-1] - 1}: {pad_nan}/{got_all[..., told:].numel()} left unwritten (told pad, "
               "not computed)") if h.shape[-1] > told else ""
        return [Row(name, PASS if ok else FAIL, f"told columns 0..{told - 1} dequantized vs the bf16 stage-1 buffer: rel L2 "
                    f"{e:.2e} (bound 2^-4, e4m3's rounding), {bad} NaN; {same:.1%} of their fp8 bytes equal the gate's "
                    f"MXFP8 of that buffer{pad}")]
    x = refs.gemm(Job(Kind.GEMM, "a16w4", "", job.shape, None, job.tokens, job.limit))["x"]
    q, qs = _t(tensors, "q"), _t(tensors, "qs")
    wq, ws = mxfp4.quantize(x.float(), "round_up")
    if q.shape != wq.shape or qs.shape != ws.shape:
        return [Row(name, FAIL, f"packed {tuple(q.shape)} / scales {tuple(qs.shape)}, expected {tuple(wq.shape)} / {tuple(ws.shape)}")]
    ns = int((qs != ws).sum())
    got, rne = mxfp4.dequantize(q, qs).double(), mxfp4.dequantize(wq, ws).double()
    xf = x.double()
    farther = int(((got - xf).abs() > (rne - xf).abs()).sum())  # not a nearest value: wrong
    ties = int((got != rne).sum()) - farther  # as near as RNE's: the other side of an exact tie
    ok = not ns and not farther
    return [Row(name, PASS if ok else FAIL, f"{ns}/{qs.numel()} scales differ from fp4moe.mx.mxfp4.quantize(x, round_up); "
                f"{farther}/{q.numel() * 2} elements not a nearest e2m1 value; {ties} exact ties rounded away from zero "
                "(aiter's e2m1 rule; OCP round-to-nearest-even rounds them to the even code)")]


def judge_reduce(job: Job, tensors: dict, meta: dict, refs: References, compiled: bool) -> list[Row]:
    g, k, n = job.reduce
    x, indx = cases.reduce_inputs(g, k, n)
    want = cases.reduce_want(x, indx)
    got = _t(tensors, "out")
    r = _same(got.reshape(want.shape) if got.numel() == want.numel() else got, want, f"{job.key}: vs exact sum (bitwise)",
              "the exact sum")
    r.detail += (f"; random values, 8-bit significands over 2^{cases.REDUCE_EXP_MIN}..2^{cases.REDUCE_EXP_MAX} "
                 "(float32 sums exact); the gate's output buffer NaN-poisoned")
    return [r]


def _routing_topk(tensors: dict, tokens: int, k: int, experts: int) -> tuple[list[str], torch.Tensor, torch.Tensor]:
    """(errors, ids [T, k], weights [T, k]) from routing()'s outputs, every index checked first."""
    errs = []
    n = tokens * k
    gs, hist = _t(tensors, "gate_scal").reshape(-1), _t(tensors, "expt_hist").reshape(-1).long()
    gather, scatter = _t(tensors, "gather").reshape(-1).long(), _t(tensors, "scatter").reshape(-1).long()
    for nm, t, want in (("gate_scal", gs, n), ("gather", gather, n), ("scatter", scatter, n)):
        if t.numel() != want:
            errs.append(f"{nm} has {t.numel()} entries, expected {want}")
    if hist.numel() < experts or bool((hist[:experts] < 0).any()) or int(hist[:experts].sum()) != n:
        errs.append(f"expt_hist ({hist.numel()} entries) is not a histogram of {n} slots over {experts} experts")
    if errs:
        return errs, None, None
    for nm, t in (("gather", gather), ("scatter", scatter)):
        if bool(((t < 0) | (t >= n)).any()):
            errs.append(f"{nm} holds indices outside [0, {n}) (e.g. {int(t[(t < 0) | (t >= n)][0])})")
    if errs:
        return errs, None, None
    if not torch.equal(gather[scatter], torch.arange(n)):
        errs.append("gather/scatter are not inverse permutations")
    expert_of_sorted = torch.repeat_interleave(torch.arange(experts), hist[:experts])
    pos = scatter.view(tokens, k)
    return errs, expert_of_sorted[pos], gs.double()[pos]


def _weights_error(rs, logits, ids, w) -> tuple[float, float]:
    from fp4moe.reference.routing import topk_weights

    want = topk_weights(logits, ids, rs.score_mode, renormalize=rs.renormalize, scaling=rs.scaling)
    err = (w - want).abs()
    tol = ROUTING_W_ATOL if rs.score_mode.value == "softmax" else ROUTING_W_RTOL_SCORED * want.abs().clamp_min(1e-3)
    return float(err.max()), float((err - tol).max())


def judge_routing(job: Job, tensors: dict, meta: dict, refs: References, compiled: bool) -> list[Row]:
    from fp4moe.reference.routing import selection_keys, valid_topk
    from fp4moe.targets.aiter.kernels.drive import routing_tables

    e, k, t, rs = job.extra["experts"], job.extra["top_k"], job.tokens, job.routing
    logits, bias = cases.routing_inputs(job)
    keys = selection_keys(logits, rs.score_mode, bias)
    name = f"{job.key}: vs the reference top-k"
    errs, ids, w = _routing_topk(tensors, t, k, e)
    rows = []
    if ids is not None:
        ok = valid_topk(keys, ids)
        if not bool(ok.all()):
            bad = int((~ok).nonzero()[0])
            want = keys[bad].argsort(descending=True, stable=True)[:k].sort().values.tolist()
            errs.append(f"{t - int(ok.sum())}/{t} tokens got a wrong expert set (token {bad}: {sorted(ids[bad].tolist())}, "
                        f"a top-k is {want})")
        else:
            err, over = _weights_error(rs, logits, ids, w)
            if over > 0:
                errs.append(f"max weight error {err:.1e} (bound {'%g' % ROUTING_W_ATOL if rs.score_mode.value == 'softmax' else '%g relative' % ROUTING_W_RTOL_SCORED})")
            sums = w.sum(-1)
            det_w = f"max weight error {err:.1e}, weights sum to {float(sums.min()):.6g}..{float(sums.max()):.6g}"
        bm = int(_t(tensors, "block_m").reshape(-1)[0])
        if bm != cases.block_m_for(t, k, e):
            errs.append(f"block_m {bm} != the heuristic's {cases.block_m_for(t, k, e)}")
        elif bool(ok.all()):
            mine = routing_tables(ids, e, bm)
            for f in ("token_offs_raw", "token_offs_pad", "block_pid_map"):
                a, b = _t(tensors, f).reshape(-1).long(), mine[f].long()
                if a.numel() < b.numel() or not torch.equal(a[: b.numel()], b):
                    errs.append(f"expt_data.{f} differs from the gate's own (first {b.numel()} entries)")
    if errs:
        rows.append(Row(name, FAIL, "; ".join(errs), meta.get("seconds", 0.0)))
    else:
        rows.append(Row(name, PASS, f"{t}/{t} expert sets a valid top-k ({_input_note(rs)}), {det_w}, "
                        f"hist/offsets/block_pid_map/permutations consistent, block_m {bm}", meta.get("seconds", 0.0)))
    if job.extra.get("topk_stage", True):
        rows.append(_topk_stage_row(job, tensors, keys, logits))
    return rows


def _input_note(rs) -> str:
    return ("logits with negative values, the boundary crossing zero, exact ties at and inside the top-k"
            + (", a correction bias moving keys across zero" if rs.bias else ""))


def _topk_stage_row(job: Job, tensors: dict, keys, logits) -> Row:
    from fp4moe.reference.routing import valid_topk

    e, k, t, rs = job.extra["experts"], job.extra["top_k"], job.tokens, job.routing
    name = f"{job.key}: topk stage alone"
    ids, vals = _t(tensors, "topk_ids").long(), _t(tensors, "topk_vals").double()
    if tuple(ids.shape) != (t, k) or tuple(vals.shape) != (t, k):
        return Row(name, FAIL, f"topk() returned ids {tuple(ids.shape)}, values {tuple(vals.shape)}; expected ({t}, {k})")
    if bool(((ids < 0) | (ids >= e)).any()):
        return Row(name, FAIL, f"topk() returned expert ids outside [0, {e}) (e.g. {int(ids[(ids < 0) | (ids >= e)][0])})")
    ok = valid_topk(keys, ids)
    if not bool(ok.all()):
        bad = int((~ok).nonzero()[0])
        return Row(name, FAIL, f"{t - int(ok.sum())}/{t} tokens got a wrong expert set from topk() (token {bad}: "
                   f"{sorted(ids[bad].tolist())})")
    err, over = _weights_error(rs, logits, ids, vals)
    if over > 0:
        return Row(name, FAIL, f"the expert sets are valid; max weight error {err:.1e} from topk()")
    return Row(name, PASS, f"{t}/{t} expert sets valid from topk(), max weight error {err:.1e}")


JUDGES = {Kind.GEMM: judge_gemm, Kind.PAD: judge_pad, Kind.TAILS: judge_tails, Kind.QUANT: judge_quant,
          Kind.REDUCE: judge_reduce, Kind.ROUTING: judge_routing, Kind.STAGE2: judge_stage2}


def _one_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"


def judge_job(job: Job, tensors: dict | None, meta: dict, refs: References, *, device: str, compiled: bool) -> list[Row]:
    """The rows of one job; never raises: what cannot be computed from aiter's outputs is a FAIL
    row of this job (a call that raised: not judged, or FAIL for routing, as a finding; what the
    tree lacks: ``absent``)."""
    if meta.get("absent"):
        return [Row(f"{job.key}: absent", ABSENT, str(meta["absent"])[:300])]
    if meta.get("error"):
        if job.kind is Kind.QUANT and device == "cpu":
            return [Row(f"{job.key}", INFO, f"n/a on the CPU: the interpreter cannot run it ({meta['error'][:200]}); a GPU row "
                        "(lab/h200_aiter_kernels.sh)")]
        res = FAIL if job.kind is Kind.ROUTING else NOT_JUDGED
        what = "routing() raised" if job.kind is Kind.ROUTING else "the call raised"
        return [Row(f"{job.key}: {'vs the reference top-k' if job.kind is Kind.ROUTING else 'not judged'}", res,
                    f"{what}: {meta['error']}")]
    if tensors is None:
        return [Row(f"{job.key}: not judged", NOT_JUDGED, "the child returned no outputs for this job")]
    try:
        rows = JUDGES[job.kind](job, tensors, meta, refs, compiled)
    except Exception as e:  # noqa: BLE001 -- a wrong output (an index, a shape) is a failure of this job
        return [Row(f"{job.key}: outputs", FAIL, f"aiter's outputs could not be judged ({_one_line(e)})")]
    if rows and meta.get("seconds") and not rows[0].seconds:
        rows[0].seconds = float(meta["seconds"])
    return rows


def shims_row(res: dict | None) -> list[Row]:
    if res is None:
        return []
    try:
        ok = all(v == 0 for v in res["on"].values()) and res["e4m3 decode mismatches"] == 0
        det = (f"{res['n_values']} values + 256 e4m3 codes; wrong bit patterns with the shim: {res['on']}, "
               f"decode {res['e4m3 decode mismatches']}; without it: {res['off']}")
    except (KeyError, TypeError, AttributeError) as e:
        return [Row("shims: interpreter casts == RNE/saturating rounding", FAIL, f"self-test result unreadable ({_one_line(e)})")]
    return [Row("shims: interpreter casts == RNE/saturating rounding", PASS if ok else FAIL, det)]


def cdna4_notes(rows: list[Row]) -> None:
    """Name the scale layout whose pad is read: a cdna4 pad-poison FAIL where plain passes."""
    plain_ok = {r.check.replace(" plain ", " cdna4 ") for r in rows
                if r.check.endswith("pad poison (told) == clean") and " plain " in r.check and r.result == PASS}
    for r in rows:
        if r.check in plain_ok and r.result == FAIL:
            r.detail += "; the plain scale layout equals clean: the CDNA4_SCALE scale load reads the told pad"


def judge_all(jobs: list[Job], outputs: dict, metas: list[dict], *, device: str = "cpu",
              compiled: bool = False) -> tuple[list[Row], dict]:
    """(rows, saved) for every job: ``outputs[i]``: job i's tensors (None: none returned);
    ``metas[i]``: its meta from the record. ``saved``: the clean outputs (and routing ids and
    weights) per row label, for ``--base-src`` comparisons."""
    refs, rows, saved = References("cpu" if device == "cpu" else device), [], {}
    for i, job in enumerate(jobs):
        meta = metas[i] if i < len(metas) and isinstance(metas[i], dict) else {}
        if meta.get("skipped"):
            continue
        if meta.get("key") not in (None, job.key):
            rows.append(Row(f"{job.key}: not judged", NOT_JUDGED, f"the child's job {i} is {str(meta.get('key'))[:80]!r}, "
                            "not this one (plans differ)"))
            continue
        got = judge_job(job, outputs.get(i), meta, refs, device=device, compiled=compiled)
        if meta.get("where"):  # a FAIL names the tree's file:line of the function the job called
            for r in got:
                if r.result == FAIL and meta["where"] not in r.detail:
                    r.detail += f" [aiter {meta['where']}]"
        rows += got
        _save(job, outputs.get(i), saved)
    cdna4_notes(rows)
    return rows, saved


def _save(job: Job, tensors: dict | None, saved: dict) -> None:
    if not tensors:
        return
    if job.kind in (Kind.GEMM, Kind.PAD, Kind.TAILS) and "y" in tensors:
        saved[job.key] = tensors["y"]
    elif job.kind is Kind.ROUTING:
        try:
            _, ids, w = _routing_topk(tensors, job.tokens, job.extra["top_k"], job.extra["experts"])
        except Exception:  # noqa: BLE001 -- judged above; nothing to compare
            return
        if ids is not None:
            order = torch.argsort(ids, -1)
            saved[job.key] = torch.stack((torch.gather(ids, 1, order).double(), torch.gather(w, 1, order)))


def not_judged_rows(unjudged: dict) -> list[Row]:
    """One row per component the loader could not load or call (``loader.load_aiter_moe(strict=False)``):
    ``absent`` where the tree lacks a module, symbol or keyword, else ``not judged``."""
    return [Row(f"{comp}: absent", ABSENT, str(why)[:300]) if any(m in str(why) for m in ABSENT_MARKS)
            else Row(f"{comp}: not judged", NOT_JUDGED, str(why)[:300]) for comp, why in unjudged.items()]
