"""Name the file of the code under test that ended a child, and quote what it said.

Child side, used by a child harness before and after the code under test runs:

- :func:`frame_in_tree` -- the innermost frame of a traceback (or of the current stack) whose
  file lies inside the tree under test: ``aiter/ops/triton/moe/moe_op_gemm_a16w4.py:12``,
  relative to the tree; None when the code under test is not on it;
- :func:`describe` -- one line for an exception the code under test raised or its
  ``sys.exit``, naming that frame, its own text quoted, truncated and labelled
  (``aiter said: "..."``);
- :func:`note_exits` -- ``os._exit`` ends a process with no traceback and no ``finally``:
  wrapped so that a call from inside the tree first hands one line naming the calling file to
  ``note`` (the harness writes it as its cannot-run record), then exits as asked. Code that
  reaches the real call another way (``posix._exit``, ctypes) is named by the stage only.

Every line is bounded: :data:`MAX_LINE_CHARS` in all, :data:`QUOTE_CHARS` of quoted text.
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
    s = " ".join(str(text).split())
    return f"{speaker} said: {json.dumps(s if len(s) <= n else s[: n - 3] + '...')}"


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
    """Wrap ``os._exit``: a call whose caller chain passes through ``trees`` first calls
    ``note(line)`` naming the innermost such file (never raises), then exits as asked."""
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
