"""Confine code under test: file writes to a scratch folder (Linux Landlock), no metadata
changes anywhere (seccomp), no signals out of its own domain (Landlock scoping).

The code that aiter-check runs is a pull request's code: without a limit it can overwrite the
caller's files (a results file, the checkout). A child harness calls :func:`confine_writes`
**before** any code under test runs; from then on the process and everything it starts:

- may create, write, truncate, rename or remove files only beneath the folders given; in
  ``/dev`` it may write only :data:`DEV_WRITABLE` (null, zero, urandom) and the GPU nodes that
  exist (:data:`GPU_DEV_NODES`); ``/dev/shm`` and every other device node are refused. Making
  character or block devices is refused everywhere, the scratch folder included (as root a
  ``mknod 1,1`` there would be a way to the machine's memory). Reading stays unrestricted;
- may change no file's metadata (``chmod``, ``chown``, ``utime*``, ``*setxattr``,
  ``*removexattr``, every variant, path or descriptor): Landlock does not cover these at any
  ABI, and seccomp cannot tell one path from another, so a BPF filter answers ``EPERM`` to all
  of them, the scratch folder included (:func:`refuse_metadata_changes`). Nothing the gates run
  needs them: Triton, aiter's and SGLang's Python call none; Python's own ``shutil.copy``
  mode-copy would fail (no gate child uses it); the harness's record writer treats a refused
  ``fchmod`` as harmless;
- can signal no process outside its Landlock domain (``LANDLOCK_SCOPE_SIGNAL``, ABI 6, Linux
  6.12): a ``SIGSTOP`` to the gate is refused. (The PID namespace of ``fp4moe.infra.childproc``
  also hides the gate's pid; this holds where there is no namespace.)

The restrictions cannot be lifted by the process or its children (``landlock_restrict_self``
and ``PR_SET_SECCOMP`` after ``PR_SET_NO_NEW_PRIVS``).

Mirrors the kernel's UAPI (``include/uapi/linux/landlock.h``, ``seccomp.h``, ``filter.h``):
``landlock_create_ruleset`` (444), ``landlock_add_rule`` (445), ``landlock_restrict_self`` (446),
same numbers on every architecture; ``struct landlock_ruleset_attr`` passed at the size the
kernel's ABI knows (8 bytes: ``handled_access_fs``; 24 from ABI 6: ``handled_access_net``,
``scoped``); ``struct landlock_path_beneath_attr`` packed (u64 + s32). Where the kernel lacks
Landlock (before 5.13, or disabled), the function returns the reason instead, and the caller
records that writes were not confined.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
from pathlib import Path

SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446
LANDLOCK_CREATE_RULESET_VERSION = 1 << 0
LANDLOCK_RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2

ACCESS_FS_WRITE_FILE = 1 << 1
ACCESS_FS_REMOVE_DIR = 1 << 4
ACCESS_FS_REMOVE_FILE = 1 << 5
ACCESS_FS_MAKE_CHAR = 1 << 6
ACCESS_FS_MAKE_DIR = 1 << 7
ACCESS_FS_MAKE_REG = 1 << 8
ACCESS_FS_MAKE_SOCK = 1 << 9
ACCESS_FS_MAKE_FIFO = 1 << 10
ACCESS_FS_MAKE_BLOCK = 1 << 11
ACCESS_FS_MAKE_SYM = 1 << 12
ACCESS_FS_REFER = 1 << 13  # ABI 2
ACCESS_FS_TRUNCATE = 1 << 14  # ABI 3
SCOPE_SIGNAL = 1 << 1  # ABI 6: no signal to a process outside the domain
SCOPE_ABI = 6

WRITE_RIGHTS_ABI1 = (ACCESS_FS_WRITE_FILE | ACCESS_FS_REMOVE_DIR | ACCESS_FS_REMOVE_FILE | ACCESS_FS_MAKE_CHAR
                     | ACCESS_FS_MAKE_DIR | ACCESS_FS_MAKE_REG | ACCESS_FS_MAKE_SOCK | ACCESS_FS_MAKE_FIFO
                     | ACCESS_FS_MAKE_BLOCK | ACCESS_FS_MAKE_SYM)
#: rights never granted, not even in the scratch folder
NEVER_GRANTED = ACCESS_FS_MAKE_CHAR | ACCESS_FS_MAKE_BLOCK
#: the rights Landlock lets a rule on a single file grant
FILE_RIGHTS = ACCESS_FS_WRITE_FILE | ACCESS_FS_TRUNCATE

#: device nodes code under test may write (what Python, torch and Triton open for writing)
DEV_WRITABLE = ("/dev/null", "/dev/zero", "/dev/urandom")
#: GPU nodes, allowed when present (AMD: kfd and the DRM render nodes; NVIDIA: its nodes)
GPU_DEV_NODES = ("/dev/kfd", "/dev/dri", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                 *(f"/dev/nvidia{i}" for i in range(16)))

#: the confined process's own threads in /proc: writing an existing file there is allowed (no
#: other right). The CUDA driver names its threads through ``/proc/self/task/<tid>/comm`` and
#: fails to start when that write is refused (cudaGetDeviceCount: error 304, "OS call failed");
#: seen on the H200 with ``python3 -m fp4moe.commands.studies.gpu_sandbox_probe --parts --strace``: Landlock alone
#: fails, the seccomp filter alone runs, Landlock with /proc writable runs, and strace names this
#: one refused call. The rule is taken at confinement time, so it covers the threads of the
#: process that confines itself (the harness child), not processes it starts later.
OWN_TASKS = "/proc/self/task"

#: the environment variable a parent sets to the folders (os.pathsep-separated) its child may write
WRITABLE_ENV = "FP4MOE_WRITABLE"

# --------------------------------------------------------------------------- seccomp (metadata)

#: (AUDIT_ARCH, syscall numbers of every metadata change) per machine; numbers from the kernel's
#: syscall tables (x86_64: arch/x86/entry/syscalls/syscall_64.tbl; aarch64: the generic table,
#: include/uapi/asm-generic/unistd.h, which has no chmod/chown/lchown/utime/utimes/futimesat: only
#: the *at and f* forms). The aarch64 filter is checked by its shape only (interpreted in the
#: tests); it has never run on an aarch64 kernel. A machine not listed gets no filter, and its
#: children say so (``seccomp: not available on <machine>``), never that metadata is refused.
METADATA_SYSCALLS = {
    "x86_64": (0xC000003E, {
        "chmod": 90, "fchmod": 91, "chown": 92, "fchown": 93, "lchown": 94, "utime": 132, "setxattr": 188,
        "lsetxattr": 189, "fsetxattr": 190, "removexattr": 197, "lremovexattr": 198, "fremovexattr": 199,
        "utimes": 235, "fchownat": 260, "futimesat": 261, "fchmodat": 268, "utimensat": 280,
        "fchmodat2": 452, "setxattrat": 463, "removexattrat": 466}),
    "aarch64": (0xC00000B7, {
        "setxattr": 5, "lsetxattr": 6, "fsetxattr": 7, "removexattr": 14, "lremovexattr": 15,
        "fremovexattr": 16, "fchmod": 52, "fchmodat": 53, "fchownat": 54, "fchown": 55, "utimensat": 88,
        "fchmodat2": 452, "setxattrat": 463, "removexattrat": 466}),
}
#: x86_64's x32 ABI numbers carry this bit: refused as a whole (a way around the table above)
X32_SYSCALL_BIT = 0x40000000
EPERM = 1
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
BPF_LD_W_ABS, BPF_JEQ_K, BPF_JGE_K, BPF_RET_K = 0x20, 0x15, 0x35, 0x06
#: offsets in struct seccomp_data: nr (int), arch (u32)
SECCOMP_DATA_NR, SECCOMP_DATA_ARCH = 0, 4


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 when it has none."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        v = libc.syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0),
                         ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(int(v), 0)


def _ruleset_attr(rights: int, abi: int):
    """``struct landlock_ruleset_attr`` at the size this ABI knows (see the module docstring)."""
    if abi >= SCOPE_ABI:
        buf = ctypes.create_string_buffer(struct.pack("=QQQ", rights, 0, SCOPE_SIGNAL), 24)
        return buf, 24
    return ctypes.create_string_buffer(struct.pack("=Q", rights), 8), 8


def _dev_rules() -> list[tuple[str, bool]]:
    """(path, is_folder) of the device nodes that may be written, those that exist."""
    return [(p, os.path.isdir(p)) for p in (*DEV_WRITABLE, *GPU_DEV_NODES) if os.path.exists(p)]


def confine_writes(writable, *, metadata: bool = True) -> str | None:
    """Allow file writes only beneath ``writable`` (and the device nodes of the module
    docstring) for this process and all it starts; signals to processes outside are refused
    where the kernel scopes them (ABI 6); with ``metadata`` every metadata change is refused
    (:func:`refuse_metadata_changes`). None when confined; else why not (no Landlock, a
    syscall refused)."""
    abi = landlock_abi()
    if abi < 1:
        return "the kernel has no Landlock: writes of the code under test are not confined"
    rights = WRITE_RIGHTS_ABI1 | (ACCESS_FS_REFER if abi >= 2 else 0) | (ACCESS_FS_TRUNCATE if abi >= 3 else 0)
    libc = ctypes.CDLL(None, use_errno=True)
    attr, size = _ruleset_attr(rights, abi)
    rfd = libc.syscall(SYS_LANDLOCK_CREATE_RULESET, attr, ctypes.c_size_t(size), ctypes.c_uint32(0))
    if rfd < 0:
        return f"landlock_create_ruleset failed: {os.strerror(ctypes.get_errno())}"
    try:
        rules = [(str(d), rights & ~NEVER_GRANTED) for d in map(Path, writable)]
        rules += [(d, (rights & ~NEVER_GRANTED) if folder else rights & FILE_RIGHTS) for d, folder in _dev_rules()]
        rules += [(OWN_TASKS, rights & FILE_RIGHTS)] if os.path.isdir(OWN_TASKS) else []
        for d, allowed in rules:
            fd = os.open(d, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = _PathBeneath(allowed, fd)
                if libc.syscall(SYS_LANDLOCK_ADD_RULE, ctypes.c_int(rfd), ctypes.c_int(LANDLOCK_RULE_PATH_BENEATH),
                                ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
                    return f"landlock_add_rule {d} failed: {os.strerror(ctypes.get_errno())}"
            finally:
                os.close(fd)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return f"prctl(PR_SET_NO_NEW_PRIVS) failed: {os.strerror(ctypes.get_errno())}"
        if libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(rfd), ctypes.c_uint32(0)) != 0:
            return f"landlock_restrict_self failed: {os.strerror(ctypes.get_errno())}"
    finally:
        os.close(rfd)
    return refuse_metadata_changes() if metadata else None


def signals_scoped() -> bool:
    """Whether :func:`confine_writes` also refuses signals to processes outside (ABI >= 6)."""
    return landlock_abi() >= SCOPE_ABI


def metadata_filter(machine: str | None = None) -> bytes | None:
    """The seccomp BPF program (``struct sock_filter`` array) answering EPERM to every
    metadata syscall of ``machine`` (default: this one); None for a machine not in
    :data:`METADATA_SYSCALLS`. Another architecture's syscalls (a 32-bit binary) are refused
    whole: their numbers mean other calls."""
    machine = machine or platform.machine()
    if machine not in METADATA_SYSCALLS:
        return None
    arch, table = METADATA_SYSCALLS[machine]
    nrs = sorted(table.values())
    deny = SECCOMP_RET_ERRNO | EPERM
    prog = [(BPF_LD_W_ABS, 0, 0, SECCOMP_DATA_ARCH),
            (BPF_JEQ_K, 1, 0, arch),  # this machine's ABI: go on; another: refused
            (BPF_RET_K, 0, 0, deny),
            (BPF_LD_W_ABS, 0, 0, SECCOMP_DATA_NR)]
    if machine == "x86_64":
        prog += [(BPF_JGE_K, len(nrs) + 1, 0, X32_SYSCALL_BIT)]  # x32 numbers: to the deny below
    prog += [(BPF_JEQ_K, len(nrs) - i, 0, nr) for i, nr in enumerate(nrs)]  # a match jumps to deny
    prog += [(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW), (BPF_RET_K, 0, 0, deny)]
    return b"".join(struct.pack("=HBBI", *ins) for ins in prog)


#: how a reason of :func:`refuse_metadata_changes` opens (Landlock held; only the filter is missing)
SECCOMP_PREFIX = "seccomp: "


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def refuse_metadata_changes() -> str | None:
    """Install :func:`metadata_filter` for this process and all it starts (after
    ``PR_SET_NO_NEW_PRIVS``). None when installed; else why not."""
    prog = metadata_filter()
    if prog is None:
        return (f"{SECCOMP_PREFIX}not available on {platform.machine()} (no syscall table for it): chmod/chown/utime "
                "of the code under test are not refused")
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(prog, len(prog))
    fprog = _SockFprog(len(prog) // 8, ctypes.cast(buf, ctypes.c_void_p))
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return f"{SECCOMP_PREFIX}prctl(PR_SET_NO_NEW_PRIVS) failed: {os.strerror(ctypes.get_errno())}"
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        return f"{SECCOMP_PREFIX}prctl(PR_SET_SECCOMP) failed: {os.strerror(ctypes.get_errno())}"
    return None


def confine_from_env(also=()) -> str | None:
    """Child side: confine to ``$FP4MOE_WRITABLE`` (plus ``also``) when the parent set it (None:
    nothing asked, or confined)."""
    value = os.environ.get(WRITABLE_ENV)
    if not value:
        return None
    return confine_writes([p for p in [*value.split(os.pathsep), *also] if p])
