"""``--dist loadgroup`` keeps a group on one worker (the slow step's two pytest-xdist workers).

The tests that read one session child run (``tests/shared_runs.py``) carry an ``xdist_group``;
with pytest-xdist 3.8 on pytest 9.2 the group's node-id suffix was lost and the group spread
over the workers, each worker then making the run again. A child pytest with two workers, this
checkout's root conftest as its plugin, over a generated module: every test of the group carries
its ``@GROUP`` id and runs on one worker. The same run, under ``--require sglang`` where SGLang is
installed: the controller proves it (a child imports SGLang's modules), no worker is configured to
start that child again.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from fp4moe.infra.paths import REPO_ROOT
from fp4moe.targets import capability_probes

#: SGLang installed here: the child run is also under --require sglang
SGLANG_FOUND = capability_probes()["sglang"]()[0]

PROBE = '''
import os

import pytest


def test_no_worker_proves_the_requirement_again(request):
    # a worker is configured without proofs (the controller's configure step started them)
    assert hasattr(request.config, "workerinput") and request.config._fp4moe_proofs is None


@pytest.mark.xdist_group("one")
@pytest.mark.parametrize("i", range(4))
def test_grouped(i):
    assert os.environ["PYTEST_XDIST_WORKER"].startswith("gw")


@pytest.mark.parametrize("i", range(4))
def test_free(i):
    assert os.environ["PYTEST_XDIST_WORKER"].startswith("gw")
'''
ROW = re.compile(r"^\[(gw\d+)\] .*PASSED (test_probe\.py::\S+)")


@pytest.mark.slow
def test_a_group_runs_on_one_worker_under_loadgroup(tmp_path):
    pytest.importorskip("xdist")
    (tmp_path / "test_probe.py").write_text(PROBE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    env.pop("FP4MOE_REQUIRE", None)
    if SGLANG_FOUND:
        env["FP4MOE_REQUIRE"] = "sglang"
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-n", "2",
                        "--dist", "loadgroup", "-v", "--rootdir", str(tmp_path), "test_probe.py"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    rows = [m.groups() for m in map(ROW.match, r.stdout.splitlines()) if m]
    grouped = [(w, t) for w, t in rows if t.startswith("test_probe.py::test_grouped[")]
    assert len(rows) == 9 and len(grouped) == 4, r.stdout[-3000:]
    assert all(t.endswith("]@one") for _, t in grouped), grouped  # the id the scheduler groups by
    assert len({w for w, _ in grouped}) == 1, grouped
