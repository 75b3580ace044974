"""Every accident ends in its verdict, a signal during a hang included (issue 48, item 1): SIGINT,
SIGTERM or SIGHUP while the code under test hangs in a child ends the gate within seconds, the
child first, its scratch folder removed: exit 2, one line saying "interrupted". And one
``--timeout`` bounds the whole run (item 2): a child that hangs at import is killed at it.

The code under test is a zoo ``--mutant-file`` that hangs at import (the zoo's listing child
imports it): it writes a marker, starts ``sleep TAG`` (found here by its unique argument) and
sleeps."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from proc_search import live_with_arg, unique_tag

from fp4moe.infra.paths import REPO_ROOT

pytestmark = pytest.mark.reliability

HANGS = """
import pathlib, subprocess, time
subprocess.Popen(["sleep", {tag!r}])
pathlib.Path({marker!r}).write_text("up")
time.sleep(600)
"""


def _hanging_gate(tmp_path, default_signals, *extra):
    tag, marker = unique_tag(), tmp_path / "up"
    f = tmp_path / "mutants.py"
    f.write_text(HANGS.format(tag=tag, marker=str(marker)))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    p = subprocess.Popen([sys.executable, "-m", "fp4moe", "zoo", "--mutant-file", str(f), *extra], cwd=REPO_ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_signals,
                         env=dict(os.environ, TMPDIR=str(scratch)))
    return p, tag, marker, scratch


def _gone(tag: str, seconds: float = 5.0) -> bool:
    t0 = time.monotonic()
    while live_with_arg(tag) and time.monotonic() - t0 < seconds:
        time.sleep(0.05)
    return not live_with_arg(tag)


@pytest.mark.parametrize("sig", [signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.slow),
                                 pytest.param(signal.SIGHUP, marks=pytest.mark.slow)], ids=lambda s: s.name)
def test_a_signal_while_the_code_under_test_hangs_ends_the_gate_children_first(tmp_path, default_signals, sig):
    p, tag, marker, scratch = _hanging_gate(tmp_path, default_signals)
    try:
        t0 = time.monotonic()
        while not marker.exists():
            assert p.poll() is None and time.monotonic() - t0 < 120, p.communicate()
            time.sleep(0.05)
        p.send_signal(sig)
        out, err = p.communicate(timeout=30)
    finally:
        p.kill()
    lines = err.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and "interrupted" in lines[0], (p.returncode, err)
    assert _gone(tag), "the hung child's own child outlived the gate"
    assert not [n for n in os.listdir(scratch) if n.startswith("fp4moe-")], os.listdir(scratch)


@pytest.mark.slow
def test_one_timeout_bounds_a_child_that_hangs_at_import(tmp_path, default_signals):
    # --timeout counts from the gate process's start (its imports, ~5 s on a loaded runner, included)
    p, tag, _, scratch = _hanging_gate(tmp_path, default_signals, "--timeout", "10")
    try:
        out, err = p.communicate(timeout=60)
    finally:
        p.kill()
    lines = err.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and "--mutant-file" in lines[0] and "timed out" in lines[0], err
    assert _gone(tag) and not [n for n in os.listdir(scratch) if n.startswith("fp4moe-")], os.listdir(scratch)
