"""Result files: written atomically (a reader never sees half a file), and output paths
checked before any work (never a folder, never one of the inputs)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


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
