"""``fp4moe-gate sglang-check`` against hostile inputs (round-2 probes, issue 21): it judges the
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
], ids=lambda x: "_".join(x) if isinstance(x, list) else None)
def test_options_that_would_mean_something_else_are_refused(gate, argv, words, tmp_path, monkeypatch):
    """Probes: ``--tp 0`` (and with ``--tp-rank 0``) silently selected the default rows and
    exited 0; ``--timeout inf`` ended in OverflowError. Refused before any SGLang is resolved,
    and no /tmp/fp4moe-sglang-* folder is left."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    gate("sglang-check", *argv).cannot_run(*words)
    assert not [p for p in os.listdir(tmp_path) if p.startswith("fp4moe-sglang-")]


def test_a_syntax_error_in_fp8_names_the_file(tmp_path, wheel_dir, gate):
    """Probe: a broken fp8.py gave ``SyntaxError (<unknown>, line 3516)``."""
    whl = _wheel(tmp_path / RELEASED, fp8=FP8_WITH_BRANCH + "def broken(:\n")
    gate("sglang-check", "--sglang-wheel", whl).cannot_run("fp8.py", "syntax error", "line 4")


def test_a_refused_run_leaves_no_temporary_folder(tmp_path, wheel_dir, gate, monkeypatch):
    """Probe: every run, even one refused, left a /tmp/fp4moe-sglang-* folder."""
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", None)
    whl = _wheel(tmp_path / RELEASED, fp8=FP8_WITHOUT)  # no FP4 branch: refused before the child
    gate("sglang-check", "--sglang-wheel", whl).cannot_run("no DeepSeek-V4 FP4 aiter branch")
    assert os.listdir(tmp_path / "tmp") == []
