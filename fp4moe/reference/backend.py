"""The backend interface: what a fused-MoE implementation must accept.

Keyword names follow ``aiter.fused_moe`` (:class:`FusedMoEKeywords`, written once) so that the one call site
(``fp4moe.reference.quant_info.call_fused_moe``) passes the same keywords to every backend, and a spy
can compare them with the layer's recorded pads.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Protocol, runtime_checkable

import torch

#: the five tensors every backend takes first, in aiter.fused_moe's order
POSITIONAL = ("hidden_states", "w1", "w2", "topk_weight", "topk_ids")


@dataclass(frozen=True)
class FusedMoEKeywords:
    """The keyword arguments of ``aiter.fused_moe`` after :data:`POSITIONAL`, with their defaults:
    the ONE copy every backend reads (``FusedMoEKeywords(**keywords)``). ``act_mode`` is this
    project's: it selects ``AITER_BF16_FP8_MOE_BOUND`` around the aiter call, aiter never sees it."""

    expert_mask: torch.Tensor | None = None
    activation: str = "silu"
    quant_type: str = "per_1x32"
    doweight_stage1: bool = False
    w1_scale: torch.Tensor | None = None
    w2_scale: torch.Tensor | None = None
    a1_scale: torch.Tensor | None = None
    a2_scale: torch.Tensor | None = None
    hidden_pad: int = 0
    intermediate_pad: int = 0
    bias1: torch.Tensor | None = None
    bias2: torch.Tensor | None = None
    gate_mode: str = "interleave"
    swiglu_limit: float | None = None
    act_mode: str = "a16w4"

    def as_dict(self) -> dict:
        return asdict(self)


#: every keyword name of :class:`FusedMoEKeywords`, in order
KEYWORDS = tuple(FusedMoEKeywords.__dataclass_fields__)
#: the keywords this project adds (aiter's ``fused_moe`` never receives them)
PROJECT_KEYWORDS = ("act_mode",)

@runtime_checkable
class MoEBackend(Protocol):
    name: str

    def fused_moe(self, hidden_states: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, topk_weight: torch.Tensor,
                  topk_ids: torch.Tensor, **keywords) -> torch.Tensor:
        """``keywords``: those of :class:`FusedMoEKeywords` (an unknown one is a TypeError)."""
