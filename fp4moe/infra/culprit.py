"""Name the file of the code under test that ended a child, and quote what it said (child side):
``aiter/ops/triton/moe/moe_op_gemm_a16w4.py:12`` for an exception, a ``sys.exit`` (:func:`describe`)
or an ``os._exit`` (:func:`note_exits`; one that reaches the real call another way, ``posix._exit``
or ctypes, is named by the stage only). Every line is bounded: :data:`MAX_LINE_CHARS` in all,
:data:`QUOTE_CHARS` of quoted text (``aiter said: "..."``).
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

#: longest cannot-run line a child hands back; longest quote of the code under test's own text
MAX_LINE_CHARS = 400
QUOTE_CHARS = 200


def quote(text, speaker: str = "it", n: int = QUOTE_CHARS) -> str:
    """``speaker said: "..."``: text of the code under test, one line, cut to ``n`` characters."""
    return f"{speaker} said: {json.dumps(bounded(text, n))}"


def bounded(line: str, n: int = MAX_LINE_CHARS) -> str:
    s = " ".join(str(line).split())
    return s if len(s) <= n else s[: n - 3] + "..."


def _inside(filename: str, trees: list[Path]) -> str | None:
    try:
        f = Path(filename).resolve()
    except (OSError, ValueError):
        return None
    for t in trees:
        if f == t or t in f.parents:
            return str(f.relative_to(t.parent))  # "aiter/ops/..." for a tree .../aiter
    return None


def frame_in_tree(tb_or_frames, trees) -> str | None:
    """``file:line`` of the innermost frame inside one of ``trees`` (folders), relative to the
    tree's parent; ``tb_or_frames``: a traceback, or a list of ``FrameSummary``."""
    roots = [Path(t).resolve() for t in trees if t]
    frames = traceback.extract_tb(tb_or_frames) if hasattr(tb_or_frames, "tb_frame") else list(tb_or_frames or [])
    for fr in reversed(frames):
        rel = _inside(fr.filename, roots)
        if rel:
            return f"{rel}:{fr.lineno}"
    return None


def describe(e: BaseException, trees, *, stage: str, speaker: str = "it") -> str:
    """One bounded line for ``e``, raised by (or through) the code under test while ``stage``."""
    where = frame_in_tree(e.__traceback__, trees)
    at = f" at {where}" if where else ""
    if isinstance(e, SystemExit):
        return bounded(f"the code under test called sys.exit({repr(e.code)[:40]}){at} while {stage}")
    return bounded(f"{type(e).__name__}{at} while {stage}; {quote(e, speaker)}")


def note_exits(trees, note) -> None:
    """Wrap ``os._exit`` (no traceback, no ``finally``): a call whose caller chain passes through
    ``trees`` first calls ``note(line)`` naming the innermost such file (never raises), then exits
    as asked (the harness writes the line as its cannot-run record)."""
    real_exit = os._exit

    def _exit(code=0):
        try:
            where = frame_in_tree(traceback.extract_stack(sys._getframe(1)), trees)
            if where:
                note(bounded(f"the code under test called os._exit({code!r}) at {where}"))
        except BaseException:  # noqa: BLE001 -- the exit happens whatever the note did
            pass
        real_exit(code)

    os._exit = _exit
