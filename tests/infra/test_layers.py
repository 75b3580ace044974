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
import source_trees

from fp4moe.infra.paths import REPO_ROOT

pytest.importorskip("importlinter", reason="import-linter (the `lint` extra) is not installed")

#: (file to plant into, the import planted, the contract it must break)
FLOORS = "floors: commands -> gates -> stats | completions -> targets -> reference -> model -> mx -> infra"
GATES = "gates never import each other"
SGLANG_OVER_AITER = "targets.sglang may use targets.aiter, never the reverse"
CHILD_ENTRIES = "child entry modules are started by name, never imported by a parent"
CYCLES = "no import cycles between sibling modules, on any floor"
PLANTS = {
    "cycle reference_backend <-> grouped_moe": ("reference/grouped_moe.py", "from fp4moe.reference import reference_backend", CYCLES),
    "infra imports a target": ("infra/capabilities.py", "from fp4moe.targets.sglang import source", FLOORS),
    "completions imports the command line": ("completions/replay_server.py", "from fp4moe.commands import main", FLOORS),
    "a gate imports another gate": ("gates/sglang_check.py", "from fp4moe.gates import footprint", GATES),
    "a target imports a gate (the zoo)": ("targets/sglang/mutations.py", "from fp4moe.gates.zoo import mutants", FLOORS),
    "serve-bench imports the accuracy gate": ("gates/serve_bench.py", "from fp4moe.gates.accuracy import gsm8k", GATES),
    "completions imports stats (siblings)": ("completions/prompts.py", "from fp4moe.stats import compare", FLOORS),
    "targets.aiter imports targets.sglang": ("targets/aiter/source.py", "from fp4moe.targets.sglang import source", SGLANG_OVER_AITER),
    "a parent imports a child entry module": ("targets/sglang/target.py", "from fp4moe.targets.sglang.child import drive", CHILD_ENTRIES),
    "mx imports the reference": ("mx/mxfp4.py", "from fp4moe.reference import layout", FLOORS),
}


def _lint(root: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("lint-imports") or pytest.skip("lint-imports is not on PATH")
    return subprocess.run([exe, "--config", str(root / "pyproject.toml"), "--no-cache"], cwd=root, capture_output=True,
                          text=True, timeout=120, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root), "HOME": str(root),
                                                       "NO_COLOR": "1", "COLUMNS": "300"})


@source_trees.HOUSE_RULE
def test_this_checkout_keeps_every_contract():
    r = _lint(REPO_ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 broken" in r.stdout


def _module(rel: str) -> str:
    return "fp4moe." + rel.removesuffix(".py").replace("/", ".")


@pytest.fixture(scope="module")
def planted_report(tmp_path_factory):
    """ONE copy of the package with all ten imports planted, linted once: import-linter reports
    every illegal import of every contract (a direct import with its line, a cycle by package),
    so each case below finds its own import, at its own line, under the contract it breaks."""
    root = tmp_path_factory.mktemp("planted")
    shutil.copytree(REPO_ROOT / "fp4moe", root / "fp4moe", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO_ROOT / "pyproject.toml", root)
    lines = {}
    for name, (rel, line, _) in PLANTS.items():
        target = root / "fp4moe" / rel
        text = target.read_text()
        target.write_text(text + f"\n{line}  # planted by tests/infra/test_layers.py\n")
        lines[name] = text.count("\n") + 2
    r = _lint(root)
    out = r.stdout + r.stderr
    assert r.returncode == 1 and "Contracts: 0 kept, 5 broken." in out, out
    broken = out[out.index("Broken contracts"):]
    starts = sorted((broken.index(f"\n{c}\n"), c) for c in (FLOORS, GATES, SGLANG_OVER_AITER, CHILD_ENTRIES, CYCLES))
    sections = {c: broken[a:b] for (a, c), (b, _) in zip(starts, [*starts[1:], (len(broken), None)])}
    return sections, lines


@source_trees.HOUSE_RULE
@pytest.mark.parametrize("name", PLANTS)
def test_a_planted_wrong_import_breaks_a_contract(name, planted_report):
    sections, lines = planted_report
    rel, line, contract = PLANTS[name]
    section = " ".join(sections[contract].split())
    if contract == CYCLES:  # a cycle is reported by the package it lies in
        assert f"No cycles are allowed in {_module(rel).rsplit('.', 1)[0]}." in section, section
    else:
        imported = line.split()[1] + ("" if contract == CHILD_ENTRIES else f".{line.split()[-1]}")
        assert f"{_module(rel)} -> {imported}" in section and f"(l.{lines[name]})" in section, section


def test_every_child_folder_is_forbidden_to_its_parents(pyproject):
    """The child-entry contract names exactly the ``child/`` folders of the package: a child entry
    moved or added under a ``child/`` folder is covered, and no entry outside one is listed."""
    contracts = pyproject["tool"]["importlinter"]["contracts"]
    forbidden = next(c for c in contracts if c["name"] == CHILD_ENTRIES)["forbidden_modules"]
    folders = {".".join(p.relative_to(REPO_ROOT).parts) for p in (REPO_ROOT / "fp4moe").rglob("child") if p.is_dir()}
    assert sorted(forbidden) == sorted(folders)


@source_trees.HOUSE_RULE
@pytest.mark.xdist_group(source_trees.GROUP)
def test_no_module_imports_another_modules_private_name():
    """``from fp4moe.x import _name`` across modules was one of the ten (``checkpoint._KEY_RE``)."""
    bad = []
    for f in sorted((REPO_ROOT / "fp4moe").rglob("*.py")):
        for node in source_trees.nodes(f):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fp4moe"):
                bad += [f"{f.relative_to(REPO_ROOT)}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    assert not bad, bad


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
