"""The package carries its runtime data. Every name the code passes to
``fp4moe.infra.paths.data_path`` is listed from the code itself (its syntax tree, never by
hand) and must exist in the data folder the imported package reads, and in a built wheel
(which holds no ``lab/``: studies, GPU recipes and recorded baselines stay in the checkout):
``$FP4MOE_WHEEL`` (the wheel ``.ci/run``'s installed-package step built and installed) or,
in the slow tier, wheels built here by ``pip wheel --no-deps`` and by ``python -m build``
(sdist, then the wheel from it). Under ``$FP4MOE_EXPECT_INSTALLED=1`` (that step's run of
part of the suite against the installed package) the package under test must be the
installed one, not a checkout's."""

from __future__ import annotations

import ast
import functools
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import source_trees

import fp4moe
from fp4moe.infra import paths

PKG = Path(fp4moe.__file__).resolve().parent
WHEEL_ENV = "FP4MOE_WHEEL"
INSTALLED_ENV = "FP4MOE_EXPECT_INSTALLED"
#: Names the scan must find (it would otherwise pass on a tree where it found nothing).
KNOWN = {"models.json", "footprint_budget.json", "accuracy_thresholds.json", "aiter_known_defects.json",
         "gsm8k/gsm8k_offline.yaml", "gsm8k/mini", "perf/baselines"}


def _calls_of(path: Path, fn: str):
    for node in source_trees.nodes(path):
        if isinstance(node, ast.Call):
            f = node.func
            if (isinstance(f, ast.Name) and f.id == fn) or (isinstance(f, ast.Attribute) and f.attr == fn):
                yield node


@functools.cache
def scan() -> tuple[dict[str, list[str]], list[str]]:
    """({data name: [module:line, ...]}, [module:line of a data_path call without one literal name])."""
    names: dict[str, list[str]] = {}
    bad: list[str] = []
    for f in sorted(PKG.rglob("*.py")):
        for call in _calls_of(f, "data_path"):
            where = f"{f.relative_to(PKG.parent)}:{call.lineno}"
            args = call.args
            if len(args) == 1 and not call.keywords and isinstance(args[0], ast.Constant) and isinstance(args[0].value, str):
                names.setdefault(args[0].value, []).append(where)
            else:
                bad.append(where)
    return names, bad



@source_trees.HOUSE_RULE
@pytest.mark.xdist_group(source_trees.GROUP)
def test_every_data_lookup_names_one_literal_file():
    NAMES, NON_LITERAL = scan()
    assert not NON_LITERAL, f"data_path called without one literal name (the wheel check cannot list it): {NON_LITERAL}"
    assert KNOWN <= set(NAMES), f"the scan missed {sorted(KNOWN - set(NAMES))}: found {sorted(NAMES)}"


@source_trees.HOUSE_RULE
@pytest.mark.xdist_group(source_trees.GROUP)
def test_only_paths_opens_the_package_data():
    """``importlib.resources`` is asked in one place, so every lookup is seen by the scan."""
    users = sorted(str(f.relative_to(PKG.parent)) for f in PKG.rglob("*.py")
                   if "resources.files(" in f.read_text() and f != PKG / "infra" / "paths.py")
    assert not users, f"package data read around fp4moe.infra.paths.data_path: {users}"


def _files_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def test_every_named_data_file_is_in_the_data_folder(monkeypatch):
    monkeypatch.delenv(paths.DATA_ENV, raising=False)
    names = scan()[0]
    for name in sorted(names):
        p = paths.data_path(name)
        assert p.is_relative_to(paths.packaged_data_dir()) and p.exists(), f"{name} (opened at {names[name]}): {p} absent"
        if p.is_dir():
            assert _files_under(p), f"{name}: {p} is an empty folder"


def test_the_data_folder_override_replaces_the_folder(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.DATA_ENV, str(tmp_path))
    assert paths.data_path("models.json") == tmp_path / "models.json"
    assert paths.data_dir() == tmp_path


