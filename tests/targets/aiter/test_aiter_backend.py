"""CPU tests of the aiter backend's mapping (fp4moe.targets.aiter.backend), against a FAKE aiter.

The fake is a handful of modules put in ``sys.modules`` for one test (``monkeypatch``): enums
with aiter's member names, ``aiter.dtypes`` with the torch dtypes aiter uses, and an
``aiter.fused_moe.fused_moe`` with the current keyword signature (ROCm/aiter, 2026) that
records what it received and the AITER_BF16_FP8_MOE_BOUND value in force during the call.
It checks the backend's side of the contract (keywords, enums, dtype views, pads, the
environment); the kernel itself runs only in tests/targets/aiter/test_gfx950_aiter.py.
"""

from __future__ import annotations

import enum
import os
import sys
import types

import pytest
import torch

from fp4moe.infra.errors import GateCannotRun
from fp4moe.reference import layout
from fp4moe.reference.inputs import make_raw_layer, make_tokens
from fp4moe.reference.quant_info import build_quant_info, call_fused_moe
from fp4moe.reference.weight_path import process_fp4_moe_weights
from fp4moe.targets.aiter.backend import ACT_MODE_BOUND, AITER_CALL_KEYWORDS, BOUND_ENV, AiterBackend, activation_dtype_name
from fp4moe.targets.backends import get_backend

FP4 = getattr(torch, "float4_e2m1fn_x2", torch.uint8)
E8M0 = getattr(torch, "float8_e8m0fnu", torch.uint8)
# small layer with a real pad: I_p 96 -> 128 at align 128 (intermediate_pad 32)
EXPERTS, HIDDEN, INTER, TOPK, TOKENS = 4, 256, 96, 2, 5


class ActivationType(enum.Enum):
    Silu = 0
    Gelu = 1
    Swiglu = 2


class QuantType(enum.Enum):
    No = 0
    per_Token = 2
    per_1x32 = 4


def install_fake_aiter(monkeypatch, with_gate_mode=True):
    calls = []

    def fused_moe(hidden_states, w1, w2, topk_weight, topk_ids, expert_mask=None, activation=ActivationType.Silu,
                  quant_type=QuantType.No, doweight_stage1=False, w1_scale=None, w2_scale=None, a1_scale=None,
                  a2_scale=None, block_size_M=None, num_local_tokens=None, moe_sorting_dispatch_policy=0, dtype=None,
                  hidden_pad=0, intermediate_pad=0, bias1=None, bias2=None, splitk=0, swiglu_limit=0.0,
                  gate_mode="separated", no_combine=False):
        calls.append(dict(locals(), bound=os.environ.get(BOUND_ENV)))
        return torch.full_like(hidden_states, 0.5)

    if not with_gate_mode:
        def fused_moe(hidden_states, w1, w2, topk_weight, topk_ids, expert_mask=None, activation=None,  # noqa: F811
                      quant_type=None, doweight_stage1=False, w1_scale=None, w2_scale=None, a1_scale=None,
                      a2_scale=None, block_size_M=None, num_local_tokens=None, moe_sorting_dispatch_policy=0,
                      dtype=None, hidden_pad=0, intermediate_pad=0, bias1=None, bias2=None):
            calls.append(dict(locals(), bound=os.environ.get(BOUND_ENV)))
            return torch.full_like(hidden_states, 0.5)

    aiter = types.ModuleType("aiter")
    aiter.ActivationType, aiter.QuantType = ActivationType, QuantType
    aiter.dtypes = types.SimpleNamespace(fp4x2=FP4, fp8_e8m0=E8M0)
    fm = types.ModuleType("aiter.fused_moe")
    fm.fused_moe = fused_moe
    ops = types.ModuleType("aiter.ops")
    shuffle = types.ModuleType("aiter.ops.shuffle")
    shuffle.shuffle_weight = lambda x, layout=(16, 16), use_int4=False, is_guinterleave=False, gate_up=False: globals()[
        "layout"
    ].shuffle_weight(x, layout, is_guinterleave=is_guinterleave, gate_up=gate_up)
    shuffle.shuffle_scale = lambda src, experts_cnt=None, is_guinterleave=False, gate_up=False: globals()[
        "layout"
    ].shuffle_scale(src, experts_cnt, is_guinterleave=is_guinterleave, gate_up=gate_up)
    aiter.fused_moe, aiter.ops, ops.shuffle = fm, ops, shuffle
    for name, mod in (("aiter", aiter), ("aiter.fused_moe", fm), ("aiter.ops", ops), ("aiter.ops.shuffle", shuffle)):
        monkeypatch.setitem(sys.modules, name, mod)
    return calls


