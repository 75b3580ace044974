"""No judging function over 60 lines: a check stays one small named function in its table.

The judging modules are where a verdict is decided from what a child computed: every module of
``fp4moe/gates/`` (child entries under ``child/`` excluded: they compute, they do not judge),
each target's ``judge/`` package and ``checks.py``, aiter's dispatch contracts and its kernel
checks. A function's length runs from its ``def`` line to its last line, docstring included.
Child code (``targets/*/child/``, e.g. the SGLang child's mutant ``apply``) is outside the rule.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import source_trees

from fp4moe.infra.paths import REPO_ROOT

pytestmark = pytest.mark.xdist_group(source_trees.GROUP)

#: the longest a judging function may be, in lines
MAX_FUNCTION_LINES = 60
#: the judging modules, as globs under fp4moe/
JUDGING_GLOBS = (
    "gates/**/*.py",
    "targets/*/judge/**/*.py",
    "targets/*/checks.py",
    "targets/aiter/dispatch/contracts.py",
    "targets/aiter/kernels/checks.py",
)


def judging_modules() -> list[Path]:
    package = REPO_ROOT / "fp4moe"
    found = {p for g in JUDGING_GLOBS for p in package.glob(g)}
    return sorted(p for p in found if "child" not in p.relative_to(package).parts)


def long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``file:line name (N lines)`` of each function in ``path`` longer than ``limit`` lines."""
    return [f"{path}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)"
            for n in source_trees.nodes(path) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.end_lineno - n.lineno + 1 > limit]


def test_the_rule_sees_every_kind_of_judging_module():
    names = {str(p.relative_to(REPO_ROOT / "fp4moe")) for p in judging_modules()}
    for expected in ("gates/sglang_check.py", "gates/zoo/runner.py", "targets/sglang/checks.py",
                     "targets/aiter/judge/source_checks.py", "targets/aiter/dispatch/contracts.py",
                     "targets/aiter/kernels/checks.py"):
        assert expected in names
    assert not any("/child/" in f"/{n}" for n in names)


def test_a_function_one_line_over_the_limit_is_found_and_one_at_it_is_not(tmp_path):
    def fn(name: str, lines: int) -> str:  # a def line, a docstring line, then statements
        return f"def {name}():\n    \"\"\"doc\"\"\"\n" + "".join(f"    x{i} = {i}\n" for i in range(lines - 2))

    src = tmp_path / "m.py"
    src.write_text(fn("at_limit", MAX_FUNCTION_LINES) + "\n\nclass C:\n" + fn("over", MAX_FUNCTION_LINES + 1).replace("\n", "\n    ")
                   .replace("def over", "    def over", 1))
    assert [s.split()[1] for s in long_functions(src)] == ["over"]


@source_trees.HOUSE_RULE
def test_no_judging_function_is_over_60_lines():
    over = [f for p in judging_modules() for f in long_functions(p)]
    assert not over, "\n".join(over)