def check_wheel(wheel: Path) -> None:
    """Every data name the code opens, every file of the data folders it opens, and every module
    of the package under test are in ``wheel``."""
    members = set(zipfile.ZipFile(wheel).namelist())
    prefix = f"fp4moe/{paths.DATA_PACKAGE_DIR}/"
    missing = []
    for name in sorted(scan()[0]):
        src = PKG / paths.DATA_PACKAGE_DIR / name
        if src.is_dir():
            want = [prefix + f.relative_to(PKG / paths.DATA_PACKAGE_DIR).as_posix() for f in _files_under(src)]
            missing += [w for w in want if w not in members] or ([] if want else [prefix + name + "/ (empty)"])
        elif prefix + name not in members:
            missing.append(prefix + name)
    modules = [str(f.relative_to(PKG.parent)) for f in sorted(PKG.rglob("*.py")) if "__pycache__" not in f.parts]
    missing += [m for m in modules if m not in members]
    assert not missing, f"{wheel.name} lacks {len(missing)} file(s) the gates open: {missing[:8]}"
    lab = sorted(m for m in members if _is_lab(m))
    assert not lab, f"{wheel.name} holds {len(lab)} lab file(s) (studies, GPU recipes, recorded baselines): {lab[:8]}"


#: what stays in the checkout's lab/, never in the wheel: the folder, its studies, its recorded baseline
LAB_MARKS = ("lab/", "/studies/", "h200-device-tool/")


def _is_lab(member: str) -> bool:
    return member.startswith(LAB_MARKS[0]) or any(mark in member for mark in LAB_MARKS[1:])


