"""``fp4moe-gate sglang-check`` against hostile inputs: it judges the
bytes it is given, refuses options that would quietly mean something else, and leaves nothing
in ``$TMPDIR``.

Wheels here are tiny zips built in the test (no SGLang needed, no child started): each case is
refused or resolved before a child would run, so the module stays in the CPU tier (~0.5 s).
"""

from __future__ import annotations

import os
import tempfile
import zipfile

import pytest

from fp4moe.targets.sglang import source

pytestmark = pytest.mark.reliability
#: the gate checks the SGLang child's dependencies before it reads fp8.py (fp4moe.targets.sglang.target.drive)
needs_child_deps = pytest.mark.skipif(bool(source.missing_deps()), reason=(
    f"{', '.join(source.missing_deps())} not installed (the sglang extra): sglang-check stops there before reading fp8.py"))

FP8_WITH_BRANCH = "def f(layer):\n    if _use_aiter and layer.is_fp4_expert:\n        return 1\n"
FP8_WITHOUT = "def f(layer):\n    return 0\n"


def _wheel(path, *, name="sglang", version="0.5.23", fp8=FP8_WITH_BRANCH, meta=True):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(source.FP8_FILE, fp8)
        z.writestr(source.RUNNER_FILE, "# runner\n")
        if meta:
            z.writestr(f"{name}-{version}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nbody\n")
    return path


@pytest.fixture
def wheel_dir(tmp_path, monkeypatch):
    d = tmp_path / "wheels"
    monkeypatch.setattr(source, "WHEEL_DIR", d)
    return d


RELEASED = "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl"


def test_an_older_wheel_under_the_released_name_is_judged_by_its_contents(tmp_path, wheel_dir):
    """Probe: after a run with the real 0.5.23 wheel, a 0.5.16 wheel copied to the 0.5.23 file
    name exited 0 (the unpacked 0.5.23 was reused by name)."""
    (tmp_path / "a").mkdir()
    good = source.from_wheel(_wheel(tmp_path / "a" / RELEASED))
    assert good.version == "0.5.23" and "if _use_aiter" in good.fp8_text
    (tmp_path / "b").mkdir()
    old = source.from_wheel(_wheel(tmp_path / "b" / RELEASED, version="0.5.16", fp8=FP8_WITHOUT))
    assert old.version == "0.5.16" and old.root != good.root and not source.has_fp4_aiter_branch(old.fp8_text)
    assert "METADATA says 0.5.16" in old.origin


def test_the_environment_variable_wheel_is_judged_by_bytes_too(tmp_path, wheel_dir, monkeypatch):
    (tmp_path / "a").mkdir()
    source.from_wheel(_wheel(tmp_path / "a" / RELEASED))
    (tmp_path / "b").mkdir()
    monkeypatch.setenv("FP4MOE_SGLANG_WHEEL", str(_wheel(tmp_path / "b" / RELEASED, version="0.5.16", fp8=FP8_WITHOUT)))
    assert source.resolve().version == "0.5.16"


