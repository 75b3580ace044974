"""NaN guard: why pad propagation is a correctness property, not only a speed one.

Uninitialised or 0xFF scale bytes in the padding are e8m0 NaN. A kernel told the pad never
reads them: the output is finite and equal to the unpadded result. A kernel not told reads
them: the output is NaN. The reference, by default, refuses NaN scales in any region it reads.
"""

from __future__ import annotations

import pytest
import torch

from fp4moe.model import catalogue
from fp4moe.mx import e8m0
from fp4moe.reference import inputs, quant_info, weight_path
from fp4moe.reference.reference_backend import ReferenceBackend

CASES = [("dsv4-pro", 8), ("dsv4-pro", 16), ("dsv4-flash", 16)]  # pads 128, 64, 128 at align 256


def _poisoned(model, tp, gu, device):
    pc = catalogue.parallel_config(model, tp)
    raw = inputs.layer_on(inputs.make_raw_layer(experts=3, hidden=128, intermediate=pc.intermediate_per_partition, seed=31), device)
    pw = weight_path.process_fp4_moe_weights(*raw.tensors(), align=256, gu_interleave=gu)
    assert pw.intermediate_pad > 0
    m13, m2 = inputs.scale_pad_masks(pw)
    pw.w13_scale[m13.to(device)] = e8m0.E8M0_NAN
    pw.w2_scale[m2.to(device)] = e8m0.E8M0_NAN
    ref = weight_path.process_fp4_moe_weights(*raw.tensors(), align=128, gu_interleave=gu)
    tokens = [t.to(device) for t in inputs.make_tokens(tokens=6, hidden=128, experts=3, top_k=2, seed=32)]
    return pw, ref, tokens


@pytest.mark.parametrize("device", inputs.device_params())
@pytest.mark.parametrize("gu", [True, False], ids=["gu_itlv", "gu_sep"])
@pytest.mark.parametrize("model,tp", CASES, ids=[f"{m}-tp{t}" for m, t in CASES])
def test_nan_in_padding_is_harmless_when_pad_is_propagated(model, tp, gu, device):
    pw, ref, (x, w, ids) = _poisoned(model, tp, gu, device)
    out = quant_info.call_fused_moe(ReferenceBackend(), x, w, ids, quant_info.build_quant_info(pw))
    unpadded = quant_info.call_fused_moe(ReferenceBackend(), x, w, ids, quant_info.build_quant_info(ref))
    assert torch.isfinite(out).all()
    assert torch.equal(out, unpadded)


@pytest.mark.parametrize("device", inputs.device_params())
@pytest.mark.parametrize("model,tp", CASES, ids=[f"{m}-tp{t}" for m, t in CASES])
def test_nan_in_padding_poisons_a_kernel_that_was_not_told(model, tp, device):
    pw, _, (x, w, ids) = _poisoned(model, tp, True, device)
    info = quant_info.build_quant_info(pw)
    info.intermediate_pad = 0
    kernel_like = ReferenceBackend(check_scales=False)  # computes what a kernel would
    out = quant_info.call_fused_moe(kernel_like, x, w, ids, info)
    assert torch.isnan(out).all(), "every token is routed to a poisoned expert: all outputs must be NaN"
    with pytest.raises(ValueError, match="w1_scale.*0xFF"):
        quant_info.call_fused_moe(ReferenceBackend(), x, w, ids, info)
