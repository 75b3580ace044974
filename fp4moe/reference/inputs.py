"""Seeded builders of realistic inputs for tests, benchmarks and the self-check.

Weights are random normals quantized with ``fp4moe.mx.mxfp4`` (so every block has a real,
non-trivial scale); activations are bf16 normals; routing comes from random router logits.
Nothing here is ever all-zeros.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fp4moe.model.catalogue import ParallelConfig
from fp4moe.model.checkpoint import RawMoEWeights
from fp4moe.mx import mxfp4
from fp4moe.reference.moe import route


@dataclass(frozen=True)
class ScaledRow:
    """A catalogue row scaled down: real per-rank I_p, fewer experts, smaller hidden."""

    label: str
    intermediate: int  # I_p
    experts: int
    hidden: int
    top_k: int


def scaled_row(pc: ParallelConfig, experts: int = 4, hidden: int = 256, top_k: int = 2) -> ScaledRow:
    return ScaledRow(pc.label, pc.intermediate_per_partition, experts, hidden, top_k)


def make_raw_layer(*, experts: int, hidden: int, intermediate: int, seed: int, device="cpu", std: float = 0.02) -> RawMoEWeights:
    """Seeded random raw routed experts, as ``checkpoint.load_moe_layer`` returns them."""
    g = torch.Generator().manual_seed(seed)
    w13 = torch.randn((experts, 2 * intermediate, hidden), generator=g) * std
    w2 = torch.randn((experts, hidden, intermediate), generator=g) * std
    p13, s13 = mxfp4.quantize(w13, "round_up", name="w13")
    p2, s2 = mxfp4.quantize(w2, "round_up", name="w2")
    return RawMoEWeights(p13.to(device), s13.to(device), p2.to(device), s2.to(device), tuple(range(experts)))


def make_tokens(*, tokens: int, hidden: int, experts: int, top_k: int, seed: int, device="cpu"):
    """(hidden_states bf16 [T, H], topk_weights float32 [T, k], topk_ids int32 [T, k])."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn((tokens, hidden), generator=g).to(torch.bfloat16)
    logits = torch.randn((tokens, experts), generator=g)
    w, ids = route(logits, top_k)
    return x.to(device), w.to(device), ids.to(device)


def scale_pad_masks(pw) -> tuple[torch.Tensor, torch.Tensor]:
    """Bool masks over a processed layer's (shuffled) w13_scale and w2_scale marking the bytes
    that belong to padded intermediate channels (not the shuffles' own growth)."""
    from fp4moe.reference import layout

    e, p, i, h = pw.experts, pw.padded_intermediate, pw.intermediate, pw.hidden
    m13 = torch.zeros((e, 2 * p, h // 32), dtype=torch.uint8)
    m13[:, i:p] = 1
    m13[:, p + i :] = 1
    m2 = torch.zeros((e, h, p // 32), dtype=torch.uint8)
    m2[:, :, i // 32 :] = 1
    if not pw.shuffled:
        return m13.bool(), m2.bool()
    s13 = layout.shuffle_scale(m13.reshape(e * 2 * p, -1), e, pw.gu_interleave, True) == 1
    s2 = layout.shuffle_scale(m2.reshape(e * h, -1), e, pw.gu_interleave, False) == 1
    return s13, s2


def device_params():
    """``pytest.mark.parametrize`` values for a ``device`` argument: the CPU always, and the GPU
    (CUDA or ROCm through torch.cuda) under the ``gpu`` marker, skipped with a reason elsewhere."""
    import pytest

    return [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]


def layer_on(raw: RawMoEWeights, device) -> RawMoEWeights:
    return RawMoEWeights(*(t.to(device) for t in raw.tensors()), raw.expert_ids)


class SpyBackend:
    """Records the keyword arguments (plus w1/w2) of every ``fused_moe`` call, then delegates to
    the reference: what the pad-propagation tests compare with the layer's record."""

    name = "spy"

    def __init__(self):
        from fp4moe.reference.reference_backend import ReferenceBackend

        self.calls: list[dict] = []
        self.inner = ReferenceBackend()

    def fused_moe(self, hidden_states, w1, w2, topk_weight, topk_ids, **kwargs):
        self.calls.append(dict(kwargs, w1=w1, w2=w2))
        return self.inner.fused_moe(hidden_states, w1, w2, topk_weight, topk_ids, **kwargs)
