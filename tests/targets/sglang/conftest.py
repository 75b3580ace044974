"""The sglang tier: one child drive of the SGLang under test per session, judged by many tests.

The SGLang is the installed one (CI installs the release pinned in ``fp4moe.targets.sglang``), or
``FP4MOE_SGLANG_WHEEL`` / ``FP4MOE_SGLANG_ROOT``. ``FP4MOE_SGLANG_MUTANT`` names a mutant of
``fp4moe.targets.sglang.mutations`` to apply inside the child (``fp4moe-gate zoo --target sglang``); a
mutant the child could not apply ends the session with status 3, so the zoo reports it NOT
JUDGED instead of counting the errors as a kill.

Speed: the drive (a child process, 4-7 s on 2 cores) is a background child (tests/conftest.py,
``EARLY_CHILDREN``): it starts when collection ends, when any selected test will use it, and runs
on the second core while the rest of the CPU tier runs on the first; the fixture takes its result.
"""

from __future__ import annotations

import pytest

NOT_APPLIED_STATUS = 3


def _drive(environ: dict):
    from fp4moe.targets.sglang import source, target
    from fp4moe.targets.sglang.mutations import MUTANT_ENV

    src = source.resolve()
    mutant = environ.get(MUTANT_ENV) or None
    # the CPU drive everywhere (stubs, spy + reference, bitwise); the gfx950 runner's real
    # aiter mode is tests/targets/sglang/test_sglang_gfx950.py. FP4MOE_SGLANG_MODE overrides.
    return target.drive(src, target.parse_rows(None, None), mutant=mutant, mode=environ.get(target.MODE_ENV) or "cpu"), mutant


EARLY_CHILDREN = {"sglang_judged": _drive}


@pytest.fixture(scope="session")
def sglang_judged(early):
    from fp4moe.gates import sglang_check as checks
    from fp4moe.infra.errors import GateCannotRun
    from fp4moe.targets.sglang.mutations import MUTANT_ENV

    d, mutant = early("sglang_judged", _drive)
    if mutant and not (d.record.get("mutant") or {}).get("applied"):
        pytest.exit(f"{MUTANT_ENV}={mutant}: not applied in the SGLang child: {d.record.get('mutant') or d.record.get('error')}",
                    returncode=NOT_APPLIED_STATUS)
    results, cannot = checks.judge(d, require_router=False)  # no triton: test_router_numerics skips, saying so
    if cannot:
        raise GateCannotRun(cannot)
    return d, {(c.name, c.row): c for c in results}
