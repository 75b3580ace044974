"""Output paths that are not regular files: a fault table of what ``--json/--markdown/--plot``
may name (``fp4moe.infra.files.output_target``).

A character device or a FIFO with a reader is written in place and is still the same node
afterwards (never renamed over, never removed); ``/dev/full`` (our own ``mknod 1,7``) is exit 2
naming it; a FIFO with no reader, a block device, a socket and a folder are refused before any
work, the node untouched; ``/dev/stdout`` and a symlink to ``/proc/self/fd/1`` write on the
gate's own stdout and the link stays a link; a symlink to a regular file keeps the link and
replaces its target. Device nodes are made with ``mknod`` in the test's tmp folder (root or
CAP_MKNOD; skipped otherwise), never the machine's ``/dev``.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time

import pytest

from fp4moe.infra import files
from fp4moe.infra.paths import REPO_ROOT

pytestmark = pytest.mark.reliability

FOOTPRINT = ("footprint", "--model", "dsv4-pro", "--tp", "8", "--align", "128")
NULL, FULL, LOOP = (1, 3), (1, 7), (7, 0)


def _mknod(path, kind, major_minor):
    try:
        os.mknod(path, kind | 0o666, os.makedev(*major_minor))
    except PermissionError:
        pytest.skip("mknod needs root or CAP_MKNOD")
    return path


def _same_node(path, st_before):
    st = os.lstat(path)
    return (st.st_ino, st.st_mode, st.st_rdev) == (st_before.st_ino, st_before.st_mode, st_before.st_rdev)


def test_own_null_device_is_written_in_place_and_stays_a_device(gate, tmp_path):
    node = _mknod(tmp_path / "null", stat.S_IFCHR, NULL)
    before = os.lstat(node)
    assert gate(*FOOTPRINT, "--json", node).rc == 0
    assert _same_node(node, before) and stat.S_ISCHR(os.lstat(node).st_mode)


def test_own_full_device_is_exit_2_naming_it_and_stays_a_device(gate, tmp_path):
    node = _mknod(tmp_path / "full", stat.S_IFCHR, FULL)
    before = os.lstat(node)
    gate(*FOOTPRINT, "--json", node).cannot_run(str(node), "No space left on device")
    assert _same_node(node, before)


def test_dev_null_itself_is_never_replaced(gate):
    before = os.lstat("/dev/null")
    assert gate(*FOOTPRINT, "--json", "/dev/null").rc == 0
    assert _same_node("/dev/null", before)


@pytest.mark.parametrize("kind,what", [(stat.S_IFBLK, "a block device"), ("socket", "a socket"),
                                       ("folder", "a folder")])
def test_block_device_socket_and_folder_are_refused_before_any_work(gate, tmp_path, kind, what):
    node = tmp_path / "node"
    if kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(node))
        s.close()
    elif kind == "folder":
        node.mkdir()
    else:
        _mknod(node, kind, LOOP)
    before = os.lstat(node)
    gate(*FOOTPRINT, "--json", node).cannot_run("--json", str(node), what)
    assert _same_node(node, before)


def test_fifo_with_a_reader_gets_the_record_and_stays_a_fifo(gate, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got = []
    # the reader is there before the gate starts (opened here, non-blocking: no race with a
    # thread that has not reached its open yet); the thread drains it until the writer closes
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)

    def read():
        buf, end = b"", time.monotonic() + 30
        try:
            while time.monotonic() < end:
                try:
                    chunk = os.read(fd, 1 << 16)
                except BlockingIOError:  # a writer is there, nothing written yet
                    chunk = None
                if chunk:
                    buf += chunk
                elif chunk == b"" and buf:  # the writer wrote and closed
                    break
                else:
                    time.sleep(0.005)
        finally:
            os.close(fd)
            got.append(buf)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert gate(*FOOTPRINT, "--json", fifo).rc == 0
    reader.join(30)
    assert not reader.is_alive(), "the gate never closed the FIFO"
    assert json.loads(got[0])["status"] == "pass"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_fifo_without_a_reader_is_exit_2_at_once_and_stays_a_fifo(gate, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    gate(*FOOTPRINT, "--json", fifo).cannot_run(str(fifo), "no reader")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_symlink_to_a_regular_file_keeps_the_link_and_replaces_the_target(gate, tmp_path):
    target, link = tmp_path / "real.json", tmp_path / "link.json"
    target.write_text("stale")
    link.symlink_to(target)
    assert gate(*FOOTPRINT, "--json", link).rc == 0
    assert link.is_symlink() and json.loads(target.read_text())["status"] == "pass"


def _gate_process(*argv):
    return subprocess.run([sys.executable, "-m", "fp4moe.commands.main", *map(str, argv)], check=False, cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("how", ["/dev/stdout", "link to /proc/self/fd/1"])
def test_stdout_links_write_on_the_gates_stdout_and_stay_links(tmp_path, how):
    path = "/dev/stdout"
    if how != "/dev/stdout":
        path = tmp_path / "out.json"
        path.symlink_to("/proc/self/fd/1")
    r = _gate_process(*FOOTPRINT, "--json", path)
    assert r.returncode == 0, r.stderr
    doc = r.stdout[r.stdout.index("{\n"):]  # the text table first, then the record on the same stdout
    assert json.loads(doc)["status"] == "pass"
    assert os.path.islink(path)


def test_stale_plot_on_a_device_is_not_removed_on_exit_2(gate, tmp_path):
    node = _mknod(tmp_path / "plot", stat.S_IFCHR, NULL)
    md = _mknod(tmp_path / "md", stat.S_IFCHR, NULL)
    before, md_before = os.lstat(node), os.lstat(md)
    (tmp_path / "b.json").write_text("{}")
    gate("perf", "compare", tmp_path / "b.json", tmp_path / "gone.json", "--plot", node, "--markdown", md).cannot_run("b.json")
    assert _same_node(node, before) and _same_node(md, md_before)


def test_output_target_classifies_without_opening(tmp_path):
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    assert files.output_target(fifo) == (files.Target.IN_PLACE, fifo)
    assert files.output_target(tmp_path / "new.json") == (files.Target.FILE, tmp_path / "new.json")
    assert files.output_target("/dev/fd/2") == (files.Target.FD, 2)
    fd = os.open(os.devnull, os.O_RDONLY)
    os.close(fd)
    with pytest.raises(OSError, match="not open"):
        files.output_target(f"/proc/self/fd/{fd}")
    with pytest.raises(OSError, match="another process"):
        files.output_target(f"/proc/{os.getppid()}/fd/1")
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(OSError, match="symlinks"):
        files.output_target(loop)


def test_read_regular_bytes_refuses_a_large_file_without_reading_it_whole(tmp_path):
    big = tmp_path / "record.json"
    with open(big, "wb") as f:
        f.truncate(1 << 30)  # 1 GiB, sparse: the size is refused from fstat, nothing read
    with pytest.raises(OSError, match="more than the 1048576"):
        files.read_regular_bytes(big, limit=1 << 20)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="a FIFO"):
        files.read_regular_bytes(fifo, limit=1 << 20)
