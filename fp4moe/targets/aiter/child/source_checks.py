"""``python -m fp4moe.targets.aiter.child.source_checks``: groups (a)-(d) of aiter-check, executed once.

A harness child (``fp4moe.infra.runner.child_session``, taken before any aiter code runs): runs
the source checks (``fp4moe.targets.aiter.judge.source_checks``) on aiter's files and returns their
rows (output ``rows``: ``{"check", "result", "detail"}`` each). It never exits with a verdict: the
parent validates the rows (``results.rows_from_child``) and judges.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import asdict


def main(argv: list[str]) -> int:
    from fp4moe.infra import runner
    from fp4moe.targets.aiter.judge.layout import LAYOUT_GRIDS, LayoutGrid
    from fp4moe.targets.aiter.judge.source_checks import CHILD_SCHEMA, run_checks
    from fp4moe.targets.aiter.source import PROGRESS_ENV, resolve_source

    p = argparse.ArgumentParser(prog="fp4moe.targets.aiter.child.source_checks")
    p.add_argument("--aiter-src")
    p.add_argument("--aiter-wheel")
    p.add_argument("--no-differential", action="store_true")
    p.add_argument("--allow-kwargs", action="store_true")
    p.add_argument("--layout-grid", default="dsv4", choices=("dsv4", "reduced"))
    a = p.parse_args(argv)
    trees = [a.aiter_src] if a.aiter_src else []
    with runner.child_session(CHILD_SCHEMA, trees=trees, speaker="aiter") as s:  # before any aiter code runs
        os.environ[PROGRESS_ENV] = os.environ.get(runner.STAGE_ENV, "")
        s.stage("resolving the aiter sources")
        src = resolve_source(a.aiter_src, a.aiter_wheel)
        rows = run_checks(src, LAYOUT_GRIDS[LayoutGrid(a.layout_grid)](), differential=not a.no_differential,
                          allow_kwargs=a.allow_kwargs)
        s.stage("writing the rows")
        s.put_json("rows", [asdict(r) for r in rows])
        s.finish({"source": src.origin, "version": src.version(), "writes_confined": s.unconfined is None,
                  "unconfined": s.unconfined})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
