"""A gate run's one time limit (``--timeout``): every child gets what is left of it
(:meth:`Deadline.remaining`), and :meth:`Deadline.watch` stops the gate's own work at it too (a
download, unpacking, listing, judging, a registry's regular expressions), naming the option and
the line of this package the gate was at. The children themselves: :mod:`fp4moe.infra.runner`.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import contextmanager

from fp4moe.infra import runner
from fp4moe.infra.errors import GateCannotRun


def _gate_frame(frame) -> str:
    """``fp4moe/...py:LINE (function)`` of the innermost frame of this package (where the gate was)."""
    root = str(runner.PACKAGE_PARENT / "fp4moe")
    while frame is not None and not frame.f_code.co_filename.startswith(root):
        frame = frame.f_back
    if frame is None:
        return "its own work"
    return f"{os.path.relpath(frame.f_code.co_filename, runner.PACKAGE_PARENT)}:{frame.f_lineno} ({frame.f_code.co_name})"


#: when the command line's process started (``time.monotonic()``), once :func:`anchor_to_process_start` ran
_PROCESS_START: list[float] = []


def anchor_to_process_start() -> None:
    """The command line's ``--timeout`` counts from its process's start, the interpreter's and
    torch's imports included (Linux's ``/proc``; elsewhere, or for a gate called in-process, a
    :class:`Deadline` counts from its creation)."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        with open("/proc/uptime") as f:
            age = float(f.read().split()[0]) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return
    if 0 <= age < 3600:
        _PROCESS_START[:] = [time.monotonic() - age]


class Deadline:
    """One total time limit for a gate run (``option``): every child gets what is left, and
    :meth:`watch` bounds the gate's own work too."""

    def __init__(self, total_s: float, option: str = "--timeout"):
        runner.check_timeout(option, total_s, allow_none=False)
        self.total_s, self.option = float(total_s), option
        self._end = (_PROCESS_START[0] if _PROCESS_START else time.monotonic()) + self.total_s
        self._late = False

    @contextmanager
    def watch(self):
        """The whole run inside the deadline, the gate's own work included (a download, unpacking,
        listing, judging, a registry's regular expressions): at the deadline a SIGALRM kills every
        child and raises ``runner.DeadlineSpent`` in the main thread, naming the option and the line of
        this package the gate was at. While a child is alive, its own limit (what this deadline
        had left) ends it first and names its stage: the alarm then waits ``runner.KILL_GRACE_S`` and
        a few seconds more. Main thread only (in another thread: the children's limits alone)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        runner.note_spent(None)
        saved = signal.signal(signal.SIGALRM, self._on_alarm)
        signal.setitimer(signal.ITIMER_REAL, max(self._end - time.monotonic(), 0.01))
        try:
            yield self
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, saved)

    def _on_alarm(self, signum, frame):
        busy = runner.children_alive()
        if busy and not self._late:  # a child's own limit ends it now, naming its stage: let it
            self._late = True
            signal.setitimer(signal.ITIMER_REAL, runner.KILL_GRACE_S + 3 * runner.DRAIN_S + 1.0)
            return
        line = (f"{self.option} {self.total_s:g}: timed out, the deadline for the whole run passed while the gate "
                f"was at {_gate_frame(frame)}")
        runner.note_spent(line)
        runner.kill_all_children()
        raise runner.DeadlineSpent(line)

    def remaining(self, what: str) -> float:
        left = self._end - time.monotonic()
        if left <= 0.05:
            raise GateCannotRun(f"{self.option} {self.total_s:g}: spent before {what} could start")
        return left

    def spent(self) -> bool:
        return self._end - time.monotonic() <= 0.1

    def spent_line(self, what: str) -> str:
        return f"{what}: timed out, killed at the deadline ({self.option} {self.total_s:g} s, for the whole run)"

