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


def test_a_refused_call_is_kept_for_the_judge():
    """DeepSeek-V4.1's a8w4 row: SGLang passes quant_dtype_a, which e4048607's fused_moe refuses
    (TypeError, the tree's own, or the spy's when only the signature is known); the failed row
    keeps the recorded call, so its keywords still reach the dispatch rows (as driven, full size)."""
    from fp4moe.targets.sglang.child.refused_call import recorded_fields

    kw = dict(RECORD["fused_moe_kwargs"], quant_dtype_a="torch.float8_e4m3fn")
    call = {"kwargs": kw, "act_mode": "a8w4", "w_attrs": RECORD["w_attrs"], "inputs": RECORD["aiter_inputs"]}
    refusal = TypeError("fused_moe() got an unexpected keyword argument 'quant_dtype_a'")
    kept = recorded_fields([call], refusal)
    assert kept["fused_moe_kwargs"] is kw and kept["act_mode"] == "a8w4" and "quant_dtype_a" in kept["fused_moe_refused"]
    assert recorded_fields([call], RuntimeError("unexpected keyword argument")) == {}  # only a refusal
    assert recorded_fields([], refusal) == {} and recorded_fields([call, call], refusal) == {}
    failed = {"label": "dsv4-pro-tp16", "error": f"TypeError: {refusal}", "step": "AiterRunnerCore.run", **kept}
    rows, skipped = sglang_call.rows_from_sglang([failed], [ROW])
    assert not skipped and all(r.extra["quant_dtype_a"] == "torch.float8_e4m3fn" and r.act == "a8w4" for r in rows)


def test_a_refused_keyword_is_named():
    assert sglang_call._refused_keyword("TypeError: fused_moe() got an unexpected keyword argument 'quant_dtype_a'") == "quant_dtype_a"
    assert sglang_call._refused_keyword("NoStandIn: x") is None


def test_sglangs_call_site_is_read_from_the_rows_frames():
    where = ["fp4moe/targets/aiter/dispatch/calls.py:130 in _attempt", "modes.py:91 in fused_moe",
             "srt/layers/moe/moe_runner/aiter.py:316 in run", "child/rows.py:151 in _run_once"]
    assert sglang_call.sglang_call_site(where) == "sglang/srt/layers/moe/moe_runner/aiter.py:316"
    assert sglang_call.sglang_call_site([]) == sglang_call.SGLANG_CALL_FILE


@pytest.mark.skipif(not HAVE_TREE, reason=f"{TREE} absent")
def test_the_trees_fused_moe_def_line_is_named():
    site = sglang_call.fused_moe_def_line(TREE)
    path, line = site.rsplit(":", 1)
    assert path.endswith("aiter/fused_moe.py")
    assert open(path, encoding="utf-8").read().splitlines()[int(line) - 1].startswith("def fused_moe(")


def test_a_record_without_the_executed_calls_is_not_judged_and_fails():
    out = sglang_call.judge({"rows": [RECORD]}, [ROW])
    assert [(c["row"], c["ok"]) for c in out] == [("dsv4-pro-tp16", False)] and "loaded no aiter tree" in out[0]["detail"]


@pytest.mark.skipif(not HAVE_TREE, reason=f"{TREE} absent")
def test_a_row_missing_its_full_size_record_fails_not_judged():
    from fp4moe.targets.aiter.dispatch import loader

    tree = loader.locate(TREE)
    info = {"tree": str(tree.root), "config_sources": ["aiter/configs/tuned_fmoe.csv"]}
    rec = dict(RECORD, dispatch={"calls": [], "cfgs": []})
    out = sglang_call.judge({"rows": [rec], "dispatch": info}, [ROW])
    gone = [c for c in out if c["row"] == "dsv4-pro-tp16 (full size)"]
    assert len(gone) == 1 and not gone[0]["ok"] and "no dispatch_full call record" in gone[0]["detail"]
    driven = [c for c in out if c["row"] == "dsv4-pro-tp16 (as driven)"]  # no stage ran: nothing passes vacuously
    assert len(driven) == 1 and not driven[0]["ok"] and "no kernel stage ran" in driven[0]["detail"]


