"""``fp4moe.infra.confine``: after :func:`confine_writes` a process (and what it starts) writes
only beneath the folders given; reads stay free. Round-2 probe: aiter code under test wrote
outside its tree and into the caller's results file.

One child Python without torch (~50 ms): CPU tier.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from fp4moe.infra.confine import landlock_abi
from fp4moe.infra.paths import REPO_ROOT

pytestmark = pytest.mark.reliability

CHILD = """
import os, subprocess, sys
from fp4moe.infra.confine import confine_writes
ok_dir, victim = sys.argv[1], sys.argv[2]
assert confine_writes([ok_dir]) is None
open(os.path.join(ok_dir, "inside.txt"), "w").write("fine")
open(victim).read()  # reading stays free
for how in ("open", "child"):
    try:
        if how == "open":
            open(victim, "w").write("overwritten")
        else:  # a process it starts is confined too
            subprocess.run(["sh", "-c", f"echo overwritten > {victim}"], check=True, stderr=subprocess.DEVNULL)
        print("WROTE", how)
    except (OSError, subprocess.CalledProcessError):
        print("refused", how)
"""


def test_writes_outside_the_allowed_folder_are_refused_in_the_process_and_its_children(tmp_path):
    """round-2 probe: aiter-check code under test writing outside its tree (and the caller's
    --json) succeeded; after confine_writes neither the process nor a shell it starts can."""
    if landlock_abi() < 1:
        pytest.skip("[cpu tier] the kernel has no Landlock")
    ok, victim = tmp_path / "scratch", tmp_path / "victim.txt"
    ok.mkdir()
    victim.write_text("caller data")
    r = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(REPO_ROOT)!r})\n" + CHILD,
                        str(ok), str(victim)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["refused", "open", "refused", "child"], r.stdout
    assert victim.read_text() == "caller data" and (ok / "inside.txt").read_text() == "fine"
