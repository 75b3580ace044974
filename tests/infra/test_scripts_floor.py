"""The contract of ``scripts/`` and ``lab/`` (tools and recipes run by hand, never by the gate):
nothing in the package, the tests or CI imports a script or the lab; a script of ``scripts/``
reaches the package only through ``fp4moe.commands``; a shell recipe starts Python by module
name. The lab's studies import the package freely (they measure its insides) and are not part
of it: ``lab/tests/`` holds their own checks, tests/infra/test_package_data.py keeps them out of
the wheel."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import source_trees

from fp4moe.infra.paths import REPO_ROOT

pytestmark = pytest.mark.xdist_group(source_trees.GROUP)

#: the only part of the package a script may import
COMMANDS = "fp4moe.commands"
#: top-level names nothing in the package, the tests or CI may import
BY_HAND = ("scripts", "lab")


def _imports(path: Path) -> set[str]:
    out = set()
    for n in source_trees.nodes(path):
        if isinstance(n, ast.ImportFrom) and n.module and not n.level:
            out.add(n.module)
        elif isinstance(n, ast.Import):
            out.update(a.name for a in n.names)
    return out


def _python_files(*folders: str) -> list[Path]:
    return [p for f in folders for p in sorted((REPO_ROOT / f).rglob("*.py"))]


def _below_commands(mods: set[str]) -> list[str]:
    return sorted(m for m in mods if m.split(".")[0] == "fp4moe" and m != COMMANDS and not m.startswith(COMMANDS + "."))


def _by_hand(mods: set[str]) -> list[str]:
    return sorted(m for m in mods if m.split(".")[0] in BY_HAND)


@source_trees.HOUSE_RULE
def test_nothing_in_the_package_the_tests_or_ci_imports_a_script_or_the_lab():
    bad = {str(p.relative_to(REPO_ROOT)): _by_hand(_imports(p)) for p in _python_files("fp4moe", "tests", "ci") + [REPO_ROOT / "conftest.py"]}
    assert not any(bad.values()), {k: v for k, v in bad.items() if v}


def test_the_rules_see_what_they_forbid(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("from fp4moe.commands.main import main\nimport fp4moe.commands\nfrom fp4moe.gates.perf import timer\n"
                      "import lab.studies.perf_study\nfrom scripts import compare_records\nimport labels\n")
    mods = _imports(script)
    assert _below_commands(mods) == ["fp4moe.gates.perf"]
    assert _by_hand(mods) == ["lab.studies.perf_study", "scripts"]


@source_trees.HOUSE_RULE
def test_scripts_reach_the_package_only_through_fp4moe_commands():
    below = {p.name: _below_commands(_imports(p)) for p in sorted((REPO_ROOT / "scripts").glob("*.py"))}
    assert below, "scripts/ holds no Python file: the rule checks nothing"
    assert not any(below.values()), {k: v for k, v in below.items() if v}


@source_trees.HOUSE_RULE
def test_shell_recipes_start_python_by_module_name():
    """A recipe runs ``python3 -m fp4moe...`` or ``python3 -m lab.studies...``, never a Python file."""
    runs_a_file = re.compile(r"python3?\s+\S*(?:scripts|lab)/\S+\.py")
    recipes = sorted((REPO_ROOT / "scripts").glob("*.sh")) + sorted((REPO_ROOT / "lab").glob("*.sh"))
    assert recipes, "no shell recipe found in scripts/ or lab/"
    bad = {sh.name: runs_a_file.findall(sh.read_text()) for sh in recipes}
    assert not any(bad.values()), {k: v for k, v in bad.items() if v}