@pytest.mark.parametrize("bad, named", [
    ({"calls": "x", "cfgs": []}, "'calls' is str"),
    ({"calls": [{"op": "ck_moe_stage1", "module": "m"}], "cfgs": []}, "calls[0]"),
    ({"calls": [], "cfgs": [{"cfg_args": []}], "extra": 1}, "unknown key(s) ['extra']"),
    ({"calls": [], "cfgs": [7]}, "cfgs[0]: is int"),
])
def test_a_malformed_call_record_is_exit_2_naming_the_row_and_key(bad, named):
    from fp4moe.infra.errors import GateCannotRun

    with pytest.raises(GateCannotRun) as e:
        sglang_call.valid_call(bad, "row r: dispatch")
    assert "row r: dispatch" in str(e.value) and named in str(e.value)


def _stitched(records: list[dict], rows: list) -> dict:
    """The SGLang child's record with each row's dispatch call records, made by the dispatch child
    for the same rows (what the SGLang child runs in-process), for the judge alone."""
    from fp4moe.targets.aiter.dispatch import table

    drows, _ = sglang_call.rows_from_sglang(records, rows)
    rec, data = table.run_dispatch(str(TREE), drows, timeout_s=300)
    got = {r.id: d for r, d in zip(drows, data["rows"])}
    out = [dict(r, dispatch=got[f"sglang {r['label']}{sglang_call.AS_DRIVEN}"],
                dispatch_full=got[f"sglang {r['label']}{sglang_call.FULL_SIZE}"]) for r in records]
    return {"rows": out, "dispatch": {"tree": rec["tree"], "config_sources": rec["config_sources"]}}


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_TREE, reason=f"{TREE} absent")
def test_sglangs_call_through_e4048607_loses_the_clamp_and_the_tuned_key():
    bad = dict(RECORD, label="quant", fused_moe_kwargs=dict(RECORD["fused_moe_kwargs"], quant_dtype_a="torch.float8_e4m3fn"),
               where=["srt/layers/moe/moe_runner/aiter.py:316 in run"])
    rows = [ROW, sglang_call.SGLangRow("quant", "dsv4-pro", 16, 1, 4, 512, 192)]
    out = sglang_call.judge(_stitched([RECORD, bad], rows), rows)
    by = {(c["name"], c["row"]): c for c in out}
    clamp = by[("aiter dispatch: swiglu_limit applied at the activation", "dsv4-pro-tp16 (full size)")]
    assert clamp["ok"] is False and "CK-tile" in clamp["compared"]
    key = by[("aiter dispatch: tuned-config key is the routed top-k", "dsv4-pro-tp16 (full size)")]
    assert key["ok"] is False and "top-k 5" in key["detail"]
    for which in (sglang_call.AS_DRIVEN, sglang_call.FULL_SIZE):
        refused = by[("aiter dispatch", f"quant{which}")]
        assert refused["ok"] is False and "sglang/srt/layers/moe/moe_runner/aiter.py:316 passes quant_dtype_a" in refused["detail"]
        assert "aiter/fused_moe.py:" in refused["detail"] and "does not take it" in refused["detail"]


