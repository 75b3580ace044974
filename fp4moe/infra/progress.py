"""Progress lines for long work: on stderr, each starting ``[<gate>] ``, silenced by ``--quiet``.

Results go to stdout; the one line of an exit 2 is stderr's last line and has no such prefix,
so a log reader (and ``tests/conftest.py``'s ``GateRun.lines``) tells the two apart: drop the
lines matching :data:`PROGRESS_RE` and what is left is the verdict. With ``--quiet`` stderr
holds only that line.
"""

from __future__ import annotations

import re
import sys
import threading

#: A progress line: ``[gate-name] text``.
PROGRESS_RE = re.compile(r"^\[[a-z0-9-]+\] ")
_LOCK = threading.Lock()


def progress(gate: str, text: str, *, quiet: bool = False) -> None:
    """One progress line on stderr (flushed: CI logs show it as it happens); thread-safe."""
    if quiet:
        return
    with _LOCK:
        print(f"[{gate}] {text}", file=sys.stderr, flush=True)
