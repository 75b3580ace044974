"""The floor of ``scripts/`` (GPU studies and probes run by hand, never by the suite): nothing in
the package, the tests or CI imports a script, and a script reaches the package only through the
modules listed here. A script that starts importing another module fails here; folding a study
into a ``fp4moe-gate`` subcommand (reaching only ``fp4moe.commands``) shrinks the table."""

from __future__ import annotations

import ast
from pathlib import Path

from fp4moe.infra.paths import REPO_ROOT

#: the commands floor: a script may always reach it
COMMANDS = "fp4moe.commands"
#: per script, the modules below the commands floor it reaches today (shrink only)
REACHES_BELOW_COMMANDS = {
    'aiter_triton_pad_table.py': {'fp4moe.gates.perf', 'fp4moe.gates.perf.abtest', 'fp4moe.gates.perf.timer', 'fp4moe.stats.compare'},
    'gpu_memory.py': {'fp4moe.model.catalogue', 'fp4moe.reference.footprint', 'fp4moe.reference.weight_path'},
    'gpu_sandbox_probe.py': {'fp4moe.infra', 'fp4moe.infra.paths'},
    'moe_fast_bench.py': {'fp4moe.gates.perf', 'fp4moe.gates.perf.roofline', 'fp4moe.gates.perf.timer', 'fp4moe.model', 'fp4moe.reference', 'fp4moe.reference.reference_backend'},
    'perf_study.py': {'fp4moe.gates.perf.abtest', 'fp4moe.gates.perf.timer', 'fp4moe.gates.perf.workloads', 'fp4moe.stats', 'fp4moe.stats.compare'},
    'serve_study.py': {'fp4moe.completions.prompts', 'fp4moe.completions.stream_server', 'fp4moe.gates.serve_bench', 'fp4moe.infra.files', 'fp4moe.stats.compare'},
    'sglang_replay.py': {'fp4moe.infra', 'fp4moe.targets.sglang.source'},
}


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


def test_nothing_in_the_package_the_tests_or_ci_imports_a_script():
    bad = {str(p.relative_to(REPO_ROOT)): m for p in _python_files("fp4moe", "tests", "ci") + [REPO_ROOT / "conftest.py"]
           for m in _imports(p) if m == "scripts" or m.startswith("scripts.")}
    assert not bad, bad


def test_scripts_reach_the_package_only_through_the_listed_modules():
    seen = {p.name: {m for m in _imports(p) if m.split(".")[0] == "fp4moe" and not m.startswith(COMMANDS)}
            for p in sorted((REPO_ROOT / "scripts").glob("*.py"))}
    grown = {name: sorted(mods - REACHES_BELOW_COMMANDS.get(name, set())) for name, mods in seen.items()}
    assert not any(grown.values()), f"new imports below fp4moe.commands: { {k: v for k, v in grown.items() if v} }"
    gone = {name: sorted(REACHES_BELOW_COMMANDS[name] - seen.get(name, set())) for name in REACHES_BELOW_COMMANDS}
    assert not any(gone.values()), f"no longer imported (remove from REACHES_BELOW_COMMANDS): { {k: v for k, v in gone.items() if v} }"
