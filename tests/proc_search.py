"""Find this side's processes by a unique argument in their command line.

Children run in a PID namespace with its own /proc, where no number a process can read is its
pid on this side: a test finds what a child left behind by an argument only that run used
(:func:`unique_tag`, e.g. the ``sleep`` seconds ``300.<digits>``), read from this side's /proc
(:func:`live_with_arg`)."""

from __future__ import annotations

import os
import time


def unique_tag(seconds: int = 300) -> str:
    """A ``sleep`` argument (``seconds`` and then this process's pid and a clock's digits as the
    fraction) that no other run on the machine uses."""
    return f"{seconds}.{os.getpid()}{time.monotonic_ns() % 10**9:09d}"


def live_with_arg(arg: str) -> list[int]:
    """Live (not zombie) processes other than this one whose command line holds ``arg``."""
    found = []
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) == os.getpid():
            continue
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                hit = arg.encode() in f.read()
            with open(f"/proc/{p}/stat") as f:
                zombie = f.read().split(") ", 1)[1][0] == "Z"
        except (OSError, IndexError):
            continue
        if hit and not zombie:
            found.append(int(p))
    return found
