"""CPU checks of ``fp4moe/commands/studies/gpu_sandbox_probe.py`` (the H200 run itself is done by hand on a GPU machine): without a
GPU it exits 2 with one line, never 0; each setting's child really starts the way it names (a
PID namespace with its own /proc shows the child its own pid there, the host's /proc does not),
and a driver that cannot start is a failed row carrying the driver's words.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from fp4moe.infra import childproc

STUDY = "fp4moe.commands.studies.gpu_sandbox_probe"

pytestmark = pytest.mark.reliability


@pytest.fixture(scope="module")
def probe_script():
    return importlib.import_module(STUDY)


def test_without_a_gpu_it_cannot_probe_exit_2_one_line(probe_script, tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("[cpu tier] a GPU is visible: the probe would run")
    out = tmp_path / "r.json"
    assert probe_script.main(["--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no GPU visible" in err[0] and not out.exists()


def test_an_output_folder_that_does_not_exist_is_exit_2_naming_it(probe_script, tmp_path, capsys):
    assert probe_script.main(["--out", str(tmp_path / "no" / "r.json")]) == 2
    assert f"--out {tmp_path / 'no' / 'r.json'}" in capsys.readouterr().err


def test_the_verdict_reads_the_pid_and_private_proc_rows(probe_script):
    v = probe_script._verdict
    assert v([{"setting": "pid", "ok": False}, {"setting": "pid+proc", "ok": True}]).endswith("(and not with the host's /proc)")
    assert v([{"setting": "pid", "ok": False}, {"setting": "pid+proc", "ok": False}]).startswith("CUDA fails")
    assert v([{"setting": "sweep", "ok": True}]).startswith("not probed")


@pytest.mark.slow
def test_each_setting_starts_the_way_it_names_and_a_dead_driver_is_a_failed_row(probe_script):
    """On this CPU machine the driver cannot start: every row fails with the driver's error
    (so ``main`` would exit 1); the ``pid+proc`` child's /proc is its own (``/proc/self`` is
    its pid), the ``pid`` child's is the host's (it is not)."""
    if torch.cuda.is_available():
        pytest.skip("[slow tier] a GPU is visible: the rows would pass")
    how = childproc.containment()[0]
    if how is None or not childproc.Hold(how).own_proc:
        pytest.skip(f"[slow tier] no PID namespace with its own /proc here: {childproc.containment()[1]}")
    rows = {s: probe_script.probe(s) for s in ("pid", "pid+proc", "pid+proc+confined")}
    for s, r in rows.items():
        assert r["ok"] is False and r["rc"] == 0 and r.get("cuda_error"), (s, r)
    assert rows["pid+proc"]["proc_self"] == str(rows["pid+proc"]["pid_here"])
    assert rows["pid"]["proc_self"] != str(rows["pid"]["pid_here"])
    assert rows["pid+proc+confined"]["unconfined"] is None


def test_a_refused_call_strace_split_between_threads_keeps_its_path(probe_script, tmp_path):
    """``--strace`` keeps the refused calls; one strace split (``<unfinished ...>`` then
    ``<... resumed>``, another thread between) is joined, so the row names the file (on the
    H200: the CUDA driver naming its threads through /proc/self/task/<tid>/comm)."""
    trace = tmp_path / "strace.txt"
    trace.write_text('7 openat(AT_FDCWD, "/proc/self/task/23/comm", O_WRONLY|O_CREAT|O_TRUNC, 0666 <unfinished ...>\n'
                     '9 read(3, "x", 1) = 1\n'
                     '7 <... openat resumed>) = -1 EACCES (Permission denied)\n'
                     '8 openat(AT_FDCWD, "/absent", O_RDONLY) = -1 ENOENT (No such file or directory)\n'
                     '8 chmod("/x", 0777) = -1 EPERM (Operation not permitted)\n')
    assert probe_script._denied(str(trace)) == [
        '7 openat(AT_FDCWD, "/proc/self/task/23/comm", O_WRONLY|O_CREAT|O_TRUNC, 0666) = -1 EACCES (Permission denied)',
        '8 chmod("/x", 0777) = -1 EPERM (Operation not permitted)']
    assert probe_script._denied(str(tmp_path / "absent.txt"))[0].startswith("(no strace output:")


def test_the_parts_take_the_confinement_apart_in_a_private_proc(probe_script):
    """Each part runs in pid+proc (where CUDA starts unconfined), so a failing part is the
    confinement's, and the parts cover Landlock alone, seccomp alone and Landlock widened."""
    parts = probe_script.PARTS
    assert {way for way, _ in parts.values()} == {"pid+proc"}
    specs = [spec for _, spec in parts.values()]
    assert {"landlock": [], "metadata": False} in specs and {"landlock": None, "metadata": True} in specs
    assert {tuple(s["landlock"]) for s in specs if s["landlock"]} >= {("/dev",), ("/proc",), ("/",)}
