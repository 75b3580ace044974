"""SGLang's recorded ``fused_moe`` call as dispatch rows (``sglang-check --aiter-src T --aiter-dispatch``)."""

from __future__ import annotations

import pytest
from dispatch_rows import HAVE_TREE, TREE

from fp4moe.targets.aiter.dispatch import sglang_call

#: one SGLang 0.5.23 row's record as its child writes it (dsv4-pro-tp16: 4 local experts, H 512, I_p 192)
RECORD = {"label": "dsv4-pro-tp16", "act_mode": "a16w4",
          "fused_moe_kwargs": {"quant_type": {"enum": "QuantType", "name": "per_1x32"},
                               "activation": {"enum": "ActivationType", "name": "Silu"},
                               "w1_scale": {"tensor": True, "shape": [2048, 16], "dtype": "float8_e8m0fnu"},
                               "w2_scale": {"tensor": True, "shape": [2048, 8], "dtype": "float8_e8m0fnu"},
                               "a1_scale": None, "a2_scale": None, "bias1": None, "bias2": None,
                               "expert_mask": {"tensor": True, "shape": [4], "dtype": "int32"}, "doweight_stage1": False,
                               "hidden_pad": 0, "intermediate_pad": 64, "gate_mode": "interleave", "swiglu_limit": 10.0,
                               "moe_sorting_dispatch_policy": 2},
          "aiter_inputs": {"hidden_states": {"tensor": True, "shape": [1, 512], "dtype": "bfloat16"},
                           "topk_weight": {"tensor": True, "shape": [1, 2], "dtype": "float32"},
                           "topk_ids": {"tensor": True, "shape": [1, 2], "dtype": "int32"}},
          "w_attrs": {"w1": {"is_shuffled": True}, "w2": {"is_shuffled": True}}}
ROW = sglang_call.SGLangRow("dsv4-pro-tp16", "dsv4-pro", 16, 1, 4, 512, 192)


def test_rows_carry_sglangs_keywords_as_driven_and_at_full_size():
    rows, skipped = sglang_call.rows_from_sglang([RECORD, {"label": "gone", "error": "TypeError"}],
                                                 [ROW, sglang_call.SGLangRow("gone", "dsv4-pro", 8, 1, 4, 512, 384)])
    assert skipped == ["gone"] and [r.id for r in rows] == ["sglang dsv4-pro-tp16 (as driven)", "sglang dsv4-pro-tp16 (full size)"]
    scaled, full = rows
    assert (scaled.experts, scaled.hidden, scaled.inter, scaled.inter_padded, scaled.topk) == (4, 512, 192, 256, 2)
    assert scaled.extra["expert_mask"] == {"tensor": [4], "dtype": "int32"} and scaled.extra["moe_sorting_dispatch_policy"] == 2
    assert (full.experts, full.hidden, full.inter, full.inter_padded, full.topk, full.routed_topk) == (384, 7168, 192, 256, 6, 6)
    assert full.extra["expert_mask"] == {"tensor": [384], "dtype": "int32"}
    assert scaled.swiglu_limit == full.swiglu_limit == 10.0 and scaled.gate_mode == "interleave" and scaled.is_shuffled
    assert not set(scaled.extra) & sglang_call.MODELLED


def test_a_call_the_spy_refused_is_kept_and_replayed():
    """DeepSeek-V4.1's a8w4 row: SGLang passes quant_dtype_a, the spy (told e4048607's signature)
    refuses it after recording; the failed row keeps the call, so the replay reaches the dispatch."""
    from fp4moe.targets.sglang.child.refused_call import recorded_fields

    kw = dict(RECORD["fused_moe_kwargs"], quant_dtype_a="torch.float8_e4m3fn")
    call = {"kwargs": kw, "act_mode": "a8w4", "w_attrs": RECORD["w_attrs"], "inputs": RECORD["aiter_inputs"]}
    refusal = TypeError("aiter.fused_moe() got unexpected keyword argument(s) ['quant_dtype_a'] (its signature in T)")
    kept = recorded_fields([call], refusal)
    assert kept["fused_moe_kwargs"] is kw and kept["act_mode"] == "a8w4" and "quant_dtype_a" in kept["fused_moe_refused"]
    assert recorded_fields([call], RuntimeError("unexpected keyword argument")) == {}  # only the spy's refusal
    assert recorded_fields([], refusal) == {} and recorded_fields([call, call], refusal) == {}
    failed = {"label": "dsv4-pro-tp16", "error": f"TypeError: {refusal}", "step": "AiterRunnerCore.run", **kept}
    rows, skipped = sglang_call.rows_from_sglang([failed], [ROW])
    assert not skipped and all(r.extra["quant_dtype_a"] == "torch.float8_e4m3fn" and r.act == "a8w4" for r in rows)


def test_a_refused_keyword_is_named():
    assert sglang_call._refused_keyword("TypeError: fused_moe() got an unexpected keyword argument 'quant_dtype_a'") == "quant_dtype_a"
    assert sglang_call._refused_keyword("NoStandIn: x") is None


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_TREE, reason=f"{TREE} absent")
def test_sglangs_call_through_e4048607_loses_the_clamp_and_the_tuned_key():
    bad = dict(RECORD, label="quant", fused_moe_kwargs=dict(RECORD["fused_moe_kwargs"], quant_dtype_a="torch.float8_e4m3fn"))
    out = sglang_call.judge(str(TREE), [RECORD, bad], [ROW, sglang_call.SGLangRow("quant", "dsv4-pro", 16, 1, 4, 512, 192)],
                            timeout_s=300)
    by = {(c["name"], c["row"]): c for c in out}
    clamp = by[("aiter dispatch: swiglu_limit applied at the activation", "dsv4-pro-tp16 (full size)")]
    assert clamp["ok"] is False and "CK-tile" in clamp["compared"]
    key = by[("aiter dispatch: tuned-config key is the routed top-k", "dsv4-pro-tp16 (full size)")]
    assert key["ok"] is False and "top-k 5" in key["detail"]
    refused = by[("aiter dispatch", "quant (full size)")]
    assert refused["ok"] is False and sglang_call.SGLANG_CALL_FILE in refused["detail"] and "aiter/fused_moe.py" in refused["detail"]


@pytest.mark.slow
@pytest.mark.sglang
@pytest.mark.skipif(not HAVE_TREE, reason=f"{TREE} absent")
def test_sglang_check_replays_the_a8w4_call_the_spy_refused():
    """The installed SGLang's DeepSeek-V4.1 a8w4 row: its call is refused in the SGLang child, kept,
    and replayed into e4048607's executed dispatch, where the tree's fused_moe refuses quant_dtype_a."""
    import subprocess
    import sys

    from fp4moe.infra.paths import REPO_ROOT

    r = subprocess.run([sys.executable, "-m", "fp4moe.commands", "sglang-check", "--model", "dsv4-pro", "--tp", "8",
                        "--aiter-src", str(TREE), "--aiter-dispatch"], capture_output=True, text=True, timeout=900,
                       cwd=REPO_ROOT, check=False)
    assert r.returncode == 1, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    for which in ("as driven", "full size"):
        i = next(i for i, ln in enumerate(lines) if ln.startswith("FAIL aiter dispatch ")
                 and f"dsv4-pro-tp8-a8w4 ({which})" in ln)
        assert sglang_call.SGLANG_CALL_FILE in lines[i + 1] and "aiter/fused_moe.py's fused_moe does not take it" in lines[i + 1]
        assert "quant_dtype_a" in lines[i + 1]
