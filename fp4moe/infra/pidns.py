"""Run one command as the only process tree of a fresh PID namespace (Linux).

Executed by path (``python -I -S pidns.py -- CMD...``) by ``fp4moe.infra.childproc.run_child``,
never imported: it uses the standard library only, and nothing of the project, so that it starts
in a few milliseconds and works whatever the child's ``PYTHONPATH``. What it gives:

- **nothing outlives the child.** The first process forked after ``unshare(CLONE_NEWPID)`` is
  PID 1 of the new namespace (:func:`_init`); it starts the command, reaps every orphan, and
  when the command ends it exits, and the kernel then SIGKILLs every process left in the
  namespace: a daemon that left the process group, cleared its environment and closed its
  pipes, or a process that keeps re-forking, included;
- **the gate cannot be addressed.** Process ids inside name processes of the namespace only:
  ``kill(getppid(), SIGSTOP)`` reaches PID 1, which the kernel protects from SIGSTOP and
  SIGKILL sent from inside; the gate's pid means nothing there;
- **the same exit status.** The command's wait status travels to the outer process over a pipe
  and is reproduced (the same exit code, or death by the same signal); SIGTERM, SIGINT, SIGHUP,
  SIGQUIT, SIGUSR1/2 sent to the outer process reach the command's process group once.

As root ``unshare(CLONE_NEWPID)`` works directly; otherwise in a new user namespace that maps
only the caller's uid and gid (``CLONE_NEWUSER | CLONE_NEWPID``), where the kernel allows them.
``--probe`` prints which works here (``pid`` or ``user+pid``) and exits 0, or prints the reason
and exits 1: the parent asks once and falls back to its process-group sweep, saying why.
"""

import ctypes
import errno
import os
import signal
import struct
import sys

CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
#: signals passed on to the command's process group
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
#: what Python sets at its start and a child must not inherit (as subprocess's restore_signals)
RESTORED = tuple(getattr(signal, n) for n in ("SIGPIPE", "SIGXFZ", "SIGXFSZ") if hasattr(signal, n))
STATUS = struct.Struct("=i")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def unshare_pid() -> str:
    """Put this process's next child in a new PID namespace; which way ('pid', 'user+pid')."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWPID) == 0:
        return "pid"
    first = ctypes.get_errno()
    if first != errno.EPERM:
        raise OSError(first, f"unshare(CLONE_NEWPID): {os.strerror(first)}")
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWPID) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"unshare(CLONE_NEWPID) needs root (EPERM) and unshare(CLONE_NEWUSER|CLONE_NEWPID) "
                         f"failed: {os.strerror(e)}")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1\n")
    _write("/proc/self/gid_map", f"{gid} {gid} 1\n")
    return "user+pid"


def _exec(cmd: list[str], inherited: dict) -> None:
    """In the command's process: its own group, the signal dispositions it inherited, exec."""
    try:
        os.setpgid(0, 0)
        for sig, how in inherited.items():
            signal.signal(sig, how)
        for sig in RESTORED:
            signal.signal(sig, signal.SIG_DFL)
        os.execvp(cmd[0], cmd)
    except BaseException as e:  # noqa: BLE001 -- reported like a shell: 127 and one line
        try:
            os.write(2, f"{cmd[0]}: cannot run: {e}\n".encode())
        finally:
            os._exit(127)


def _forward_signals(kill, target) -> None:
    """Pass every FORWARDED signal on with ``kill(target(), sig)``; dropped while ``target()`` is 0
    (nothing started yet) or when the target is gone."""

    def forward(sig, frame):
        pid = target()
        if pid:
            try:
                kill(pid, sig)
            except OSError:
                pass

    for sig in FORWARDED:
        signal.signal(sig, forward)


def _init(cmd: list[str], status_w: int, inherited: dict) -> None:
    """PID 1 of the namespace: start the command, pass signals on, reap everything, report."""
    child = 0
    _forward_signals(os.killpg, lambda: child)  # to the command's process group, once it is started
    child = os.fork()
    if child == 0:
        os.close(status_w)
        _exec(cmd, inherited)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            status = 127 << 8
            break
        if pid == child:
            break
    os.write(status_w, STATUS.pack(status))
    os._exit(0)  # the kernel now kills whatever is left in the namespace


def _reproduce(status: int) -> None:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # those two cannot be caught anyway
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def probe() -> int:
    try:
        how = unshare_pid()
    except OSError as e:
        print(e.strerror or e)
        return 1
    pid = os.fork()
    if pid == 0:
        os._exit(0 if os.getpid() == 1 else 1)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        print("the first child after unshare is not PID 1")
        return 1
    print(how)
    return 0


def main(argv: list[str]) -> None:
    if argv[:1] == ["--probe"]:
        sys.exit(probe())
    cmd = argv[1:] if argv[:1] == ["--"] else argv
    if not cmd:
        os.write(2, b"pidns.py: no command\n")
        os._exit(127)
    inherited = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM)}
    inherited = {s: (signal.SIG_IGN if h is signal.SIG_IGN else signal.SIG_DFL) for s, h in inherited.items()}
    unshare_pid()  # the parent probed first: a failure here is an error, not a silent fallback
    status_r, status_w = os.pipe()
    init = os.fork()
    if init == 0:
        os.close(status_r)
        _init(cmd, status_w, inherited)
    os.close(status_w)
    _forward_signals(os.kill, lambda: init)
    _, init_status = os.waitpid(init, 0)
    data = os.read(status_r, STATUS.size)
    _reproduce(STATUS.unpack(data)[0] if len(data) == STATUS.size else init_status)


if __name__ == "__main__":
    main(sys.argv[1:])
