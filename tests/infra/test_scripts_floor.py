"""The contract of ``scripts/`` (recipes run by hand, never by the suite): nothing in the package,
the tests or CI imports a script, and a script reaches the package only through
``fp4moe.commands`` (a subcommand, or a study in ``fp4moe.commands.studies``). The studies
themselves live in the package, so the floors hold for them too; every one of them, the GPU
ones included, imports cleanly on a machine without a GPU."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

from fp4moe.infra.paths import REPO_ROOT

#: the only part of the package a script may import
COMMANDS = "fp4moe.commands"
STUDIES = "fp4moe.commands.studies"


def _imports(path: Path) -> set[str]:
    out = set()
    for n in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(n, ast.ImportFrom) and n.module and not n.level:
            out.add(n.module)
        elif isinstance(n, ast.Import):
            out.update(a.name for a in n.names)
    return out


def _python_files(*folders: str) -> list[Path]:
    return [p for f in folders for p in sorted((REPO_ROOT / f).rglob("*.py"))]


def _below_commands(mods: set[str]) -> list[str]:
    return sorted(m for m in mods if m.split(".")[0] == "fp4moe" and m != COMMANDS and not m.startswith(COMMANDS + "."))


def test_nothing_in_the_package_the_tests_or_ci_imports_a_script():
    bad = {str(p.relative_to(REPO_ROOT)): m for p in _python_files("fp4moe", "tests", "ci") + [REPO_ROOT / "conftest.py"]
           for m in _imports(p) if m == "scripts" or m.startswith("scripts.")}
    assert not bad, bad


def test_scripts_reach_the_package_only_through_fp4moe_commands():
    below = {p.name: _below_commands(_imports(p)) for p in sorted((REPO_ROOT / "scripts").glob("*.py"))}
    assert not any(below.values()), {k: v for k, v in below.items() if v}


def test_the_rule_sees_an_import_below_commands(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("from fp4moe.commands.main import main\nimport fp4moe.commands\nfrom fp4moe.gates.perf import timer\n")
    assert _below_commands(_imports(script)) == ["fp4moe.gates.perf"]


def test_shell_recipes_start_python_by_module_name():
    """A recipe runs ``python3 -m fp4moe...`` (a study or a subcommand), never a Python file of ``scripts/``."""
    runs_a_file = re.compile(r"python3?\s+\S*scripts/\S+\.py")
    bad = {sh.name: runs_a_file.findall(sh.read_text()) for sh in sorted((REPO_ROOT / "scripts").glob("*.sh"))}
    assert not any(bad.values()), {k: v for k, v in bad.items() if v}


STUDY_MODULES = sorted(m.name for m in pkgutil.iter_modules([str(REPO_ROOT / "fp4moe" / "commands" / "studies")]))


def test_the_six_studies_are_there():
    assert STUDY_MODULES == ["aiter_triton_pad_table", "gpu_memory", "gpu_sandbox_probe", "moe_fast_bench",
                             "perf_study", "serve_study"]


def _extra_of(module: str, pyproject: dict) -> str | None:
    """The pyproject extra whose distribution provides ``module`` (a top-level name), or None."""
    top = module.split(".")[0].lower()
    for extra, reqs in pyproject["project"]["optional-dependencies"].items():
        if any(re.split(r"[\[<>=~!; ]", r, maxsplit=1)[0].lower().replace("-", "_") == top for r in reqs):
            return extra
    return None


@pytest.mark.parametrize("name", STUDY_MODULES)
def test_every_study_imports_cleanly_and_has_a_main(name, request):
    try:
        mod = importlib.import_module(f"{STUDIES}.{name}")
    except ModuleNotFoundError as e:  # a study may need an extra (serve_study: aiohttp); nothing else
        extra = _extra_of(e.name or "", request.getfixturevalue("pyproject"))
        if extra is None:
            raise
        pytest.skip(f"{e.name} not installed (the {extra} extra)")
    assert callable(getattr(mod, "main", None)) and mod.__doc__
