"""Expert weights as the kernels hold them: gfx950-shuffled bytes with the pads recorded.

``ShuffledExpertWeights`` un-shuffles for the exact MoE (``fp4moe.reference.moe``) and keeps the
shuffled bytes for the grouped GPU MoE (``fp4moe.reference.grouped_moe``), which decodes them on the device.
"""

from __future__ import annotations

from fp4moe.mx.e8m0 import as_uint8
from fp4moe.mx.mxfp4 import BLOCK_SIZE, as_packed_uint8
from fp4moe.reference import layout, moe

#: the two gate/up layouts of w13 (aiter's ``gate_mode``)
GATE_MODES = ("interleave", "separated")

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
