"""Result files: written atomically (a reader never sees half a file), and output paths
checked before any work (never a folder, never one of the inputs). Input data files are read
only when they are regular files (:func:`read_regular_bytes`): a FIFO named as a data file
would otherwise block the gate forever on ``open``.

What an output path may name (:func:`output_target`, used by every writer here):

- absent, or a regular file (through symlinks: the link is kept, its target replaced):
  written to a temporary file beside it and renamed over it (:attr:`Target.FILE`);
- a character device (``/dev/null``, a terminal) or a FIFO with a reader: opened and written in
  place, never created, truncated, renamed over or removed (:attr:`Target.IN_PLACE`); a FIFO
  with no reader is refused at once (non-blocking open), a device that cannot be opened is named
  for what it is (``/dev/tty`` without a controlling terminal), ``/dev/full`` fails on the write;
  a FIFO whose reader leaves before reading the whole output is an error naming the path (the
  bytes still in the pipe are counted once written: :data:`FIFO_DRAIN_S`);
- one of this process's descriptors (``/dev/stdout``, ``/dev/fd/N``, ``/proc/self/fd/N``):
  written on that descriptor, at its offset, as a shell's ``>&N`` would (:attr:`Target.FD`);
- anything else -- a folder, a block device, a socket, another process's descriptor -- is
  refused with an ``OSError`` naming the path and what it is.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import sys
import tempfile
from enum import Enum
from pathlib import Path


def node_kind(mode: int) -> str:
    """What an ``st_mode`` is, in words: "a FIFO", "a folder", "a character device" ..."""
    return ("a FIFO" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "a character device" if stat.S_ISCHR(mode)
            else "a block device" if stat.S_ISBLK(mode) else "a regular file" if stat.S_ISREG(mode)
            else "not a regular file")


#: the most bytes :func:`read_regular_bytes` reads when its caller gives no ``limit``: no data
#: file a gate reads (a catalogue, a budget, a tuned CSV, a source file) comes near it, and a
#: file padded to GiBs (a sparse giant) is refused by its size before a byte is read
MAX_READ_BYTES = 64 << 20


def _check_regular(p: Path, st: os.stat_result, limit: int, via: str = "") -> None:
    if not stat.S_ISREG(st.st_mode):
        raise OSError(f"{p}: is {node_kind(st.st_mode)}{via}, not a regular file")
    if st.st_size > limit:
        raise OSError(f"{p}: {st.st_size} bytes{via}, more than the {limit} a file of this kind may hold")


def read_regular_bytes(path: str | Path, limit: int | None = None) -> bytes:
    """The bytes of ``path``, which must be a regular file (symlinks followed). A FIFO, a
    device, a socket or a folder is an ``OSError`` saying what it is, raised without waiting:
    the file is opened non-blocking and checked with ``fstat`` on the open descriptor (no race
    between a check and the open). ``limit``: refuse files larger than this many bytes
    (default :data:`MAX_READ_BYTES`: every read is bounded)."""
    p = Path(path)
    limit = MAX_READ_BYTES if limit is None else limit
    fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        _check_regular(p, os.fstat(fd), limit)
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=True) as f:
            fd = -1
            data = f.read(limit + 1)  # a file growing while read
        if len(data) > limit:
            raise OSError(f"{p}: more than the {limit} bytes a file of this kind may hold")
        return data
    finally:
        if fd >= 0:
            os.close(fd)


def check_regular_file(path: str | Path, limit: int | None = None) -> int:
    """The size of ``path``, which must be a regular file (symlinks followed) of at most ``limit``
    bytes (default :data:`MAX_READ_BYTES`), checked by ``stat`` alone (nothing opened, nothing
    waited on): for a file that code under test will read (aiter's pandas reading a tuned CSV). A
    FIFO, a device (a link to ``/dev/zero``), a folder or a sparse giant is an ``OSError`` naming
    the path and what it is."""
    p = Path(path)
    limit = MAX_READ_BYTES if limit is None else limit
    st = os.stat(p)
    real = os.path.realpath(p)
    _check_regular(p, st, limit, f" ({real})" if real != os.path.abspath(p) else "")
    return st.st_size


def read_text_bounded(path: str | Path, limit: int | None = None, errors: str = "strict") -> str:
    """:func:`read_regular_bytes` decoded as UTF-8: the text of a file a tree or a user names."""
    return read_regular_bytes(path, limit).decode("utf-8", errors)


class Target(Enum):
    """How an output path is written (module docstring)."""

    FILE = "file"  # created or replaced atomically
    IN_PLACE = "in place"  # a character device or a FIFO: opened and written, never replaced
    FD = "descriptor"  # one of this process's descriptors (/dev/stdout): written on it


#: a link into a process's open files (/proc/self/fd/1, what /dev/stdout and /dev/fd/N lead to)
_FD_LINK = re.compile(r"^/proc/(self|thread-self|\d+)(/task/\d+)?/fd/(\d+)$")
#: symlinks followed before giving up (the kernel's own limit is 40)
MAX_LINKS = 40


def output_target(path: str | Path) -> tuple[Target, Path | int]:
    """Where a write to ``path`` goes: (:attr:`Target.FILE`, the real path to replace),
    (:attr:`Target.IN_PLACE`, the node to open) or (:attr:`Target.FD`, the descriptor number).
    Raises OSError naming ``path`` for what is refused (module docstring). Checks only; a FIFO
    is not opened here (opening and closing it would end its reader's input)."""
    p = os.path.abspath(os.fspath(path))
    for _ in range(MAX_LINKS):
        p = os.path.join(os.path.realpath(os.path.dirname(p)), os.path.basename(p))
        m = _FD_LINK.match(p)
        if m:
            if m.group(1) not in ("self", "thread-self", str(os.getpid())):
                raise OSError(f"{path}: a descriptor of another process ({p}): refused")
            fd = int(m.group(3))
            try:
                os.fstat(fd)
            except OSError:
                raise OSError(f"{path}: descriptor {fd} is not open") from None
            return Target.FD, fd
        if not os.path.islink(p):
            break
        p = os.path.join(os.path.dirname(p), os.readlink(p))
    else:
        raise OSError(f"{path}: more than {MAX_LINKS} symlinks")
    try:
        mode = os.stat(p).st_mode
    except FileNotFoundError:
        return Target.FILE, Path(p)
    if stat.S_ISREG(mode):
        return Target.FILE, Path(p)
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return Target.IN_PLACE, Path(p)
    what = node_kind(mode)
    raise OSError(f"{path}: is {what}" + (f" ({p})" if p != os.path.abspath(os.fspath(path)) else "")
                  + (", not a file" if what == "a folder" else ": refused, an output is never written there"))


def _write_all(fd: int, data: bytes, path) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except OSError as e:
            raise OSError(e.errno, f"{path}: cannot write: {e.strerror}") from None
        view = view[n:]


#: seconds a FIFO's reader is given to take what is still in the pipe once the output is written;
#: a reader that leaves with bytes unread is an error, one still there after this is trusted
FIFO_DRAIN_S = 30.0


def _wait_drained(fd: int, total: int, path) -> None:
    """A write into a FIFO succeeds once the bytes are in the pipe, read or not: a reader that
    leaves after 10 bytes would go unnoticed. Wait until the pipe is empty (all read) or its
    reader is gone with bytes unread (an error naming ``path``), at most :data:`FIFO_DRAIN_S`."""
    import array
    import fcntl
    import select
    import termios
    import time

    unread = array.array("i", [0])
    poller = select.poll()
    poller.register(fd, select.POLLOUT)  # POLLERR once no reader is left
    deadline = time.monotonic() + FIFO_DRAIN_S
    while True:
        try:
            fcntl.ioctl(fd, termios.FIONREAD, unread)  # a pipe's bytes not read yet (Linux: either end)
        except OSError:
            return  # no FIONREAD here: what the write said is all there is to know
        left = unread[0]
        if left == 0:
            return
        if any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0)):
            raise OSError(errno.EPIPE, f"{path}: cannot write: the FIFO's reader left with {left} of the "
                                       f"{total} bytes unread")
        if time.monotonic() > deadline:
            return
        time.sleep(0.005)


