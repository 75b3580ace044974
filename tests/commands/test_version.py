"""``fp4moe-gate --version`` and the provenance every result record carries: the package
version (``fp4moe.__version__``, which ``pyproject.toml`` reads) and, from a git checkout, the
commit. ``python -m fp4moe`` is the same command line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import fp4moe
from fp4moe.commands import version
from fp4moe.commands.main import main
from fp4moe.infra import paths

CHECKOUT = Path(__file__).resolve().parents[2]


def test_version_names_the_package_version_and_the_commit(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith(f"fp4moe-gate {fp4moe.__version__} (")
    if paths.CHECKOUT is not None and (paths.CHECKOUT / ".git").exists():
        head = subprocess.run(["git", "-C", str(paths.CHECKOUT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
        assert re.fullmatch(r"[0-9a-f]{40}", head) and f"commit {head}" in out, out
    else:
        assert "installed package" in out, out
    assert f"data {paths.data_dir()}" in out


def test_every_record_carries_version_and_commit(gate, tmp_path):
    out = tmp_path / "fp.json"
    r = gate("footprint", "--model", "dsv4-flash", "--tp", "8", "--json", out)
    assert r.rc == 0, r.err
    rec = json.loads(out.read_text())
    assert rec["fp4moe_version"] == fp4moe.__version__
    assert rec["fp4moe_commit"] == version.checkout_commit()
    bad = tmp_path / "bad.json"  # a cannot-run record carries them too
    r = gate("footprint", "--model", "no-such-model", "--json", bad)
    assert r.rc == 2
    rec = json.loads(bad.read_text())
    assert rec["status"] == "cannot-run" and rec["fp4moe_version"] == fp4moe.__version__


def test_the_commit_is_marked_dirty_when_tracked_files_differ(tmp_path, monkeypatch):
    repo = tmp_path / "co"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "f.txt").write_text("seeded 1\n")
    subprocess.run([*git, "add", "f.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "one"], check=True)
    monkeypatch.setattr(version, "CHECKOUT", repo)
    version.checkout_commit.cache_clear()
    try:
        clean = version.checkout_commit()
        (repo / "f.txt").write_text("seeded 2\n")
        version.checkout_commit.cache_clear()
        dirty = version.checkout_commit()
    finally:
        version.checkout_commit.cache_clear()
    assert re.fullmatch(r"[0-9a-f]{40}", clean) and dirty == clean + "+dirty"


@pytest.mark.slow
def test_python_m_fp4moe_is_the_same_command_line():
    env = {**os.environ, "PYTHONPATH": str(Path(fp4moe.__file__).resolve().parents[1])}
    r = subprocess.run([sys.executable, "-m", "fp4moe", "footprint", "--tp", "0"], capture_output=True, text=True,
                       timeout=120, env=env, cwd=CHECKOUT)
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith("fp4moe-gate footprint"), r.stderr
    r = subprocess.run([sys.executable, "-m", "fp4moe", "--version"], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0 and r.stdout.startswith(f"fp4moe-gate {fp4moe.__version__} ("), r.stdout + r.stderr
