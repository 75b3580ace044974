"""The reference backend: ``fp4moe.reference.moe`` behind the backend interface.

Like aiter it takes the gfx950-shuffled weights and scales; it reads each routed expert
through the exact inverse layouts (``fp4moe.reference.layout``), chosen by ``gate_mode``:
"interleave" = the GU-interleaved layout (SGLANG_USE_AITER_MOE_GU_ITLV=1), "separated" = the
plain layout. A layout built with the other flag reads as garbage, as on the real kernel.

Which implementation runs is chosen by device (``path="auto"``, the default): on a CUDA GPU
with Triton, bfloat16 activations, the GPU-bound ``fp4moe.reference.grouped_moe`` (same semantics, grouped
GEMMs, the work on the device: what the perf gate times); everywhere else the exact
``fp4moe.reference.moe``, which stays the judge (``path="exact"`` forces it; tests compare the two).
"""

from __future__ import annotations

import torch

from fp4moe.reference import grouped_moe, moe
from fp4moe.reference.backend import FusedMoEKeywords
from fp4moe.reference.expert_weights import GATE_MODES, ShuffledExpertWeights  # noqa: F401  (GATE_MODES: the backend's public vocabulary)

PATHS = ("auto", "exact", "fast")


class ReferenceBackend:
    """Readable, exact, slow: the oracle every kernel is compared with."""

    name = "reference"

    def __init__(self, check_scales: bool = True, path: str = "auto"):
        if path not in PATHS:
            raise ValueError(f"path must be one of {PATHS}, got {path!r}")
        self.check_scales = check_scales
        self.path = path

    def uses_fast_path(self, hidden_states: torch.Tensor) -> bool:
        """``path="auto"``: the fast path on a CUDA GPU with Triton, for bfloat16 activations."""
        if self.path != "auto":
            return self.path == "fast"
        return hidden_states.dtype == torch.bfloat16 and grouped_moe.fast_path_available(hidden_states.device)[0]

    def fused_moe(self, hidden_states, w1, w2, topk_weight, topk_ids, **keywords) -> torch.Tensor:
        k = FusedMoEKeywords(**keywords)
        if k.activation != "silu":
            raise ValueError(f"activation: only 'silu' is implemented, got {k.activation!r}")
        if k.quant_type != "per_1x32":
            raise ValueError(f"quant_type: only 'per_1x32' (MXFP4 weights) is implemented, got {k.quant_type!r}")
        if k.w1_scale is None or k.w2_scale is None:
            raise ValueError("w1_scale and w2_scale are required for per_1x32 weights")
        if k.a1_scale is not None or k.a2_scale is not None:
            raise ValueError("a1_scale/a2_scale: static activation scales are not used by per_1x32 (dynamic MXFP8)")
        if k.bias1 is not None or k.bias2 is not None:
            raise ValueError("bias1/bias2: DeepSeek-V4 experts have no bias; not implemented in the reference")
        kw = dict(
            hidden_pad=k.hidden_pad,
            intermediate_pad=k.intermediate_pad,
            swiglu_limit=k.swiglu_limit,
            act_mode=k.act_mode,
            doweight_stage1=k.doweight_stage1,
            expert_mask=k.expert_mask,
            check_scales=self.check_scales,
        )
        if self.uses_fast_path(hidden_states):
            layer = grouped_moe.prepared_layer(w1, w2, k.w1_scale, k.w2_scale, k.gate_mode)
            return grouped_moe.fused_moe_fast(hidden_states, layer, topk_weight, topk_ids, **kw)
        ew = ShuffledExpertWeights(w1, w2, k.w1_scale, k.w2_scale, k.gate_mode)
        return moe.fused_moe_reference(hidden_states, ew, topk_weight, topk_ids, **kw)
