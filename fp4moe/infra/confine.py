"""Confine the file writes of code under test to a scratch folder (Linux Landlock).

The code that aiter-check runs is a pull request's code: without a limit it can overwrite the
caller's files (a results file, the checkout). A child harness calls :func:`confine_writes`
**before** any code under test runs; from then on the process and everything it starts may
create, write, truncate, rename or remove files only beneath the folders given (and ``/dev``,
for ``/dev/null`` and ``/dev/shm``); reading stays unrestricted. Landlock restrictions cannot be
lifted by the process or its children (``landlock_restrict_self`` after ``PR_SET_NO_NEW_PRIVS``).

Mirrors the kernel's UAPI (``include/uapi/linux/landlock.h``): the syscalls
``landlock_create_ruleset`` (444), ``landlock_add_rule`` (445), ``landlock_restrict_self``
(446), same numbers on every architecture; ``struct landlock_ruleset_attr`` read only up to
``handled_access_fs`` (the kernel accepts the ABI 1 size), ``struct landlock_path_beneath_attr``
packed (u64 + s32). Where the kernel lacks Landlock (before 5.13, or disabled), the function
returns the reason instead, and the caller records that writes were not confined.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446
LANDLOCK_CREATE_RULESET_VERSION = 1 << 0
LANDLOCK_RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38

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

WRITE_RIGHTS_ABI1 = (ACCESS_FS_WRITE_FILE | ACCESS_FS_REMOVE_DIR | ACCESS_FS_REMOVE_FILE | ACCESS_FS_MAKE_CHAR
                     | ACCESS_FS_MAKE_DIR | ACCESS_FS_MAKE_REG | ACCESS_FS_MAKE_SOCK | ACCESS_FS_MAKE_FIFO
                     | ACCESS_FS_MAKE_BLOCK | ACCESS_FS_MAKE_SYM)

#: the environment variable a parent sets to the folders (os.pathsep-separated) its child may write
WRITABLE_ENV = "FP4MOE_WRITABLE"


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


def confine_writes(writable) -> str | None:
    """Allow file writes only beneath ``writable`` (and ``/dev``) for this process and all it
    starts. None when confined; else why not (no Landlock, a syscall refused)."""
    abi = landlock_abi()
    if abi < 1:
        return "the kernel has no Landlock: writes of the code under test are not confined"
    rights = WRITE_RIGHTS_ABI1 | (ACCESS_FS_REFER if abi >= 2 else 0) | (ACCESS_FS_TRUNCATE if abi >= 3 else 0)
    libc = ctypes.CDLL(None, use_errno=True)
    attr = ctypes.c_uint64(rights)
    rfd = libc.syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(8), ctypes.c_uint32(0))
    if rfd < 0:
        return f"landlock_create_ruleset failed: {os.strerror(ctypes.get_errno())}"
    try:
        for d in [*map(Path, writable), Path("/dev")]:
            fd = os.open(d, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = _PathBeneath(rights, fd)
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
    return None


def confine_from_env(also=()) -> str | None:
    """Child side: confine to ``$FP4MOE_WRITABLE`` (plus ``also``) when the parent set it (None:
    nothing asked, or confined)."""
    value = os.environ.get(WRITABLE_ENV)
    if not value:
        return None
    return confine_writes([p for p in [*value.split(os.pathsep), *also] if p])
