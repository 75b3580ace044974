"""What the kernel checks run: the shapes, the settings and the inputs, one plan for both sides.

The child (``fp4moe.targets.aiter.child.kernel_checks``) runs each :class:`Job` of :func:`plan`
through aiter's kernels and returns the outputs; the parent (``kernels.checks``) builds the same
plan and the same inputs (every input here is a seeded function of the job) and judges. Nothing
here imports aiter or triton.

- shapes: :data:`TINY` (hidden 512: two K blocks of 256 in GEMM1, both scale layouts; I 128
  padded to 256), :data:`TAILS` (hidden 352, I 96, block_m 32: stage-1 width 192 and stage-2
  width 352 do not divide the 128-wide output tile, K 352 and 96 do not divide block_k 256;
  the plain scale layout only: CDNA4_SCALE needs K % 256 == 0), the DeepSeek-V4 TP8 shapes (GPU);
- stage 2 alone (:func:`stage2_inputs`): GEMM2 told K on the gate's own input at :data:`PAD`'s
  shape and token count (block_m 16; a GPU: each padded DeepSeek-V4 shape at 1 token), its pad
  columns zero or poison (the told K pad never read);
- settings: the model's (``fp4moe.model.catalogue``): SwiGLU limit, scoring function,
  renormalisation, routed scaling factor, correction bias (:class:`RoutingSettings`), and the
  defaults of aiter's ``routing()`` (softmax top-k) beside them;
- inputs that tell: GEMM inputs scaled by a power of two (exact in bf16) until the gate and up
  pre-activations pass the clamp on both sides; routing logits with negative values, the top-k
  boundary crossing zero, exact ties at the boundary and inside the top-k; reduce inputs random
  at top-6 and top-8 whose float32 partial sums are exact (so any float32 order is bitwise
  the exact sum, and a bf16 accumulator is not).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import torch

from fp4moe.model import catalogue
from fp4moe.model.catalogue import ScoreMode
from fp4moe.reference import weight_path
from fp4moe.reference.inputs import make_raw_layer

BF16 = torch.bfloat16
KERNELS = ("a16w4", "a8w4")
#: wrappers driven for their told pad alone (the block_m 16 pad job and stage 2 alone, at PAD's shape):
#: a4w4 takes MXFP4 activations, which the gate quantizes itself (``fp4moe.mx.mxfp4``, aiter's
#: activation scale rule); its GEMM/tails rows are not judged here
TOLD_PAD_KERNELS = ("a4w4",)
SCALE_LAYOUTS = (None, "CDNA4_SCALE")
#: the model whose settings the CPU checks run at (DeepSeek-V4-Flash: 256 experts, top-k 6)
CPU_MODEL = "dsv4-flash"


@dataclass(frozen=True)
class Shape:
    experts: int
    hidden: int
    intermediate: int
    align: int
    tokens: int
    top_k: int

    @property
    def padded(self) -> int:
        return weight_path.PadPlan(self.intermediate, self.align).padded

    def label(self, tokens: int | None = None) -> str:
        return (f"E{self.experts} H{self.hidden} I{self.intermediate}->{self.padded} "
                f"T{self.tokens if tokens is None else tokens} k{self.top_k}")


TINY = Shape(experts=8, hidden=512, intermediate=128, align=256, tokens=4, top_k=2)
TAILS = Shape(experts=8, hidden=352, intermediate=96, align=32, tokens=68, top_k=2)
#: the pad-honoured probe's shape (its token counts are the block_m switch's): hidden 256, since
#: only the pad matters there and the interpreter's time grows with H
PAD = Shape(experts=8, hidden=256, intermediate=128, align=256, tokens=4, top_k=2)
#: tokens per routing call on the CPU: 17, above the 16 where routing() leaves its fused sort
#: (sort_tokens_fused, judged at 4 tokens) for sort_tokens
CPU_ROUTING_TOKENS = 17
#: routing with aiter's defaults (softmax top-k) at DeepSeek-V4's expert counts, top-k 6 and 8
DEFAULT_ROUTING_CASES = ((256, 6), (384, 8))
DSV4_MODELS = ("dsv4-pro", "dsv4-flash")
DSV4_TP, DSV4_ALIGN = 8, 256
DSV4_TOKENS = (1, 64, 1024, 4096)
GPU_ROUTING_TOKENS = (8, 1024)
#: e8m0 bytes of the GPU shapes' random scales: 2^-9 .. 2^-3 (finite; never 0xFF)
SCALE_BYTE_RANGE = (118, 124)
#: reduce_grouped alone at DeepSeek-V4's top-6 and at top-8: (groups, k, N)
REDUCE_CASES = ((5, 6, 256), (3, 8, 320))
#: reduce inputs: |x| in [2^REDUCE_EXP_MIN, 2^REDUCE_EXP_MAX) with bf16's 8 significant bits,
#: so every value is a multiple of 2^(REDUCE_EXP_MIN - 7) below 2^REDUCE_EXP_MAX: a sum of 8
#: needs at most REDUCE_EXP_MAX - REDUCE_EXP_MIN + 7 + 3 = 22 <= 24 bits (float32 exact)
REDUCE_EXP_MIN, REDUCE_EXP_MAX = -10, 2
#: the share of gate / up pre-activations that must lie past the clamp on each side
CLAMP_SHARE = 0.05


class Rule(str, enum.Enum):
    """Which routing settings a routing job runs with."""

    DEFAULTS = "defaults"  # aiter's routing() defaults: softmax over the selected logits
    MODEL = "model"  # the model's scoring, renormalisation, scaling and correction bias


@dataclass(frozen=True)
class RoutingSettings:
    score_mode: ScoreMode
    renormalize: bool
    scaling: float
    bias: bool

    @property
    def label(self) -> str:
        if self.score_mode is ScoreMode.SOFTMAX and not self.bias and self.scaling == 1.0:
            return "softmax"
        return (f"{self.score_mode.value}{' renorm' if self.renormalize else ''} x{self.scaling:g}"
                f"{' +bias' if self.bias else ''}")

    def kwargs(self) -> dict:
        """The ``routing()`` keywords (none for the defaults)."""
        if self.score_mode is ScoreMode.SOFTMAX and not self.bias and self.scaling == 1.0:
            return {}
        return dict(score_mode=self.score_mode.value, renorm=self.renormalize, routed_scaling_factor=self.scaling)


DEFAULT_ROUTING = RoutingSettings(ScoreMode.SOFTMAX, True, 1.0, False)


def model_routing(model: str) -> RoutingSettings:
    """The model's routing settings; ValueError naming the setting when one is unknown."""
    st = catalogue.get_model(model).settings
    for name in ("scoring_func", "renormalize", "routed_scaling_factor", "correction_bias"):
        if st.value(name) is None:
            raise ValueError(f"{model}: routing setting {name} is unknown ({st.routing[name].unknown})")
    return RoutingSettings(st.score_mode, st.value("renormalize"), st.value("routed_scaling_factor"),
                           st.value("correction_bias"))


