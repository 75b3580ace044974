"""The backend interface: what a fused-MoE implementation must accept.

Keyword names follow ``aiter.fused_moe`` so that the one call site
(``fp4moe.reference.quant_info.call_fused_moe``) passes the same keywords to every backend, and a spy
can compare them with the layer's recorded pads.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class MoEBackend(Protocol):
    name: str

    def fused_moe(
        self,
        hidden_states: torch.Tensor,
        w1: torch.Tensor,
        w2: torch.Tensor,
        topk_weight: torch.Tensor,
        topk_ids: torch.Tensor,
        *,
        expert_mask: torch.Tensor | None = None,
        activation: str = "silu",
        quant_type: str = "per_1x32",
        doweight_stage1: bool = False,
        w1_scale: torch.Tensor | None = None,
        w2_scale: torch.Tensor | None = None,
        a1_scale: torch.Tensor | None = None,
        a2_scale: torch.Tensor | None = None,
        hidden_pad: int = 0,
        intermediate_pad: int = 0,
        bias1: torch.Tensor | None = None,
        bias2: torch.Tensor | None = None,
        swiglu_limit: float | None = None,
        gate_mode: str = "interleave",
        act_mode: str = "a16w4",
    ) -> torch.Tensor: ...
