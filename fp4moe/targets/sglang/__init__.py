"""SGLang under test: its own FP4 MoE code, driven in a child process and judged here.

- ``fp4moe.targets.sglang.source``  where the SGLang under test lives (installed, a wheel, a version)
- ``fp4moe.targets.sglang.target``  the parent side: inputs, one child run, its record and tensors
- ``fp4moe.targets.sglang.record``  the child's record: one schema for the child, the judge and the summary
- ``fp4moe.targets.sglang.checks``  the row checks as one table (SGLang's result vs ``fp4moe.reference.weight_path``
  and the reference MoE)
- ``fp4moe.targets.sglang.child.drive``   the child's one main: SGLang imported with stubs, its layer driven to
  ``fused_moe``; its concepts beside it (``aiter_spy``, ``import_trail``, ``layer``, ``rows``, ``probes``, ``poison``)
- ``fp4moe.targets.sglang.child.stubs`` / ``patches`` / ``mutants``  child-only machinery (never imported here)
- ``fp4moe.gates.sglang_check``  the run and the verdict (drive, judge, why a run cannot be judged)
- ``fp4moe.commands.sglang_check`` / ``sglang_replay``  ``fp4moe-gate sglang-check`` / ``sglang-replay``

``PINNED_SGLANG`` is the one place the SGLang release CI installs is named (``ci/install.sh``
reads it from this file).
"""

PINNED_SGLANG = "0.5.23"
#: Seconds one SGLang child run may take (import, load, drive every row); here, not in
#: ``target``, so that ``sglang-check --help`` shows it without importing torch.
CHILD_TIMEOUT_S = 240.0
