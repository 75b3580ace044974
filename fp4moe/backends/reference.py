"""The reference backend: ``fp4moe.moe`` behind the backend interface.

Like aiter it takes the gfx950-shuffled weights and scales; it reads each routed expert
through the exact inverse layouts (``fp4moe.layout``), chosen by ``gate_mode``:
"interleave" = the GU-interleaved layout (SGLANG_USE_AITER_MOE_GU_ITLV=1), "separated" = the
plain layout. A layout built with the other flag reads as garbage, as on the real kernel.

Which implementation runs is chosen by device (``path="auto"``, the default): on a CUDA GPU
with Triton, bfloat16 activations, the GPU-bound ``fp4moe.moe_fast`` (same semantics, grouped
GEMMs, the work on the device: what the perf gate times); everywhere else the exact
``fp4moe.moe``, which stays the judge (``path="exact"`` forces it; tests compare the two).
"""

from __future__ import annotations

import torch

from fp4moe import layout, moe, moe_fast
from fp4moe.mxfp4 import BLOCK_SIZE, as_packed_uint8
from fp4moe.e8m0 import as_uint8

GATE_MODES = ("interleave", "separated")
PATHS = ("auto", "exact", "fast")


class ShuffledExpertWeights(moe.ExpertWeights):
    """Unshuffles one expert at a time, only the experts that are routed to."""

    def __init__(self, w1, w2, w1_scale, w2_scale, gate_mode: str):
        if gate_mode not in GATE_MODES:
            raise ValueError(f"gate_mode must be one of {GATE_MODES}, got {gate_mode!r}")
        object.__setattr__(self, "w13", as_packed_uint8(w1, "w1"))
        object.__setattr__(self, "w2", as_packed_uint8(w2, "w2"))
        object.__setattr__(self, "w13_scale", as_uint8(w1_scale, "w1_scale"))
        object.__setattr__(self, "w2_scale", as_uint8(w2_scale, "w2_scale"))
        object.__setattr__(self, "_itlv", gate_mode == "interleave")
        object.__setattr__(self, "_cache", {})

    def validate(self) -> None:
        e, p, h = self.experts, self.padded, self.hidden
        if self.w13.ndim != 3 or self.w2.ndim != 3:
            raise ValueError(f"w1 {tuple(self.w13.shape)} / w2 {tuple(self.w2.shape)}: expected 3-D [E, N, K/2]")
        if tuple(self.w2.shape) != (e, h, p // 2):
            raise ValueError(f"w2: shape {tuple(self.w2.shape)} does not match w1 {tuple(self.w13.shape)}; expected {(e, h, p // 2)}")
        for name, t, rows, cols in (
            ("w1_scale", self.w13_scale, e * 2 * p, h // BLOCK_SIZE),
            ("w2_scale", self.w2_scale, e * h, p // BLOCK_SIZE),
        ):
            want = layout.shuffled_scale_shape(rows, cols, self._itlv)
            if tuple(t.shape) != want:
                raise ValueError(
                    f"{name}: shape {tuple(t.shape)} is not the shuffled shape {want} of a [{rows}, {cols}] scale "
                    f"(gate_mode={'interleave' if self._itlv else 'separated'})"
                )

    def _expert(self, e: int):
        if e not in self._cache:
            p, h = self.padded, self.hidden
            w13 = layout.unshuffle_weight(self.w13[e : e + 1], is_guinterleave=self._itlv, gate_up=True)[0]
            w2 = layout.unshuffle_weight(self.w2[e : e + 1], is_guinterleave=self._itlv, gate_up=False)[0]
            s13 = layout.unshuffle_scale_rows(self.w13_scale[e * 2 * p : (e + 1) * 2 * p], h // BLOCK_SIZE, self._itlv, gate_up=True)
            s2 = layout.unshuffle_scale_rows(self.w2_scale[e * h : (e + 1) * h], p // BLOCK_SIZE, self._itlv, gate_up=False)
            self._cache[e] = (w13, s13, w2, s2)
        return self._cache[e]

    def gate_up(self, e, n_used, k_used):
        w, s, _, _ = self._expert(e)
        p, kb, ks = self.padded, k_used // 2, k_used // BLOCK_SIZE
        return w[:n_used, :kb], s[:n_used, :ks], w[p : p + n_used, :kb], s[p : p + n_used, :ks]

    def down(self, e, h_used, k_used):
        _, _, w, s = self._expert(e)
        return w[:h_used, : k_used // 2], s[:h_used, : k_used // BLOCK_SIZE]


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
        return hidden_states.dtype == torch.bfloat16 and moe_fast.fast_path_available(hidden_states.device)[0]

    def fused_moe(
        self,
        hidden_states,
        w1,
        w2,
        topk_weight,
        topk_ids,
        *,
        expert_mask=None,
        activation="silu",
        quant_type="per_1x32",
        doweight_stage1=False,
        w1_scale=None,
        w2_scale=None,
        a1_scale=None,
        a2_scale=None,
        hidden_pad=0,
        intermediate_pad=0,
        bias1=None,
        bias2=None,
        swiglu_limit=None,
        gate_mode="interleave",
        act_mode="a16w4",
    ) -> torch.Tensor:
        if activation != "silu":
            raise ValueError(f"activation: only 'silu' is implemented, got {activation!r}")
        if quant_type != "per_1x32":
            raise ValueError(f"quant_type: only 'per_1x32' (MXFP4 weights) is implemented, got {quant_type!r}")
        if w1_scale is None or w2_scale is None:
            raise ValueError("w1_scale and w2_scale are required for per_1x32 weights")
        if a1_scale is not None or a2_scale is not None:
            raise ValueError("a1_scale/a2_scale: static activation scales are not used by per_1x32 (dynamic MXFP8)")
        if bias1 is not None or bias2 is not None:
            raise ValueError("bias1/bias2: DeepSeek-V4 experts have no bias; not implemented in the reference")
        kw = dict(
            hidden_pad=hidden_pad,
            intermediate_pad=intermediate_pad,
            swiglu_limit=swiglu_limit,
            act_mode=act_mode,
            doweight_stage1=doweight_stage1,
            expert_mask=expert_mask,
            check_scales=self.check_scales,
        )
        if self.uses_fast_path(hidden_states):
            layer = moe_fast.prepared_layer(w1, w2, w1_scale, w2_scale, gate_mode)
            return moe_fast.fused_moe_fast(hidden_states, layer, topk_weight, topk_ids, **kw)
        ew = ShuffledExpertWeights(w1, w2, w1_scale, w2_scale, gate_mode)
        return moe.fused_moe_reference(hidden_states, ew, topk_weight, topk_ids, **kw)
