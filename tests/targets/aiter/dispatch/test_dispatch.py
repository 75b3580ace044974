"""aiter's fused_moe dispatch executed under the gate: the loader's cannot-runs, the contract table,
and the executed e4048607 rows (CK 2-stage loses the pad and the clamp; FlyDSL gets both)."""

from __future__ import annotations

import pytest
from dispatch_rows import (
    CK_ROW,
    FLY_ROW,
    HAVE_TREE,
    TREE,
    catalogue_rows,
    linked_tree,
    run,
)

from fp4moe.targets.aiter.dispatch import contracts, cost, loader, table
from fp4moe.targets.aiter.dispatch.standins import STANDINS

needs_tree = pytest.mark.skipif(not HAVE_TREE, reason=f"{TREE} absent")


@needs_tree
@pytest.mark.parametrize("missing", loader.REQUIRED_CSRC)
def test_missing_csrc_file_is_a_cannot_run_naming_it(tmp_path, missing):
    root = linked_tree(tmp_path, drop=missing)
    with pytest.raises(loader.DispatchTreeError, match=missing.replace("/", "/")):
        loader.locate(root)
    assert loader.locate(linked_tree(tmp_path / "ok")).root == (tmp_path / "ok" / "tree").resolve()


def _facts(**over) -> dict:
    row = {"id": "r", "topk": 6, "intermediate_pad": 128, "swiglu_limit": 10.0, "act": "a16w4", "gate_mode": "interleave",
           "is_shuffled": True, "env": {}}
    stage = {"stage": 1, "op": "flydsl_moe_stage1", "path": "FlyDSL", "module": "flydsl", "act_dtype": "torch.bfloat16",
             "pads": {"inter_dim_pad": 128}, "swiglu_limit": 10.0, "gate_mode": "interleave", "block_m": None,
             "is_shuffled_arg": None}
    s2 = {**stage, "stage": 2, "op": "flydsl_moe_stage2", "swiglu_limit": "no parameter", "gate_mode": "no parameter"}
    from test_cost import PADDED_ROW, flydsl_launches

    row.update({k: PADDED_ROW[k] for k in ("experts", "hidden", "inter", "tokens")})
    f = {"id": "r", "row": row, "stages": [stage, s2], "error": None, "unmodelled": [], "activation_op": None,
         "cost": cost.row_cost(row, flydsl_launches()),
         "sorting": {"unit": 32}, "block_m": 32, "key_topk": 6, "is_ep": False, "is_shuffled_read": True, "inter_dtype": "torch.bfloat16", "path": "FlyDSL + FlyDSL"}
    f.update(over)
    return f


def test_every_contract_passes_a_consistent_row_and_each_fails_its_own_fault():
    assert {r for _, r, _ in contracts.judge_row(_facts())} == {contracts.PASS}
    f = _facts()
    f["stages"][1]["pads"] = {"inter_dim_pad": 0}
    assert {n: r for n, r, _ in contracts.judge_row(f)}["pad reaches every stage"] == contracts.FAIL
    f = _facts(inter_dtype="torch.float4_e2m1fn_x2")
    assert {n: r for n, r, _ in contracts.judge_row(f)}["inter-stage dtype is the reference's"] == contracts.FAIL
    f = _facts(activation_op="flydsl_silu_and_mul_interleaved")
    assert {n: r for n, r, _ in contracts.judge_row(f)}["swiglu_limit applied at the activation"] == contracts.FAIL
    f = _facts(is_shuffled_read=False)
    assert {n: r for n, r, _ in contracts.judge_row(f)}["is_shuffled read and honoured"] == contracts.FAIL
    f = _facts(sorting={"unit": 64})
    assert {n: r for n, r, _ in contracts.judge_row(f)}["block_m equals the sorting unit"] == contracts.FAIL
    f = _facts()
    f["stages"] = []  # a record in which no kernel stage ran: the pad reached nothing
    res = {n: (r, d) for n, r, d in contracts.judge_row(f)}["pad reaches every stage"]
    assert res[0] == contracts.FAIL and "no kernel stage ran" in res[1], res


def test_an_op_with_no_standin_makes_every_contract_na_never_pass():
    f = _facts(unmodelled=["some_new_op"], error="NoStandIn: some_new_op")
    res = contracts.judge_row(f)
    assert {r for _, r, _ in res} == {contracts.NA} and "some_new_op" in res[0][2]
    rows = contracts.summarise([f], {})
    assert rows and all(r["result"] == contracts.NA for r in rows)


