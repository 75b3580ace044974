"""The differential conformance of ``aiter-check`` (fp4moe.targets.aiter.conformance, fp4moe.targets.aiter.source).

CPU tier: the lazy source loader on a synthetic tree (not aiter code) -- only the statements a
function needs run, so aiter's JIT imports and module-level side effects never execute.

Slow tier (CI's slow step; the differential executes aiter's reference functions):
- the PyPI wheel (``amd-aiter 0.1.7.post2.dev18``, fetched by ci/fetch_amd_aiter_wheel.sh): its
  codecs and ``torch_moe`` agree bitwise; its ``torch_moe_stage1`` is a different function for
  a16w4 (an older SwiGLU variant) and has no ``swiglu_limit``: DIFFER / n/a, exit 1, naming it;
- one reference function mutated in a temp copy of the wheel's tree: its row turns DIFFER and
  names the function;
- ``$FP4MOE_AITER_SRC`` (a current aiter checkout, e.g. ROCm/aiter at e4048607): everything
  bitwise and exit 0; with ``torch_moe_stage1`` mutated in a temp copy: exit 1 naming it.
"""

from __future__ import annotations

import ast
import os
import shutil
import textwrap
import zipfile
from pathlib import Path

import pytest

from fp4moe.commands.main import main as cli_main
from fp4moe.gates import aiter_check as ac
from fp4moe.targets.aiter import conformance as conf
from fp4moe.targets.aiter import source as aiter_source
from fp4moe.targets.aiter.judge import source_checks
from fp4moe.targets.aiter.results import Result
from fp4moe.targets.aiter.source import AiterSource, SourceModules

SRC_ENV = "FP4MOE_AITER_SRC"


# ---------------------------------------------------------------------- CPU tier: the loader
def test_only_the_statements_a_function_needs_are_executed(tmp_path):
    pkg = tmp_path / "aiter" / "ops"
    pkg.mkdir(parents=True)
    (tmp_path / "aiter" / "__init__.py").write_text("from .ops.maths import *\nraise SystemExit('aiter/__init__ ran')\n")
    (pkg / "maths.py").write_text(textwrap.dedent(
        """
        import sys
        import not_a_module_anywhere  # never needed: never imported
        from ..jit.core import compile_ops

        BASE = 20

        @compile_ops("module_x")
        def compiled_op(x): ...

        def helper(v):
            return v + BASE

        def answer(v=1):
            from aiter.ops.maths import helper as again  # a lazy import inside the function
            return helper(v) + again(0)

        sys.exit("module-level code ran")
        """))
    mods = SourceModules(AiterSource.from_dir(tmp_path))
    with mods.active():
        f = mods.function("aiter.ops.maths", "answer")
        assert f(1) == 41  # 1 + 20 + 0 + 20
        assert mods.module("aiter").answer is f  # resolved through the package's star import
        with pytest.raises(RuntimeError, match="compiled op"):
            mods.function("aiter.ops.maths", "compiled_op")(1)
    ran = {name for _, name, _ in mods.executed}
    assert {"answer", "helper", "BASE"} <= ran and "not_a_module_anywhere" not in ran and "sys" not in ran
    assert mods.function("aiter.ops.maths", "absent") is None
    assert mods.where("aiter.ops.maths", "answer") == "aiter/ops/maths.py:14"


def test_pinned_divergence_that_changes_is_a_difference():
    import torch

    amax = torch.tensor([1.0, 2.0**-140])
    ours_s, theirs_s = torch.tensor([0x7F, 0x00], dtype=torch.uint8), torch.tensor([0x7F, 0x00], dtype=torch.uint8)
    elems = torch.zeros((2, 16), dtype=torch.uint8)
    tiny = torch.tensor([False, True])
    d = conf._quant_check("q", "f (x.py:1)", ours_s, elems, theirs_s, elems, amax, [(tiny, 0x01, 0x00, "tiny")])
    assert d.outcome == conf.DIFFER and "documented divergence changed (tiny)" in d.detail  # aiter fixed its helper
    theirs_s[1] = 0x01
    assert conf._quant_check("q", "f", ours_s, elems, theirs_s, elems, amax, [(tiny, 0x01, 0x00, "tiny")]).outcome == conf.BITWISE


# ---------------------------------------------------------------------- slow: real aiter code
def _wheel():
    path = aiter_source.find_wheel()
    if path is None:
        pytest.skip(f"amd-aiter wheel absent: set {aiter_source.WHEEL_ENV} or run `bash ci/fetch_amd_aiter_wheel.sh` (CI does)")
    return path


