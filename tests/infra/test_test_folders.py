"""Each test module sits in the folder of the floor it tests.

The rule: ``tests/<floor>/...`` (``tests/targets/<target>/...`` for a target) names a floor of the
package; a test module there imports at least one ``fp4moe`` module of that floor, unless

- it drives the command line (imports ``fp4moe.commands``, uses the ``gate`` / ``gate_child``
  fixtures, or names ``fp4moe`` / ``fp4moe.commands`` as a module to run) and sits under
  ``tests/gates/`` or ``tests/commands/``: a gate is tested through its command; or
- it imports nothing of the package but ``fp4moe.infra`` (paths, the child harness): it drives
  the package in a subprocess, and its folder says which floor.

``tests/ci/`` tests CI files, not the package; top-level modules of ``tests/`` are shared helpers.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import source_trees

from fp4moe.infra.paths import REPO_ROOT

pytestmark = pytest.mark.xdist_group(source_trees.GROUP)

TESTS = REPO_ROOT / "tests"
#: fixtures that run the command line (tests/conftest.py)
CLI_FIXTURES = {"gate", "gate_child"}
#: module names a test runs with ``python -m``
CLI_MODULES = {"fp4moe", "fp4moe.commands", "fp4moe.commands.main"}
#: folders whose floor the command line reaches: a command-driving test may sit there
COMMAND_FOLDERS = {"gates", "commands"}
#: test modules outside the rule, with why: the killers of the zoo's aiter-dispatch target import
#: the mutant definitions they must kill (fp4moe.gates.zoo); the code under test runs in a child
#: started by name, which a test cannot import, and the zoo's target table names this folder.
EXEMPT = {
    "tests/targets/aiter/dispatch/test_compute_dispatch.py": "aiter-dispatch zoo killer (mutants from gates.zoo)",
    "tests/targets/aiter/dispatch/test_default_run.py": "aiter-dispatch zoo killer (mutants from gates.zoo)",
    "tests/targets/aiter/dispatch/test_dispatch_mutants.py": "aiter-dispatch zoo killer (mutants from gates.zoo)",
}


def floor_of_module(name: str) -> str | None:
    parts = name.split(".")
    if parts[0] != "fp4moe" or len(parts) < 2:
        return None
    return ".".join(parts[1:3]) if parts[1] == "targets" and len(parts) > 2 else parts[1]


def floor_of_folder(path: Path) -> str | None:
    parts = path.relative_to(TESTS).parts[:-1]
    if not parts:
        return None
    return f"targets.{parts[1]}" if parts[0] == "targets" and len(parts) > 1 else parts[0]


def what_it_imports(source) -> tuple[set[str], bool]:
    """(the floors of the fp4moe modules it imports, whether it drives the command line); ``source``:
    text, or the nodes of a parsed file."""
    floors, cli = set(), False
    for n in ast.walk(ast.parse(source)) if isinstance(source, str) else source:
        if isinstance(n, ast.ImportFrom) and n.module and not n.level:
            floors.update(floor_of_module(f"{n.module}.{a.name}") for a in n.names)
        elif isinstance(n, ast.Import):
            floors.update(floor_of_module(a.name) for a in n.names)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            cli |= bool({a.arg for a in n.args.args} & CLI_FIXTURES)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str):
            cli |= n.value in CLI_MODULES
    floors.discard(None)
    return floors, cli or "commands" in floors


def misfiled(path: Path) -> str | None:
    """Why ``path`` is in the wrong folder, or None."""
    folder = floor_of_folder(path)
    if folder in (None, "ci"):
        return None
    floors, cli = what_it_imports(source_trees.nodes(path))
    tested = floors if folder == "infra" else floors - {"infra"}
    if not tested or folder in floors or (cli and folder in COMMAND_FOLDERS):
        return None
    return f"in tests/{folder.replace('.', '/')}/ but imports only {sorted(floors)}"


@source_trees.HOUSE_RULE
def test_every_test_module_sits_in_the_folder_of_its_floor():
    found = {str(p.relative_to(REPO_ROOT)): misfiled(p) for p in sorted(TESTS.rglob("*.py"))}
    bad = {k: v for k, v in found.items() if v and k not in EXEMPT}
    assert not bad, bad
    assert {k for k in EXEMPT if found.get(k)} == set(EXEMPT), "an exemption no longer needed: remove it"


def test_the_rule_finds_a_reference_test_under_gates(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("from fp4moe.reference.footprint import layer_footprint\nfrom fp4moe.infra.paths import REPO_ROOT\n")
    assert what_it_imports(f.read_text()) == ({"reference", "infra"}, False)
    f.write_text("def test_x(gate):\n    pass\nfrom fp4moe.targets.aiter.backend import X\n")
    assert what_it_imports(f.read_text()) == ({"targets.aiter"}, True)
