"""``fp4moe.infra.confine``: after :func:`confine_writes` a process (and what it starts) writes
only beneath the folders given; reads stay free. aiter code under test wrote
outside its tree and into the caller's results file.

One child Python without torch (~50 ms): CPU tier.
"""

from __future__ import annotations

import os
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
    """aiter-check code under test writing outside its tree (and the caller's
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


# --------------------------------------------------------------------------- metadata, /dev, signals

PROBES = """
import os, signal, subprocess, sys
from fp4moe.infra.confine import confine_writes
ok, victim = sys.argv[1], sys.argv[2]
assert confine_writes([ok]) is None
inside = os.path.join(ok, "inside")
open(inside, "w").close()
fd = os.open(victim, os.O_RDONLY)
PROBES = {
    "chmod": lambda: os.chmod(victim, 0o777),
    "fchmod": lambda: os.fchmod(fd, 0o777),
    "chown": lambda: os.chown(victim, 1, 1),
    "lchown": lambda: os.lchown(victim, 1, 1),
    "utime": lambda: os.utime(victim, (0, 0)),
    "futimens": lambda: os.utime(fd, (0, 0)),
    "setxattr": lambda: os.setxattr(victim, "user.fp4moe", b"1"),
    "removexattr": lambda: os.removexattr(victim, "user.fp4moe"),
    "chmod in the scratch folder": lambda: os.chmod(inside, 0o600),
    "shell touch -d": lambda: subprocess.run(["touch", "-d", "2000-01-01", victim], check=True, stderr=subprocess.DEVNULL),
    "a /dev/shm file": lambda: open("/dev/shm/fp4moe-confine-probe", "w").close(),
    "mknod in the scratch folder": lambda: os.mknod(os.path.join(ok, "mem"), 0o600 | 0o020000, os.makedev(1, 1)),
    "SIGSTOP to the parent": lambda: os.kill(os.getppid(), signal.SIGSTOP),
    "write /dev/null": lambda: open("/dev/null", "w").write("x"),
    "write /dev/zero": lambda: open("/dev/zero", "wb").write(b"x"),
    "os.urandom": lambda: os.urandom(8),
    "SIGKILL to its own child": lambda: (lambda p: (os.kill(p.pid, signal.SIGKILL), p.wait()))(subprocess.Popen(["sleep", "30"])),
}
for name, probe in PROBES.items():
    if name == "SIGSTOP to the parent" and sys.argv[3] != "scoped":  # it would stop the test
        print(name, "=", "not scoped by this kernel")
        continue
    try:
        probe()
        print(name, "=", "done")
    except (OSError, subprocess.CalledProcessError):
        print(name, "=", "refused")
"""
#: probe -> what confine_writes must give (the last four are what code under test needs)
EXPECTED = {"chmod": "refused", "fchmod": "refused", "chown": "refused", "lchown": "refused", "utime": "refused",
            "futimens": "refused", "setxattr": "refused", "removexattr": "refused",
            "chmod in the scratch folder": "refused", "shell touch -d": "refused", "a /dev/shm file": "refused",
            "mknod in the scratch folder": "refused", "SIGSTOP to the parent": "refused",
            "write /dev/null": "done", "write /dev/zero": "done", "os.urandom": "done", "SIGKILL to its own child": "done"}


def test_metadata_dev_and_signals_are_refused_and_what_the_code_needs_still_works(tmp_path):
    """Sandbox probes: chmod/chown/utime/xattr on the caller's files (Landlock does not cover
    metadata: the seccomp filter does), /dev/shm files that outlive the gate, mknod of a memory
    device in the scratch folder (as root), SIGSTOP to the gate (Landlock signal scoping).
    Run as root, the strongest case; the victim's mode, owner and times are unchanged."""
    from fp4moe.infra.confine import signals_scoped

    if landlock_abi() < 3:
        pytest.skip("[cpu tier] the kernel's Landlock is older than ABI 3")
    ok, victim = tmp_path / "scratch", tmp_path / "victim.txt"
    ok.mkdir()
    victim.write_text("caller data")
    before = victim.stat()
    r = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(REPO_ROOT)!r})\n" + PROBES,
                        str(ok), str(victim), "scoped" if signals_scoped() else "no"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    got = dict(line.split(" = ") for line in r.stdout.splitlines())
    assert got == dict(EXPECTED, **({} if signals_scoped() else {"SIGSTOP to the parent": "not scoped by this kernel"}))
    after = victim.stat()
    assert (after.st_mode, after.st_uid, after.st_gid, after.st_mtime_ns) == \
        (before.st_mode, before.st_uid, before.st_gid, before.st_mtime_ns)
    assert not os.path.exists("/dev/shm/fp4moe-confine-probe")


def test_the_metadata_filter_jumps_land_on_deny_for_every_listed_syscall():
    """The BPF program, interpreted here: every listed number of both machines is denied,
    neighbours and ordinary calls (read 0, openat 257) allowed, another ABI denied whole."""
    import struct

    from fp4moe.infra import confine as c

    def run(prog: bytes, arch: int, nr: int) -> int:
        ins = [struct.unpack("=HBBI", prog[i:i + 8]) for i in range(0, len(prog), 8)]
        pc, acc = 0, 0
        while True:
            code, jt, jf, k = ins[pc]
            if code == c.BPF_LD_W_ABS:
                acc = arch if k == c.SECCOMP_DATA_ARCH else nr
            elif code == c.BPF_RET_K:
                return k
            elif code in (c.BPF_JEQ_K, c.BPF_JGE_K):
                hit = acc == k if code == c.BPF_JEQ_K else acc >= k
                pc += jt if hit else jf
            pc += 1

    deny = c.SECCOMP_RET_ERRNO | c.EPERM
    for machine, (arch, table) in c.METADATA_SYSCALLS.items():
        prog = c.metadata_filter(machine)
        for name, nr in table.items():
            assert run(prog, arch, nr) == deny, (machine, name)
        listed = set(table.values())
        for nr in (0, 1, 2, 3, 56, 63, 64, 257, 435):
            if nr not in listed:
                assert run(prog, arch, nr) == c.SECCOMP_RET_ALLOW, (machine, nr)
        assert run(prog, 0x40000003, 90) == deny  # i386 ABI: refused whole
    assert run(c.metadata_filter("x86_64"), 0xC000003E, c.X32_SYSCALL_BIT | 90) == deny