@pytest.fixture(scope="module")
def raw():
    return make_raw_layer(experts=EXPERTS, hidden=HIDDEN, intermediate=INTER, seed=11)


@pytest.fixture(scope="module")
def processed(raw):
    return process_fp4_moe_weights(raw.w13, raw.w13_scale, raw.w2, raw.w2_scale, align=128, gu_interleave=True)


@pytest.fixture(scope="module")
def tokens():
    return make_tokens(tokens=TOKENS, hidden=HIDDEN, experts=EXPERTS, top_k=TOPK, seed=12)


def test_get_backend_returns_aiter_backend():
    assert isinstance(get_backend("aiter"), AiterBackend)


def test_keywords_enums_views_and_pads_reach_aiter(monkeypatch, processed, tokens):
    calls = install_fake_aiter(monkeypatch)
    monkeypatch.delenv(BOUND_ENV, raising=False)
    x, w, ids = tokens
    info = build_quant_info(processed)
    before = [t.clone() for t in (processed.w13, processed.w13_scale, processed.w2, processed.w2_scale)]
    out = call_fused_moe(AiterBackend(), x, w, ids, info, act_mode="a8w4")
    assert out.shape == x.shape and len(calls) == 1
    c = calls[0]
    assert processed.intermediate_pad == 32 and c["intermediate_pad"] == 32 and c["hidden_pad"] == 0
    assert c["gate_mode"] == "interleave"
    assert c["quant_type"] is QuantType.per_1x32 and c["activation"] is ActivationType.Silu
    assert c["w1"].dtype == FP4 and c["w2"].dtype == FP4 and c["w1"].is_shuffled and c["w2"].is_shuffled
    assert c["w1_scale"].dtype == E8M0 and c["w2_scale"].dtype == E8M0
    assert torch.equal(c["w1"].view(torch.uint8), processed.w13) and torch.equal(c["w2_scale"].view(torch.uint8), processed.w2_scale)
    assert c["topk_ids"].dtype == torch.int32 and c["topk_weight"].dtype == torch.float32
    assert c["swiglu_limit"] == 0.0  # not set -> not passed -> aiter's default
    assert c["bound"] == "0"  # a8w4: fp8 activations at every M
    assert BOUND_ENV not in os.environ  # restored after the call
    # the caller's tensors: same bytes, no attribute added
    for b, t in zip(before, (processed.w13, processed.w13_scale, processed.w2, processed.w2_scale)):
        assert torch.equal(b, t)
    assert not hasattr(processed.w13, "is_shuffled")


def test_every_passed_keyword_is_listed_for_the_conformance_check(monkeypatch, processed, tokens):
    install_fake_aiter(monkeypatch)
    x, w, ids = tokens
    kw = AiterBackend().build_kwargs(x, processed.w13, processed.w2, w, ids, w1_scale=processed.w13_scale,
                                     w2_scale=processed.w2_scale, swiglu_limit=7.0, intermediate_pad=32)
    assert set(kw) <= set(AITER_CALL_KEYWORDS["fused_moe"])
    assert set(AITER_CALL_KEYWORDS["fused_moe"]) == set(kw)  # with swiglu_limit set, every listed keyword is used
    assert kw["swiglu_limit"] == 7.0


