"""The sglang tier: one child drive of the SGLang under test per session, judged by many tests.

The SGLang is the installed one (CI installs the release pinned in ``fp4moe.targets.sglang``), or
``FP4MOE_SGLANG_WHEEL`` / ``FP4MOE_SGLANG_ROOT``. ``FP4MOE_SGLANG_MUTANT`` names a mutant of
``fp4moe.targets.sglang.mutations`` to apply inside the child (``fp4moe-gate zoo --target sglang``); a
mutant the child could not apply ends the session with status 3, so the zoo reports it NOT
JUDGED instead of counting the errors as a kill.

Speed: the drive (a child process, 4-7 s on 2 cores) starts in a background thread as soon as
collection ends, when any selected test will use it, so it runs on the second core while the
rest of the CPU tier runs on the first; the fixture joins it. The environment is snapshotted on
the main thread before the thread starts (tests may monkeypatch ``os.environ`` meanwhile), and
the child is kept out of ``childproc.kill_all_children`` (the tests of that cleanup call it
while the drive runs); the session's leak check still sees it.
"""

from __future__ import annotations

import os
import threading

import pytest

NOT_APPLIED_STATUS = 3
_EARLY: dict = {}  # "thread", then "drive" or "error": the drive started at collection's end


def _drive(environ: dict, background: bool = False):
    from fp4moe.targets.sglang import source, target
    from fp4moe.targets.sglang.mutations import MUTANT_ENV

    src = source.resolve()
    mutant = environ.get(MUTANT_ENV) or None
    # the CPU drive everywhere (stubs, spy + reference, bitwise); the gfx950 runner's real
    # aiter mode is tests/targets/sglang/test_sglang_gfx950.py. FP4MOE_SGLANG_MODE overrides.
    return target.drive(src, target.parse_rows(None, None), mutant=mutant, mode=environ.get(target.MODE_ENV) or "cpu",
                        environ=environ, tracked=not background), mutant


def _early(environ: dict) -> None:
    try:
        _EARLY["drive"] = _drive(environ, background=True)
    except BaseException as e:  # re-raised by the fixture, on the main thread
        _EARLY["error"] = e


def pytest_collection_finish(session):
    users = [i for i in session.items if "sglang_judged" in getattr(i, "fixturenames", ())
             and i.get_closest_marker("skip") is None]
    if users and not session.config.getoption("collectonly"):
        t = threading.Thread(target=_early, args=(dict(os.environ),), name="sglang-drive", daemon=True)
        _EARLY["thread"] = t
        t.start()


@pytest.fixture(scope="session")
def sglang_judged():
    from fp4moe.infra.errors import GateCannotRun
    from fp4moe.gates import sglang_check as checks
    from fp4moe.targets.sglang.mutations import MUTANT_ENV

    t = _EARLY.pop("thread", None)
    if t is not None:
        t.join()
        if "error" in _EARLY:
            raise _EARLY.pop("error")
        d, mutant = _EARLY.pop("drive")
    else:
        d, mutant = _drive(dict(os.environ))
    if mutant and not (d.record.get("mutant") or {}).get("applied"):
        pytest.exit(f"{MUTANT_ENV}={mutant}: not applied in the SGLang child: {d.record.get('mutant') or d.record.get('error')}",
                    returncode=NOT_APPLIED_STATUS)
    results, cannot = checks.judge(d)
    if cannot:
        raise GateCannotRun(cannot)
    return d, {(c.name, c.row): c for c in results}
