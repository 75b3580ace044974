"""Every test path the CI scripts and workflows name exists: a moved or renamed test file fails here, in the
CPU tier, not as a pytest "file or directory not found" late in a CI step."""

from __future__ import annotations

import re

import pytest

from fp4moe.infra.paths import REPO_ROOT

#: the scripts CI runs that name test files or folders
SCRIPTS = (".ci/run", "ci/installed-package.sh", "ci/gfx950-gate.sh", "lab/h200_tier.sh", "lab/h200_aiter_kernels.sh",
           *sorted(str(p.relative_to(REPO_ROOT)) for p in (REPO_ROOT / "ci" / "workflows").glob("*.yml")))
#: a path into tests/ as a script writes it (a file, a folder, or a file::test id)
TEST_PATH = re.compile(r"(?<![\w/.])(tests/[\w./-]+?)(?:::[\w\[\]-]+)?(?=[\s\"')|\\]|$)")


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_test_path_a_ci_script_names_exists(script):
    path = REPO_ROOT / script
    if not path.is_file():
        pytest.skip(f"[cpu tier] {script} is not in this checkout")
    named = sorted({m.group(1).rstrip(".") for m in TEST_PATH.finditer(path.read_text())})
    missing = [p for p in named if not (REPO_ROOT / p).exists()]
    assert not missing, f"{script} names test paths that do not exist: {missing}"
