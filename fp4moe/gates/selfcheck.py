"""``fp4moe-gate selfcheck`` (the default job): the CPU tier's main check, in seconds.

1. The DeepSeek-V4 pad table: every catalogue row x align {128, 256}: I_p, padded, pad.
2. Codec: all 16 E2M1 codes and all 256 E8M0 bytes decode to the spec values; a
   quantize -> dequantize round trip of exactly representable blocks is exact.
3. Layouts: the gfx950 shuffles invert exactly; the golden aiter index maps match (when
   ../shared is present).
4. The reference path on every catalogue row scaled down: (align 256 + pad) == align 128
   bitwise; 0xFF scale bytes in the padding stay out of the output when the pad is propagated.
Exit 0 when everything holds, 1 when something does not (``fp4moe.commands.selfcheck``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import torch

from fp4moe.model import catalogue
from fp4moe.mx import e8m0, mxfp4
from fp4moe.reference import inputs, layout, quant_info, weight_path
from fp4moe.reference.reference_backend import ReferenceBackend


class CheckFailed(Exception):
    """A check did not hold (its message says which and by how much). Raised explicitly, never by
    an ``assert`` statement: ``python -O`` / ``PYTHONOPTIMIZE=1`` would strip those and pass."""


def _require(ok, message: str) -> None:
    if not ok:
        raise CheckFailed(message)


def pad_rows(aligns=(128, 256)):
    rows = []
    for pc in catalogue.catalogue_rows():
        for align in aligns:
            plan = weight_path.pad_table(pc.model, pc.tp, pc.ep, align)
            rows.append(
                dict(model=pc.model.name, tp=pc.tp, ep=pc.ep, align=align, experts=pc.local_experts,
                     I_p=plan.intermediate, padded=plan.padded, pad=plan.intermediate_pad)
            )
    return rows


def _check_codec() -> str:
    got = mxfp4.decode_e2m1(torch.arange(16, dtype=torch.uint8)).tolist()
    want = [math.copysign(v, 1 if c < 8 else -1) for c, v in enumerate([0, .5, 1, 1.5, 2, 3, 4, 6] * 2)]
    _require(got == want, f"E2M1 decode {got} != {want}")
    s = e8m0.decode(torch.arange(256, dtype=torch.uint8))
    bad = [b for b in range(255) if s[b].item() != 2.0 ** (b - 127)]
    _require(not bad and math.isnan(s[255].item()),
             f"E8M0 decode: byte {bad[0]} -> {s[bad[0]].item()}" if bad else f"E8M0 decode: 0xFF -> {s[255].item()}, not NaN")
    g = torch.Generator().manual_seed(7)
    codes = torch.randint(0, 16, (64, 32), generator=g, dtype=torch.uint8)
    codes[:, 0] = 7  # each block holds +6 so that the round_up/floor scale is exactly 2^exp
    exps = torch.randint(-20, 20, (64, 1), generator=g)
    x = torch.ldexp(mxfp4.decode_e2m1(codes), exps)
    for mode in ("floor", "round_up"):
        _require(torch.equal(mxfp4.dequantize(*mxfp4.quantize(x, mode)), x), f"round trip ({mode})")
    return "16 E2M1 codes, 256 E8M0 bytes, exact round trip of 64 representable blocks"


def _check_layouts() -> str:
    g = torch.Generator().manual_seed(3)
    w = torch.randint(0, 256, (2, 768, 192), generator=g, dtype=torch.uint8)
    s = torch.randint(0, 255, (2 * 768, 12), generator=g, dtype=torch.uint8)
    for itlv in (False, True):
        back = layout.unshuffle_weight(layout.shuffle_weight(w, is_guinterleave=itlv, gate_up=True), is_guinterleave=itlv, gate_up=True)
        _require(torch.equal(back, w), f"weight shuffle/unshuffle (interleave={itlv}) is not the identity")
        sh = layout.shuffle_scale(s, 2, itlv, True)
        _require(torch.equal(layout.unshuffle_scale(sh, *s.shape, 2, itlv, True), s),
                 f"scale shuffle/unshuffle (interleave={itlv}) is not the identity")
    msg = "shuffle/unshuffle exact"
    try:
        from fp4moe.reference.golden import check_all_golden

        n = check_all_golden()
        msg += f"; {n} golden aiter layouts match"
    except FileNotFoundError as exc:
        msg += f"; golden layouts not checked ({exc})"
    return msg


def _check_reference() -> str:
    be = ReferenceBackend()
    n = 0
    for pc in catalogue.catalogue_rows():
        if pc.ep != 1:
            continue
        row = inputs.scaled_row(pc, experts=2, hidden=128)
        raw = inputs.make_raw_layer(experts=row.experts, hidden=row.hidden, intermediate=row.intermediate, seed=11)
        x, w, ids = inputs.make_tokens(tokens=4, hidden=row.hidden, experts=row.experts, top_k=row.top_k, seed=12)
        outs = {}
        for align in (128, 256):
            pw = weight_path.process_fp4_moe_weights(*raw.tensors(), align=align)
            if pw.intermediate_pad:  # poison the padded channels' scales: they must never be read
                m13, m2 = inputs.scale_pad_masks(pw)
                pw.w13_scale[m13] = e8m0.E8M0_NAN
                pw.w2_scale[m2] = e8m0.E8M0_NAN
            outs[align] = quant_info.call_fused_moe(be, x, w, ids, quant_info.build_quant_info(pw))
        _require(bool(torch.isfinite(outs[256]).all()), f"{pc.label}: NaN leaked from padded scales")
        _require(torch.equal(outs[128], outs[256]), f"{pc.label}: align 256 + pad != align 128")
        n += 1
    return f"{n} catalogue rows: align256+pad == align128 bitwise, NaN-poisoned pads never read"


@dataclass
class SelfcheckResult:
    """The pad table, each check (name, ok, detail) and the wall time."""

    pad_table: list[dict]
    checks: list[dict]
    seconds: float

    @property
    def failed(self) -> list[str]:
        return [c["name"] for c in self.checks if not c["ok"]]

    def to_dict(self) -> dict:
        return {"pad_table": self.pad_table, "checks": self.checks, "ok": not self.failed, "seconds": round(self.seconds, 2)}


CHECKS = (("codec", _check_codec), ("layouts", _check_layouts), ("reference", _check_reference))


def selfcheck(on_check: Callable[[dict], None] | None = None) -> SelfcheckResult:
    """Every check; a :class:`CheckFailed` (or the golden maps' explicit ``AssertionError``) is a
    failed check (named), anything else escapes (exit 2). No ``assert`` statement decides here:
    ``-O`` gives the same verdicts.
    ``on_check`` sees each check's dict as soon as it is decided (the text report)."""
    t0 = time.perf_counter()
    table = pad_rows()
    checks = []
    for name, check in CHECKS:
        try:
            checks.append(dict(name=name, ok=True, detail=check()))
        except (CheckFailed, AssertionError) as exc:
            checks.append(dict(name=name, ok=False, detail=str(exc)))
        if on_check:
            on_check(checks[-1])
    return SelfcheckResult(table, checks, time.perf_counter() - t0)
