"""``python -m fp4moe.targets.aiter.child.source_checks``: groups (a)-(d) of aiter-check, executed.

A harness child (``fp4moe.infra.runner.child_session``, taken before any aiter code runs):
executes aiter's files under a recorder (``fp4moe.infra.callrecord.Recorder``) through the same
checks the parent runs (``fp4moe.targets.aiter.judge.source_checks``) and returns the call log
(outputs ``calls`` and ``call-tensors``); its own rows are never read. It never exits with a
verdict: the parent replays the log and judges.
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str]) -> int:
    from fp4moe.infra import runner
    from fp4moe.infra.callrecord import Recorder
    from fp4moe.targets.aiter.judge.access import RecordingAccess
    from fp4moe.targets.aiter.judge.layout import LAYOUT_GRIDS, LayoutGrid
    from fp4moe.targets.aiter.judge.source_checks import CHILD_SCHEMA, run_checks
    from fp4moe.targets.aiter.source import PROGRESS_ENV, resolve_source

    p = argparse.ArgumentParser(prog="fp4moe.targets.aiter.child.source_checks")
    p.add_argument("--aiter-src")
    p.add_argument("--aiter-wheel")
    p.add_argument("--no-differential", action="store_true")
    p.add_argument("--layout-grid", default="dsv4", choices=("dsv4", "reduced"))
    a = p.parse_args(argv)
    trees = [a.aiter_src] if a.aiter_src else []
    with runner.child_session(CHILD_SCHEMA, trees=trees, speaker="aiter") as s:  # before any aiter code runs
        os.environ[PROGRESS_ENV] = os.environ.get(runner.STAGE_ENV, "")
        s.stage("resolving the aiter sources")
        src = resolve_source(a.aiter_src, a.aiter_wheel)
        rec = Recorder()
        run_checks(src, LAYOUT_GRIDS[LayoutGrid(a.layout_grid)](), differential=not a.no_differential, allow_kwargs=True,
                   access=RecordingAccess(src, rec))
        log, tensors = rec.outputs()
        s.stage("writing the call log")
        s.put_json("calls", log)
        s.put_tensors("call-tensors", tensors)
        s.finish({"source": src.origin, "version": src.version(), "writes_confined": s.unconfined is None,
                  "unconfined": s.unconfined})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
