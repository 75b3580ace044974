"""The house's direction, enforced: import-linter's contracts in ``pyproject.toml``
(floors, gates independent, targets.sglang above targets.aiter, child entry modules never
imported by a parent, no cycles), run on this checkout and on copies with one wrong import
planted -- each of the ten imports that ran against the floors before the layout move."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fp4moe.infra.paths import REPO_ROOT

pytest.importorskip("importlinter", reason="import-linter (the `lint` extra) is not installed")

#: (file to plant into, the import planted, words the verdict must name)
PLANTS = {
    "cycle reference_backend <-> grouped_moe": ("reference/grouped_moe.py", "from fp4moe.reference import reference_backend", "no import cycles"),
    "infra imports a target": ("infra/capabilities.py", "from fp4moe.targets.sglang import source", "fp4moe.infra is not allowed to import fp4moe.targets"),
    "completions imports the command line": ("completions/replay_server.py", "from fp4moe.commands import main", "fp4moe.completions is not allowed to import fp4moe.commands"),
    "a gate imports another gate": ("gates/sglang_check.py", "from fp4moe.gates import footprint", "gates never import each other"),
    "a target imports a gate (the zoo)": ("targets/sglang/mutations.py", "from fp4moe.gates.zoo import mutants", "fp4moe.targets is not allowed to import fp4moe.gates"),
    "serve-bench imports the accuracy gate": ("gates/serve_bench.py", "from fp4moe.gates.accuracy import gsm8k", "gates never import each other"),
    "completions imports stats (siblings)": ("completions/prompts.py", "from fp4moe.stats import compare", "fp4moe.completions is not allowed to import fp4moe.stats"),
    "targets.aiter imports targets.sglang": ("targets/aiter/source.py", "from fp4moe.targets.sglang import source", "targets.sglang may use targets.aiter"),
    "a parent imports a child entry module": ("targets/sglang/target.py", "from fp4moe.targets.sglang.child import drive", "child entry modules"),
    "mx imports the reference": ("mx/mxfp4.py", "from fp4moe.reference import layout", "fp4moe.mx is not allowed to import fp4moe.reference"),
}


def _lint(root: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("lint-imports") or pytest.skip("lint-imports is not on PATH")
    return subprocess.run([exe, "--config", str(root / "pyproject.toml"), "--no-cache"], cwd=root, capture_output=True,
                          text=True, timeout=120, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root), "HOME": str(root),
                                                       "NO_COLOR": "1", "COLUMNS": "200"})


def test_this_checkout_keeps_every_contract():
    r = _lint(REPO_ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 broken" in r.stdout


@pytest.mark.parametrize("name", PLANTS)
def test_a_planted_wrong_import_breaks_a_contract(name, tmp_path):
    rel, line, verdict = PLANTS[name]
    shutil.copytree(REPO_ROOT / "fp4moe", tmp_path / "fp4moe", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO_ROOT / "pyproject.toml", tmp_path)
    target = tmp_path / "fp4moe" / rel
    target.write_text(target.read_text() + f"\n{line}  # planted by tests/infra/test_layers.py\n")
    r = _lint(tmp_path)
    out = " ".join((r.stdout + r.stderr).split())
    assert r.returncode == 1, out
    assert verdict in out and "BROKEN" in out, out


def test_no_module_imports_another_modules_private_name():
    """``from fp4moe.x import _name`` across modules was one of the ten (``checkpoint._KEY_RE``)."""
    bad = []
    for f in sorted((REPO_ROOT / "fp4moe").rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fp4moe"):
                bad += [f"{f.relative_to(REPO_ROOT)}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    assert not bad, bad


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