def test_stage_ops_of_the_table_all_have_a_standin():
    assert set(table.STAGE_OPS) <= set(STANDINS)


@pytest.mark.slow
@needs_tree
def test_e4048607_ck_two_stage_loses_pad_and_clamp_flydsl_gets_both(executed):
    ck, fly = executed[CK_ROW], executed[FLY_ROW]
    assert ck["path"] == "CK 2-stage + CK 2-stage" and ck["block_m"] == 32 == ck["sorting"]["unit"]
    assert ck["stages"][0]["module"].startswith("module_moe_ck2stages_b16_fp4x2_preshuffle_on")
    assert ck["inter_dtype"] == "torch.float4_e2m1fn_x2"
    res = {n: r for n, r, _ in contracts.judge_row(ck)}
    assert res["pad reaches every stage"] == res["swiglu_limit applied at the activation"] == contracts.FAIL
    assert res["inter-stage dtype is the reference's"] == contracts.FAIL
    assert fly["path"].startswith("FlyDSL")
    assert fly["stages"][0]["pads"]["inter_dim_pad"] == 128 and fly["stages"][0]["swiglu_limit"] == 10.0
    assert {r for _, r, _ in contracts.judge_row(fly)} <= {contracts.PASS, contracts.INFO}


@needs_tree
@pytest.mark.slow
def test_a_tree_dropping_the_flydsl_pad_fails_the_pad_contract(tmp_path):
    def edit(text):  # the tuned FlyDSL stage-1 partial (get_2stage_cfgs) loses its pad keyword
        old = ("                _flydsl_stage1_wrapper,\n                kernelName=kernelName1,\n"
               "                activation=activation,\n                inter_dim_pad=intermediate_pad,\n")
        assert text.count(old) == 1
        return text.replace(old, old.replace("                inter_dim_pad=intermediate_pad,\n", ""))
    root = linked_tree(tmp_path, edit=edit)
    assert (root / "aiter/fused_moe.py").read_text() != (TREE / "aiter/fused_moe.py").read_text()
    fs = run(root, catalogue_rows([FLY_ROW]))
    res = {n: (r, d) for n, r, d in contracts.judge_row(fs[FLY_ROW])}
    assert res["pad reaches every stage"][0] == contracts.FAIL, res["pad reaches every stage"]


@needs_tree
def test_a_source_without_any_csrc_folder_exits_2_naming_the_folder(tmp_path, capsys):
    from fp4moe.commands.main import main as cli_main
    from fp4moe.targets.aiter.dispatch import group

    root = tmp_path / "only-aiter"  # a copy of aiter/ alone: every entry of the package, no csrc/ beside it
    (root / "aiter").mkdir(parents=True)
    for entry in (TREE / "aiter").iterdir():
        (root / "aiter" / entry.name).symlink_to(entry)
    with pytest.raises(loader.DispatchTreeError, match=r"only-aiter/csrc: no such folder"):
        group.preflight(root)
    with pytest.raises(loader.DispatchTreeError, match=r"only-aiter/csrc: no such folder"):
        group.run_group(str(root), timeout_s=60)  # never a child, never a row
    assert cli_main(["aiter-check", "--aiter-src", str(root / "aiter"), "--no-kernels", "--no-differential"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "only-aiter/csrc: no such folder" in err[0], err


def test_a_signature_stub_fused_moe_is_not_the_dispatch(tmp_path):
    from fp4moe.targets.aiter.dispatch import group

    (tmp_path / "aiter").mkdir()
    (tmp_path / "aiter" / "fused_moe.py").write_text("def fused_moe(hidden_states, w1, w2):\n    pass\n")
    assert not group.applies(tmp_path)
    group.preflight(tmp_path)  # not the dispatch: the group notes it is not run, no cannot-run


@pytest.mark.slow
@needs_tree
def test_the_table_prints_every_row_as_text_and_markdown(executed):
    fs = [executed[CK_ROW], executed[FLY_ROW]]
    text, md = table.format_table(fs), table.format_table(fs, "markdown")
    assert text.splitlines()[0].split("  ")[0] == "row" and len(text.splitlines()) == 3
    assert md.startswith("| row | path |") and len(md.splitlines()) == 4
    fly = md.splitlines()[3]
    assert "dsv4_fp8fp4_tuned_fmoe.csv:" in fly and "us1 " in fly and "inter_dim_pad=128" in fly
    assert "heuristic" in md.splitlines()[2] and "none taken" in md.splitlines()[2]
