"""The reference backend's options and refusals (fp4moe/reference/reference_backend.py):

- ``path`` is kept and decides the implementation: "exact" never the fast path, "fast" always
  (it runs on the CPU too and equals the exact path bitwise), "auto" not on a CPU, bf16 or not;
- every keyword the reference does not implement is refused on its own (one of a pair is
  enough), with the message naming it;
- ``swiglu_limit`` and ``doweight_stage1`` reach the computation: the backend's output is the
  exact MoE's with the same option, and differs from the output without it.
"""

from __future__ import annotations

import pytest
import torch

from fp4moe.reference import inputs, moe, quant_info, weight_path
from fp4moe.reference.expert_weights import ShuffledExpertWeights
from fp4moe.reference.reference_backend import ReferenceBackend


@pytest.fixture(scope="module")
def layer():
    raw = inputs.make_raw_layer(experts=2, hidden=128, intermediate=64, seed=3)
    info = quant_info.build_quant_info(weight_path.process_fp4_moe_weights(*raw.tensors()))
    x, w, ids = inputs.make_tokens(tokens=4, hidden=128, experts=2, top_k=2, seed=4)
    return info, x, w, ids


def test_an_unknown_path_is_refused_by_name_and_a_known_one_kept():
    with pytest.raises(ValueError, match=r"^path must be one of \('auto', 'exact', 'fast'\), got 'gpu'$"):
        ReferenceBackend(path="gpu")
    assert ReferenceBackend(path="exact").path == "exact" and ReferenceBackend().path == "auto"


def test_the_path_decides_the_implementation():
    bf16, f32 = torch.zeros(1, 128, dtype=torch.bfloat16), torch.zeros(1, 128)
    assert [ReferenceBackend(path=p).uses_fast_path(bf16) for p in ("exact", "fast", "auto")] == [False, True, False]
    assert [ReferenceBackend(path=p).uses_fast_path(f32) for p in ("exact", "fast", "auto")] == [False, True, False]


def test_the_fast_path_on_the_cpu_equals_the_exact_path(layer):
    info, x, w, ids = layer
    exact = quant_info.call_fused_moe(ReferenceBackend(path="exact"), x, w, ids, info)
    assert torch.equal(quant_info.call_fused_moe(ReferenceBackend(path="fast"), x, w, ids, info), exact)


@pytest.mark.parametrize("override, message", [
    ({"activation": "gelu"}, "activation: only 'silu' is implemented, got 'gelu'"),
    ({"quant_type": "per_token"}, "quant_type: only 'per_1x32' (MXFP4 weights) is implemented, got 'per_token'"),
    ({"w1_scale": None}, "w1_scale and w2_scale are required for per_1x32 weights"),
    ({"w2_scale": None}, "w1_scale and w2_scale are required for per_1x32 weights"),
    ({"a1_scale": torch.ones(1)}, "a1_scale/a2_scale: static activation scales are not used by per_1x32 (dynamic MXFP8)"),
    ({"a2_scale": torch.ones(1)}, "a1_scale/a2_scale: static activation scales are not used by per_1x32 (dynamic MXFP8)"),
    ({"bias1": torch.ones(1)}, "bias1/bias2: DeepSeek-V4 experts have no bias; not implemented in the reference"),
    ({"bias2": torch.ones(1)}, "bias1/bias2: DeepSeek-V4 experts have no bias; not implemented in the reference"),
], ids=lambda v: next(iter(v)) if isinstance(v, dict) else "")
def test_each_unimplemented_keyword_is_refused_on_its_own(layer, override, message):
    info, x, w, ids = layer
    kw = {**quant_info.fused_moe_kwargs(info), **override}
    with pytest.raises(ValueError) as e:
        ReferenceBackend().fused_moe(x, info.w13_weight, info.w2_weight, w, ids, **kw)
    assert str(e.value) == message


@pytest.mark.parametrize("option", [{"swiglu_limit": 0.02}, {"doweight_stage1": True}])
def test_activation_options_reach_the_computation(layer, option):
    info, x, w, ids = layer
    kw = {**quant_info.fused_moe_kwargs(info), **option}
    got = ReferenceBackend().fused_moe(x, info.w13_weight, info.w2_weight, w, ids, **kw)
    ew = ShuffledExpertWeights(info.w13_weight, info.w2_weight, info.w13_scale, info.w2_scale, "interleave")
    assert torch.equal(got, moe.fused_moe_reference(x, ew, w, ids, **option))
    assert not torch.equal(got, moe.fused_moe_reference(x, ew, w, ids))


