"""The dispatch group through ``fp4moe-gate aiter-check`` and against edited trees: a missing csrc
file (exit 2 naming it), the registry (exit 1 without it, 0 with it), an op with no stand-in
(n/a, never pass), a tree that patches the parent's checks from its child (verdict unchanged),
``--base-src`` (``fixed`` where the new tree is right)."""

from __future__ import annotations

import pytest
from dispatch_rows import FLY_ROW, HAVE_TREE, TREE, catalogue_rows, linked_tree, run

from fp4moe.targets.aiter.dispatch import contracts, group, loader, standins
from fp4moe.targets.aiter.results import Result

pytestmark = pytest.mark.skipif(not HAVE_TREE, reason=f"{TREE} absent")


def test_missing_csrc_file_exits_2_naming_it_before_any_child(tmp_path, capsys):
    from fp4moe.commands.main import main as cli_main

    root = linked_tree(tmp_path, drop="csrc/include/aiter_enum.h")
    assert cli_main(["aiter-check", "--aiter-src", str(root), "--no-kernels", "--no-differential"]) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "csrc/include/aiter_enum.h" in lines[0], err


def test_an_op_with_no_standin_is_recorded_and_named():
    rec = standins.Recorder()

    @rec.compile_ops("module_new")
    def brand_new_op(x: int, out=None) -> None: ...

    with pytest.raises(standins.NoStandIn, match="brand_new_op"):
        brand_new_op(3)
    assert rec.calls[-1]["op"] == "brand_new_op" and rec.calls[-1]["unmodelled"] is True
    assert rec.calls[-1]["args"] == {"x": 3, "out": None}


@pytest.mark.slow
def test_without_the_registry_the_executed_ck_defects_exit_1():
    """The run with the registry (exit 0, each CK finding known) is test_default_run.py's."""
    from test_default_run import NUMERICS_KNOWN, ROUTE_OUT_KNOWN, default_run, rows

    # the registry decides the dispatch rows' verdicts: the layout checks at their reduced grid
    # (the DeepSeek-V4 grid of this tree is judged in test_default_run.py's run)
    bare = default_run(TREE, "--layout-grid", "reduced", registry=False)
    assert bare.returncode == 1, bare.stderr[-2000:]
    failing = {k for k, v in rows(bare.stdout, "dispatch ").items() if v == "FAIL"}
    assert "dispatch CK 2-stage + CK 2-stage: pad reaches every stage" in failing, failing
    assert {k for k in failing if k.startswith("dispatch numerics ")} == {*NUMERICS_KNOWN.values(), *ROUTE_OUT_KNOWN[1]}, failing


@pytest.mark.slow
def test_a_new_compiled_op_without_standin_makes_the_row_na(tmp_path):
    def edit(text):  # the Opus sorting op under a new Python name: a compiled op this table does not know
        old = "def moe_sorting_opus_fwd("
        assert text.count(old) == 1
        return text.replace(old, "def moe_sorting_opus_fwd_v2(") + "\n\nmoe_sorting_opus_fwd = moe_sorting_opus_fwd_v2\n"
    root = linked_tree(tmp_path, edit=edit, edited="aiter/ops/moe_sorting_opus.py")
    f = run(root, catalogue_rows([FLY_ROW]))[FLY_ROW]
    assert f["unmodelled"] == ["moe_sorting_opus_fwd_v2"] and "no stand-in" in f["error"]
    res = contracts.judge_row(f)
    assert {r for _, r, _ in res} == {contracts.NA} and "moe_sorting_opus_fwd_v2" in res[0][2]


@pytest.mark.reliability  # an accident of the code under test (threat model): the verdict stands
@pytest.mark.slow
def test_a_tree_patching_the_parents_checks_cannot_change_the_verdict(tmp_path):
    def edit(text):  # the code under test rewrites the contract table in the process it runs in
        return ("import fp4moe.targets.aiter.dispatch.contracts as _c\n"
                "_c.CONTRACTS = tuple(_c.Contract(x.name, x.cites, lambda f: ('pass', 'patched')) for x in _c.CONTRACTS)\n"
                + text)
    root = linked_tree(tmp_path, edit=edit)
    rows = catalogue_rows(["dsv4-pro tp8/ep1 align256 a16w4 M=32"])
    f = run(root, rows)[rows[0].id]
    res = {n: r for n, r, _ in contracts.judge_row(f)}
    assert res["pad reaches every stage"] == contracts.FAIL
    assert all(c.check.__name__ != "<lambda>" for c in contracts.CONTRACTS)


@pytest.mark.slow
def test_base_src_diff_says_fixed_where_the_new_tree_is_right(tmp_path):
    def edit(text):  # the OLD tree: the tuned FlyDSL stage-1 partial without its pad keyword
        old = ("                _flydsl_stage1_wrapper,\n                kernelName=kernelName1,\n"
               "                activation=activation,\n                inter_dim_pad=intermediate_pad,\n")
        return text.replace(old, old.replace("                inter_dim_pad=intermediate_pad,\n", ""))
    base = linked_tree(tmp_path, edit=edit)
    # the upgrade rows compare the two trees' meta-tensor tables; the head's numerics cases (a third
    # child, which --base-src never compares) are judged in test_default_run.py's run of this tree
    rows, notes, _ = group.run_group(str(TREE), timeout_s=600, base=str(base), numerics_on=False)
    assert not [r for r in rows if r["check"].startswith("dispatch numerics ")]
    fixed = [r for r in rows if r["result"] == Result.FIXED]
    assert any(r["check"] == "upgrade dispatch FlyDSL + FlyDSL: pad reaches every stage" for r in fixed), [r["check"] for r in fixed]
    assert any(r["check"] == "upgrade dispatch: rows compared" for r in rows)
    assert any(n.startswith("dispatch base tree: ") for n in notes)
    assert loader.locate(base).root != loader.locate(TREE).root