def _extract_py(wheel: Path, dest: Path) -> Path:
    with zipfile.ZipFile(wheel) as z:
        for n in z.namelist():
            if n.startswith("aiter/") and n.endswith(".py"):
                z.extract(n, dest)
    return dest


def mutate_function(path: Path, func: str, statement: str) -> None:
    """Insert ``statement`` as the first line of ``def func`` in ``path`` (a semantic change)."""
    text = path.read_text()
    node = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == func)
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant):
        first = node.body[1]  # after a docstring
    lines = text.splitlines(keepends=True)
    indent = lines[first.lineno - 1][: len(lines[first.lineno - 1]) - len(lines[first.lineno - 1].lstrip())]
    lines.insert(first.lineno - 1, f"{indent}{statement}\n")
    path.write_text("".join(lines))


def _rows(results):
    return {r.check: r for r in results}


@pytest.mark.slow
def test_wheel_differential_figures():
    src = AiterSource.from_wheel(_wheel())
    rows = _rows(source_checks.check_differential(src))
    assert rows["diff: codec: e8m0 decode, all 256 bytes"].result == Result.BITWISE
    assert rows["diff: codec: e2m1 decode + nibble order, all 256 bytes"].result == Result.BITWISE
    assert rows["diff: moe: torch_moe a16w4, float stage-1, expert_mask with global ids"].result == Result.BITWISE
    s1 = rows["diff: moe: a16w4 stage 1 (bf16 stage-1 output)"]
    assert s1.result == Result.DIFFER and "torch_moe_stage1 (aiter/fused_moe.py:" in s1.detail
    assert rows["diff: quant: MXFP8 activations (a8w4)"].result == Result.ABSENT  # no a8w4 reference in 0.1.7
    assert ac.verdict(list(rows.values()), allow_missing=True) == 1


@pytest.mark.slow
def test_wheel_mutated_reference_function_is_named(tmp_path):
    root = _extract_py(_wheel(), tmp_path / "tree")
    clean = _rows(source_checks.check_differential(AiterSource.from_dir(root)))
    mutate_function(root / "aiter" / "utility" / "fp4_utils.py", "e8m0_to_f32", "scale_e8m0_biased = scale_e8m0_biased + 1")
    mutate_function(root / "aiter" / "fused_moe.py", "torch_moe", "topk_weight = topk_weight * 2")
    mutated = _rows(source_checks.check_differential(AiterSource.from_dir(root)))
    for check, fn in (("diff: codec: e8m0 decode, all 256 bytes", "e8m0_to_f32"),
                      ("diff: moe: torch_moe a16w4, float stage-1, expert_mask with global ids", "torch_moe")):
        assert clean[check].result == Result.BITWISE
        assert mutated[check].result == Result.DIFFER and f"aiter {fn} (" in mutated[check].detail, mutated[check]


def _current_src() -> Path:
    path = os.environ.get(SRC_ENV)
    if not path:
        pytest.skip(f"${SRC_ENV} not set: point it at a current aiter checkout (holding aiter/), e.g. ROCm/aiter e4048607")
    return Path(path)


@pytest.mark.slow
def test_current_aiter_conforms_and_a_mutated_stage1_is_named(tmp_path, capsys):
    src = _current_src()
    assert cli_main(["aiter-check", "--aiter-src", str(src), "--no-dispatch"]) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    diff_rows = [ln for ln in out.splitlines() if ln.startswith("diff: ")]
    assert len(diff_rows) >= 14 and all(" bitwise " in ln for ln in diff_rows), diff_rows
    tree = tmp_path / "aiter-copy"
    shutil.copytree(src / "aiter", tree / "aiter", ignore=shutil.ignore_patterns("*.so", "*.hsaco", "*.co", "csrc", "3rdparty"))
    mutate_function(tree / "aiter" / "fused_moe.py", "torch_moe_stage1", "topk_weight = topk_weight * 2")
    assert cli_main(["aiter-check", "--aiter-src", str(tree), "--no-differential", "--no-dispatch"]) == 0  # API/layout untouched
    capsys.readouterr()
    assert cli_main(["aiter-check", "--aiter-src", str(tree), "--no-dispatch"]) == 1
    out = capsys.readouterr().out
    failing = [ln for ln in out.splitlines() if " DIFFER " in ln]
    assert failing and all("torch_moe_stage1 (aiter/fused_moe.py:" in ln for ln in failing), failing
