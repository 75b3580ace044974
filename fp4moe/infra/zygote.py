"""Warm starts: a process that has imported torch once forks each Python child instead of a
fresh interpreter importing it again (``python zygote.py --fd N --preload torch``).

Executed by path by ``fp4moe.infra.childproc`` (:class:`~fp4moe.infra.childproc.Zygote`), never
imported: it imports the standard library and the ``--preload`` modules only (no module of this
project, so a child running another tree's ``fp4moe`` -- the zoo's mutants -- imports that one),
and drops its own folder from ``sys.path`` before anything else. On a 2-core runner a child
interpreter spends ~2 CPU s importing torch before its first line of work; the gates start
several per run, the suite hundreds.

What a child gets is what ``subprocess.Popen`` + ``pidns.py`` + ``python -m`` give it, in this
order, in the forked process: its descriptors (stdin, stdout, stderr and the pass-through fds at
the numbers asked, every other descriptor of this process closed), its working folder, a
session of its own (the caller's ``killpg`` of its pid reaches it from the first moment: the pid
is answered only after ``setsid``), the SIGINT/SIGHUP/SIGTERM dispositions the caller would have
passed (ignored or default), its environment (``os.environ`` replaced, so everything it
``exec``s inherits it), then the namespaces of ``pidns.py`` (loaded by path, the same code:
PID 1, its own /proc, the command in a process group of its own, the wait status reproduced),
and finally the command, in that process: ``-m MOD`` through ``runpy`` as ``python -m`` does,
``-c CODE`` or a script path, with ``sys.argv``, ``sys.path`` (the working folder or script
folder first, then ``$PYTHONPATH``, then this interpreter's own) and bytecode writing
(``$PYTHONDONTWRITEBYTECODE``) as a fresh interpreter would set them; it ends through the
interpreter's own exit (threads joined, ``atexit``, an uncaught exception printed, exit 1).

What differs from a fresh interpreter, and why it does not matter to a verdict: the preloaded
modules are already in ``sys.modules`` (the same files the child would import: one interpreter,
one ``site-packages``), with what importing them did (torch's ``warnings`` filters) there from
the child's first line, not from its ``import torch``; what those imports cached of the
environment is dropped (``tempfile``'s folder: the child's ``$TMPDIR`` decides); ``/proc/PID/environ`` of the forked process shows this process's
environment (the caller warm-starts only children held in a PID namespace, which the kernel
empties when the command ends, so the marker sweep is not what holds them); the hash seed is
this process's. ``childproc`` sends here only commands it can start this way (the same
interpreter, ``-m``/``-c``/a script with ``-W`` options at most, the import-time environment --
thread counts, allocator, library paths -- equal to this process's) and starts the rest as
before.

The zygote never holds a secret of a run: a child's record key travels in a pipe it passes on
unread, so what a child could find in the memory it inherits (earlier requests' environments,
record paths) forges nothing (a record needs its own run's key).

Protocol, on the socket ``--fd`` (a socketpair end; the caller holds the other and is the only
one that can ask): this process sends ``ready\\n`` once its preloads are imported; each request
is one ``sendmsg``: a JSON object (``argv``, ``env``, ``cwd``, ``fds``: the target numbers of
the descriptors sent with it after stdin, stdout, stderr and the status pipe, ``ignored``: the
signal numbers the child is to start with ignored, ``how``: a ``pidns.py`` way) with the
descriptors as ``SCM_RIGHTS``; the answer is one line, ``{"pid": N}`` or ``{"error": "..."}``.
When a child ends its wait status (4 bytes, native int) is written to its status pipe, which
is then closed. EOF on the socket (the caller ended, however it ended: the kernel closes its end)
ends this process; its children are the caller's to end. (Not ``PR_SET_PDEATHSIG``: that fires
when the *thread* that started this process ends, and a caller may start it from any thread.)
"""

import os
import sys

if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]  # this folder (fp4moe/infra) must not shadow a module the preloads import

import importlib  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import selectors  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import struct  # noqa: E402

STATUS = struct.Struct("=i")
#: most descriptors one request carries (stdin, stdout, stderr, status, pass-through fds)
MAX_FDS = 16
MAX_REQUEST = 1 << 22
#: the lowest number a received descriptor is parked at before it is moved to its target
PARK = 200
#: the marker every child carries in its environment (``childproc.TAG_ENV``)
TAG_ENV = "FP4MOE_CHILD_TAG"
#: the variable whose value is the room the caller left in the environment block (dropped at start)
ROOM_ENV = "_FP4MOE_ZYGOTE_ROOM"


