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
def rewrite(path):  # the same value written back: harmless where it is allowed
    with open(path) as f:
        value = f.read()
    with open(path, "w") as f:
        f.write(value)
def name_a_new_thread():  # what the CUDA driver does through /proc/self/task/<tid>/comm
    import threading
    err = []
    def run():
        try:
            with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as f:
                f.write("fp4moe-probe")
        except OSError as e:
            err.append(e)
    t = threading.Thread(target=run)
    t.start()
    t.join()
    if err:
        raise err[0]
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
    "a later thread names itself": name_a_new_thread,
    "its own oom_score_adj": lambda: rewrite("/proc/self/oom_score_adj"),
    "a sysctl": lambda: rewrite("/proc/sys/kernel/hostname"),
    "the parent's thread name": lambda: rewrite(f"/proc/{os.getppid()}/task/{os.getppid()}/comm"),
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
#: probe -> what confine_writes must give ("done": what code under test needs; in /proc only its
#: own threads' files, which the CUDA driver writes to name its threads)
EXPECTED = {"chmod": "refused", "fchmod": "refused", "chown": "refused", "lchown": "refused", "utime": "refused",
            "futimens": "refused", "setxattr": "refused", "removexattr": "refused",
            "chmod in the scratch folder": "refused", "shell touch -d": "refused", "a /dev/shm file": "refused",
            "mknod in the scratch folder": "refused", "SIGSTOP to the parent": "refused",
            "write /dev/null": "done", "write /dev/zero": "done", "os.urandom": "done", "SIGKILL to its own child": "done",
            "a later thread names itself": "done", "its own oom_score_adj": "refused", "a sysctl": "refused",
            "the parent's thread name": "refused"}


def test_metadata_dev_and_signals_are_refused_and_what_the_code_needs_still_works(tmp_path):
    """Sandbox probes: chmod/chown/utime/xattr on the caller's files (Landlock does not cover
    metadata: the seccomp filter does), /dev/shm files that outlive the gate, mknod of a memory
    device in the scratch folder (as root), SIGSTOP to the gate (Landlock signal scoping), /proc
    beyond its own threads' files (a sysctl, its oom score, the parent's thread name).
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


# --------------------------------------------------------------------------- other machines


def test_a_machine_without_a_syscall_table_gets_no_filter_and_says_so(monkeypatch):
    """On a machine the table does not know the filter is not installed (its numbers would mean
    other calls) and nothing claims it: the reason opens with ``seccomp: not available on``, the
    child's containment says so, and a harness record carrying that reason keeps Landlock's ABI
    (writes are confined) while its seccomp field names the machine."""
    import platform

    from fp4moe.infra import childproc, confine, harness

    monkeypatch.setattr(platform, "machine", lambda: "riscv64")
    assert confine.metadata_filter() is None
    why = confine.refuse_metadata_changes()  # returns before any prctl: safe in this process
    assert why.startswith("seccomp: not available on riscv64")
    c = childproc.containment_of("pid+proc", "", {confine.WRITABLE_ENV: "/scratch"})
    assert c.seccomp == "not available on riscv64" and c.processes == childproc.Hold.PID_PROC
    res = childproc.ChildResult(cmd=["x"], rc=0, stdout="", stderr="", seconds=0.0, contained=c,
                                record={"a": 1, harness.CONFINE_KEY: why})
    harness._take_confine_report(res)
    assert res.record == {"a": 1} and res.contained.seccomp.startswith("not available on riscv64")
    assert res.contained.landlock_abi == c.landlock_abi and res.contained.confine_why == c.confine_why


def test_a_child_whose_confinement_failed_is_recorded_unconfined():
    """A harness record saying Landlock failed turns the containment's ABI to 0 and keeps the
    child's reason (what the gate's record then shows), never the parent's expectation."""
    from fp4moe.infra import childproc, confine, harness

    c = childproc.containment_of("pid+proc", "", {confine.WRITABLE_ENV: "/scratch"})
    res = childproc.ChildResult(cmd=["x"], rc=0, stdout="", stderr="", seconds=0.0, contained=c,
                                record={harness.CONFINE_KEY: "landlock_restrict_self failed: Operation not permitted"})
    harness._take_confine_report(res)
    assert res.contained.landlock_abi == 0 and not res.contained.signals_scoped
    assert res.contained.confine_why.startswith("landlock_restrict_self failed")


