"""The checkout's Python files parsed once per session: the house-rule tests (floors, package
data, scripts, test folders, function lengths) walk the same trees, so each file is read and
parsed here once, not once per rule (``ast.parse`` of the package and the tests was ~1.5 s of
every CPU-tier run)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path


@functools.lru_cache(maxsize=None)
def tree(path: Path) -> ast.Module:
    """``path`` parsed (cached by its path; the checkout does not change during a session)."""
    path = Path(path)
    return ast.parse(path.read_text(), str(path))


@functools.lru_cache(maxsize=None)
def nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of ``path``'s tree, in ``ast.walk`` order."""
    return tuple(ast.walk(tree(Path(path))))