@pytest.mark.parametrize("fault, words", [
    ("truncated", ["not a readable wheel"]),
    ("foreign", ["METADATA names 'torch'"]),
    ("no-metadata", ["METADATA"]),
], ids=lambda x: x if isinstance(x, str) else None)
def test_a_bad_wheel_under_the_released_name_is_exit_2_naming_it(tmp_path, wheel_dir, gate, fault, words):
    """Probes: a truncated copy and a renamed unrelated wheel passed on a cache hit by name."""
    (tmp_path / "a").mkdir()
    source.from_wheel(_wheel(tmp_path / "a" / RELEASED))  # the cache now holds a good 0.5.23
    bad = tmp_path / RELEASED
    if fault == "truncated":
        data = (tmp_path / "a" / RELEASED).read_bytes()
        bad.write_bytes(data[: len(data) // 2])
    else:
        _wheel(bad, name="torch" if fault == "foreign" else "sglang", meta=fault != "no-metadata")
    gate("sglang-check", "--sglang-wheel", bad, inputs=[bad]).cannot_run(RELEASED, *words)


@pytest.mark.parametrize("argv, words", [
    (["--tp", "0"], ["--tp 0"]),
    (["--tp", "0", "--tp-rank", "0"], ["--tp 0"]),
    (["--tp", "-8"], ["--tp -8"]),
    (["--timeout", "inf"], ["--timeout inf"]),
    (["--timeout", "0"], ["--timeout 0"]),
    (["--timeout", "-1"], ["--timeout -1"]),
    (["--timeout", "nan"], ["--timeout nan"]),
    # before any child (it cost a whole SGLang drive to hear "was not applied")
    (["--mutant", "no_such_mutant"], ["argument --mutant: invalid choice: 'no_such_mutant'", "'pad_not_propagated'"]),
], ids=lambda x: "_".join(x) if isinstance(x, list) else None)
def test_options_that_would_mean_something_else_are_refused(gate, argv, words, tmp_path, monkeypatch):
    """Probes: ``--tp 0`` (and with ``--tp-rank 0``) silently selected the default rows and
    exited 0; ``--timeout inf`` ended in OverflowError. Refused before any SGLang is resolved,
    and no /tmp/fp4moe-sglang-* folder is left."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    gate("sglang-check", *argv).cannot_run(*words)
    assert not [p for p in os.listdir(tmp_path) if p.startswith("fp4moe-sglang-")]


@needs_child_deps
def test_a_syntax_error_in_fp8_names_the_file(tmp_path, wheel_dir, gate):
    """Probe: a broken fp8.py gave ``SyntaxError (<unknown>, line 3516)``."""
    whl = _wheel(tmp_path / RELEASED, fp8=FP8_WITH_BRANCH + "def broken(:\n")
    gate("sglang-check", "--sglang-wheel", whl).cannot_run("fp8.py", "syntax error", "line 4")


@needs_child_deps
def test_a_refused_run_leaves_no_temporary_folder(tmp_path, wheel_dir, gate, monkeypatch):
    """Probe: every run, even one refused, left a /tmp/fp4moe-sglang-* folder."""
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", None)
    whl = _wheel(tmp_path / RELEASED, fp8=FP8_WITHOUT)  # no FP4 branch: refused before the child
    gate("sglang-check", "--sglang-wheel", whl).cannot_run("no DeepSeek-V4 FP4 aiter branch")
    assert os.listdir(tmp_path / "tmp") == []


# ---------------------------------------------------------------- SGLang code that ends the child
_TRAIL_SCRIPT = r"""
import importlib, json, sys
from fp4moe.targets.sglang.child.import_trail import ImportTrail, stage_text
seen = []
trail = ImportTrail(sys.argv[1], lambda stack, raised: seen.append([stack, raised]), prefix="p21pkg.")
sys.path.insert(0, sys.argv[1])
trail.install()
try:
    importlib.import_module("p21pkg.outer")
except SystemExit:
    pass
trail.remove()
print(json.dumps({"seen": seen, "stages": [stage_text(st, r) for st, r in seen]}))
"""


def test_import_trail_names_the_module_whose_code_is_running(tmp_path):
    """Probe ``sg-import-os-exit`` (the child side): the trail the SGLang child notes as its
    harness stage says which module's import-time code runs (the innermost, beside the one
    importing it) and which module a ``SystemExit`` came out of. Run in a child: the parent
    never imports the child's modules (tests/targets/sglang/test_sglang_tier.py checks it)."""
    import json
    import subprocess
    import sys

    pkg = tmp_path / "p21pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "done.py").write_text("X = 1\n")
    (pkg / "outer.py").write_text("import p21pkg.done\nimport p21pkg.inner\n")
    (pkg / "inner.py").write_text("import sys\nsys.exit(0)\n")
    out = subprocess.run([sys.executable, "-B", "-c", _TRAIL_SCRIPT, str(tmp_path)], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    got = json.loads(out)
    seen = got["seen"]
    o, d, i = "p21pkg/outer.py", "p21pkg/done.py", "p21pkg/inner.py"
    stacks = [s for s, _ in seen]
    # outer begun, done nested in it and finished, inner nested, then both unwound by the exit
    assert stacks == [[o], [o, d], [o], [o, i], [o], []], stacks
    assert seen[3][1] is None and seen[4][1] == seen[5][1]
    assert seen[-1][1] == {"module": [o, i], "type": "SystemExit"}, seen[-1]  # where the exit came from
    assert got["stages"][3] == f"importing {i} (imported by {o})"
    assert got["stages"][-1] == f"unwinding SystemExit raised while importing {i} (imported by {o})"
    assert not list(tmp_path.rglob("__pycache__"))


def _tree_that_exits(tmp_path, how: str):
    """A minimal SGLang tree (the two files the gate looks for, the FP4 branch's text) whose
    fp8.py imports a helper module that ends the process at import."""
    from fp4moe.targets.sglang import source as src

    root = tmp_path / "sg"
    for rel in (src.FP8_FILE, src.RUNNER_FILE):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("")
    (root / "sglang" / "version.py").write_text('__version__ = "0.0.1"\n')
    (root / "sglang" / "srt" / "helper.py").write_text({"os-exit": "import os\nos._exit(0)\n",
                                                       "sys-exit": "import sys\nsys.exit(0)\n", "none": "X = 1\n"}[how])
    (root / src.FP8_FILE).write_text("import sglang.srt.helper\n\nif _use_aiter and layer.is_fp4_expert:\n    pass\n")
    return root


@pytest.mark.slow
@pytest.mark.parametrize("how, words", [
    ("os-exit", ["the SGLang child: the code under test called os._exit(0) at sglang/srt/helper.py:2"]),
    ("sys-exit", ["the SGLang child: the code under test called sys.exit(0) at sglang/srt/helper.py:2 while "
                  "unwinding SystemExit raised while importing sglang/srt/helper.py "
                  "(imported by sglang/srt/layers/quantization/fp8.py)"]),
])
def test_sglang_code_ending_the_child_at_import_is_named(tmp_path, gate, how, words):
    """Probes ``sg-import-os-exit`` / ``sg-import-sys-exit``: the line used to name SGLang's last
    warning ("exited 0 without a result record: warnings.warn(...)"), not the module."""
    root = _tree_that_exits(tmp_path, how)
    gate("sglang-check", "--sglang-root", root, "--model", "dsv4-pro", "--tp", "8", "--quiet",
         inputs=[root]).cannot_run(*words)


@pytest.mark.slow
def test_no_bytecode_is_written_into_the_sglang_tree(tmp_path):
    """Probe ``sg-pycache``: with bytecode writing on in the caller's environment, no process the
    gate starts writes a ``__pycache__`` into the SGLang tree under test (the gate itself runs
    with bytecode on here; its children get PYTHONDONTWRITEBYTECODE)."""
    import subprocess
    import sys

    from fp4moe.infra.paths import REPO_ROOT

    root = _tree_that_exits(tmp_path, "none")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    p = subprocess.run([sys.executable, "-m", "fp4moe.commands.main", "sglang-check", "--sglang-root", str(root),
                        "--model", "dsv4-pro", "--tp", "8", "--quiet"], env=env, cwd=tmp_path, capture_output=True,
                       text=True, timeout=300, stdin=subprocess.DEVNULL)
    # the child did import the tree: fp8.py ran (and raised at its FP4-branch text, this tree's end)
    assert p.returncode == 2 and "fp8.py:3 in <module>" in p.stderr and "exec_module" not in p.stderr, p.stderr
    assert not list(root.rglob("__pycache__")) and not list(root.rglob("*.pyc")), list(root.rglob("*.pyc"))


def test_an_unwritable_wheel_cache_is_named_not_the_genuine_wheel(tmp_path, monkeypatch, gate):
    """Probe: with the wheel cache unwritable the genuine wheel was "not a readable wheel". The
    cache is a folder under a regular file here (unwritable even for root)."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setattr(source, "WHEEL_DIR", blocker / "wheels")
    (tmp_path / "a").mkdir()
    whl = _wheel(tmp_path / "a" / RELEASED)
    r = gate("sglang-check", "--sglang-wheel", whl, inputs=[whl]).cannot_run(
        f"the wheel cache {blocker / 'wheels'}", "FP4MOE_WHEEL_DIR")
    assert "not a readable wheel" not in r.err


#: a pip that never answers, and one that takes ``$1`` seconds and then leaves a wheel in ``-d``
HANGING_PIP = ("import time; time.sleep(300)",)
SLOW_PIP = ("import shutil, sys, time; time.sleep(float(sys.argv[1])); d = sys.argv[sys.argv.index('-d') + 1]; "
            "shutil.copy(sys.argv[2], d)",)


@pytest.mark.slow
def test_the_wheel_download_is_killed_at_the_run_deadline(tmp_path, wheel_dir, monkeypatch, gate):
    """Probe: ``pip download`` ran outside ``--timeout`` (its own 600 s). Now it is a child of
    the run's one deadline: a pip that never answers is killed at ``--timeout 1`` and the line
    names the option, the version and the wheel cache folder."""
    import sys
    import time

    monkeypatch.setattr(source, "PIP_DOWNLOAD", (sys.executable, "-c", *HANGING_PIP))
    t0 = time.monotonic()
    gate("sglang-check", "--sglang-version", "0.5.23", "--timeout", "1").cannot_run(
        "--sglang-version 0.5.23: pip download into the wheel cache", str(wheel_dir), "--timeout 1",
        "for the whole run")
    assert time.monotonic() - t0 < 20  # 1 s, the kill's grace (5 s) and a loaded runner


def test_a_wheel_cache_that_cannot_be_made_is_named_before_any_download(tmp_path, monkeypatch, gate):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setattr(source, "WHEEL_DIR", blocker / "wheels")
    gate("sglang-check", "--sglang-version", "0.5.23").cannot_run(f"the wheel cache {blocker / 'wheels'} cannot be made",
                                                                  "FP4MOE_WHEEL_DIR")


@pytest.mark.slow
def test_the_download_and_the_sglang_child_share_one_deadline(tmp_path, wheel_dir, monkeypatch, gate):
    """A download that takes 3 s of ``--timeout 4`` leaves the SGLang child what is left (at most
    1 s, too little to import torch and SGLang): it is killed at the deadline or, where the
    download's start under load spent the rest, never started; either way the line names the
    whole run's limit, not a fresh one."""
    import sys
    import time

    (tmp_path / "a").mkdir()
    whl = _wheel(tmp_path / "a" / RELEASED)
    monkeypatch.setattr(source, "PIP_DOWNLOAD", (sys.executable, "-c", *SLOW_PIP, "3", str(whl)))
    t0 = time.monotonic()
    r = gate("sglang-check", "--sglang-version", "0.5.23", "--model", "dsv4-flash", "--tp", "16", "--timeout", "4", "-q")
    r.cannot_run("the SGLang child", "--timeout 4")
    assert "timed out" in r.err and "for the whole run" in r.err or "spent before" in r.err, r.err
    assert time.monotonic() - t0 < 4 + 15


FULL_TMPDIR = """set -e
mount -t tmpfs -o size=64k tmpfs "$1"
TMPDIR="$1" exec "$2" -m fp4moe.commands.main sglang-check --sglang-root "$3" --model dsv4-flash --tp 16 -q
"""


@pytest.mark.slow
def test_a_full_tmpdir_is_named(tmp_path):
    """Probe: a full ``TMPDIR`` was "internal error: SafetensorError ..." naming no folder. A
    64 KiB tmpfs as TMPDIR, mounted in a mount namespace of the gate's own (root), so nothing of
    it is seen outside; the SGLang tree is a stand-in holding the two files the gate reads."""
    import shutil
    import subprocess
    import sys

    from fp4moe.infra.paths import REPO_ROOT

    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("[slow tier] a private tmpfs needs root and unshare(1)")
    root, full = tmp_path / "sglang-root", tmp_path / "full"
    full.mkdir()
    for rel, text in ((source.FP8_FILE, FP8_WITH_BRANCH), (source.RUNNER_FILE, "# runner\n")):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    r = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", FULL_TMPDIR, "sh", str(full),
                        sys.executable, str(root)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False)
    if "mount:" in r.stderr or "unshare:" in r.stderr:
        pytest.skip(f"[slow tier] no private tmpfs here: {r.stderr.strip()[:200]}")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"TMPDIR {full}:" in r.stderr and "No space left on device" in r.stderr and "internal error" not in r.stderr
