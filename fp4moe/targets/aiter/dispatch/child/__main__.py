"""Child entry: ``python -m fp4moe.targets.aiter.dispatch.child TREE`` (rows: the harness input ``rows``).

Runs the tree's real ``fused_moe`` (loaded by :mod:`..loader`, compiled ops stood in by
:mod:`..standins`) once per row on meta tensors (:func:`..calls.run_row`) and returns only call records: which ops ran, in
which order, with their bound arguments (shapes/dtypes/scalars, never data), and what
``get_2stage_cfgs`` was asked and chose. No check or verdict runs here (the parent judges:
:mod:`fp4moe.targets.aiter.dispatch.contracts`).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from fp4moe.infra import runner
from fp4moe.targets.aiter.dispatch.records import ROWS_INPUT, ROWS_OUTPUT, SCHEMA


def main(argv: list[str]) -> int:
    tree_arg = argv[0]
    with runner.child_session(SCHEMA) as s:
        from fp4moe.targets.aiter.dispatch import calls, loader, standins

        rows = json.loads(bytes(s.input_tensors(ROWS_INPUT)["json"].tolist()).decode())
        s.stage(f"loading {tree_arg}/aiter/fused_moe.py")
        tree = loader.locate(tree_arg)
        rec = standins.Recorder()
        scratch = Path(os.getcwd())
        ld = loader.load_fused_moe(tree, scratch, rec, env={})
        cfg_log: list = []
        calls.observe_cfgs(ld.fused_moe, cfg_log)
        import_calls = list(rec.calls)
        results = []
        for row in rows:
            s.stage(f"running fused_moe for row {row['id']}")
            results.append(calls.run_row(ld, rec, row, cfg_log))
        s.put_json(ROWS_OUTPUT, {"rows": results, "import_calls": import_calls})
        s.finish({"tree": str(tree.root), "config_file": os.path.basename(ld.config_file),
                  "config_sources": [os.path.relpath(p, tree.root) for p in ld.config_sources],
                  "rows": len(results), "computed": sorted(rec.compute)})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
