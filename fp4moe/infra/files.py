"""Result files: written atomically (a reader never sees half a file), and output paths
checked before any work (never a folder, never one of the inputs). Input data files are read
only when they are regular files (:func:`read_regular_bytes`): a FIFO named as a data file
would otherwise block the gate forever on ``open``."""

from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path


def read_regular_bytes(path: str | Path, limit: int | None = None) -> bytes:
    """The bytes of ``path``, which must be a regular file (symlinks followed). A FIFO, a
    device, a socket or a folder is an ``OSError`` saying what it is, raised without waiting:
    the file is opened non-blocking and checked with ``fstat`` on the open descriptor (no race
    between a check and the open). ``limit``: refuse files larger than this many bytes."""
    p = Path(path)
    fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a folder" if stat.S_ISDIR(st.st_mode)
                    else "a socket" if stat.S_ISSOCK(st.st_mode) else "a device" if stat.S_ISCHR(st.st_mode)
                    or stat.S_ISBLK(st.st_mode) else "not a regular file")
            raise OSError(f"{p}: is {kind}, not a regular file")
        if limit is not None and st.st_size > limit:
            raise OSError(f"{p}: {st.st_size} bytes, more than the {limit} a file of this kind may hold")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=True) as f:
            fd = -1
            return f.read()
    finally:
        if fd >= 0:
            os.close(fd)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename:
    a reader sees the old file or the new one, never half of one. Errors name the path."""
    if not isinstance(text, str):
        raise TypeError(f"{path}: atomic_write_text needs str, got {type(text).__name__}")
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """:func:`atomic_write_text` for bytes (a PNG, say)."""
    p = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent if str(p.parent) else ".")
    except OSError as e:
        raise OSError(f"{p}: cannot write here: {e.strerror or e}") from e
    try:
        try:  # keep an existing file's mode; a new one gets rw-r--r-- (mkstemp would give rw-------)
            os.fchmod(fd, p.stat().st_mode & 0o7777 if p.exists() else 0o644)
        except OSError:
            pass
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def check_output_path(path: Path | None, option: str, inputs=()) -> None:
    """Before any work: an output option names a file in an existing, writable folder, and
    is none of ``inputs`` (files, or folders it must not be inside): a results file must
    never overwrite the data it was computed from. Raises OSError naming the option."""
    if path is None:
        return
    p = Path(path)
    for inp in map(Path, inputs):
        if p.resolve() == inp.resolve() or (inp.is_dir() and inp.resolve() in p.resolve().parents):
            raise OSError(f"{option} {p}: would overwrite the input {inp}")
    parent = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise OSError(f"{option} {p}: is a folder, not a file")
    if not parent.is_dir():
        raise OSError(f"{option} {p}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise OSError(f"{option} {p}: not writable")


def check_distinct_outputs(outputs: dict) -> None:
    """Before any work: no two output options name the same file (one would overwrite the
    other). ``outputs`` maps option -> path or None. Raises ValueError naming both options."""
    seen: dict = {}
    for option, path in outputs.items():
        if path is None:
            continue
        key = Path(path).resolve()
        if key in seen:
            raise ValueError(f"{seen[key]} and {option} name the same file {path}: one would overwrite the other")
        seen[key] = option


def atomic_write_json(path: str | Path, obj, **dump_kw) -> None:
    atomic_write_text(path, json.dumps(obj, **dump_kw) + "\n")
