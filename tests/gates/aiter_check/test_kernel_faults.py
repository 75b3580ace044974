"""Kernel faults: edited copies of aiter e4048607's Triton MoE files, each of which must fail the
kernel group (a named FAIL row), and the judge's own guards.

CPU tier (no aiter code): the judge on outputs that are wrong in the ways a broken kernel makes
them (indices out of range, wrong shapes, NaN): named FAIL rows, never an exception, and one
job's failure leaves the others' rows standing.

Slow tier (aiter's kernels under the interpreter, one child per edit, only the jobs the edit can
reach, and of those only the kernel whose row is asserted): the edits the settings, inputs and shapes were chosen to catch -- the routed scaling
factor dropped from renormalised weights, a sort key right only for non-negative scores, a
one-sided clamp of ``up``, a K-loop scale pointer step wrong for CDNA4_SCALE, a reduce that
accumulates in bf16, each driven wrapper's told pad dropped on N and on K, NaN masked
out of the covered rows (a known defect failing differently), and a kernel file that patches
the checker's row writer and the reference while scaling its output (the verdict stands), and
one that kills its process inside ``routing()`` (that component FAILs, the others are judged).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from fp4moe.gates import aiter_check as ac
from fp4moe.infra.paths import shared_dir
from fp4moe.targets.aiter.judge import registry as judge_registry
from fp4moe.targets.aiter.kernels import cases, checks, defects, triton_status_light
from fp4moe.targets.aiter.results import Result

_OK, _WHY = triton_status_light()
TREE_ROOT = (shared_dir() / "aiter" / "e4048607") if shared_dir() else None
needs_tree = pytest.mark.skipif(not (_OK and TREE_ROOT is not None and (TREE_ROOT / "aiter").is_dir()),
                                reason=_WHY if not _OK else "../shared/aiter/e4048607 absent")


# ------------------------------------------------------------------------------ CPU tier: the judge


def _routing_job(experts=8, k=2, tokens=4):
    return next(j for j in cases.plan(only=("routing",)) if j.extra["experts"] == experts and j.extra["top_k"] == k
                and j.tokens == tokens)


def _good_routing_outputs(job):
    """What a correct routing() returns for the job, built from the reference."""
    from fp4moe.reference.routing import reference_topk
    from fp4moe.targets.aiter.kernels.drive import routing_tables

    logits, bias = cases.routing_inputs(job)
    rs, k, e = job.routing, job.extra["top_k"], job.extra["experts"]
    w, ids = reference_topk(logits, k, rs.score_mode, renormalize=rs.renormalize, scaling=rs.scaling, bias=bias)
    bm = cases.block_m_for(job.tokens, k, e)
    tb = routing_tables(ids, e, bm)
    gate_scal = w.reshape(-1).float()[tb["gather"]]
    return {"gate_scal": gate_scal, "expt_hist": tb["hist"].long(), "gather": tb["gather"], "scatter": tb["scatter"],
            "block_m": torch.tensor([bm]), "token_offs_raw": tb["token_offs_raw"].long(),
            "token_offs_pad": tb["token_offs_pad"].long(), "block_pid_map": tb["block_pid_map"].long(),
            "topk_vals": w.float(), "topk_ids": ids}


def test_a_correct_routing_output_passes():
    job = _routing_job()
    rows = checks.judge_job(job, _good_routing_outputs(job), {}, checks.References(), device="cpu", compiled=False)
    assert [r.result for r in rows] == [checks.PASS, checks.PASS], rows


@pytest.mark.parametrize("name, breaks, says", [
    ("scatter out of range", lambda o: o["scatter"].__setitem__(0, 10_000), "scatter holds indices outside"),
    ("histogram off", lambda o: o["expt_hist"].__setitem__(0, o["expt_hist"][0] + 3), "is not a histogram"),
    ("short gate_scal", lambda o: o.__setitem__("gate_scal", o["gate_scal"][:3]), "gate_scal has 3 entries"),
    ("weights unscaled", lambda o: o.__setitem__("gate_scal", o["gate_scal"] / 1.5), "max weight error"),
    ("block_pid_map", lambda o: o["block_pid_map"].__setitem__(0, 7), "block_pid_map differs"),
    ("a tensor missing", lambda o: o.pop("block_m"), "no tensor 'block_m'"),
])
def test_a_wrong_routing_output_is_a_named_failure_not_a_crash(name, breaks, says):
    job = _routing_job(8, 6, 4)  # the model's settings: sqrtsoftplus, renorm, x1.5, bias
    out = _good_routing_outputs(job)
    breaks(out)
    rows = checks.judge_job(job, out, {}, checks.References(), device="cpu", compiled=False)
    assert rows[0].result == checks.FAIL and says in rows[0].detail, (name, rows)


def test_one_jobs_failure_never_hides_anothers():
    jobs = [_routing_job(8, 2, 4), _routing_job(8, 6, 4)]
    bad = _good_routing_outputs(jobs[0])
    bad["gather"] = bad["gather"][:1]  # the first job's outputs broken
    outputs = {0: bad, 1: _good_routing_outputs(jobs[1])}
    metas = [{"key": j.key} for j in jobs]
    rows, _ = checks.judge_all(jobs, outputs, metas)
    by = {r.check: r.result for r in rows}
    assert by[f"{jobs[0].key}: vs the reference top-k"] == checks.FAIL
    assert by[f"{jobs[1].key}: vs the reference top-k"] == checks.PASS


def test_a_reduce_with_a_bf16_accumulator_differs_from_the_exact_sum():
    """The reduce inputs tell: summing them in bf16 (rounding each partial sum) differs."""
    g, k, n = cases.REDUCE_CASES[0]
    x, indx = cases.reduce_inputs(g, k, n)
    acc = torch.zeros((g, n), dtype=torch.bfloat16)
    for j in range(k):
        acc = (acc.float() + x[0][indx[:, j].long()].float()).to(torch.bfloat16)
    job = next(j for j in cases.plan(only=("reduce",)) if j.reduce == (g, k, n))
    row = checks.judge_job(job, {"out": acc}, {}, checks.References(), device="cpu", compiled=False)[0]
    assert row.result == checks.FAIL, row
    right = checks.judge_job(job, {"out": cases.reduce_want(x, indx)}, {}, checks.References(), device="cpu",
                             compiled=False)[0]
    assert right.result == checks.PASS, right


def test_the_telling_logits_cross_zero_tie_and_go_negative():
    e, k = 256, 6
    x = cases.telling_logits(10, e, k, 0)
    top = x.sort(-1, descending=True).values
    assert float(top[1, k - 1]) > 0 > float(top[1, k])  # the boundary crosses zero
    assert float(top[2, 0]) < 0  # the whole top-k negative
    assert float(top[3, k - 1]) == float(top[3, k])  # a tie at the boundary
    assert float(top[4, 0]) == float(top[4, 1])  # a tie inside the top-k


def test_told_pad_row_sees_a_computed_pad_and_says_where_it_cannot():
    h = torch.full((8, 256), float("nan"), dtype=torch.bfloat16)
    h[:, :128] = 1.0
    assert checks.told_pad_row("t", h, 128, 32).result == checks.PASS
    h[:, 200] = 0.0
    r = checks.told_pad_row("t", h, 128, 32)
    assert r.result == checks.FAIL and "written in 8/1024" in r.detail
    assert checks.told_pad_row("t", h[:, :128], 128, 32).result == checks.PASS  # buffer = told width
    assert checks.told_pad_row("t", h[:, :128], 120, 32).result == checks.INFO  # the last tile reaches the end


@pytest.mark.parametrize("kernel", (*cases.KERNELS, *cases.TOLD_PAD_KERNELS))
def test_stage2_inputs_differ_only_in_a_pad_that_reads_nan(kernel):
    """The told-K probe's inputs: seeded told columns (not zero), the pad zero in the clean one and
    NaN on any read in the poisoned one (a8w4: the e4m3 elements and their e8m0 scale groups; a4w4:
    nonzero e2m1 codes under e8m0 NaN scales, e2m1 having no NaN)."""
    from fp4moe.mx import mxfp4, mxfp8

    job = next(j for j in cases.plan(only=("stage2",)) if j.component == kernel)
    i = job.shape.intermediate
    clean, bad = cases.stage2_inputs(job)
    if kernel in ("a8w4", "a4w4"):
        told = i // 2 if kernel == "a4w4" else i  # bytes of the told columns (e2m1: two per byte)
        assert torch.equal(clean[0].view(torch.uint8)[:, :told], bad[0].view(torch.uint8)[:, :told])
        assert bool((bad[1][:, i // 32:] == cases.E8M0_NAN).all()) and bool((clean[1][:, i // 32:] != cases.E8M0_NAN).all())
        if kernel == "a4w4":
            assert bool((mxfp4.unpack_nibbles(bad[0][:, told:]) != 0).all())  # a read shows even past a NaN-blind scale
        clean, bad = (mxfp4 if kernel == "a4w4" else mxfp8).dequantize(*clean), (mxfp4 if kernel == "a4w4" else mxfp8).dequantize(*bad)
    # nonzero share: e2m1 rounds |v| < scale/4 to 0 (89% nonzero here), the others keep > 90%
    assert torch.equal(clean[:, :i], bad[:, :i]) and bool((clean[:, :i] != 0).float().mean() > 0.8)
    assert bool((clean[:, i:] == 0).all()) and bool(torch.isnan(bad[:, i:].float()).all())
    assert not bool(torch.isnan(bad[:, :i].float()).any())


def _stage2_row(y, yp, kernel="a16w4"):
    job = next(j for j in cases.plan(only=("stage2",)) if j.component == kernel)
    return checks.judge_job(job, {"y": y, "yp": yp}, {}, checks.References(), device="cpu", compiled=False)[0]


def test_told_k_row_fails_on_a_read_pad_and_on_an_unwritten_output():
    y = torch.randn(4, 256, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    ok = _stage2_row(y, y.clone(), "a8w4")
    assert ok.result == checks.PASS and ok.check.endswith(": told K pad never read") and "scale groups 4..7" in ok.detail
    read = _stage2_row(y, torch.full_like(y, float("nan")))
    assert read.result == checks.FAIL and "1024/1024 values differ from the zero-pad run, 1024/1024 NaN" in read.detail
    assert defects.row_signature(read.detail) == {"differ": "all", "nan": "all"}
    y[0, 0] = float("nan")  # an unwritten value equal in both runs: not a pass
    assert _stage2_row(y, y.clone()).result == checks.FAIL


def test_the_default_children_run_every_kind_of_job_the_plan_makes():
    """A job kind no default child names would never run (its rows silently absent)."""
    from fp4moe.targets.aiter.kernels.run import KERNEL_CHILD_GROUPS, KERNEL_JOB_NAMES

    named = {n for only, _ in KERNEL_CHILD_GROUPS for n in only.split(",")}
    assert {j.kind.value for j in cases.plan()} == named == {k.value for k in cases.Kind}
    assert named <= set(KERNEL_JOB_NAMES)


def test_the_project_registry_signatures_match_the_rows_the_judge_words():
    reg = {d.id: d for d in defects.load_registry(defects.PROJECT_REGISTRY)}
    h = torch.full((8, 256), float("nan"), dtype=torch.bfloat16)
    h[:] = 1.0
    row = checks.told_pad_row("a8w4 plain E8 H256 I128->256 T68 k2 (block_m 32)", h, 128, 64)
    assert row.result == checks.FAIL
    assert defects.signature_mismatch(reg["pad-honoured-only-at-block-m-16"], row.detail, row.check) is None


# ------------------------------------------------------------------------------ slow: edited trees


#: (id, file under aiter/ops/triton, old text, new text, the child's plan options, the row that must FAIL)
ROUTING_TINY = ("--quick", "--only", "routing")  # routing at E8 only: the fused sort, both rules
#: the edits whose row is a16w4's leave a8w4's jobs out (its rows are asserted by no edit here)
NO_A8W4 = ("--skip", "a8w4")
A16W4_PLAIN_GEMM = ("--quick", "--only", "gemm", *NO_A8W4)  # the plain scale layout's GEMM of a16w4 alone
#: a told pad's edit, per extent: (the jobs that reach it, the row that must FAIL). N (GEMM1) leaves the
#: pad columns of the stage-1 buffer written; K (GEMM2) leaves no buffer trace: stage 2 alone on the
#: gate's input with a poisoned pad reads it (in the stage1->stage2 chain a16w4's stage-1 buffer is
#: the told width, so there the edit changes nothing)
TOLD_PAD = {"N": ("pad", "E8 H256 I128->256 T67 k2 (block_m 16): told pad never computed"),
            "K": ("stage2", "E8 H256 I128->256 T4 k2 stage 2 alone: told K pad never read")}
#: every MXFP4-weight wrapper with a told pad (a4w4: its pad and stage-2 jobs alone, on the gate's MXFP4 activations)
TOLD_PAD_WRAPPERS = (*cases.KERNELS, *cases.TOLD_PAD_KERNELS)
EDITS = [
    ("scaling-dropped-from-renorm", "_triton_kernels/moe/moe_routing/topk.py",
     "y_values = (y_f / (s + 1e-20) * ROUTED_SCALING).to(x_dtype)", "y_values = (y_f / (s + 1e-20)).to(x_dtype)",
     ROUTING_TINY, "routing sqrtsoftplus renorm x1.5 +bias E8 k6 T4: vs the reference top-k"),
    ("sort-key-nonnegative-only", "_triton_kernels/moe/moe_routing/topk.py",
     "return x ^ tl.where((x & tm) != 0, fm, tm)", "return x ^ tm",
     ROUTING_TINY, "routing softmax E8 k2 T4: vs the reference top-k"),
    ("up-clamped-one-side", "_triton_kernels/moe/activations.py",
     "linear = clip(linear, limit, clip_lower=True)", "linear = clip(linear, limit, clip_lower=False)",
     A16W4_PLAIN_GEMM, "a16w4 plain E8 H512 I128->256 T4 k2: vs reference (kernel budget)"),
    ("k-loop-scale-step-cdna4", "_triton_kernels/moe/moe_op_gemm_a16w4.py",
     "        WMxScalePtrs += (PACKED_MX_BLOCK * SPLIT_K) * stride_w_mx_k\n",
     "        WMxScalePtrs += (MX_SCALE_BLOCK_K * SPLIT_K) * stride_w_mx_k\n",
     ("--only", "gemm", *NO_A8W4), "a16w4 cdna4 E8 H512 I128->256 T4 k2: vs reference (kernel budget)"),
    ("reduce-bf16-accumulator", "_triton_kernels/moe/reduce.py",
     "        acc += curr\n", "        acc = (acc + curr).to(tl.bfloat16).to(tl.float32)\n",
     ("--only", "reduce"), "reduce_grouped G5 k6 N256: vs exact sum (bitwise)"),
    # every wrapper the kernel group drives that takes a told pad, on N (GEMM1's unpadded_N) and on K
    # (GEMM2's unpadded_K): the wrapper's edit that drops it where it honours it (block_m 16)
    *[(f"{k}-told-{d.lower()}-ignored", f"moe/moe_op_gemm_{k}.py",
       f"    if unpadded_{d} and block_m == 16:\n        {d} = unpadded_{d}\n",
       f"    if unpadded_{d} and block_m == 16:\n        {d} = {d}\n",
       ("--only", TOLD_PAD[d][0], "--skip", ",".join(o for o in TOLD_PAD_WRAPPERS if o != k)), f"{k} plain {TOLD_PAD[d][1]}")
      for k in TOLD_PAD_WRAPPERS for d in ("N", "K")],
]


def _edited(tmp_path: Path, rel: str, old: str, new: str, extra: str = "") -> Path:
    root = tmp_path / "tree"
    shutil.copytree(TREE_ROOT / "aiter", root / "aiter")
    f = root / "aiter" / "ops" / "triton" / rel
    text = f.read_text()
    assert text.count(old) >= 1, (rel, old)
    f.write_text(text.replace(old, new) + extra)
    return root


def _rows(tree: Path, plan_args: tuple) -> dict:
    rec = ac.run_kernel_child(str(tree), arch="gfx950", timeout_s=900, extra_args=tuple(plan_args))
    return {r["check"]: r for r in rec["rows"]}


@pytest.mark.slow
@needs_tree
@pytest.mark.parametrize("edit", [pytest.param(e, id=e[0]) for e in EDITS])
def test_each_edit_fails_the_kernel_group_naming_the_row(tmp_path, edit):
    _id, rel, old, new, only, row = edit
    rows = _rows(_edited(tmp_path, rel, old, new), only)
    assert row in rows, sorted(rows)
    assert rows[row]["result"] == "FAIL", rows[row]


@pytest.mark.slow
@needs_tree
def test_nan_masked_out_of_the_covered_rows_fails_as_new_with_the_registry(tmp_path):
    """An edit that zeroes NaN in a16w4's output: the registered rows then fail with 0 NaN (not
    the registered all-NaN failure) and must fail as new, naming both (a16w4's GEMM and pad jobs
    alone: the edit is in its file, and the rows asserted are its own)."""
    tree = _edited(tmp_path, "moe/moe_op_gemm_a16w4.py", "def moe_gemm_a16w4(", "def _moe_gemm_a16w4_inner(",
                   "\n\nimport functools as _ft\n\n\n@_ft.wraps(_moe_gemm_a16w4_inner)\ndef moe_gemm_a16w4(*a, **kw):\n"
                   "    import torch as _t\n    y = _moe_gemm_a16w4_inner(*a, **kw)\n"
                   "    return _t.nan_to_num(y) if isinstance(y, _t.Tensor) else y\n")
    rec = ac.run_kernel_child(str(tree), arch="gfx950", timeout_s=900, extra_args=("--only", "gemm,pad", *NO_A8W4))
    out = judge_registry.apply_registry(judge_registry.kernel_rows(rec["rows"]), defects.load_registry(defects.PROJECT_REGISTRY),
                                        accepted=True)
    new = [r for r in out if r.result == Result.FAIL and "fails differently from known defect" in r.detail]
    assert any("cdna4" in r.check for r in new) and any("(block_m 32): pad honoured" in r.check for r in new), \
        [(r.check, r.result, r.detail[-160:]) for r in out if r.result != Result.PASS]


@pytest.mark.reliability  # an accident of the code under test (threat model): the verdict stands
@pytest.mark.slow
@needs_tree
def test_a_kernel_file_patching_the_row_writer_and_reference_cannot_change_the_verdict(tmp_path):
    patch = ("\n\ntry:\n    import fp4moe.targets.aiter.kernels.checks as _c\n    import fp4moe.reference.moe as _m\n"
             "    _c.rows_to_dicts = lambda rows: [dict(check=r.check, result='pass', detail='', seconds=0.0) for r in rows]\n"
             "    _c.judge_all = lambda *a, **k: ([], {})\n    _m.fused_moe_reference = lambda *a, **k: None\n"
             "except Exception:\n    pass\n")
    tree = _edited(tmp_path, "_triton_kernels/moe/moe_op_gemm_a16w4.py", "out *= gammas[:, None]",
                   "out *= 1.05 * gammas[:, None]", patch)
    rows = _rows(tree, ("--quick", "--only", "gemm"))
    assert rows["a16w4 plain E8 H512 I128->256 T4 k2: vs reference (kernel budget)"]["result"] == "FAIL"
    assert rows["a8w4 plain E8 H512 I128->256 T4 k2: vs reference (kernel budget)"]["result"] == "pass"


@pytest.mark.reliability  # an accident of the code under test (threat model): the verdict stands
@pytest.mark.slow
@needs_tree
def test_a_process_killed_inside_routing_is_that_components_failure(tmp_path):
    tree = _edited(tmp_path, "moe/moe_routing/routing.py", "    num_tokens, n_expts_tot = logits.shape\n",
                   "    import os, signal\n    os.kill(os.getpid(), signal.SIGSEGV)\n    num_tokens, n_expts_tot = logits.shape\n")
    rows = _rows(tree, ("--quick", "--only", "routing,reduce"))
    assert rows["routing: killed the kernel child"]["result"] == "FAIL"
    assert "routing" in rows["routing: killed the kernel child"]["detail"]
    assert all(r["result"] == "pass" for n, r in rows.items() if n.startswith("reduce_grouped")), rows


def test_two_runs_nan_in_the_same_places_are_not_the_same_result():
    """A K edit made both runs of a16w4/a8w4 all NaN, and 'pad honoured (poisoned pad, told) ==
    clean' passed on NaN == NaN bitwise: equal NaN now FAILs, naming the count."""
    g = torch.Generator().manual_seed(5)
    y = torch.randn(4, 8, generator=g).to(torch.bfloat16)
    assert checks._same(y, y.clone(), "r").result == checks.PASS
    y[1, 2:5] = float("nan")
    row = checks._same(y, y.clone(), "r")
    assert row.result == checks.FAIL and "3/32 NaN in both runs" in row.detail, row
