"""The checkout's Python files parsed once per session: the house-rule tests (floors, package
data, scripts, test folders, function lengths) walk the same trees, so each file is read and
parsed here once, not once per rule (``ast.parse`` of the package and the tests was ~1.5 s of
every CPU-tier run; the walking tests share :data:`GROUP`, so one pytest-xdist worker
parses them, not both)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

#: the xdist group (``pytest.mark.xdist_group``) of the tests that walk the package's or the
#: checkout's trees: under pytest-xdist they run on one worker, which parses each file once
GROUP = "source-trees"

#: the rules that walk the whole checkout (import floors and private names, function length,
#: test folders, data lookups, the scripts floor) judge this repository's own source, not the
#: weight path: ~4 CPU-s of parsing 55k lines and import-linter, outside the CPU tier a runner
#: runs; CI runs them in its slow step (the rules' own tests on small planted sources stay)
HOUSE_RULE = pytest.mark.slow


@functools.lru_cache(maxsize=None)
def tree(path: Path) -> ast.Module:
    """``path`` parsed (cached by its path; the checkout does not change during a session)."""
    path = Path(path)
    return ast.parse(path.read_text(), str(path))


@functools.lru_cache(maxsize=None)
def nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of ``path``'s tree, in ``ast.walk`` order."""
    return tuple(ast.walk(tree(Path(path))))
