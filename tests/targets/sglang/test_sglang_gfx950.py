"""SGLang's own FP4 MoE path on a gfx950 runner, with nothing patched.

The child runs in ``gfx950`` mode (``fp4moe.targets.sglang.modes``): no aiter stub and no flag patch;
SGLang's selectors are its own, aiter's real shuffles run on the GPU and the real
``aiter.fused_moe`` computes the layer's output, both wrapped only to record the calls. Every
check of the CPU tier runs on what they produced (bytes unshuffled and compared with
``fp4moe.reference.weight_path``, pad contract, field probe, footprint); the output is compared with the
reference MoE of the raw checkpoint under the project's kernel budget
(``fp4moe.reference.inputs.KERNEL_REL_L2`` = 6e-3, ``KERNEL_COS_DIST`` = 2e-5; derivation there and in
docs/reference.md, the same budget tests/aiter_gate applies to aiter's kernel).

Skipped with its reason where there is no gfx950 GPU, no aiter or no SGLang; mandatory under
``--require gfx950,aiter,sglang`` (ci/gfx950-gate.sh). Never executed by its author: no gfx950
machine was available; it is as right as reading SGLang 0.5.23 and aiter allowed.
"""

from __future__ import annotations

import pytest

from fp4moe.gates.sglang_check import CHECKS, failure
from fp4moe.targets.sglang.target import default_labels

pytestmark = [pytest.mark.gfx950, pytest.mark.aiter, pytest.mark.sglang]

ROWS = default_labels()


@pytest.fixture(scope="module")
def gfx950_judged():
    from fp4moe.gates import sglang_check as checks
    from fp4moe.infra.errors import GateCannotRun
    from fp4moe.targets.sglang import source, target

    d = target.drive(source.resolve(), target.parse_rows(None, None), mode="gfx950")
    results, cannot = checks.judge(d, require_router=False)  # the row checks; router numerics: the gate
    if cannot:
        raise GateCannotRun(cannot)
    return d, {(c.name, c.row): c for c in results}


def test_the_drive_ran_the_real_aiter(gfx950_judged):
    d, _ = gfx950_judged
    rec = d.record
    assert rec["mode"] == "gfx950", rec.get("mode_why")
    assert "aiter.fused_moe from" in rec["kernel"] and "stub" not in rec["kernel"], rec["kernel"]
    assert not set(rec["stubbed_modules"]) & {"aiter", "triton", "torch"}, rec["stubbed_modules"]
    assert all(f["now"] == f["was"] for f in rec["flags"].values()), rec["flags"]  # read, never set
    for r in rec["rows"]:
        real = [c for c in r.get("shuffle_calls", []) if not c["meta"]]
        assert real and not any("meta_fallback" in c for c in real), (r["label"], real)


@pytest.mark.parametrize("row", ROWS)
@pytest.mark.parametrize("check", CHECKS)
def test_sglang_check_on_gfx950(gfx950_judged, check, row):
    d, results = gfx950_judged
    why = failure(d, results, check, row)
    assert why is None, why