def model_swiglu_limit(model: str) -> float | None:
    return catalogue.get_model(model).settings.value("swiglu_limit")


class Kind(str, enum.Enum):
    GEMM = "gemm"  # the per-layout rows at one shape
    PAD = "pad"  # pad honoured on both sides of the first block_m switch
    TAILS = "tails"  # N and K tails
    REDUCE = "reduce"
    ROUTING = "routing"
    QUANT = "quant"  # the fused MXFP8 output quant and the FP4 activation quant (GPU)
    STAGE2 = "stage2"  # GEMM2 alone on a gate-made input with a poisoned pad: the told K pad never read


@dataclass(frozen=True)
class Job:
    kind: Kind
    component: str  # a16w4 / a8w4 / a4w4 / reduce / routing: what a crash or a raise is charged to
    key: str  # the rows' label
    shape: Shape | None = None
    layout: str | None = None
    tokens: int = 0
    limit: float | None = None
    rule: Rule | None = None
    routing: RoutingSettings | None = None
    reduce: tuple = ()
    extra: dict = field(default_factory=dict, compare=False)


def layout_name(swizzle: str | None) -> str:
    return "cdna4" if swizzle == "CDNA4_SCALE" else "plain"


def block_m_for(tokens: int, top_k: int, experts: int) -> int:
    """The block_m aiter's ``routing()`` derives for this batch (routing.py, ``routing``)."""
    per_expert = max(1, tokens * top_k // experts)
    return max(16, min(1 << (per_expert - 1).bit_length(), 128))


def first_block_m_switch(top_k: int, experts: int) -> int:
    t = 2
    while block_m_for(t, top_k, experts) == block_m_for(t - 1, top_k, experts):
        t += 1
    return t


def plan_from_args(args) -> list[Job]:
    """The plan of a kernel-child command line (``shapes``, ``device``, ``quick``,
    ``routing_cases``, ``only`` as the child parses them): the child and the judge build it alike."""
    only = tuple(c for c in (args.only or "").split(",") if c) or None
    return plan(shapes=args.shapes, device=args.device, quick=args.quick,
                routing_cases=parse_routing_cases(args.routing_cases), only=only)


def plan(*, shapes: str = "tiny", device: str = "cpu", quick: bool = False, routing_cases=None,
         kernels=KERNELS, model: str = CPU_MODEL, only: tuple | None = None) -> list[Job]:
    """Every job, in order (the child runs them in this order, the parent judges them so);
    ``only``: job kinds or components to keep (tests)."""
    jobs = _plan(shapes, device, quick, routing_cases, kernels, model)
    return jobs if not only else [j for j in jobs if j.kind.value in only or j.component in only]


def _plan(shapes, device, quick, routing_cases, kernels, model) -> list[Job]:
    limit = model_swiglu_limit(model)
    jobs: list[Job] = []
    layouts = (None,) if quick else SCALE_LAYOUTS
    if shapes == "tiny":
        gemm_shapes = [(TINY, (TINY.tokens,))]
    else:
        gemm_shapes = dsv4_shapes()
    for shape, token_counts in gemm_shapes:
        for kernel in kernels:
            for t in token_counts:
                # above block_m 16 the pad rows are the "pad honoured" probe: named so (the
                # registry's patterns for pad-honoured-only-at-block-m-16 read the block_m)
                bm = block_m_for(t, shape.top_k, shape.experts)
                bm_tag = "" if bm == 16 else f" (block_m {bm})"
                for swz in layouts:
                    tag = f"{kernel} {layout_name(swz)} {shape.label(t)}{bm_tag}"
                    jobs.append(Job(Kind.GEMM, kernel, tag, shape, swz, t, limit))
            pshape = PAD if shapes == "tiny" else shape
            if not quick and pshape.padded != pshape.intermediate:
                t_sw = first_block_m_switch(pshape.top_k, pshape.experts)
                for t in (t_sw - 1, t_sw):
                    bm = block_m_for(t, pshape.top_k, pshape.experts)
                    jobs.append(Job(Kind.PAD, kernel, f"{kernel} plain {pshape.label(t)} (block_m {bm})", pshape, None, t,
                                    limit))
                # stage 2 alone, told K: at the shape's own token count (block_m 16, where the wrappers
                # honour the told pad; above it the pad rows show the pad-honoured defect)
                bm = block_m_for(pshape.tokens, pshape.top_k, pshape.experts)
                jobs.append(Job(Kind.STAGE2, kernel, f"{kernel} plain {pshape.label()}{'' if bm == 16 else f' (block_m {bm})'}"
                                " stage 2 alone", pshape, None, pshape.tokens, limit))
    if shapes == "tiny" and not quick:
        t_sw = first_block_m_switch(PAD.top_k, PAD.experts)
        for kernel in TOLD_PAD_KERNELS:  # block_m 16 only: where the wrappers honour a told pad
            jobs.append(Job(Kind.PAD, kernel, f"{kernel} plain {PAD.label(t_sw - 1)} (block_m 16)", PAD, None, t_sw - 1,
                            limit))
            jobs.append(Job(Kind.STAGE2, kernel, f"{kernel} plain {PAD.label()} stage 2 alone", PAD, None, PAD.tokens,
                            limit))
        for kernel in kernels:
            bm = block_m_for(TAILS.tokens, TAILS.top_k, TAILS.experts)
            jobs.append(Job(Kind.TAILS, kernel, f"{kernel} plain {TAILS.label()} (block_m {bm}): N and K tails", TAILS,
                            None, TAILS.tokens, limit))
    if not quick:
        jobs.append(Job(Kind.QUANT, "a8w4", f"a8w4 fused MXFP8 output quant {TINY.label()}", TINY, None, TINY.tokens,
                        limit))
        jobs.append(Job(Kind.QUANT, "quant", f"FP4 activation quant (downcast_to_mxfp e2m1) {TINY.label()}", TINY,
                        None, TINY.tokens, limit))
    for g, k, n in REDUCE_CASES:
        jobs.append(Job(Kind.REDUCE, "reduce", f"reduce_grouped G{g} k{k} N{n}", reduce=(g, k, n)))
    jobs += routing_jobs(shapes, device, quick, routing_cases)
    return jobs


def routing_jobs(shapes: str, device: str, quick: bool, routing_cases) -> list[Job]:
    out = []
    tokens = (CPU_ROUTING_TOKENS,) if shapes == "tiny" else GPU_ROUTING_TOKENS
    flash = model_routing("dsv4-flash")

    def add(e, k, t, rule, rs):
        # the top-k stage alone: at E8 and for the defaults at 256 experts (where a K < K_PAD mask
        # broke before); not repeated at the other 17-token cases (the interpreter's time)
        stage = e <= 8 or (rule is Rule.DEFAULTS and e == 256) or device != "cpu"
        out.append(Job(Kind.ROUTING, "routing", f"routing {rs.label} E{e} k{k} T{t}", tokens=t, rule=rule, routing=rs,
                       extra={"experts": e, "top_k": k, "topk_stage": stage}))

    add(TINY.experts, TINY.top_k, TINY.tokens, Rule.DEFAULTS, DEFAULT_ROUTING)  # the fused sort
    add(TINY.experts, 6 if TINY.experts >= 6 else TINY.top_k, TINY.tokens, Rule.MODEL, flash)
    cases = DEFAULT_ROUTING_CASES if routing_cases is None else routing_cases
    if quick and routing_cases is None:
        cases = ()
    for e, k in cases:
        for t in tokens:
            add(e, k, t, Rule.DEFAULTS, DEFAULT_ROUTING)
    if not (quick and routing_cases is None):
        for m in DSV4_MODELS:
            spec = catalogue.get_model(m)
            for t in tokens:
                add(spec.routed_experts, spec.top_k, t, Rule.MODEL, model_routing(m))
    return out


def dsv4_shapes() -> list[tuple[Shape, tuple[int, ...]]]:
    """(shape, token counts) per DeepSeek-V4 model at TP8 (``fp4moe.model.catalogue``)."""
    out = []
    for m in DSV4_MODELS:
        pc = catalogue.parallel_config(m, DSV4_TP, 1)
        spec = pc.model
        out.append((Shape(experts=spec.routed_experts, hidden=spec.hidden, intermediate=pc.intermediate_per_partition,
                          align=DSV4_ALIGN, tokens=DSV4_TOKENS[0], top_k=spec.top_k), DSV4_TOKENS))
    return out


# ----------------------------------------------------------------------------------- inputs


def make_layer(shape: Shape, seed: int = 0, device="cpu"):
    """The padded, unshuffled layer. CPU: quantized seeded Gaussian weights. GPU (DeepSeek-V4
    sizes): seeded random FP4 bytes and e8m0 scales in SCALE_BYTE_RANGE, drawn on the device."""
    dev = torch.device(device)
    if dev.type == "cpu":
        raw = make_raw_layer(experts=shape.experts, hidden=shape.hidden, intermediate=shape.intermediate, seed=seed)
        return weight_path.process_fp4_moe_weights(*raw.tensors(), align=shape.align, shuffle=False)
    g = torch.Generator(device=dev).manual_seed(seed)
    e, h, i = shape.experts, shape.hidden, shape.intermediate
    lo, hi = SCALE_BYTE_RANGE

    def fp4(*sh):
        return torch.randint(0, 256, sh, dtype=torch.uint8, generator=g, device=dev)

    def sc(*sh):
        return torch.randint(lo, hi + 1, sh, dtype=torch.uint8, generator=g, device=dev)

    return weight_path.process_fp4_moe_weights(fp4(e, 2 * i, h // 2), sc(e, 2 * i, h // 32), fp4(e, h, i // 2),
                                               sc(e, h, i // 32), align=shape.align, shuffle=False)


def tieproof_logits(tokens: int, experts: int, seed: int) -> torch.Tensor:
    """float32 [T, E]: each row a random permutation of (j - E/2)/64: pairwise distinct and
    exact, so the top-k set has no ties and every correct top-k agrees."""
    g = torch.Generator().manual_seed(seed)
    rows = torch.stack([torch.randperm(experts, generator=g) for _ in range(tokens)]).float()
    return (rows - experts / 2) / 64


def exact_topk(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights float64 [T, k], ids int64 [T, k]), slots sorted by expert id: float64 top-k,
    softmax over the selected logits."""
    top = torch.topk(logits.double(), k, dim=-1)
    ids, order = torch.sort(top.indices, dim=-1)
    w = torch.gather(torch.softmax(top.values, dim=-1), 1, order)
    return w, ids


#: the pre-activations the clamp share is measured on: the first tokens and experts (bounded
#: work at DeepSeek-V4 sizes: a full [T, E, 2P, H] product would not fit)
CLAMP_PROBE_TOKENS, CLAMP_PROBE_EXPERTS = 64, 8


def pre_activations(pw, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(gate, up) pre-activations float32 [t, e, I] of the first CLAMP_PROBE tokens and experts."""
    from fp4moe.mx import mxfp4

    p, i = pw.padded_intermediate, pw.intermediate
    e = min(CLAMP_PROBE_EXPERTS, pw.w13.shape[0])
    w = mxfp4.dequantize(pw.w13[:e], pw.w13_scale[:e]).float()  # [e, 2P, H]
    pre = torch.einsum("th,enh->ten", x[:CLAMP_PROBE_TOKENS].float().to(w.device), w)
    return pre[..., :i], pre[..., p:p + i]


def clamp_boost(pw, x: torch.Tensor, limit: float | None) -> float:
    """The smallest power of two b (1..2^12) such that with ``b * x`` at least CLAMP_SHARE of
    the gate and of the up pre-activations lie above ``limit`` and as many below ``-limit``."""
    if not limit:
        return 1.0
    gate, up = pre_activations(pw, x)
    for e in range(13):
        b = float(2 ** e)
        if all(float(((s * b) > limit).float().mean()) >= CLAMP_SHARE and float(((s * b) < -limit).float().mean())
               >= CLAMP_SHARE for s in (gate, up)):
            return b
    return float(2 ** 12)


def gemm_inputs(shape: Shape, tokens: int, pw, limit: float | None, seed: int = 7):
    """(x bf16 [T, H], weights float32 [T, k], ids int64 [T, k], boost): tie-proof routing; x
    scaled by :func:`clamp_boost` (a power of two: exact) so the SwiGLU clamp bites both ways."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn((tokens, shape.hidden), generator=g).to(BF16)
    w, ids = exact_topk(tieproof_logits(tokens, shape.experts, seed), shape.top_k)
    b = clamp_boost(pw, x, limit)
    return (x.float() * b).to(BF16), w.float(), ids, b


#: the stage-2 probe's pad poison on the a8w4 path: an e4m3 NaN byte per pad element, an e8m0 NaN
#: byte per pad scale group (a16w4: bf16 NaN). a4w4 (e2m1 has no NaN): the pad's FP4 codes 6.0
#: (0x77: both nibbles) under e8m0 NaN scales, so a read of the pad is NaN whichever operand the
#: kernel upscales first (a NaN scale alone would be, a nonzero code also on a scale that ignored it)
E4M3_NAN, E8M0_NAN, E2M1_PAD_POISON = 0x7F, 0xFF, 0x77


def mxfp4_act(h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The gate's MXFP4 of a16 activations for a4w4 (packed e2m1 [.., K/2], e8m0 [.., K/32]):
    ``fp4moe.mx.mxfp4`` with aiter's activation scale rule (``mxfp8.ACT_SCALE_MODE``)."""
    from fp4moe.mx import mxfp4, mxfp8

    return mxfp4.quantize(h, mxfp8.ACT_SCALE_MODE)


def stage2_inputs(job: Job, seed: int = 11) -> tuple:
    """(clean, poisoned) stage-2 inputs of a STAGE2 job: [T*k, P] rows of seeded Gaussian values in
    the told columns [0, I), the pad columns [I, P) zero (clean) or poison (poisoned). a16w4: bf16,
    the pad NaN; a8w4: (e4m3 [T*k, P], e8m0 [T*k, P/32]), the gate's MXFP8 of the bf16 rows (aiter's
    activation rule, ``fp4moe.mx.mxfp8.ACT_SCALE_MODE``), the pad elements ``E4M3_NAN`` and the scale
    groups wholly in the pad ``E8M0_NAN`` (a read of either is NaN); a4w4: (e2m1 packed [T*k, P/2], e8m0
    [T*k, P/32]) by :func:`mxfp4_act`, the pad codes ``E2M1_PAD_POISON`` under ``E8M0_NAN`` scales."""
    from fp4moe.mx import mxfp8

    s = job.shape
    i, p = s.intermediate, s.padded
    g = torch.Generator().manual_seed(seed)
    h = torch.randn((job.tokens * s.top_k, p), generator=g).to(BF16)
    h[:, i:] = 0
    if job.component == "a16w4":
        bad = h.clone()
        bad[:, i:] = float("nan")
        return h, bad
    if job.component == "a4w4":
        q, sc = mxfp4_act(h)
        bq, bs = q.clone(), sc.clone()
        bq[:, i // 2:] = E2M1_PAD_POISON
        bs[:, -(-i // 32):] = E8M0_NAN
        return (q, sc), (bq, bs)
    q, sc = mxfp8.quantize(h, mxfp8.ACT_SCALE_MODE)
    bq, bs = q.clone(), sc.clone()
    bq.view(torch.uint8)[:, i:] = E4M3_NAN
    bs[:, -(-i // mxfp8.BLOCK_SIZE):] = E8M0_NAN
    return (q, sc), (bq, bs)


def telling_logits(tokens: int, experts: int, k: int, seed: int) -> torch.Tensor:
    """float32 [T, E] from :func:`tieproof_logits`, per token (cycling):
    0: as drawn (negative values below the top-k);
    1: shifted so the k-th largest is +1/128 and the (k+1)-th -1/128 (the boundary crosses zero);
    2: shifted so every logit is negative (the top-k all below zero);
    3: the (k+1)-th set equal to the k-th (an exact tie AT the boundary);
    4: the 2nd set equal to the 1st (an exact tie inside the top-k), the rest shifted negative.
    Every value stays a multiple of 2^-7, exact in float32."""
    x = tieproof_logits(tokens, experts, seed)
    srt = x.sort(-1, descending=True)
    for t in range(tokens):
        v, idx = srt.values[t], srt.indices[t]
        mode = t % 5
        if mode == 1:
            x[t] -= float(v[k - 1]) - 1 / 128
        elif mode == 2:
            x[t] -= float(v[0]) + 1 / 64
        elif mode == 3:
            x[t, idx[k]] = v[k - 1]
        elif mode == 4:
            x[t, idx[1]] = v[0]
            x[t] -= float(v[k // 2])
    return x


def routing_bias(experts: int) -> torch.Tensor:
    """float32 [E] correction bias on a coarse grid (many experts share a value, so equal
    logits give bitwise-equal keys): values in {-3/8, ..., +1/4}, so keys cross zero."""
    return (((torch.arange(experts) * 37) % 6).float() - 3) / 8


def routing_inputs(job: Job, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(logits float32 [T, E], bias float32 [E] or None) of a routing job: :func:`telling_logits`;
    with a correction bias, the tied tokens (3, 4 of every 5) get their tie between experts of
    the same bias (equal logits and equal bias: bitwise-equal keys)."""
    from fp4moe.reference.routing import selection_keys

    e, k = job.extra["experts"], job.extra["top_k"]
    logits = telling_logits(job.tokens, e, k, seed)
    if not job.routing.bias:
        return logits, None
    bias = routing_bias(e)
    keys = selection_keys(logits, job.routing.score_mode, bias)
    for t in range(job.tokens):
        if t % 5 not in (3, 4):
            continue
        order = keys[t].argsort(descending=True, stable=True)
        a = int(order[k - 1] if t % 5 == 3 else order[0])
        pool = order[k:] if t % 5 == 3 else order[1:]
        same = [int(j) for j in pool if float(bias[int(j)]) == float(bias[a])]
        if same:
            logits[t, same[0]] = logits[t, a]
    return logits, bias


def reduce_inputs(g: int, k: int, n: int, seed: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """(x bf16 [1, g*k, n], indx int32 [g, k]): random signs, exponents and 8-bit significands
    in the REDUCE_EXP range (float32 sums exact, see REDUCE_EXP_MIN)."""
    gen = torch.Generator().manual_seed(seed)
    sig = torch.randint(128, 256, (1, g * k, n), generator=gen).float() / 128  # [1, 2): 8 significant bits
    ex = torch.randint(REDUCE_EXP_MIN, REDUCE_EXP_MAX, (1, g * k, n), generator=gen).float()
    sign = torch.randint(0, 2, (1, g * k, n), generator=gen).float() * 2 - 1
    x = (sign * sig * torch.pow(2.0, ex)).to(BF16)
    indx = torch.randperm(g * k, generator=gen).view(g, k).to(torch.int32)
    return x, indx


def reduce_want(x: torch.Tensor, indx: torch.Tensor) -> torch.Tensor:
    """The exact sum of each group (float64: exact here), rounded once to bf16."""
    return x[0].double()[indx.long()].sum(1).to(torch.float32).to(BF16)


# ----------------------------------------------------------------------------------- the record


def record_schema():
    """The kernel child's record (``fp4moe.infra.runner.RecordSchema``): what the child ran and
    where; every job's outputs are the harness output ``job-NNN`` (tensors), its meta in ``jobs``."""
    from fp4moe.infra.runner import RecordSchema

    return RecordSchema("aiter-kernels", 1, {
        "tree": str, "arch": str, "triton": str, "device": str, "shapes": str, "shims_active": bool, "interp_fastpath": str,
        "gpu": (str, type(None)), "interpreter": bool, "unjudged": dict, "patches": list, "shims": (dict, type(None)),
        "jobs": list, "seconds": (int, float), "writes_confined": bool, "unconfined": (str, type(None)),
    })


def output_name(i: int) -> str:
    return f"job-{i:03d}"


def parse_routing_cases(text: str | None):
    """``--routing-cases "256x6,384x8"`` -> ((256, 6), (384, 8)); None -> None (the defaults)."""
    if text is None:
        return None
    return tuple(tuple(int(v) for v in c.split("x")) for c in text.split(",") if c)