@pytest.mark.parametrize("option", [{"swiglu_limit": 0.02}, {"doweight_stage1": True}])
def test_the_fast_path_takes_the_options_too(layer, option):
    info, x, w, ids = layer
    kw = {**quant_info.fused_moe_kwargs(info), **option}
    fast = ReferenceBackend(path="fast").fused_moe(x, info.w13_weight, info.w2_weight, w, ids, **kw)
    assert torch.equal(fast, ReferenceBackend(path="exact").fused_moe(x, info.w13_weight, info.w2_weight, w, ids, **kw))


def test_auto_takes_the_fast_path_for_bf16_where_it_is_available(monkeypatch):
    from fp4moe.reference import grouped_moe

    monkeypatch.setattr(grouped_moe, "fast_path_available", lambda device: (True, ""))
    auto = ReferenceBackend()
    assert auto.uses_fast_path(torch.zeros(1, 128, dtype=torch.bfloat16))
    assert not auto.uses_fast_path(torch.zeros(1, 128))
    assert not ReferenceBackend(path="exact").uses_fast_path(torch.zeros(1, 128, dtype=torch.bfloat16))


@pytest.mark.parametrize("bad, message", [
    ("w1", "w1: expected packed FP4 bytes (uint8, int8 or float4_e2m1fn_x2), got torch.float32"),
    ("w2", "w2: expected packed FP4 bytes (uint8, int8 or float4_e2m1fn_x2), got torch.float32"),
    ("w1_scale", "w1_scale: expected e8m0 bytes (uint8, int8 or float8_e8m0fnu), got torch.float32"),
    ("w2_scale", "w2_scale: expected e8m0 bytes (uint8, int8 or float8_e8m0fnu), got torch.float32"),
])
def test_shuffled_weights_name_the_tensor_of_a_wrong_dtype(layer, bad, message):
    info = layer[0]
    t = {"w1": info.w13_weight, "w2": info.w2_weight, "w1_scale": info.w13_scale, "w2_scale": info.w2_scale}
    t[bad] = t[bad].float()
    with pytest.raises(TypeError) as e:
        ShuffledExpertWeights(t["w1"], t["w2"], t["w1_scale"], t["w2_scale"], "interleave")
    assert str(e.value) == message
    with pytest.raises(ValueError, match=r"^gate_mode must be one of \('interleave', 'separated'\), got 'itlv'$"):
        ShuffledExpertWeights(info.w13_weight, info.w2_weight, info.w13_scale, info.w2_scale, "itlv")


@pytest.mark.parametrize("gate_mode", ["interleave", "separated"])
def test_shuffled_weights_validate_names_what_does_not_match(gate_mode):
    raw = inputs.make_raw_layer(experts=2, hidden=128, intermediate=64, seed=9)
    pw = weight_path.process_fp4_moe_weights(*raw.tensors(), gu_interleave=gate_mode == "interleave")
    w1, w2, s1, s2 = pw.w13, pw.w2, pw.w13_scale, pw.w2_scale  # [2, 256, 64], [2, 128, 64], scales 2-D

    def refused(*tensors):
        with pytest.raises(ValueError) as e:
            ShuffledExpertWeights(*tensors, gate_mode).validate()
        return str(e.value)

    assert refused(w1, w2[0], s1, s2) == "w1 (2, 256, 64) / w2 (128, 64): expected 3-D [E, N, K/2]"
    assert refused(w1, w2[:, :, :32], s1, s2) == "w2: shape (2, 128, 32) does not match w1 (2, 256, 64); expected (2, 128, 64)"
    rows13, rows2 = 512, 256  # E * 2P and E * H: multiples of 256, the same rows in both layouts
    assert refused(w1, w2, s1[:-32], s2) == (f"w1_scale: shape ({rows13 - 32}, 8) is not the shuffled shape ({rows13}, 8) "
                                             f"of a [512, 4] scale (gate_mode={gate_mode})")
    assert refused(w1, w2, s1, s2[:, :4]) == (f"w2_scale: shape ({rows2}, 4) is not the shuffled shape ({rows2}, 8) "
                                              f"of a [256, 4] scale (gate_mode={gate_mode})")


def test_quant_info_carries_the_options_and_refuses_unshuffled_weights():
    raw = inputs.make_raw_layer(experts=2, hidden=128, intermediate=64, seed=9)
    info = quant_info.build_quant_info(weight_path.process_fp4_moe_weights(*raw.tensors()), doweight_stage1=True)
    assert info.doweight_stage1 is True and quant_info.fused_moe_kwargs(info)["doweight_stage1"] is True
    with pytest.raises(ValueError) as e:
        quant_info.build_quant_info(weight_path.process_fp4_moe_weights(*raw.tensors(), shuffle=False))
    assert str(e.value) == "processed weights: the kernel takes shuffled weights (process with shuffle=True)"
