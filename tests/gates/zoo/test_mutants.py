"""The built-in bug zoo (fp4moe.gates.zoo.mutants) and the zoo's rule for mutants only ../shared can kill.

The zoo itself (``fp4moe-gate zoo``) is what proves every built-in mutant is killed by the
default tests; here: the catalogue is consistent, and ``weight_tile_order`` -- an exact
shuffle/unshuffle pair with two tile axes swapped -- is killed only by the golden layout data,
so without ``../shared`` the zoo reports it NOT JUDGED (exit 2), never killed or survived.
The zoo runs are child pytests: ``slow``.
"""

from __future__ import annotations

import json

import pytest

from fp4moe.commands.main import main as cli_main
from fp4moe.gates.zoo import mutants
from fp4moe.gates.zoo import runner as zoo
from fp4moe.infra.paths import shared_dir


def test_mutant_names_are_unique_and_only_the_layout_mutant_needs_shared():
    names = [m.name for m in mutants.MUTANTS]
    assert len(names) == len(set(names))
    assert {m.name: m.needs_shared for m in mutants.MUTANTS if m.needs_shared} == {"weight_tile_order": "golden/aiter-layouts"}
    kernel_stage_and_call_site_mutants = {"doweight_after_activation", "swiglu_limit_zero_clamps", "stage1_output_float32", "a8w4_swiglu_skipped",
               "a8w4_per_tensor_act_scale", "a8w4_doweight_after_requant", "call_site_drops_expert_mask"}
    assert kernel_stage_and_call_site_mutants <= set(names)


def _zoo_json(capsys, *argv) -> tuple[int, dict]:
    rc = cli_main(["zoo", "--json", "-", *argv])
    return rc, json.loads(capsys.readouterr().out)


@pytest.mark.slow
def test_layout_mutant_is_not_judged_without_shared(monkeypatch, capsys):
    monkeypatch.setattr(zoo, "_shared_has", lambda sub: False)
    rc, rep = _zoo_json(capsys, "--mutant", "weight_tile_order", "--tests", "tests/mx/test_e8m0.py")
    assert rc == 2
    (row,) = rep["mutants"]
    assert row["verdict"] == zoo.NOT_JUDGED and "../shared/golden/aiter-layouts" in row["why"] and not row["killed"]


@pytest.mark.slow
def test_layout_mutant_survives_everything_but_the_golden_tests(capsys):
    if shared_dir() is None or not (shared_dir() / "golden" / "aiter-layouts").is_dir():
        pytest.skip("../shared/golden/aiter-layouts absent: the golden tests cannot run")
    # one zoo run over the three files (its clean run and its mutant run; no -x, so killed_by
    # lists every test that failed with the mutant): killed, and by golden tests alone -- the
    # layout and equivalence tests it survives
    golden = "tests/reference/test_golden_layouts.py"
    rc, rep = _zoo_json(capsys, "--mutant", "weight_tile_order", "--tests", "tests/reference/test_layout.py",
                        "tests/reference/test_equivalence.py", golden)
    (row,) = rep["mutants"]
    assert rc == 0 and row["verdict"] == zoo.KILLED, row
    assert row["killed_by"] and all(t.startswith(f"{golden}::") for t in row["killed_by"]), row["killed_by"]
