"""The pad-propagation contract between the weight path and the kernel.

SGLang hands aiter's fused MoE an ``AiterMoeQuantInfo`` built by
``maybe_get_hip_aiter_quant_info`` from the processed layer. SGLang PR #27858 padded the
weights 384 -> 512 but never put the pad in here, so ``intermediate_pad`` reached
``aiter.fused_moe`` as 0 and the kernel computed the zero channels (MoE 18-19% slower,
accuracy unchanged). Here the builder reads the pads the weight path recorded, and
``call_fused_moe`` is the ONE call site that passes them to a backend as keyword arguments.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fp4moe.reference.weight_path import ProcessedMoEWeights

QUANT_TYPE_PER_1X32 = "per_1x32"


@dataclass
class AiterMoeQuantInfo:
    w13_weight: torch.Tensor
    w2_weight: torch.Tensor
    quant_type: str = QUANT_TYPE_PER_1X32
    w13_scale: torch.Tensor | None = None
    w2_scale: torch.Tensor | None = None
    a13_scale: torch.Tensor | None = None
    a2_scale: torch.Tensor | None = None
    b13: torch.Tensor | None = None
    b2: torch.Tensor | None = None
    expert_mask: torch.Tensor | None = None
    doweight_stage1: bool = False
    hidden_pad: int = 0
    intermediate_pad: int = 0
    swiglu_limit: float | None = None
    # not in SGLang's dataclass: SGLang reads it from SGLANG_USE_AITER_MOE_GU_ITLV at call time
    gu_interleave: bool = True


def build_quant_info(
    processed: ProcessedMoEWeights,
    *,
    swiglu_limit: float | None = None,
    expert_mask: torch.Tensor | None = None,
    doweight_stage1: bool = False,
) -> AiterMoeQuantInfo:
    """Mirror of ``maybe_get_hip_aiter_quant_info``: the recorded pads go into the info."""
    if not processed.shuffled:
        raise ValueError("processed weights: the kernel takes shuffled weights (process with shuffle=True)")
    return AiterMoeQuantInfo(
        w13_weight=processed.w13,
        w2_weight=processed.w2,
        quant_type=QUANT_TYPE_PER_1X32,
        w13_scale=processed.w13_scale,
        w2_scale=processed.w2_scale,
        expert_mask=expert_mask,
        doweight_stage1=doweight_stage1,
        hidden_pad=processed.hidden_pad,
        intermediate_pad=processed.intermediate_pad,
        swiglu_limit=swiglu_limit,
        gu_interleave=processed.gu_interleave,
    )


def fused_moe_kwargs(info: AiterMoeQuantInfo, act_mode: str = "a16w4") -> dict:
    """The keyword arguments every backend's ``fused_moe`` receives for this layer."""
    return dict(
        expert_mask=info.expert_mask,
        activation="silu",
        quant_type=info.quant_type,
        doweight_stage1=info.doweight_stage1,
        w1_scale=info.w13_scale,
        w2_scale=info.w2_scale,
        a1_scale=info.a13_scale,
        a2_scale=info.a2_scale,
        hidden_pad=info.hidden_pad,
        intermediate_pad=info.intermediate_pad,
        bias1=info.b13,
        bias2=info.b2,
        swiglu_limit=info.swiglu_limit,
        gate_mode="interleave" if info.gu_interleave else "separated",
        act_mode=act_mode,
    )


def call_fused_moe(backend, hidden_states, topk_weights, topk_ids, info: AiterMoeQuantInfo, *, act_mode: str = "a16w4"):
    """The one call site: quant info -> ``backend.fused_moe(...)`` keyword arguments."""
    return backend.fused_moe(
        hidden_states, info.w13_weight, info.w2_weight, topk_weights, topk_ids, **fused_moe_kwargs(info, act_mode)
    )
