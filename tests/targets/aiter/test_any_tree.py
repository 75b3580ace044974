"""What aiter-check needs is read from each tree (issue #45 item 1), on small hand-made trees
(CPU tier, milliseconds, no aiter code runs): a csrc file is demanded only of a tree that names
it, a ``fused_moe`` without DeepSeek-V4's keywords makes the dispatch group ``absent``, a kernel
component whose module, symbol or keyword is missing is ``absent`` (one that raises is ``not
judged``), and the rows a child returns are validated before they are judged."""

from __future__ import annotations

import pytest

from fp4moe.infra.errors import GateCannotRun
from fp4moe.targets.aiter.dispatch import group, loader
from fp4moe.targets.aiter.kernels import checks
from fp4moe.targets.aiter.results import Result, TreeLacks, rows_from_child

DSV4_CALL = "def fused_moe(hidden_states, w1, w2, hidden_pad=0, intermediate_pad=0, swiglu_limit=0.0, gate_mode='s'):\n    pass\n"


def _tree(root, fused_moe: str, extra: dict | None = None):
    (root / "aiter" / "ops").mkdir(parents=True)
    (root / "aiter" / "fused_moe.py").write_text("def get_2stage_cfgs():\n    pass\n" + fused_moe)
    for rel, text in (extra or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_a_csrc_file_is_demanded_only_of_a_tree_that_names_it(tmp_path):
    old = _tree(tmp_path / "old", DSV4_CALL, {"aiter/utility/aiter_types.py": "H = 'csrc/include/aiter_enum.h'\n",
                                              "csrc/include/aiter_enum.h": "enum class QuantType : int { No };\n"})
    assert loader.needed_csrc(old) == ["csrc/include/aiter_enum.h"]
    assert loader.locate(old).root == old.resolve()  # no opus_moe_common.py, none imported: loads
    new = _tree(tmp_path / "new", DSV4_CALL, {"aiter/ops/opus/moe.py": "from csrc.opus_moe.opus_moe_common import X\n"})
    assert loader.needed_csrc(new) == ["csrc/opus_moe/opus_moe_common.py"]
    with pytest.raises(loader.DispatchTreeError, match="opus_moe_common.py: no such file"):
        loader.locate(new)


def test_a_fused_moe_without_dsv4_keywords_makes_the_dispatch_group_absent(tmp_path):
    old = _tree(tmp_path / "old", "def fused_moe(hidden_states, w1, w2, hidden_pad=0, intermediate_pad=0):\n    pass\n")
    assert group.lacking_keywords(old) == ["gate_mode", "swiglu_limit"]
    with pytest.raises(TreeLacks, match="fused_moe takes no keyword gate_mode, swiglu_limit"):
        group._tree_facts(old, None, 10)
    assert group.lacking_keywords(_tree(tmp_path / "new", DSV4_CALL)) == []


@pytest.mark.parametrize("why, word", [
    ("/t/aiter/ops/triton/moe/moe_op_gemm_a16w4.py: import failed: No module named 'x'", Result.ABSENT),
    ("/t/aiter/ops/triton/moe/moe_op_gemm_a8w4.py: symbol 'moe_gemm_a8w4' missing (needed as a8w4.moe_gemm_a8w4)", Result.ABSENT),
    ("/t/aiter/ops/triton/moe/moe_op_gemm_a8w4.py: moe_gemm_a8w4() takes no keyword 'swiglu_add_residual' (the drive passes it)",
     Result.ABSENT),
    ("/t/aiter/ops/triton/moe/moe_op_gemm_a8w4.py: raised ZeroDivisionError at import", Result.NOT_JUDGED),
    ("/t/aiter/ops/triton/moe/moe_op_gemm_a8w4.py: syntax error at line 3: invalid syntax", Result.NOT_JUDGED),
])
def test_a_component_the_tree_lacks_is_absent_one_that_breaks_is_not_judged(why, word):
    (row,) = checks.not_judged_rows({"a8w4": why})
    assert row.result == word and row.detail == why


@pytest.mark.parametrize("data, says", [
    ({"check": "x"}, "not a list"),
    ([{"check": "x", "result": "pass"}], "row 0"),
    ([{"check": "x", "result": "passed", "detail": ""}], "known result word"),
    ([{"check": "x", "result": "pass", "detail": 3}], "row 0"),
    ([{"check": "x", "result": "pass", "detail": "", "extra": 1}], "row 0"),
])
def test_rows_a_child_returns_are_validated(data, says):
    with pytest.raises(GateCannotRun, match=says):
        rows_from_child(data, "aiter-check (--aiter-src T)")
    ok = rows_from_child([{"check": "x", "result": "absent", "detail": "d"}], "w")
    assert ok[0].result == Result.ABSENT
