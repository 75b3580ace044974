"""The sglang tier: one child drive of the SGLang under test per session, judged by many tests.

The SGLang is the installed one (CI installs the release pinned in ``fp4moe.targets.sglang``), or
``FP4MOE_SGLANG_WHEEL`` / ``FP4MOE_SGLANG_ROOT``. ``FP4MOE_SGLANG_MUTANT`` names a mutant of
``fp4moe.targets.sglang.mutations`` to apply inside the child (``fp4moe-gate zoo --target sglang``); a
mutant the child could not apply ends the session with status 3, so the zoo reports it NOT
JUDGED instead of counting the errors as a kill.
"""

from __future__ import annotations

import os

import pytest

NOT_APPLIED_STATUS = 3


@pytest.fixture(scope="session")
def sglang_judged():
    from fp4moe.infra.errors import GateCannotRun
    from fp4moe.gates import sglang_check as checks
    from fp4moe.targets.sglang import source, target
    from fp4moe.targets.sglang.mutations import MUTANT_ENV

    src = source.resolve()
    mutant = os.environ.get(MUTANT_ENV) or None
    # the CPU drive everywhere (stubs, spy + reference, bitwise); the gfx950 runner's real
    # aiter mode is tests/targets/sglang/test_sglang_gfx950.py. FP4MOE_SGLANG_MODE overrides.
    d = target.drive(src, target.parse_rows(None, None), mutant=mutant, mode=os.environ.get(target.MODE_ENV) or "cpu")
    if mutant and not (d.record.get("mutant") or {}).get("applied"):
        pytest.exit(f"{MUTANT_ENV}={mutant}: not applied in the SGLang child: {d.record.get('mutant') or d.record.get('error')}",
                    returncode=NOT_APPLIED_STATUS)
    results, cannot = checks.judge(d)
    if cannot:
        raise GateCannotRun(cannot)
    return d, {(c.name, c.row): c for c in results}