def _pidns():
    spec = importlib.util.spec_from_file_location("_fp4moe_pidns", os.path.join(os.path.dirname(__file__), "pidns.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


PIDNS = _pidns()


class Command:
    """What the forked process runs once :func:`serve` returns in it."""

    def __init__(self, req: dict):
        self.req = req


def _place_fds(fds: list[int], targets: list[int]) -> None:
    """stdin, stdout, stderr and the pass-through fds to 0, 1, 2 and ``targets``; every other
    descriptor of this process closed."""
    want = [0, 1, 2, *targets]
    parked = [os.dup2(fd, PARK + i, inheritable=False) for i, fd in enumerate(fds)]
    for fd in fds:
        if fd not in parked:
            os.close(fd)
    for p, t in zip(parked, want):
        os.dup2(p, t, inheritable=True)
    lo = 0
    for t in sorted(set(want)):
        if t > lo:
            os.closerange(lo, t)
        lo = t + 1
    os.closerange(lo, 1 << 20)  # close_range(2) where the kernel has it


def _rewrite_area(start_field: int, items: list[str]) -> None:
    """Write ``items`` (NUL-separated) over this process's argv (``start_field`` 48, proc(5)'s
    ``arg_start``) or environment (50, ``env_start``) block, as ``/proc/PID/cmdline`` or ``/proc/PID/environ`` shows it, padded
    with NULs or cut at its size (the caller started this process with room to spare)."""
    with open("/proc/self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    lo, hi = int(fields[start_field - 3]), int(fields[start_field - 2])
    data = b"".join(i.encode("utf-8", "surrogateescape") + b"\0" for i in items)
    data = data[: hi - lo - 1] + b"\0" if len(data) > hi - lo else data + b"\0" * (hi - lo - len(data))
    with open("/proc/self/mem", "r+b", buffering=0) as m:
        m.seek(lo)
        m.write(data)


def _show_as(argv: list[str], env: dict) -> None:
    """``ps``, ``pgrep`` and a marker sweep see the child's own command line and environment
    (the marker first, so a cut keeps it). A kernel that refuses: this process's are shown."""
    tag = [f"{k}={v}" for k, v in env.items() if k == TAG_ENV]
    try:
        _rewrite_area(48, argv)
        _rewrite_area(50, tag + [f"{k}={v}" for k, v in env.items() if k != TAG_ENV])
    except (OSError, ValueError, IndexError):
        pass


def _child(req: dict, fds: list[int], sock: socket.socket, sel, wake_r: int, ready_w: int) -> Command:
    """In the forked process: its descriptors, folder, session, signals, environment."""
    sel.close()
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    status_w = fds.pop(3)
    os.close(status_w)  # the status pipe is this process's parent's to write
    sock.close()
    os.close(wake_r)
    os.setsid()
    os.write(ready_w, b"s")
    os.close(ready_w)
    _place_fds(fds, [int(t) for t in req.get("fds", [])])
    if req.get("cwd"):
        os.chdir(req["cwd"])
    ignored = set(req.get("ignored", []))
    for sig in (signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN if int(sig) in ignored else signal.SIG_DFL)
    # as a fresh interpreter: Python's KeyboardInterrupt handler unless started with SIGINT ignored
    signal.signal(signal.SIGINT, signal.SIG_IGN if int(signal.SIGINT) in ignored else signal.default_int_handler)
    os.environ.clear()
    os.environ.update(req["env"])
    _show_as(req["argv"], req["env"])
    # what the preloads' imports cached of this process's environment, read afresh from the child's
    if "tempfile" in sys.modules:
        sys.modules["tempfile"].tempdir = None  # $TMPDIR (a gate gives each child run its own)
    importlib.invalidate_caches()
    return Command(req)


def serve(fd: int) -> Command:
    """Answer requests until EOF (then exit); returns only in a forked child, its command."""
    sock = socket.socket(fileno=fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    status_of: dict[int, int] = {}
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ, "req")
    sel.register(wake_r, selectors.EVENT_READ, "chld")
    sock.sendall(b"ready\n")
    while True:
        for key, _ in sel.select():
            if key.data == "chld":
                try:
                    os.read(wake_r, 4096)
                except BlockingIOError:
                    pass
            else:
                try:
                    msg, fds, _, _ = socket.recv_fds(sock, MAX_REQUEST, MAX_FDS)
                except OSError:
                    os._exit(0)
                if not msg:
                    os._exit(0)  # the caller is gone: its children are its to end
                try:
                    req = json.loads(msg)
                    if len(fds) < 4 or len(fds) != 4 + len(req.get("fds", [])):
                        raise ValueError(f"{len(fds)} descriptors for {len(req.get('fds', []))} pass-through fds")
                except ValueError as e:
                    for f in fds:
                        os.close(f)
                    sock.sendall((json.dumps({"error": f"bad request: {e}"}) + "\n").encode())
                    continue
                ready_r, ready_w = os.pipe()
                pid = os.fork()
                if pid == 0:
                    os.close(ready_r)
                    for w in status_of.values():
                        os.close(w)
                    return _child(req, fds, sock, sel, wake_r, ready_w)
                os.close(ready_w)
                os.read(ready_r, 1)  # its own session first (b"" if it died before)
                os.close(ready_r)
                status_of[pid] = fds[3]
                for f in fds[:3] + fds[4:]:
                    os.close(f)
                sock.sendall((json.dumps({"pid": pid}) + "\n").encode())
            while status_of:  # reap: each ended child's status to its pipe
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                w = status_of.pop(pid, None)
                if w is not None:
                    try:
                        os.write(w, STATUS.pack(status))
                    except OSError:
                        pass
                    os.close(w)


def _start(cmd: Command):
    """The command's process (inside the namespaces): become ``python ARGS`` in place."""
    import runpy
    import types
    import warnings

    argv = list(cmd.req["argv"][1:])
    env = os.environ
    while argv[:1] == ["-W"]:
        sys.warnoptions.append(argv[1])
        warnings._processoptions([argv[1]])  # as the interpreter reads -W (a bad one: a warning, as there)
        argv = argv[2:]
    sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    base = list(sys.path)  # started without $PYTHONPATH: the standard library and site-packages
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    if argv[0] == "-m":
        sys.argv = ["-m", *argv[2:]]
        sys.path[:] = [os.getcwd(), *extra, *base]
        runpy._run_module_as_main(argv[1], alter_argv=True)
    elif argv[0] == "-c":
        sys.argv = ["-c", *argv[2:]]
        sys.path[:] = ["", *extra, *base]
        sys.modules["__main__"] = main
        exec(compile(argv[1], "<string>", "exec"), main.__dict__)
    else:
        path = argv[0]
        sys.argv = list(argv)
        sys.path[:] = [os.path.dirname(os.path.abspath(path)), *extra, *base]
        sys.modules["__main__"] = main
        main.__dict__["__file__"] = path
        with open(path, "rb") as f:
            code = compile(f.read(), path, "exec")
        exec(code, main.__dict__)


def main(argv: list[str]) -> Command:
    os.environ.pop(ROOM_ENV, None)
    fd = int(argv[argv.index("--fd") + 1])
    for name in [a for i, a in enumerate(argv) if i and argv[i - 1] == "--preload"]:
        importlib.import_module(name)
    cmd = serve(fd)
    how = cmd.req.get("how")
    if how:  # returns only in the command's process (the outer one and PID 1 end in pidns.py)
        PIDNS.run(how, cmd.req["argv"], PIDNS.inherited_signals(), start=_become_here)
    return cmd


def _become_here(cmd: list[str], inherited: dict) -> bool:
    """pidns.py's ``_exec`` without the exec: the command's own group and signals (returns)."""
    os.setpgid(0, 0)
    for sig, how in inherited.items():
        if sig == signal.SIGINT and how is signal.SIG_DFL:
            how = signal.default_int_handler
        signal.signal(sig, how)
    return True


def _own_frames_dropped(tb):
    """The traceback from the first frame that is not this file's (as a fresh interpreter shows it)."""
    here = os.path.abspath(__file__)
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) == here:
        tb = tb.tb_next
    return tb


def _exit_code(e: SystemExit) -> int:
    """What the interpreter makes of ``SystemExit(code)``: None 0, an int itself, else printed, 1."""
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        sys.stderr.write(f"{code}\n")
    except Exception:  # noqa: BLE001 -- as the interpreter: an unprintable code is still exit 1
        pass
    return 1


def _finish(code: int, sigint: bool = False) -> None:
    """End as the interpreter would, without tearing the preloaded modules down one by one (~1 CPU s
    with torch, and nothing a verdict reads): non-daemon threads joined, ``atexit`` run, stdio
    flushed, then the exit status (or death by SIGINT, as after an uncaught KeyboardInterrupt)."""
    import atexit
    import threading

    try:
        threading._shutdown()
    except BaseException:  # noqa: BLE001 -- a thread's failure at exit does not change the status
        pass
    atexit._run_exitfuncs()
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except BaseException:  # noqa: BLE001 -- a closed or broken stream, as at interpreter exit
            pass
    if sigint:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code)


if __name__ == "__main__":
    _cmd = main(sys.argv[1:])
    try:
        _start(_cmd)
    except SystemExit as _e:
        _finish(_exit_code(_e))
    except BaseException as _e:  # noqa: BLE001 -- the interpreter's own handling of an uncaught one
        _e.__traceback__ = _own_frames_dropped(_e.__traceback__)
        sys.excepthook(type(_e), _e, _e.__traceback__)
        _finish(1, sigint=isinstance(_e, KeyboardInterrupt))
    _finish(0)
