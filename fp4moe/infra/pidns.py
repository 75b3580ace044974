"""Run one command as the only process tree of a fresh PID namespace with its own /proc (Linux).

Executed by path (``python -I -S pidns.py --how HOW -- CMD...``) by
``fp4moe.infra.childproc.run_child``, never imported: it uses the standard library only, and
nothing of the project, so that it starts in a few milliseconds and works whatever the child's
``PYTHONPATH``. What it gives:

- **nothing outlives the child.** The first process forked after ``unshare(CLONE_NEWPID)`` is
  PID 1 of the new namespace (:func:`_init`); it starts the command, reaps every orphan, and
  when the command ends it exits, and the kernel then SIGKILLs every process left in the
  namespace: a daemon that left the process group, cleared its environment and closed its
  pipes, or a process that keeps re-forking, included;
- **its own /proc.** With ``CLONE_NEWNS`` too, PID 1 makes every mount of its copy of the mount
  tree a slave (``mount("/", MS_REC|MS_SLAVE)``: nothing it mounts propagates back to the
  host) and mounts a fresh ``proc`` on ``/proc``, so ``/proc`` lists the namespace's processes
  under the numbers ``kill`` takes there: a gate running inside (the zoo's suite) finds and
  ends its own children through it. Without it a namespaced process sees the host's ``/proc``,
  whose numbers mean other processes (``childproc.sweep`` refuses such a ``/proc``);
- **the gate cannot be addressed.** Process ids inside name processes of the namespace only:
  ``kill(getppid(), SIGSTOP)`` reaches PID 1, which the kernel protects from SIGSTOP and
  SIGKILL sent from inside; the gate's pid means nothing there;
- **the same exit status.** The command's wait status travels to the outer process over a pipe
  and is reproduced (the same exit code, or death by the same signal); SIGTERM, SIGINT, SIGHUP,
  SIGQUIT, SIGUSR1/2 sent to the outer process reach the command's process group once.

Ways (``HOW``, strongest first, :data:`WAYS`): as root ``unshare(CLONE_NEWPID|CLONE_NEWNS)``
(``pid+proc``); otherwise in a new user namespace that maps only the caller's uid and gid
(``user+pid+proc``); where mounting proc is refused (a container that masks parts of its
``/proc`` refuses it in a user namespace) the PID namespace alone (``pid``, ``user+pid``).
``--probe`` tries them in that order, each in a throw-away child, and prints the first that
works here and exits 0, or prints every reason and exits 1: the parent asks once and falls back
to its process-group sweep, saying why. A run is given the way the probe found: a failure then
is an error (exit 127 and one line), never a silent weaker containment.
"""

import ctypes
import os
import signal
import struct
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_SLAVE = 0x2, 0x4, 0x8, 0x4000, 1 << 19
#: the ways, strongest first: (name, unshare flags, whether PID 1 mounts its own /proc)
WAYS = (("pid+proc", CLONE_NEWPID | CLONE_NEWNS, True),
        ("user+pid+proc", CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS, True),
        ("pid", CLONE_NEWPID, False),
        ("user+pid", CLONE_NEWUSER | CLONE_NEWPID, False))
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


def unshare_ns(how: str) -> bool:
    """Put this process's next child in new namespaces, the way ``how`` names (:data:`WAYS`);
    whether that child is to mount its own /proc. OSError naming the call when refused."""
    ways = {name: (flags, proc) for name, flags, proc in WAYS}
    if how not in ways:
        raise OSError(0, f"unknown way {how!r} (one of {', '.join(ways)})")
    flags, proc = ways[how]
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(flags) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"unshare({how}): {os.strerror(e)}")
    if flags & CLONE_NEWUSER:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1\n")
        _write("/proc/self/gid_map", f"{gid} {gid} 1\n")
    return proc


