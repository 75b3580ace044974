"""Reference fused MoE with the semantics of ``aiter.fused_moe`` for MXFP4 experts.

For each token t and each of its top-k experts e (weight w), as aiter's own torch references
(``torch_moe_stage1`` / ``torch_moe_stage2`` in aiter/fused_moe.py) and its 2-stage kernels
compute it:
    [gate | up] = x @ [Wg[e]; Wu[e]].T                          (stage 1, one matmul)
    doweight_stage1: gate, up = w * gate, w * up                (BEFORE the activation)
    swiglu_limit L (truthy): gate = min(gate, L), up = clamp(up, -L, L)   (0.0 / None: none)
    a = silu(gate) * up, rounded to the activation dtype        (aiter's bf16 stage-1 buffer)
    y[t, slot] = a @ Wd[e].T, times w unless doweight_stage1    (stage 2)
    out[t] = sum over slots in slot order, rounded to the input dtype
with float32 accumulation (the reference) or float64 (the oracle). docs/reference.md has the
table of these points with the aiter lines each follows.

Weights arrive as the processed layer's padded tensors [E, 2P, H/2] (gate rows [0, P), up
rows [P, 2P)), [E, H, P/2] and their e8m0 scales, unshuffled (``fp4moe.reference.reference_backend``
undoes the gfx950 layouts first). ``intermediate_pad`` / ``hidden_pad`` say how many trailing
channels of the intermediate / hidden dims are padding: those bytes are never read (sliced
off before dequantization, so 0xFF scale bytes there cannot leak NaN). With pad 0 on padded
weights everything is computed, like a kernel that was not told.

Activation modes: ``a16w4`` (bf16 activations, exact in float32) and ``a8w4`` (activations
quantized to MXFP8 e4m3, e8m0 scale per 32, with aiter's run-time scale rule
``mxfp8.ACT_SCALE_MODE``, before both stages -- the stage-2 input is the bf16-rounded stage-1
output: what aiter runs for DeepSeek-V4 with AITER_BF16_FP8_MOE_BOUND=0 and gate mode
interleave).

``slot_dtype``: the dtype each top-k slot's weighted row ``y[t, slot]`` is rounded to before
the sum. Default ``None``: not rounded (aiter's ``fused_moe`` and its torch references sum the
float32 rows). ``torch.bfloat16``: aiter's *Triton* MoE path (``moe_gemm_a16w4`` /
``moe_gemm_a8w4`` GEMM2 applies the top-k weight in the kernel and stores bf16 rows; its
``reduce_grouped`` sums them in float32 and rounds once more): docs/reference.md point 3d.

``slot_quant``: a quant of each weighted slot row after ``slot_dtype`` (a :class:`SlotQuant`).
Default ``None``: none. ``"mxfp8_route"``: aiter's Opus stage 2 with an MXFP8 route output
(the tuned ``opus_moe2_..._fp8_..._rbn...`` kernels): the float32 row times its top-k weight is
rounded to bf16 (``opus_moe_pipeline_stage2_a8w4_decode_main_gfx950.cuh``:928-931 in e4048607),
quantized to e4m3 with one e8m0 byte per 8 columns by the ``floor_headroom`` rule (:1059-1088,
``fp4moe.mx.mxfp8.ROUTE_OUT_BLOCK`` / ``ROUTE_OUT_SCALE_MODE``), and the reduce sums the
dequantized rows in slot order in float32 (``opus_moe_stage2_route_output_reduce_gfx950.cuh``:97-113)
before the one rounding to the output dtype.

``gate_up_dtype``: the dtype the stage-1 gate/up projections are stored in before the
activation. Default ``None``: kept in float32 (the 2-stage kernels' fused epilogue).
``torch.bfloat16``: aiter's CK-tile split-k path (``cktile_moe_stage1`` reduces gate/up into a
bf16 workspace, then ``silu_and_mul``).

``stage2_act``: the quant of the stage-2 input after the stage-1 buffer. Default ``None``: the
``act_mode``'s own (none in a16w4, MXFP8 in a8w4). ``"mxfp4"``: MXFP4 with aiter's run-time
scale rule, as ``fused_moe_2stages`` quantizes the bf16 stage-1 output for the CK 2-stage
kernels (``fused_dynamic_mxfp4_quant_moe_sort``).

``stage1_dtype``: the dtype the stage-1 output is rounded to. Default (``ACT_DTYPE``): the
dtype of ``hidden_states``, as the kernel's inter-stage buffer. ``None``: no rounding ("float
semantics", as aiter's single-function ``torch_moe`` computes); used by the float64 oracle
comparisons that measure accumulation error alone, and by the differential check against
``torch_moe``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import torch

from fp4moe.mx import e8m0, mxfp4, mxfp8
from fp4moe.mx.mxfp4 import BLOCK_SIZE

ACT_MODES = ("a16w4", "a8w4")
ACT_DTYPE = "act"  # stage1_dtype default: the dtype of hidden_states


@dataclass(frozen=True)
class ExpertWeights:
    """Accessor for one layer's unshuffled padded weights; returns byte slices per expert."""

    w13: torch.Tensor  # [E, 2P, H/2] uint8
    w13_scale: torch.Tensor  # [E, 2P, H/32] uint8
    w2: torch.Tensor  # [E, H, P/2]
    w2_scale: torch.Tensor  # [E, H, P/32]

    @property
    def experts(self) -> int:
        return self.w13.shape[0]

    @property
    def padded(self) -> int:
        return self.w13.shape[1] // 2

    @property
    def hidden(self) -> int:
        return self.w13.shape[2] * 2

    def gate_up(self, e: int, n_used: int, k_used: int):
        """(gate bytes, gate scale, up bytes, up scale) for the first n_used rows, k_used columns."""
        p = self.padded
        kb, ks = k_used // 2, k_used // BLOCK_SIZE
        w, s = self.w13[e], self.w13_scale[e]
        return w[:n_used, :kb], s[:n_used, :ks], w[p : p + n_used, :kb], s[p : p + n_used, :ks]

    def down(self, e: int, h_used: int, k_used: int):
        return self.w2[e, :h_used, : k_used // 2], self.w2_scale[e, :h_used, : k_used // BLOCK_SIZE]

    def validate(self) -> None:
        e, p, h = self.experts, self.padded, self.hidden
        checks = {
            "w1_scale": (self.w13_scale.shape, (e, 2 * p, h // BLOCK_SIZE)),
            "w2": (self.w2.shape, (e, h, p // 2)),
            "w2_scale": (self.w2_scale.shape, (e, h, p // BLOCK_SIZE)),
        }
        for name, (got, want) in checks.items():
            if tuple(got) != want:
                raise ValueError(f"{name}: shape {tuple(got)} does not match w1 {tuple(self.w13.shape)}; expected {want}")


def check_moe_inputs(hidden_states, ew: ExpertWeights, topk_weights, topk_ids, hidden_pad, intermediate_pad, act_mode, expert_mask=None):
    """Validate; errors name the tensor or option. Returns (T, k)."""
    if act_mode not in ACT_MODES:
        raise ValueError(f"act_mode must be one of {ACT_MODES}, got {act_mode!r}")
    if hidden_states.ndim != 2:
        raise ValueError(f"hidden_states: expected [T, H], got shape {tuple(hidden_states.shape)}")
    if not torch.is_floating_point(hidden_states):
        raise TypeError(f"hidden_states: expected a floating dtype, got {hidden_states.dtype}")
    t, h = hidden_states.shape
    if h != ew.hidden:
        raise ValueError(f"hidden_states: H = {h} does not match w1 (H = {ew.hidden}, shape {tuple(ew.w13.shape)})")
    e, p = ew.experts, ew.padded
    ew.validate()
    if topk_ids.shape != topk_weights.shape or topk_ids.ndim != 2 or topk_ids.shape[0] != t:
        raise ValueError(
            f"topk_ids {tuple(topk_ids.shape)} / topk_weight {tuple(topk_weights.shape)}: expected both [T={t}, k]"
        )
    if topk_ids.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"topk_ids: expected int32/int64, got {topk_ids.dtype}")
    n_ids = e if expert_mask is None else expert_mask.numel()
    if topk_ids.numel() and (int(topk_ids.min()) < 0 or int(topk_ids.max()) >= n_ids):
        raise ValueError(f"topk_ids: values must be in [0, {n_ids}), got [{int(topk_ids.min())}, {int(topk_ids.max())}]")
    if not 0 <= intermediate_pad < p:
        raise ValueError(f"intermediate_pad: {intermediate_pad} must be in [0, {p}) (padded intermediate {p})")
    if not 0 <= hidden_pad < h:
        raise ValueError(f"hidden_pad: {hidden_pad} must be in [0, {h}) (hidden {h})")
    for name, v in (("intermediate_pad", intermediate_pad), ("hidden_pad", hidden_pad)):
        if v % BLOCK_SIZE:
            raise ValueError(f"{name}: {v} must be a multiple of the MXFP4 block ({BLOCK_SIZE})")
    return t, topk_ids.shape[1]


def _local_ids(topk_ids: torch.Tensor, expert_mask: torch.Tensor | None) -> torch.Tensor:
    """Global ids -> local expert index (-1 for experts not on this rank), aiter's expert_mask."""
    if expert_mask is None:
        return topk_ids.long()
    mask = expert_mask.to(torch.bool).flatten()
    local = torch.cumsum(mask.long(), 0) - 1
    local = torch.where(mask, local, torch.full_like(local, -1))
    return local[topk_ids.long()]


def _act_quant(x: torch.Tensor, act_mode: str) -> torch.Tensor:
    """a8w4: the MXFP8 values aiter's run-time activation quant produces (float32)."""
    return mxfp8.fake_quantize(x.to(torch.float32), mxfp8.ACT_SCALE_MODE) if act_mode == "a8w4" else x


class SlotQuant(str, enum.Enum):
    """How a weighted slot row is stored before the slot sum (``slot_quant``; see the module docstring)."""

    MXFP8_ROUTE = "mxfp8_route"  # aiter's Opus MXFP8 route output: bf16, then e4m3 + e8m0 per 8 columns


def _mxfp8_route(y: torch.Tensor) -> torch.Tensor:
    """What the reduce reads for weighted rows ``y`` [n, h]: bf16, then MXFP8 per 8 columns."""
    staged = y.to(torch.bfloat16).to(torch.float32)
    return mxfp8.fake_quantize(staged, mxfp8.ROUTE_OUT_SCALE_MODE, block=mxfp8.ROUTE_OUT_BLOCK)


#: ``slot_quant`` value -> the stored-and-read values of a weighted slot row
SLOT_QUANT_FUNCS = {SlotQuant.MXFP8_ROUTE.value: _mxfp8_route}
SLOT_QUANTS = tuple(SLOT_QUANT_FUNCS)


#: the stage-2 input quants ``stage2_act`` names
STAGE2_ACTS = ("mxfp4",)


def _stage2_quant(a: torch.Tensor, stage2_act: str) -> torch.Tensor:
    if stage2_act not in STAGE2_ACTS:
        raise ValueError(f"stage2_act must be one of {STAGE2_ACTS} or None, got {stage2_act!r}")
    return mxfp4.dequantize(*mxfp4.quantize(a.to(torch.float32), mxfp8.ACT_SCALE_MODE, name="stage-2 input"))


def clamp_swiglu(gate: torch.Tensor, up: torch.Tensor, swiglu_limit) -> tuple[torch.Tensor, torch.Tensor]:
    """aiter's ``if swiglu_limit:``: None and 0.0 mean no clamp; else gate <= L, up in [-L, L]."""
    if not swiglu_limit:
        return gate, up
    return gate.clamp(max=swiglu_limit), up.clamp(-swiglu_limit, swiglu_limit)


def stage1(x: torch.Tensor, ew: ExpertWeights, e: int, n_used: int, k_used: int, swiglu_limit, dtype, check_scales: bool, weight: torch.Tensor | None = None, gate_up_dtype: torch.dtype | None = None) -> torch.Tensor:
    """Gate/up projections and the gated activation for one expert's tokens -> [n_tok, n_used].

    ``weight`` ([n_tok, 1], doweight_stage1) multiplies gate and up before the activation;
    ``gate_up_dtype`` (not None) rounds gate and up before it. The result is not rounded here
    (``fused_moe_unshuffled`` rounds it to ``stage1_dtype``).
    """
    gw, gs, uw, us = ew.gate_up(e, n_used, k_used)
    if check_scales:
        e8m0.check_no_nan(gs, f"w1_scale[expert {e}, gate]")
        e8m0.check_no_nan(us, f"w1_scale[expert {e}, up]")
    w13 = torch.cat((mxfp4.dequantize(gw, gs), mxfp4.dequantize(uw, us))).to(dtype)
    gate_up = x @ w13.T  # one matmul over [gate; up], as the kernel and aiter's reference
    if weight is not None:
        gate_up = gate_up * weight
    if gate_up_dtype is not None:
        gate_up = gate_up.to(gate_up_dtype).to(dtype)
    gate, up = clamp_swiglu(gate_up[:, :n_used], gate_up[:, n_used:], swiglu_limit)
    return torch.nn.functional.silu(gate) * up


def stage2_input(a: torch.Tensor, stage1_dtype, act_mode: str) -> torch.Tensor:
    """What stage 2 reads: the stage-1 output stored in ``stage1_dtype`` (None: kept as is),
    then, in a8w4, MXFP8-quantized from that stored buffer."""
    if stage1_dtype is not None:
        a = a.to(stage1_dtype)  # the kernel's inter-stage buffer
    return _act_quant(a, act_mode)


def stage2(a: torch.Tensor, ew: ExpertWeights, e: int, h_used: int, k_used: int, dtype, check_scales: bool) -> torch.Tensor:
    """Down projection for one expert's tokens -> [n_tok, h_used]."""
    dw, ds = ew.down(e, h_used, k_used)
    if check_scales:
        e8m0.check_no_nan(ds, f"w2_scale[expert {e}]")
    return a[:, :k_used] @ mxfp4.dequantize(dw, ds).to(dtype).T


def fused_moe_unshuffled(
    hidden_states: torch.Tensor,
    ew: ExpertWeights,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    *,
    hidden_pad: int = 0,
    intermediate_pad: int = 0,
    swiglu_limit: float | None = None,
    act_mode: str = "a16w4",
    doweight_stage1: bool = False,
    expert_mask: torch.Tensor | None = None,
    compute_dtype: torch.dtype = torch.float32,
    stage1_dtype: torch.dtype | str | None = ACT_DTYPE,
    slot_dtype: torch.dtype | None = None,
    slot_quant: str | None = None,
    gate_up_dtype: torch.dtype | None = None,
    stage2_act: str | None = None,
    check_scales: bool = True,
    trace: dict | None = None,
) -> torch.Tensor:
    """The reference computation on unshuffled padded weights. See the module docstring.

    Returns ``compute_dtype`` [T, H] (not yet rounded to the input dtype). ``trace``, when a
    dict, receives ``"stage1"``: the per-(token, slot) stage-1 output [T, k, n_used] as stage 2
    reads it before the a8w4 quant (zeros for slots routed off this rank), and ``"slots"``: the
    per-(token, slot) weighted rows [T, k, H] that are summed (after ``slot_dtype`` rounding).
    ``check_scales`` rejects 0xFF (NaN) scale bytes in every region that is read; turn it off
    only to emulate what a kernel that reads them would output (the NaN-guard tests do).
    """
    t, k = check_moe_inputs(hidden_states, ew, topk_weights, topk_ids, hidden_pad, intermediate_pad, act_mode, expert_mask)
    if slot_quant is not None and slot_quant not in SLOT_QUANTS:
        raise ValueError(f"slot_quant must be one of {SLOT_QUANTS} or None, got {slot_quant!r}")
    if stage1_dtype == ACT_DTYPE:
        stage1_dtype = hidden_states.dtype
    h = ew.hidden
    h_used = h - hidden_pad
    n_used = ew.padded - intermediate_pad
    x_all = hidden_states.to(torch.float32)
    if hidden_pad:
        x_all = x_all[:, :h_used]
    x_all = _act_quant(x_all, act_mode).to(compute_dtype)
    local = _local_ids(topk_ids, expert_mask)
    # per (token, slot) outputs, summed over the slots in slot order (aiter's ``out.sum(1)``)
    per_slot = torch.zeros((t, k, h), dtype=compute_dtype, device=hidden_states.device)
    weights = topk_weights.to(compute_dtype)
    for e in torch.unique(local).tolist():
        if e < 0:
            continue
        tok, slot = (local == e).nonzero(as_tuple=True)
        w = weights[tok, slot].unsqueeze(1)
        s1_args = (x_all[tok], ew, e, n_used, h_used, swiglu_limit, compute_dtype, check_scales, w if doweight_stage1 else None)
        a = stage1(*s1_args) if gate_up_dtype is None else stage1(*s1_args, gate_up_dtype=gate_up_dtype)
        if trace is not None:
            if "stage1" not in trace:
                trace["stage1"] = torch.zeros((t, k, n_used), dtype=stage1_dtype or a.dtype, device=a.device)
            trace["stage1"][tok, slot] = a.to(stage1_dtype or a.dtype)
        a = stage2_input(a, stage1_dtype, act_mode)
        if stage2_act is not None:
            a = _stage2_quant(a, stage2_act)
        a = a.to(compute_dtype)
        y = stage2(a, ew, e, h_used, n_used, compute_dtype, check_scales)
        y = y if doweight_stage1 else y * w
        y = y if slot_dtype is None else y.to(slot_dtype).to(compute_dtype)
        per_slot[tok, slot, :h_used] = y if slot_quant is None else SLOT_QUANT_FUNCS[SlotQuant(slot_quant).value](y).to(compute_dtype)
    if trace is not None:
        trace["slots"] = per_slot  # [T, k, H]: each slot's weighted row as summed (after slot_dtype / slot_quant)
    return per_slot.sum(1)


def fused_moe_reference(hidden_states, ew: ExpertWeights, topk_weights, topk_ids, **kw) -> torch.Tensor:
    """float32 accumulation, output in the input dtype (bf16), as aiter returns it."""
    return fused_moe_unshuffled(hidden_states, ew, topk_weights, topk_ids, compute_dtype=torch.float32, **kw).to(
        hidden_states.dtype
    )


def fused_moe_oracle(hidden_states, ew: ExpertWeights, topk_weights, topk_ids, **kw) -> torch.Tensor:
    """float64 accumulation (tests only); returns float64, no final rounding.

    The same function as the reference: every rounding point the kernel has (the stage-1
    output in the activation dtype, the a8w4 MXFP8 quants) is kept, so reference vs oracle
    measures float32 accumulation error only. Pass ``stage1_dtype=None`` for float semantics.
    """
    return fused_moe_unshuffled(hidden_states, ew, topk_weights, topk_ids, compute_dtype=torch.float64, **kw)


def route(router_logits: torch.Tensor, top_k: int, renormalize: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax top-k routing: (topk_weights float32 [T, k], topk_ids int32 [T, k])."""
    if router_logits.ndim != 2:
        raise ValueError(f"router_logits: expected [T, E], got shape {tuple(router_logits.shape)}")
    if not 0 < top_k <= router_logits.shape[1]:
        raise ValueError(f"top_k: {top_k} must be in [1, {router_logits.shape[1]}]")
    probs = torch.softmax(router_logits.float(), dim=-1)
    w, ids = torch.topk(probs, top_k, dim=-1)
    if renormalize:
        w = w / w.sum(dim=-1, keepdim=True)
    return w, ids.to(torch.int32)