def test_setuptools_packages_only_fp4moe():
    """pyproject's ``packages.find`` (what every wheel builder here reads) finds ``fp4moe`` and its
    subpackages only: the checkout's ``lab/`` (a package, so ``python -m lab.studies.X`` runs)
    is left out. Cheap twin of the slow tier's wheel builds."""
    if paths.CHECKOUT is None:
        pytest.skip("an installed package: no pyproject.toml to read (its wheel: $FP4MOE_WHEEL)")
    tomllib = pytest.importorskip("tomllib", reason="tomllib is Python >= 3.11")
    from setuptools import find_packages

    find = tomllib.loads((paths.CHECKOUT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    found = find_packages(where=str(paths.CHECKOUT), include=find["include"], exclude=find.get("exclude", ()))
    assert "fp4moe" in found and "fp4moe.commands" in found
    assert all(p == "fp4moe" or p.startswith("fp4moe.") for p in found), found
    assert not [p for p in found if "studies" in p.split(".")], found
    assert (paths.CHECKOUT / "lab" / "__init__.py").is_file(), "lab/ is not a package here: the check proves nothing"
    assert find_packages(where=str(paths.CHECKOUT), include=["lab*"]), "find_packages sees no lab: the check proves nothing"


@pytest.mark.skipif(not os.environ.get(WHEEL_ENV), reason=f"${WHEEL_ENV} unset (.ci/run's installed-package step sets it)")
def test_the_ci_wheel_holds_every_data_file():
    check_wheel(Path(os.environ[WHEEL_ENV]))


def _tracked_copy(dst: Path) -> Path:
    """The checkout's files git knows (tracked or not ignored): no build/ or egg-info leftovers."""
    root = paths.CHECKOUT
    listing = subprocess.run(["git", "-C", str(root), "ls-files", "-co", "--exclude-standard", "-z"],
                             capture_output=True, check=True, timeout=60).stdout.decode().split("\0")
    for rel in filter(None, listing):
        if (root / rel).is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / rel, dst / rel)
    return dst


BUILDERS = {
    "pip wheel --no-deps": lambda src, out: [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                                             "-w", str(out), str(src)],
    "python -m build": lambda src, out: [sys.executable, "-m", "build", "--no-isolation", "-o", str(out), str(src)],
}


@pytest.mark.slow
@pytest.mark.parametrize("builder", sorted(BUILDERS))
def test_a_wheel_built_here_holds_every_data_file(builder, tmp_path):
    if paths.CHECKOUT is None or not (paths.CHECKOUT / ".git").exists():
        pytest.skip("no git checkout to build from (the installed package's own wheel: $FP4MOE_WHEEL)")
    if builder == "python -m build" and importlib.util.find_spec("build") is None:
        pytest.skip("the build package is not installed (pip install build)")
    src = _tracked_copy(tmp_path / "src")
    out = tmp_path / "dist"
    r = subprocess.run(BUILDERS[builder](src, out), capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    wheels = sorted(out.glob("fp4_moe_gate-*.whl"))
    assert len(wheels) == 1, sorted(p.name for p in out.iterdir())
    check_wheel(wheels[0])


@pytest.mark.skipif(os.environ.get(INSTALLED_ENV) != "1", reason=f"${INSTALLED_ENV} unset (.ci/run's installed-package step)")
def test_the_package_under_test_is_the_installed_one():
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    assert PKG.is_relative_to(site), f"fp4moe imported from {PKG}, not from {site}"
    assert paths.CHECKOUT is None, f"the installed package believes it is a checkout: {paths.CHECKOUT}"
    assert paths.packaged_data_dir().resolve().is_relative_to(site)
    tests_root = Path(__file__).resolve().parents[2]
    assert not (tests_root / "fp4moe").exists(), f"{tests_root} holds an fp4moe that could shadow the installed one"


def _package_zip(whl: Path, leave_out: str | None = None, add: str | None = None) -> Path:
    """A zip of the package under test's files (empty), less ``leave_out``, plus ``add``."""
    with zipfile.ZipFile(whl, "w") as z:
        for f in sorted(PKG.rglob("*")):
            rel = f.relative_to(PKG.parent).as_posix()
            if f.is_file() and "__pycache__" not in f.parts and rel != leave_out:
                z.writestr(rel, b"")
        if add:
            z.writestr(add, b"")
    return whl


@pytest.mark.parametrize("left_out", ["fp4moe/data/models.json", "fp4moe/data/gsm8k/mini/train.jsonl",
                                      "fp4moe/commands/version.py"])
def test_a_wheel_lacking_one_file_fails_the_check(left_out, tmp_path):
    """The check itself can fail: a zip of the package under test with one file left out."""
    whl = _package_zip(tmp_path / "fp4_moe_gate-0-py3-none-any.whl", leave_out=left_out)
    check_wheel_ok = tmp_path / "complete.whl"
    shutil.copy(whl, check_wheel_ok)
    with zipfile.ZipFile(check_wheel_ok, "a") as z:
        z.writestr(left_out, b"")
    check_wheel(check_wheel_ok)
    with pytest.raises(AssertionError, match=left_out.replace(".", r"\.")):
        check_wheel(whl)


@pytest.mark.parametrize("lab_file", ["lab/studies/perf_study.py", "fp4moe/commands/studies/perf_study.py",
                                      "fp4moe/data/perf/baselines/h200-device-tool/aiter-none.json"])
def test_a_wheel_holding_a_lab_file_fails_the_check(lab_file, tmp_path):
    """The check fails a wheel that carries the lab, wherever it put it."""
    whl = _package_zip(tmp_path / "fp4_moe_gate-0-py3-none-any.whl", add=lab_file)
    with pytest.raises(AssertionError, match="lab file"):
        check_wheel(whl)


def test_known_defects_alone_names_the_packaged_registry():
    from fp4moe.commands.main import build_parser
    from fp4moe.targets.aiter.kernels.defects import PROJECT_REGISTRY

    p = build_parser()
    assert p.parse_args(["aiter-check", "--known-defects"]).known_defects == str(PROJECT_REGISTRY)
    assert p.parse_args(["aiter-check", "--known-defects", "mine.json"]).known_defects == "mine.json"
    assert p.parse_args(["aiter-check"]).known_defects is None  # without it: named, never accepted
    assert PROJECT_REGISTRY.is_file()


def test_perf_accept_never_writes_an_installed_package_s_data(monkeypatch, tmp_path):
    from fp4moe.commands import perf
    from fp4moe.infra.errors import GateCannotRun

    monkeypatch.delenv(perf.BASELINE_ENV, raising=False)
    assert perf.default_baseline_dir(writing=False) == paths.data_path("perf/baselines")
    monkeypatch.setattr(perf, "CHECKOUT", None)  # as installed: no checkout around the package
    assert perf.default_baseline_dir(writing=False) == paths.data_path("perf/baselines")  # reading: the packaged ones
    with pytest.raises(GateCannotRun, match="--baseline-dir"):
        perf.default_baseline_dir(writing=True)
    monkeypatch.setenv(perf.BASELINE_ENV, str(tmp_path))
    assert perf.default_baseline_dir(writing=True) == tmp_path