def mount_own_proc() -> None:
    """In PID 1 of the new namespaces: every mount a slave (nothing propagates out), then a
    fresh proc on /proc. OSError naming the call when refused."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(b"none", b"/", None, MS_REC | MS_SLAVE, None) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"mount(/, MS_REC|MS_SLAVE): {os.strerror(e)}")
    if libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"mount(proc, /proc): {os.strerror(e)}")


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


def _init(cmd: list[str], status_w: int, inherited: dict, own_proc: bool, start=None) -> None:
    """PID 1 of the namespace: its own /proc (``own_proc``), start the command, pass signals
    on, reap everything, report. ``start`` (default :func:`_exec`) becomes the command in the
    forked process; one that returns (a warm start, ``zygote.py``) returns from here there."""
    child = 0
    if own_proc:
        try:
            mount_own_proc()
        except OSError as e:  # the probe said it works: now it is an error, not a weaker run
            os.write(2, f"pidns.py: {e.strerror or e}\n".encode())
            os._exit(127)
    _forward_signals(os.killpg, lambda: child)  # to the command's process group, once it is started
    child = os.fork()
    if child == 0:
        os.close(status_w)
        return (start or _exec)(cmd, inherited)
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


def _try(how: str) -> str | None:
    """Whether ``how`` works here, tried in a throw-away child (None: it does; else why not)."""
    r, w = os.pipe()
    tester = os.fork()
    if tester == 0:  # unshare changes the caller: only this child is changed
        os.close(r)
        try:
            own_proc = unshare_ns(how)
            pid = os.fork()
            if pid == 0:
                try:
                    if own_proc:
                        mount_own_proc()
                        if os.readlink("/proc/self") != "1":
                            raise OSError(0, "the new /proc does not show the namespace's PID 1")
                    elif os.getpid() != 1:
                        raise OSError(0, "the first child after unshare is not PID 1")
                except OSError as e:
                    os.write(w, (e.strerror or str(e)).encode()[:300])
                    os._exit(1)
                os._exit(0)
            _, status = os.waitpid(pid, 0)
            os._exit(0 if status == 0 else 1)
        except OSError as e:
            os.write(w, (e.strerror or str(e)).encode()[:300])
            os._exit(1)
    os.close(w)
    why = b""
    while chunk := os.read(r, 4096):
        why += chunk
    os.close(r)
    _, status = os.waitpid(tester, 0)
    return None if status == 0 else (why.decode(errors="replace") or f"wait status {status}")


def probe() -> int:
    """Print the strongest way that works here (exit 0), or every way's reason (exit 1)."""
    reasons = []
    for how, _, _ in WAYS:
        why = _try(how)
        if why is None:
            print(how if not reasons else f"{how} ({'; '.join(reasons)})")
            return 0
        reasons.append(why)
    print("; ".join(reasons))
    return 1


def run(how: str, cmd: list[str], inherited: dict, start=None):
    """``cmd`` as the only process tree of new namespaces made the way ``how`` names; this
    process waits and ends with the command's wait status (never returns here). ``start``: as
    :func:`_init`'s; where it returns, :func:`run` returns in the command's process."""
    try:
        own_proc = unshare_ns(how)  # the parent probed first: a failure here is an error, not a fallback
    except OSError as e:
        os.write(2, f"pidns.py: {e.strerror or e}\n".encode())
        os._exit(127)
    status_r, status_w = os.pipe()
    init = os.fork()
    if init == 0:
        os.close(status_r)
        return _init(cmd, status_w, inherited, own_proc, start)
    os.close(status_w)
    _forward_signals(os.kill, lambda: init)
    _, init_status = os.waitpid(init, 0)
    data = os.read(status_r, STATUS.size)
    _reproduce(STATUS.unpack(data)[0] if len(data) == STATUS.size else init_status)


def inherited_signals() -> dict:
    """SIGINT, SIGHUP, SIGTERM as the command is to get them: ignored where this process has them
    ignored, else the default."""
    got = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM)}
    return {s: (signal.SIG_IGN if h is signal.SIG_IGN else signal.SIG_DFL) for s, h in got.items()}


def main(argv: list[str]) -> None:
    if argv[:1] == ["--probe"]:
        sys.exit(probe())
    how = "pid"
    if argv[:1] == ["--how"] and len(argv) > 1:
        how, argv = argv[1], argv[2:]
    cmd = argv[1:] if argv[:1] == ["--"] else argv
    if not cmd:
        os.write(2, b"pidns.py: no command\n")
        os._exit(127)
    run(how, cmd, inherited_signals())


if __name__ == "__main__":
    main(sys.argv[1:])
