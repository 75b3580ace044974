"""Every file a tree or a user names is read bounded in size, and never waited on (issue #48
item 2), and no child starts once the gate is interrupted (item 1). A fault table of the pure
parts, CPU tier: ``files.check_regular_file`` (a file code under test will read: checked by
``stat`` alone) and ``files.read_text_bounded`` (a file the gate reads) on a FIFO, a link to
``/dev/zero``, a sparse giant and a folder; the runner after an interrupt. The gates' own
cases: ``tests/commands/test_signal_moments.py``, aiter's tuned CSVs in
``tests/targets/aiter/dispatch/test_tuned_csv_bounds.py`` and ``tests/gates/aiter_check/``."""

from __future__ import annotations

import os
import sys
import time

import pytest
from proc_search import live_with_arg, unique_tag

from fp4moe.infra import files, runner

pytestmark = pytest.mark.reliability


def _spoiled(tmp_path, how: str):
    """What an accident leaves where a small file belongs."""
    p = tmp_path / "tuned.csv"
    if how == "a FIFO":
        os.mkfifo(p)
    elif how == "a link to /dev/zero":
        p.symlink_to("/dev/zero")
    elif how == "a sparse giant":
        p.write_bytes(b"token,us\n")
        os.truncate(p, 3 << 30)  # 3 GiB, no block written
    elif how == "a folder":
        p.mkdir()
    return p


#: how -> what the OSError's line says
FAULTS = {"a FIFO": "is a FIFO, not a regular file",
          "a link to /dev/zero": "is a character device (/dev/zero), not a regular file",
          "a sparse giant": f"{(3 << 30)} bytes, more than the {files.MAX_READ_BYTES}",
          "a folder": "is a folder, not a regular file"}


@pytest.mark.parametrize("how", list(FAULTS))
def test_check_regular_file_names_the_path_and_what_it_is(tmp_path, how):
    p = _spoiled(tmp_path, how)
    t0 = time.monotonic()
    with pytest.raises(OSError) as e:
        files.check_regular_file(p)
    assert str(e.value).startswith(f"{p}: ") and FAULTS[how] in str(e.value), str(e.value)
    with pytest.raises(OSError) as e:
        files.read_text_bounded(p)
    assert str(p) in str(e.value)
    assert time.monotonic() - t0 < 5  # not waited on (a FIFO with no writer blocks a plain open forever)


def test_a_regular_file_within_the_limit_is_read_and_one_byte_past_it_is_not(tmp_path):
    p = tmp_path / "tuned.csv"
    p.write_text("token,us\n1,2.5\n")
    n = p.stat().st_size
    assert files.check_regular_file(p, limit=n) == n and files.read_text_bounded(p, limit=n) == "token,us\n1,2.5\n"
    with pytest.raises(OSError, match=f"{n} bytes, more than the {n - 1}"):
        files.check_regular_file(p, limit=n - 1)
    with pytest.raises(OSError, match=f"{n} bytes, more than the {n - 1}"):
        files.read_text_bounded(p, limit=n - 1)


def test_no_child_starts_once_the_gate_is_interrupted(monkeypatch):
    """A worker thread retried a kernel child that the SIGINT had just killed: the gate waited
    for the new child (the reported kernel-child hang, still running after 240 s). Once
    interrupted, ``start`` raises KeyboardInterrupt and leaves no process behind."""
    tag = unique_tag()
    monkeypatch.setattr(runner, "_INTERRUPTED", [2])
    with pytest.raises(KeyboardInterrupt, match="signal 2"):
        runner.run_child([sys.executable, "-c", "import time; time.sleep(60)", tag], timeout_s=30, want_record=False)
    assert not live_with_arg(tag)
    monkeypatch.setattr(runner, "_INTERRUPTED", [])
    res = runner.run_child([sys.executable, "-c", "print('ran')"], timeout_s=60, want_record=False)
    assert res.rc == 0 and res.stdout.strip() == "ran"