@pytest.mark.slow
@pytest.mark.sglang
@pytest.mark.skipif(not HAVE_TREE, reason=f"{TREE} absent")
def test_sglang_check_runs_sglangs_call_into_the_executed_fused_moe(tmp_path):
    """The installed SGLang's layer and runner, in one child, into e4048607's real fused_moe: the
    a8w4 row's quant_dtype_a is refused by the tree's own code (both files named); the CK 2-stage
    row's output equals the reference with that path's rounding points except where the clamp
    binds (the path loses it: equal to the unclamped reference); the bf16 row at the bound runs
    FlyDSL (fp8 activations); the parent judged it all from the child's record."""
    import json
    import subprocess
    import sys

    from fp4moe.infra.paths import REPO_ROOT

    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, "-m", "fp4moe.commands", "sglang-check", "--model", "dsv4-pro", "--tp", "8",
                        "--aiter-src", str(TREE), "--aiter-dispatch", "--json", str(out)], capture_output=True, text=True,
                       timeout=900, cwd=REPO_ROOT, check=False)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "fused_moe: aiter.fused_moe executed from" in r.stdout
    checks = {(c["name"], c["row"]): c for c in json.loads(out.read_text())["checks"]}
    for which in ("as driven", "full size"):
        c = checks[("aiter dispatch", f"dsv4-pro-tp8-a8w4 ({which})")]
        assert not c["ok"] and "sglang/srt/layers/moe/moe_runner/aiter.py:" in c["detail"], c
        assert "passes quant_dtype_a" in c["detail"] and "aiter/fused_moe.py:" in c["detail"], c
    ck = checks[("output", "dsv4-pro-tp8-ep2-ip160")]
    assert "CK 2-stage path's rounding points" in ck["compared"] and "equals the unclamped reference: True" in ck["detail"], ck
    assert checks[("drive", "dsv4-pro-tp8")]["ok"]
    out_fly = checks[("output", "dsv4-pro-tp8")]  # FlyDSL stage 2 with SGLang's expert_mask: computed, bitwise
    assert out_fly["ok"] and "FlyDSL path's rounding points, bitwise" in out_fly["compared"], out_fly
    fly = checks[("aiter dispatch: activation dtype follows the bound", "dsv4-pro-tp8 (as driven)")]
    assert fly["ok"] and fly["compared"].startswith("FlyDSL"), fly
    assert checks[("aiter dispatch: kernel gate mode equals the weights' layout", "dsv4-pro-tp8 (full size)")]["ok"]


#: code a tree under test runs in the SGLang child when its fused_moe.py is imported: it replaces
#: the contract judge, the row checks, the reference MoE and the gate's verdict in that
#: interpreter. None of it may change a verdict: every one of them runs in the parent.
FORGERY = '''
import fp4moe.targets.aiter.dispatch.contracts as _k
_k.judge_row = lambda f: [(c.name, "pass", "forged") for c in _k.CONTRACTS]
import fp4moe.reference.moe as _moe
for _n in dir(_moe):
    if callable(getattr(_moe, _n)) and not _n.startswith("_") and "moe" in _n:
        setattr(_moe, _n, lambda *a, **k: (_ for _ in ()).throw(SystemExit("forged")))
import fp4moe.targets.sglang.checks as _s
_s.OUTPUT_TOLERANCE = "forged"
import fp4moe.gates.sglang_check as _g
_g.check = lambda *a, **k: "forged"
'''


@pytest.mark.reliability  # an accident of the code under test (threat model): the verdict stands
@pytest.mark.slow
@pytest.mark.sglang
@pytest.mark.skipif(not HAVE_TREE, reason=f"{TREE} absent")
def test_a_tree_that_patches_the_judge_in_the_sglang_child_changes_no_verdict(tmp_path):
    """The tree's fused_moe.py, imported in the child SGLang calls into, rewrites the judge, the
    reference and the verdict there: the run still exits 1 with the rows of the unpatched tree
    failing (the a8w4 keyword refused, the CK row's lost clamp), nothing reads "forged"."""
    import json
    import shutil
    import subprocess
    import sys

    from fp4moe.infra.paths import REPO_ROOT

    tree = tmp_path / "tree"
    for part in ("aiter", "csrc"):
        shutil.copytree(TREE / part, tree / part, ignore=shutil.ignore_patterns("__pycache__"))
    fused = tree / "aiter" / "fused_moe.py"
    fused.write_text(fused.read_text() + FORGERY)
    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, "-m", "fp4moe.commands", "sglang-check", "--model", "dsv4-pro", "--tp", "8",
                        "--aiter-src", str(tree), "--aiter-dispatch", "--json", str(out)], capture_output=True, text=True,
                       timeout=900, cwd=REPO_ROOT, check=False)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "forged" not in r.stdout and "forged" not in out.read_text(), r.stdout[-3000:]
    checks = {(c["name"], c["row"]): c for c in json.loads(out.read_text())["checks"]}
    assert not checks[("aiter dispatch", "dsv4-pro-tp8-a8w4 (as driven)")]["ok"]
    assert not checks[("output", "dsv4-pro-tp8-ep2-ip160")]["ok"]
    assert not checks[("aiter dispatch: swiglu_limit applied at the activation", "dsv4-pro-tp8-ep2-ip160 (as driven)")]["ok"]