@pytest.mark.parametrize("act_mode, tokens_m, want", [("a8w4", 1, "fp8"), ("a16w4", 4096, "bf16"), ("auto", 255, "bf16"), ("auto", 256, "fp8")])
def test_act_mode_selects_bound(monkeypatch, processed, tokens, act_mode, tokens_m, want):
    calls = install_fake_aiter(monkeypatch)
    monkeypatch.setenv(BOUND_ENV, "256")  # the runner's value must come back after the call
    x, w, ids = tokens
    call_fused_moe(AiterBackend(), x, w, ids, build_quant_info(processed), act_mode=act_mode)
    bound = calls[0]["bound"]
    assert bound == (ACT_MODE_BOUND[act_mode] or "256")
    assert ("bf16" if tokens_m < int(bound) else "fp8") == want == activation_dtype_name(tokens_m, act_mode, "256")
    assert os.environ[BOUND_ENV] == "256"


def test_bad_inputs_are_named(monkeypatch, processed, tokens):
    install_fake_aiter(monkeypatch)
    x, w, ids = tokens
    info = build_quant_info(processed)
    with pytest.raises(ValueError, match="act_mode"):
        call_fused_moe(AiterBackend(), x, w, ids, info, act_mode="a2w2")
    with pytest.raises(ValueError, match="separated"):
        AiterBackend().fused_moe(x, info.w13_weight, info.w2_weight, w, ids, gate_mode="separated", act_mode="a8w4",
                                 w1_scale=info.w13_scale, w2_scale=info.w2_scale)
    monkeypatch.setenv(BOUND_ENV, "zero")
    with pytest.raises(ValueError, match=BOUND_ENV):
        call_fused_moe(AiterBackend(), x, w, ids, info, act_mode="a8w4")
    monkeypatch.delenv(BOUND_ENV)
    with pytest.raises(TypeError, match="w1"):
        AiterBackend().fused_moe(x, info.w13_weight.float(), info.w2_weight, w, ids, w1_scale=info.w13_scale, w2_scale=info.w2_scale)


def test_old_aiter_without_gate_mode_refuses_interleaved(monkeypatch, raw, processed, tokens):
    calls = install_fake_aiter(monkeypatch, with_gate_mode=False)
    x, w, ids = tokens
    with pytest.raises(GateCannotRun, match="gate_mode"):
        call_fused_moe(AiterBackend(), x, w, ids, build_quant_info(processed), act_mode="a16w4")
    assert not calls
    # separated (plain) weights need no gate_mode: the old signature gets no unknown keyword
    plain = process_fp4_moe_weights(raw.w13, raw.w13_scale, raw.w2, raw.w2_scale, align=128, gu_interleave=False)
    call_fused_moe(AiterBackend(), x, w, ids, build_quant_info(plain), act_mode="a4w4")
    assert len(calls) == 1 and "gate_mode" not in calls[0] and calls[0]["intermediate_pad"] == 32


def test_import_failure_is_a_clear_cannot_run(monkeypatch, processed, tokens):
    monkeypatch.setitem(sys.modules, "aiter", None)  # `import aiter` raises ImportError
    x, w, ids = tokens
    with pytest.raises(GateCannotRun, match="import aiter failed"):
        call_fused_moe(AiterBackend(), x, w, ids, build_quant_info(processed))


def test_prepare_weights_with_aiter_shuffles_matches_reference(monkeypatch, raw, processed):
    install_fake_aiter(monkeypatch)  # its shuffles are fp4moe.reference.layout: checks the plumbing, not aiter
    p = AiterBackend().prepare_weights(raw.w13, raw.w13_scale, raw.w2, raw.w2_scale, align=128, use_aiter_shuffle=True)
    for name in ("w13", "w13_scale", "w2", "w2_scale"):
        assert torch.equal(getattr(p, name), getattr(processed, name)), name
    assert (p.intermediate_pad, p.shuffled, p.gu_interleave) == (32, True, True)
    assert layout.shuffled_scale_shape(EXPERTS * HIDDEN, 128 // 32, True) == tuple(p.w2_scale.shape)