#: the generic syscall table's metadata calls (include/uapi/asm-generic/unistd.h): no chmod,
#: chown, lchown, utime, utimes or futimesat there, only the *at and f* forms
GENERIC_METADATA = {"setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr", "fchmod",
                    "fchmodat", "fchownat", "fchown", "utimensat", "fchmodat2", "setxattrat", "removexattrat"}


def test_the_aarch64_table_has_the_generic_tables_shape():
    """Shape only (it never ran on an aarch64 kernel): the generic table's metadata calls,
    distinct numbers, AUDIT_ARCH_AARCH64 (EM_AARCH64 183 | 64-bit | little-endian), and the
    x86_64 table's calls a superset (x86_64 also has the legacy path forms)."""
    from fp4moe.infra import confine as c

    arch, table = c.METADATA_SYSCALLS["aarch64"]
    assert arch == 0xC0000000 | 183 and set(table) == GENERIC_METADATA
    assert len(set(table.values())) == len(table) and all(0 < n < 512 for n in table.values())
    assert table["fchmodat2"] == 452 and table["fchmod"] == 52 and table["setxattr"] == 5
    x86 = c.METADATA_SYSCALLS["x86_64"][1]
    assert set(x86) >= GENERIC_METADATA and {"chmod", "chown", "lchown", "utime", "utimes", "futimesat"} <= set(x86)
    assert all(x86[n] == table[n] for n in ("fchmodat2", "setxattrat", "removexattrat"))  # the unified numbers


# --------------------------------------------------------------------------- confined_exec.py


def _confined_exec(tmp_path, writable, *cmd, extra_env=None):
    from fp4moe.infra.childproc import CONFINED_EXEC
    from fp4moe.infra.confine import WRITABLE_ENV

    env = dict(os.environ, **{WRITABLE_ENV: writable}, **(extra_env or {}))
    return subprocess.run([sys.executable, "-I", "-S", str(CONFINED_EXEC), "--", *cmd], env=env, capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)


def test_confined_exec_confines_the_command_it_becomes(tmp_path):
    """The launcher confines itself, then execs: the command (here a shell) writes its scratch
    folder, not the folder beside it."""
    if landlock_abi() < 1:
        pytest.skip("[cpu tier] the kernel has no Landlock")
    ok = tmp_path / "scratch"
    ok.mkdir()
    r = _confined_exec(tmp_path, str(ok), "/bin/sh", "-c",
                       f"echo x > {ok}/in; echo x > {tmp_path}/out")
    assert r.returncode == 2 and "Permission denied" in r.stderr and (ok / "in").is_file() and not (tmp_path / "out").exists(), r


def test_confined_exec_that_cannot_confine_runs_nothing_and_says_why_in_one_line(tmp_path):
    if landlock_abi() < 1:
        pytest.skip("[cpu tier] the kernel has no Landlock")
    r = _confined_exec(tmp_path, str(tmp_path / "absent"), "/bin/sh", "-c", f"echo ran > {tmp_path}/ran")
    assert r.returncode == 127 and not (tmp_path / "ran").exists()
    assert r.stderr.count("\n") == 1 and "cannot confine /bin/sh" in r.stderr and str(tmp_path / "absent") in r.stderr


def test_confined_exec_pins_the_command_and_what_it_starts_to_the_cpus_it_is_told(tmp_path):
    """``$FP4MOE_CPUS`` (perf ab's one shared core on a CPU run): the command and a process it
    starts run on exactly that CPU; a CPU the machine lacks, or a word, runs nothing (127, one line)."""
    from fp4moe.infra.childproc import CPUS_ENV

    cpu = max(os.sched_getaffinity(0))
    probe = "import os, subprocess, sys; print(sorted(os.sched_getaffinity(0)), subprocess.check_output([sys.executable, '-c', " \
            "'import os; print(sorted(os.sched_getaffinity(0)))'], text=True).strip())"
    r = _confined_exec(tmp_path, str(tmp_path), sys.executable, "-c", probe, extra_env={CPUS_ENV: str(cpu)})
    assert r.returncode == 0 and r.stdout.split() == [f"[{cpu}]", f"[{cpu}]"], r
    for bad in ("4096", "one"):
        r = _confined_exec(tmp_path, str(tmp_path), "/bin/sh", "-c", f"echo ran > {tmp_path}/ran", extra_env={CPUS_ENV: bad})
        assert r.returncode == 127 and not (tmp_path / "ran").exists() and r.stderr.count("\n") == 1 and CPUS_ENV in r.stderr, r