def _write_in_place(node: Path, data: bytes, path) -> None:
    flags = os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(node, flags)  # never O_CREAT/O_TRUNC: the node is written, not made or cut
    except OSError as e:
        try:
            kind = node_kind(os.stat(node).st_mode)
        except OSError:
            kind = "gone"
        if e.errno == errno.ENXIO and kind == "a FIFO":
            raise OSError(e.errno, f"{path}: a FIFO with no reader: refused (nothing would read the output)") from None
        what = "a FIFO" if kind == "a FIFO" else "a terminal" if os.path.realpath(node) == "/dev/tty" else kind
        hint = " (this process has no controlling terminal)" if what == "a terminal" and e.errno == errno.ENXIO else ""
        raise OSError(e.errno, f"{path}: {what} that cannot be opened: {e.strerror}{hint}") from None
    try:
        st = os.fstat(fd)
        if not (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)):  # replaced since it was checked
            raise OSError(f"{path}: changed into {node_kind(st.st_mode)} while being opened: refused")
        os.set_blocking(fd, True)
        _write_all(fd, data, path)
        if stat.S_ISFIFO(st.st_mode):
            _wait_drained(fd, len(data), path)
    finally:
        os.close(fd)


def _write_fd(fd: int, data: bytes, path) -> None:
    for stream in (sys.stdout, sys.stderr):  # what Python buffered comes first, as in a shell
        try:
            if stream is not None and stream.fileno() == fd:
                stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    _write_all(fd, data, path)


