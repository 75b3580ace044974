"""Bytes a fused MXFP4 MoE must move: the numerator of the roofline (``fp4moe.gates.perf.roofline``).

A MoE step cannot take less time than moving, once, every byte it must read or write:

- the weights of the TOUCHED experts only (the distinct expert ids in ``topk_ids``; an expert no
  token is routed to is never read), each expert holding
  w13 = gate + up rows, ``2*n`` rows of ``H/2`` packed FP4 bytes, with ``H/32`` e8m0 scale bytes per row,
  w2 = ``H`` rows of ``n/2`` packed bytes, with ``n/32`` scale bytes per row,
  where ``n`` is the number of intermediate channels the kernel computes: the real ``I_p`` when
  the pad is propagated (``intermediate_pad`` tells it to skip the rest), the padded size when
  it is not (SGLang PR #27858: the kernel then reads and multiplies the zero channels too);
- the activations in (``T*H`` bf16) and out (``T*H`` bf16);
- the routing: ``topk_ids`` (int32) and ``topk_weights`` (float32), ``T*k`` each.

Counted as the kernel must move them, not as a given implementation does: the gfx950 shuffle's
scale column padding (K/32 rounded up to 8) and any re-reads are left out, so the fraction
``achieved_fraction(bytes, seconds, bandwidth)`` is an upper bound on how memory-efficient a
kernel is (1.0 = at the copy bandwidth). MXFP4 layout: OCP MX spec v1.0, sections 5.2-5.4.
"""

from __future__ import annotations

from fp4moe.mx.mxfp4 import BLOCK_SIZE
from fp4moe.reference.layout import shuffled_scale_shape

ACTIVATION_BYTES = 2  # bf16 hidden states in and out
TOPK_ID_BYTES = 4  # int32
TOPK_WEIGHT_BYTES = 4  # float32


def _check_positive(**values) -> None:
    for name, v in values.items():
        if not isinstance(v, int) or v < 0:
            raise ValueError(f"{name}: must be a non-negative integer, got {v!r}")


def _check_blocks(hidden: int, channels: int) -> None:
    if hidden % BLOCK_SIZE or channels % BLOCK_SIZE:
        raise ValueError(
            f"hidden {hidden} and channels {channels} must be multiples of the MXFP4 block ({BLOCK_SIZE})"
        )


def expert_weight_bytes(hidden: int, channels: int) -> int:
    """Packed FP4 bytes + e8m0 scale bytes of ONE expert computing ``channels`` intermediate channels."""
    _check_positive(hidden=hidden, channels=channels)
    _check_blocks(hidden, channels)
    w13 = 2 * channels * (hidden // 2) + 2 * channels * (hidden // BLOCK_SIZE)
    w2 = hidden * (channels // 2) + hidden * (channels // BLOCK_SIZE)
    return w13 + w2


def moe_bytes_moved(*, hidden: int, channels: int, touched_experts: int, tokens: int, top_k: int) -> int:
    """The least bytes one fused MoE call moves (see the module docstring)."""
    _check_positive(touched_experts=touched_experts, tokens=tokens, top_k=top_k)
    weights = touched_experts * expert_weight_bytes(hidden, channels)
    activations = 2 * tokens * hidden * ACTIVATION_BYTES
    routing = tokens * top_k * (TOPK_ID_BYTES + TOPK_WEIGHT_BYTES)
    return weights + activations + routing


def stage_bytes_moved(stage: str, *, hidden: int, channels: int, tokens: int) -> int:
    """One expert's stage: its weights and scales + bf16 activations in and out.

    stage1: ``x [T, H] -> act [T, n]`` with the w13 weights; stage2: ``act [T, n] -> y [T, H]``
    with the w2 weights.
    """
    _check_positive(hidden=hidden, channels=channels, tokens=tokens)
    _check_blocks(hidden, channels)
    acts = tokens * (hidden + channels) * ACTIVATION_BYTES
    if stage == "stage1":
        return 2 * channels * (hidden // 2 + hidden // BLOCK_SIZE) + acts
    if stage == "stage2":
        return hidden * (channels // 2 + channels // BLOCK_SIZE) + acts
    raise ValueError(f"stage: must be 'stage1' or 'stage2', got {stage!r}")


def weight_path_bytes_moved(*, experts: int, hidden: int, intermediate: int, padded: int, gu_interleave: bool = True) -> int:
    """The floor of ``weight_path.process_fp4_moe_weights``: read the raw layer once, write the
    processed (padded, shuffled) layer once, as an ideal fused pad+shuffle would. The output
    scales are counted at their shuffled shape (``fp4moe.reference.layout.shuffled_scale_shape``), since
    that padding is really written."""
    _check_positive(experts=experts, hidden=hidden, intermediate=intermediate, padded=padded)
    _check_blocks(hidden, intermediate)
    _check_blocks(hidden, padded)
    if padded < intermediate:
        raise ValueError(f"padded {padded} must be >= intermediate {intermediate}")
    raw = experts * expert_weight_bytes(hidden, intermediate)
    r13, c13 = shuffled_scale_shape(experts * 2 * padded, hidden // BLOCK_SIZE, gu_interleave)
    r2, c2 = shuffled_scale_shape(experts * hidden, padded // BLOCK_SIZE, gu_interleave)
    out = experts * (2 * padded * (hidden // 2) + hidden * (padded // 2)) + r13 * c13 + r2 * c2
    return raw + out
