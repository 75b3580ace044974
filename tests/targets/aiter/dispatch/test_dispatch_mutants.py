"""The aiter-dispatch mutants (fp4moe.gates.zoo.aiter_dispatch_mutants): each applies to e4048607's
``aiter/fused_moe.py`` exactly; each makes the default ``aiter-check`` run (the real command, with
the registry; its layout checks, which never run fused_moe.py, at the reduced grid) exit 1 on
the mutated copy, naming the rows it fails; and each is killed by a numerics case through the
dispatch (test_compute_dispatch.py) run on the mutated copy: a measured failure (AssertionError:
wrong values, or the path / the told pad differs), never a could-not-run."""

from __future__ import annotations

import pytest
import test_compute_dispatch as disp
from shared_runs import DISPATCH_GROUP
from test_default_run import default_run_here, rows

from fp4moe.gates.zoo import aiter_dispatch_mutants as dm
from fp4moe.gates.zoo.runner import TARGETS

pytestmark = disp.pytestmark

#: mutant -> the case that kills it (the cheapest one that can see it)
KILLED_BY = {
    "flydsl_partials_pad_dropped": lambda tmp: disp.case_flydsl(True),
    "opus_stage1_pad_dropped": lambda tmp: disp.case_opus(tmp, True),
    "flydsl_stage2_pad_on_model_dim": lambda tmp: disp.case_opus_flydsl(tmp),
    "cktile_gate_up_pad_once": lambda tmp: disp.case_cktile_splitk(True),
    "opus_stage2_pad_dropped": lambda tmp: disp.case_opus(tmp, True),
    "swiglu_limit_not_forwarded": lambda tmp: disp.case_flydsl(True, swiglu_limit=disp.SWIGLU_LIMIT),
    "is_shuffled_ignored": lambda tmp: disp.case_ck_unshuffled_a8w4(),
    "tuned_stage1_kernel_swapped": lambda tmp: disp.case_opus(tmp, True),
    "bf16_fp8_bound_moved": lambda tmp: disp.case_ck_unpadded(),
    "block_m_rounded_to_64": lambda tmp: disp.case_flydsl(True),
}


def test_every_mutant_has_a_killing_case_and_a_zoo_entry():
    assert set(KILLED_BY) == set(dm.MUTANTS)
    assert {m.name for m in TARGETS["aiter-dispatch"].mutants()} == set(dm.MUTANTS)
    # the zoo's killer: the default aiter-check run on the tree under test (a slow-tier test)
    assert TARGETS["aiter-dispatch"].default_tests == ("tests/targets/aiter/dispatch/test_default_run.py",)
    assert "--slow" in TARGETS["aiter-dispatch"].pytest_args


@pytest.mark.parametrize("name", list(dm.MUTANTS))
def test_mutant_applies_to_the_tree_once(name, tmp_path):
    tree = dm.mutated_tree(disp.TREE, name, tmp_path / "tree")
    rel = dm.MUTANTS[name].file
    edited, original = (tree / rel).read_text(), (disp.TREE / rel).read_text()
    assert edited != original and not (tree / rel).is_symlink()
    assert (tree / "csrc").is_symlink() and (tree / "aiter" / "ops").is_symlink()
    for e in dm.MUTANTS[name].edits:
        assert e.old not in edited and e.new in edited


def test_a_mutant_whose_text_is_absent_is_not_applicable(tmp_path):
    fake = tmp_path / "old"
    (fake / "aiter").mkdir(parents=True)
    (fake / "aiter" / "fused_moe.py").write_text("def fused_moe():\n    pass\n")
    with pytest.raises(dm.MutantNotApplicable, match="flydsl_partials_pad_dropped: edit 1 found 0 times"):
        dm.mutated_tree(fake, "flydsl_partials_pad_dropped", tmp_path / "out")


@pytest.mark.slow
@pytest.mark.xdist_group(DISPATCH_GROUP)  # each case's child is the one its test in test_compute_dispatch.py ran
def test_the_cases_pass_on_the_unmutated_tree(tmp_path, monkeypatch):
    monkeypatch.delenv(dm.MUTANT_ENV, raising=False)
    for case in {id(f): f for f in KILLED_BY.values()}.values():
        case(tmp_path)  # the parent's judgement runs again on each; the child's output may be shared


@pytest.mark.slow
@pytest.mark.parametrize("name", list(dm.MUTANTS))
def test_mutant_is_killed(name, tmp_path, monkeypatch):
    monkeypatch.setenv(dm.MUTANT_ENV, name)
    with pytest.raises(AssertionError):
        KILLED_BY[name](tmp_path)


#: the layout cases of the runs on a mutated copy (see test_mutant_fails_the_default_run)
LAYOUT_REDUCED = ("--layout-grid", "reduced")
#: mutant -> a gate row its default run must fail (the first the dispatch group shows it in)
FAILS_ROW = {
    "flydsl_partials_pad_dropped": "dispatch numerics FlyDSL a8w4 padded clamp: == reference (bitwise)",
    "opus_stage1_pad_dropped": "dispatch numerics tuned Opus a8w4 padded clamp: pad told to the stages",
    # the cost on paper: each fails as "reads R times the bytes" (CK-tile's: the pad contract passes it)
    "flydsl_stage2_pad_on_model_dim": "dispatch FlyDSL + FlyDSL: stage reads the unpadded bytes",
    "cktile_gate_up_pad_once": "dispatch CK-tile + CK-tile: stage reads the unpadded bytes",
    "opus_stage2_pad_dropped": "dispatch FlyDSL + Opus: stage reads the unpadded bytes",
    "swiglu_limit_not_forwarded": "dispatch numerics FlyDSL a8w4 padded clamp: == reference (bitwise)",
    "is_shuffled_ignored": "dispatch numerics CK 2-stage a8w4 plain weights: stage ops are the path's",
    "tuned_stage1_kernel_swapped": "dispatch numerics tuned Opus a8w4 padded clamp: stage ops are the path's",
    "bf16_fp8_bound_moved": "dispatch numerics CK 2-stage a16w4 unpadded: stage ops are the path's",
    "block_m_rounded_to_64": "dispatch numerics FlyDSL a8w4 padded clamp: == reference (bitwise)",
}


@pytest.mark.slow
@pytest.mark.reproof  # each is killed by test_mutant_is_killed (its case through the dispatch) at merge time
@pytest.mark.parametrize("name", list(dm.MUTANTS))
def test_mutant_fails_the_default_run(name, tmp_path, capsys):
    assert set(FAILS_ROW) == set(dm.MUTANTS)
    # every mutant edits aiter/fused_moe.py alone, which the layout checks never run (they call
    # shuffle.py's functions): their reduced grid (the DeepSeek-V4 grid is test_default_run.py's,
    # on the unmutated tree); the dispatch group runs its default rows, as in the default run
    assert {dm.MUTANTS[n].file for n in dm.MUTANTS} == {"aiter/fused_moe.py"}
    # (the command through the CLI in this process: test_default_run.py runs it as a subprocess)
    r = default_run_here(capsys, dm.mutated_tree(disp.TREE, name, tmp_path / "tree"), *LAYOUT_REDUCED)
    assert r.returncode == 1, (name, r.returncode, r.stderr[-1500:])
    failing = {k for k, v in rows(r.stdout, "dispatch ").items() if v == "FAIL"}
    assert FAILS_ROW[name] in failing, (name, sorted(failing))