def atomic_write_text(path: str | Path, text: str, *, replace: bool = False) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename:
    a reader sees the old file or the new one, never half of one; a device, a FIFO or a
    descriptor is written in place instead (:func:`output_target`). ``replace``: rename over
    whatever ``path`` is, never write through it (a file of the harness's own, in a folder the
    code under test could have left a FIFO in). Errors name the path."""
    if not isinstance(text, str):
        raise TypeError(f"{path}: atomic_write_text needs str, got {type(text).__name__}")
    atomic_write_bytes(path, text.encode("utf-8"), replace=replace)


def atomic_write_bytes(path: str | Path, data: bytes, *, replace: bool = False) -> None:
    """:func:`atomic_write_text` for bytes (a PNG, say)."""
    if replace:
        kind, where = Target.FILE, Path(os.path.abspath(os.fspath(path)))
    else:
        kind, where = output_target(path)
    if kind is Target.FD:
        return _write_fd(where, data, path)
    if kind is Target.IN_PLACE:
        return _write_in_place(where, data, path)
    p = where
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    except OSError as e:
        raise OSError(f"{path}: cannot write here: {e.strerror or e}") from e
    try:
        try:  # keep an existing file's mode; a new one gets rw-r--r-- (mkstemp would give rw-------)
            os.fchmod(fd, p.stat().st_mode & 0o7777 if p.exists() else 0o644)
        except OSError:
            pass
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)  # the close flushes: a full disk fails here or there
        except OSError as e:  # a full disk: named, not a bare ENOSPC
            raise OSError(e.errno, f"{path}: cannot write: {e.strerror}") from None
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def check_output_path(path: Path | None, option: str, inputs=()) -> None:
    """Before any work: an output option names a file in an existing, writable folder (or a
    node written in place, :func:`output_target`), and is none of ``inputs`` (files, or folders
    it must not be inside): a results file must never overwrite the data it was computed from.
    Raises OSError naming the option."""
    if path is None:
        return
    p = Path(path)
    try:
        kind, where = output_target(p)
    except OSError as e:
        raise OSError(f"{option} {e}") from None
    if kind is Target.FD:
        return
    for inp in map(Path, inputs):
        if where == inp.resolve() or (inp.is_dir() and inp.resolve() in where.parents):
            raise OSError(f"{option} {p}: would overwrite the input {inp}")
    if kind is Target.IN_PLACE:
        if not os.access(where, os.W_OK):
            raise OSError(f"{option} {p}: not writable")
        return
    parent = where.parent
    if not parent.is_dir():
        raise OSError(f"{option} {p}: folder {p.parent if str(p.parent) else '.'} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK) or (where.exists() and not os.access(where, os.W_OK)):
        raise OSError(f"{option} {p}: not writable")


def atomic_write_json(path: str | Path, obj, **dump_kw) -> None:
    atomic_write_text(path, json.dumps(obj, **dump_kw) + "\n")


#: characters a quoted text never carries raw: controls (a terminal escape, a carriage return
#: that would overwrite the verdict), format characters, line and paragraph separators
_UNSAFE_CATEGORIES = ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")


def escape_controls(text, limit: int | None = None, *, quote: bool = False) -> str:
    """``text`` with every control or format character (``\\x1b``, ``\\r``, a newline, U+2028)
    written as an escape, never raw; ``quote``: a double quote and a backslash escaped too. Bytes
    are decoded as UTF-8, a bad byte written ``\\xNN``. ``limit``: cut to that many characters,
    ``...`` then."""
    import unicodedata

    if isinstance(text, bytes | bytearray):
        text = bytes(text).decode("utf-8", errors="backslashreplace")
    text = str(text)
    cut = limit is not None and len(text) > limit
    out = []
    for ch in text[:limit] if cut else text:
        if quote and ch in '"\\':
            out.append("\\" + ch)
        elif unicodedata.category(ch) in _UNSAFE_CATEGORIES:
            o = ord(ch)
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(ch) or
                       (f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"))
        else:
            out.append(ch)
    return "".join(out) + ("..." if cut else "")


def quoted(label: str, text, limit: int = 200) -> str:
    """``label "text"``: text that came from code under test, a file or a server, for the one
    line a gate prints: in double quotes, a quote or backslash escaped, every control or
    format character escaped (:func:`escape_controls`), cut to ``limit`` characters. A fake
    verdict in the text stays inside the quotes."""
    return f'{label} "{escape_controls(text, limit, quote=True)}"'
