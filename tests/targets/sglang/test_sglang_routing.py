"""The routing contract at the kernel boundary, judged without SGLang: the float64 router
reference (``fp4moe.reference.routing``) as these checks use it, and the ``expert_ids`` / ``routing_once`` judges of
``fp4moe.targets.sglang.checks`` on recorded (built-in-the-test) kernel inputs. The SGLang drive
itself is judged in the sglang tier (``test_sglang_tier.py``), its mutants in the zoo."""

from __future__ import annotations

import math

import pytest
import torch

from fp4moe.model.catalogue import ScoreMode
from fp4moe.reference import routing
from fp4moe.targets.sglang import checks, target
from fp4moe.targets.sglang import router_numerics as rn


def _route(logits, bias, k, scaling):
    return routing.reference_topk(logits, k, ScoreMode.SQRTSOFTPLUS, renormalize=True, scaling=scaling, bias=bias)


def test_the_fp32_edge_is_where_one_plus_exp_rounds_to_one_and_float64_keeps_going():
    below, above = rn.FP32_LOG1P_EDGE - 1e-3, rn.FP32_LOG1P_EDGE + 1e-3
    f = torch.float32
    assert torch.log(1 + torch.exp(torch.tensor(below, dtype=f))) == 0  # the #34459 bug
    assert torch.log(1 + torch.exp(torch.tensor(above, dtype=f))) > 0
    x = torch.tensor([[-104.0, -20.0, 0.0, 200.0]], dtype=torch.float64)
    want = torch.tensor([math.exp(-52.0), math.sqrt(math.log1p(math.exp(-20.0))), math.sqrt(math.log(2.0)), math.sqrt(200.0)],
                        dtype=torch.float64)
    assert torch.allclose(routing.scores(x, ScoreMode.SQRTSOFTPLUS)[0], want, rtol=1e-12, atol=0)
    assert min(rn.PROBE_X) == -104.0 and max(rn.PROBE_X) == 200.0


def test_the_reference_route_renormalises_once_scales_once_and_the_bias_only_steers():
    g = torch.Generator().manual_seed(7)
    logits = torch.randn(5, 8, generator=g, dtype=torch.float64) * 3
    logits[1] = -200.0 - torch.rand(8, generator=g, dtype=torch.float64)  # past any fp32 softplus, not float64's
    bias = torch.randn(8, generator=g, dtype=torch.float64)
    w, ids = _route(logits, bias, 2, 1.5)
    assert torch.isfinite(w).all() and torch.allclose(w.sum(-1), torch.full((5,), 1.5, dtype=torch.float64), rtol=1e-15)
    s = routing.scores(logits, ScoreMode.SQRTSOFTPLUS)[0]
    assert sorted(ids[0].tolist()) == sorted(torch.topk(s + bias, 2).indices.tolist())
    assert torch.allclose(w[0], s[ids[0]] / s[ids[0]].sum() * 1.5, rtol=1e-15)


# --------------------------------------------------------------------------- expert_ids


def test_expert_ids_hold_for_in_range_ids_and_zero_weight_padding():
    ids = [[0, 3], [1, 2], [0, 0], [0, 0]]
    w = [[0.9, 0.6], [1.0, 0.5], [0.0, 0.0], [0.0, 0.0]]
    assert checks.expert_id_problems(ids, w, n_real=2, n_ids=4) == []


@pytest.mark.parametrize("ids, w, why", [
    ([[0, 3], [-1, -1]], [[0.9, 0.6], [0.0, 0.0]], "padded row 1: ids [-1, -1]"),  # vLLM #57036 / SGLang #39804
    ([[0, 4], [0, 0]], [[0.9, 0.6], [0.0, 0.0]], "real row 0: ids [4]"),  # past E_local
    ([[0, 3], [2, 1]], [[0.9, 0.6], [0.7, 0.8]], "padded row 1: weights"),  # routed as a real token
])
def test_expert_ids_name_each_break(ids, w, why):
    bad = checks.expert_id_problems(ids, w, n_real=1, n_ids=4)
    assert len(bad) == 1 and bad[0].startswith(why)


# --------------------------------------------------------------------------- routing_once


def _routed_case():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(4, 8, generator=g, dtype=torch.float64) * 3
    logits[0] = -25.0 - torch.rand(8, generator=g, dtype=torch.float64)  # past the fp32 edge
    bias = torch.randn(8, generator=g, dtype=torch.float64) * 0.5
    w, ids = _route(logits, bias, 2, 1.5)
    return w, ids, w.float().double().tolist(), ids.tolist()


def test_routing_once_holds_for_fp32_rounded_reference_weights_in_any_order():
    w, ids, got_w, got_ids = _routed_case()
    swapped_ids = [r[::-1] for r in got_ids]
    swapped_w = [r[::-1] for r in got_w]
    assert checks.routing_problems(swapped_ids, swapped_w, w, ids, rn.SCORE_RTOL) == []


