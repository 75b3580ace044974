"""Every exit-2 line names its cause and is one bounded line: a fault table.

CPU tier: ``fp4moe.infra.culprit`` finds the innermost frame inside the tree under test (not the
harness's, not the library's), quotes and labels the code under test's text, cuts it; an
``os._exit`` from inside the tree is noted with its file before the process ends (a real child,
no torch); the gate's one stderr line stays under ``EXIT_LINE_CHARS`` whatever the cause carried
(a 2 MB message). Slow tier: aiter's kernel file ``moe_op_gemm_a16w4.py`` that calls
``os._exit(0)``, ``sys.exit(0)`` or raises with 2 MB of text at import ends aiter-check with exit
2 and one line naming that file (the probe: "exited 0 without a result record"). These runs ask
for that kernel's jobs alone (``--kernel-jobs a16w4``: one kernel child, which loads the whole
tree as every kernel child does) and the small layout grid (``--layout-grid reduced``): the line
is about the file, not about the other kernels' rows or the layout shapes, which the shared
children of the unedited tree judge once (tests/gates/aiter_check/test_kernel_checks.py).
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from fp4moe.commands import main as cli
from fp4moe.infra import culprit
from fp4moe.infra.errors import GateCannotRun
from fp4moe.infra.paths import REPO_ROOT, shared_dir

pytestmark = pytest.mark.reliability


def _raise_from(path, body: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"def f():\n    {body}\n")
    ns: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), ns)
    try:
        ns["f"]()
    except BaseException as e:  # noqa: BLE001 -- what the child harness sees
        return e
    raise AssertionError("no exception")


def test_the_innermost_frame_inside_the_tree_is_named_and_the_text_quoted(tmp_path):
    tree = tmp_path / "t" / "aiter"
    e = _raise_from(tree / "ops" / "triton" / "moe" / "k.py", "raise ValueError('bad ' + 'x' * 2_000_000)")
    line = culprit.describe(e, [tree], stage="running the kernel checks", speaker="aiter")
    assert line.startswith("ValueError at aiter/ops/triton/moe/k.py:2 while running the kernel checks; aiter said: \"bad x")
    assert len(line) <= culprit.MAX_LINE_CHARS and line.endswith('..."')
    assert culprit.frame_in_tree(e.__traceback__, [tmp_path / "elsewhere"]) is None
    e = _raise_from(tree / "m.py", "raise SystemExit(0)")
    assert culprit.describe(e, [tree], stage="loading").startswith("the code under test called sys.exit(0) at aiter/m.py:2")


NOTE_CHILD = """
import os, sys
sys.path.insert(0, {repo!r})
from fp4moe.infra import culprit
tree = sys.argv[1]
culprit.note_exits([tree], lambda line: print("NOTE", line, flush=True))
ns = {{}}
exec(compile(open(tree + "/ops/bye.py").read(), tree + "/ops/bye.py", "exec"), ns)
ns["bye"]()
print("not reached")
"""


def test_os_exit_from_inside_the_tree_is_noted_with_its_file_before_the_process_ends(tmp_path):
    tree = tmp_path / "aiter"
    (tree / "ops").mkdir(parents=True)
    (tree / "ops" / "bye.py").write_text("import os\n\ndef bye():\n    os._exit(0)\n")
    r = subprocess.run([sys.executable, "-c", NOTE_CHILD.format(repo=str(REPO_ROOT)), str(tree)],
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0 and r.stdout.splitlines() == [
        "NOTE the code under test called os._exit(0) at aiter/ops/bye.py:4"], (r.stdout, r.stderr)


def test_the_gates_one_line_is_bounded_whatever_the_cause_carried(gate, monkeypatch):
    from fp4moe.gates import selfcheck

    def flood():
        raise GateCannotRun("a child said: " + "y" * 2_000_000)

    monkeypatch.setattr(selfcheck, "CHECKS", (("codec", flood),))
    r = gate("selfcheck")
    assert r.rc == 2 and len(r.err.strip().splitlines()) == 1
    assert len(r.err.strip()) <= cli.EXIT_LINE_CHARS


# --------------------------------------------------------------------------- real kernel child (slow)

TREE_ROOT = (shared_dir() / "aiter" / "e4048607") if shared_dir() else None
KERNEL_FILE = "ops/triton/moe/moe_op_gemm_a16w4.py"
#: case -> (lines put before the kernel file's code, extra options, words of the one line). An
#: exit ends the kernel child (the line names file:line); an exception at import leaves a16w4
#: not judged (exit 2; the registry is given so that no known defect could make it exit 1)
EXITS = {
    "os._exit(0)": ("import os\nos._exit(0)\n", [], [f"aiter/{KERNEL_FILE}:2", "os._exit(0)"]),
    "sys.exit(0)": ("import sys\nsys.exit(0)\n", [], [f"aiter/{KERNEL_FILE}:2", "sys.exit("]),
    "2 MB error text": ("raise RuntimeError('z' * 2_000_000)\n", ["--known-defects", "fp4moe/data/aiter_known_defects.json"],
                        [f"aiter/{KERNEL_FILE}", "RuntimeError", 'aiter said: "zzz']),
}


@pytest.mark.slow
@pytest.mark.skipif(TREE_ROOT is None or not (TREE_ROOT / "aiter" / KERNEL_FILE).is_file(),
                    reason="../shared/aiter/e4048607 absent")
@pytest.mark.parametrize("case", list(EXITS))
def test_a_kernel_file_that_exits_or_raises_is_named(tmp_path, gate_child, case):
    prefix, extra, words = EXITS[case]
    root = tmp_path / "t"
    shutil.copytree(TREE_ROOT / "aiter", root / "aiter")
    f = root / "aiter" / KERNEL_FILE
    f.write_text(prefix + f.read_text())
    # --no-dispatch: the copy holds aiter/ alone (no csrc/), and the kernel child is what is probed
    # here; --kernel-jobs a16w4: the edited kernel's jobs, in one child; --layout-grid reduced: the
    # (a)-(d) child before it reads no kernel file (the full grid is judged on the unedited tree)
    r = gate_child("aiter-check", "--aiter-src", root, "--no-differential", "--no-dispatch", "--kernel-jobs", "a16w4",
                   "--layout-grid", "reduced", "--timeout", "400", *extra, timeout_s=500, inputs=[root]).cannot_run(*words)
    assert len(r.lines()[0]) <= cli.EXIT_LINE_CHARS