@pytest.mark.parametrize("change, why", [
    (lambda w: [[v * 1.5 for v in r] for r in w], "x1.5"),  # tokenspeed #1231: the scale twice
    (lambda w: [[v / sum(r) for v in r] for r in w], "x0.666667"),  # renormalised after the scale
    (lambda w: [[0.0, 0.0]] + w[1:], "reference"),  # the #34459 underflow: a token loses its experts
])
def test_routing_once_names_a_second_scale_a_renormalisation_or_lost_weights(change, why):
    w, ids, got_w, got_ids = _routed_case()
    bad = checks.routing_problems(got_ids, change(got_w), w, ids, rn.SCORE_RTOL)
    assert bad and why in bad[0]


def test_routing_once_names_other_experts():
    w, ids, got_w, got_ids = _routed_case()
    got_ids[2] = [(got_ids[2][0] + 1) % 8 if (got_ids[2][0] + 1) % 8 != got_ids[2][1] else (got_ids[2][0] + 2) % 8,
                  got_ids[2][1]]
    assert checks.routing_problems(got_ids, got_w, w, ids, rn.SCORE_RTOL)[0].startswith("row 2: experts")


def test_routing_inputs_pad_every_row_and_push_token_0_past_the_edge():
    for tokens in (1, 8, 255, 256):
        row = target.Row("dsv4-flash", 16, ep=2, intermediate=96, tokens=tokens)
        r = target.routing_inputs(row)
        n, rows = int(r["num_token_non_padded"]), r["router_logits"].shape[0]
        assert n == tokens and rows > tokens and rows % target.ROUTING_PAD == 0
        assert r["router_logits"].shape[1] == len(row.expert_mask)
        assert (r["router_logits"][0] < rn.FP32_LOG1P_EDGE).all()
        assert (r["router_logits"][n:] >= target.PAD_LOGIT).all()


# --------------------------------------------------------------------------- moe_path


def test_moe_path_fused_moe_holds_and_any_bypass_is_judged_by_its_output():
    g = torch.Generator().manual_seed(11)
    want = torch.randn(3, 16, generator=g).to(torch.bfloat16)
    assert checks.moe_path_verdict(checks.FUSED_MOE_PATH, None, None, False)[0]
    ok, why = checks.moe_path_verdict("smallm_moe_fwd", want.clone(), want, gfx950=False)
    assert ok and "bypasses aiter.fused_moe" in why and "0 of 48 values differ" in why  # named, judged, held
    off = want.clone()
    off[0, 0] = off[0, 0] * 2 + 1
    ok, why = checks.moe_path_verdict("smallm_moe_fwd", off, want, gfx950=False)
    assert not ok and "1 of 48 values differ" in why  # cpu mode: bitwise
    assert checks.moe_path_verdict("smallm_moe_fwd", want.clone(), want, gfx950=True)[0]  # gfx950: the kernel budget
    ok, why = checks.moe_path_verdict("unknown: neither", None, want, gfx950=False)
    assert not ok and "no output to judge" in why


# --------------------------------------------------------------------------- layout_env


def _combo(itlv, gate_mode, is_shuffled=True, **env):
    calls = [] if itlv is None else [{"name": "shuffle_weight", "args": [None, [16, 16]],
                                      "kwargs": {"is_guinterleave": itlv, "gate_up": True}}]
    return {"env": env or {"SGLANG_USE_AITER_MOE_GU_ITLV": None}, "shuffle_calls": calls, "is_shuffled": is_shuffled,
            "gate_mode": gate_mode}


def test_layout_env_holds_when_layout_and_gate_mode_agree_in_every_combination():
    combos = [_combo(True, "interleave"), _combo(False, "separated", SGLANG_USE_AITER_MOE_GU_ITLV="0"),
              _combo(False, None, SGLANG_USE_AITER_MOE_GU_ITLV="0"),  # absent: aiter's default separated
              _combo(None, None, is_shuffled=False)]  # not shuffled: the checkpoint's gate|up halves
    assert checks.layout_env_problems(combos) == []


def test_layout_env_names_the_combination_that_disagrees():
    combos = [_combo(True, "interleave", SGLANG_USE_AITER_MOE_GU_ITLV="1"),
              _combo(True, "separated")]  # vLLM #52442: one flag read twice with different defaults
    (bad,) = checks.layout_env_problems(combos)
    assert bad.startswith("[SGLANG_USE_AITER_MOE_GU_ITLV=<unset>] weights interleave") and "gate_mode=separated" in bad
    (bad,) = checks.layout_env_problems([_combo(True, "interleave", is_shuffled=False)])
    assert "is_shuffled=False but the weights were shuffled" in bad


def test_env_names_are_read_from_the_functions_and_combined():
    from fp4moe.targets.sglang.child import layout_env

    def f(envs, os, get_bool_env_var):  # the three spellings SGLang uses
        return envs.SGLANG_A.get(), get_bool_env_var("SGLANG_B", "true"), os.environ.get("SGLANG_C"), os.getenv("lower")

    assert layout_env._names(f) == {"SGLANG_A", "SGLANG_B", "SGLANG_C"}
    assert len(layout_env.combinations(["A", "B"])) == 9 and {"A": None, "B": "0"} in layout_env.combinations(["A", "B"])
    many = layout_env.combinations(list("ABCD"))  # past JOINT_MAX: one at a time, all unset once
    assert len(many) == 1 + 4 * 2 and many[0] == dict.fromkeys("ABCD")
