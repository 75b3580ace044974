"""CPU tests of ``fp4moe-gate aiter-check`` (fp4moe.gates.aiter_check, fp4moe.targets.aiter.source).

Two aiter versions are exercised without importing or installing aiter:

- the public PyPI release ``amd-aiter 0.1.7.post2.dev18`` (a pure-Python wheel, read with
  zipfile). It predates aiter PR #4130 and the ``gate_mode`` / ``is_guinterleave`` keywords, so
  the probe must say "missing" and layout conformance must hold where it has a function for
  the case. Found via ``$FP4MOE_AITER_WHEEL`` or the wheel cache (``bash ci/fetch_amd_aiter_wheel.sh``;
  CI always fetches it); skipped with that reason when absent.
- a "post-#4130" aiter for the "present" side. aiter's code cannot be vendored here, so the
  test writes a tmp source tree whose ``aiter/ops/shuffle.py`` is a shim re-exporting
  ``fp4moe.reference.layout`` (which implements the post-#4130 behaviour) and whose
  ``aiter/fused_moe.py`` is a signature stub with the current keywords. It proves the checks
  report "present"/"pass" when the behaviour is there, not that any real aiter has it; the
  issue author runs the command against a current aiter tree for that.

Layout cases here are a reduced grid (small shapes plus the two K/32 edge cases of real
DeepSeek-V4 ranks) to stay inside the CPU budget; the CLI runs the full grid.
"""

from __future__ import annotations

import importlib.machinery
import json
import sys
import textwrap
import types

import pytest

from fp4moe.commands.main import main as cli_main
from fp4moe.gates import aiter_check as ac
from fp4moe.targets.aiter import source as aiter_source
from fp4moe.targets.aiter.backend import AITER_CALL_KEYWORDS, BOUND_ENV
from fp4moe.targets.aiter.judge import api as judge_api
from fp4moe.targets.aiter.judge import layout as judge_layout
from fp4moe.targets.aiter.judge import source_checks
from fp4moe.targets.aiter.results import Result
from fp4moe.targets.aiter.source import AiterSource, function_params, load_shuffle_module

E = judge_layout.LAYOUT_EXPERTS
# the reduced grid (judge.layout.REDUCED_SHAPES: tiny tileable shapes, plus DSV4-Pro TP8 w2 scale
# (K/32 = 12, needs PR #4130) and DSV4-Flash TP16 w2 scale (K/32 = 4) at a reduced row count)
REDUCED_SHAPES = judge_layout.REDUCED_SHAPES
reduced_cases = judge_layout.reduced_layout_cases


def by_check(results):
    return {r.check: r for r in results}


# ---------------------------------------------------------------------- the PyPI wheel
@pytest.fixture(scope="module")
def wheel_src():
    path = aiter_source.find_wheel()
    if path is None:
        pytest.skip(f"amd-aiter wheel absent: set {aiter_source.WHEEL_ENV} or run `bash ci/fetch_amd_aiter_wheel.sh` (CI does)")
    return AiterSource.from_wheel(path)


@pytest.fixture(scope="module")
def wheel_results(wheel_src):
    return source_checks.run_checks(wheel_src, reduced_cases())


def test_wheel_version_and_signature_read_without_import(wheel_src):
    assert wheel_src.version() == "0.1.7.post2.dev18"
    params = function_params(wheel_src.read("aiter/fused_moe.py"), "fused_moe")
    assert {"hidden_pad", "intermediate_pad", "quant_type"} <= set(params)
    stubs = [k for k, m in sys.modules.items() if k.split(".")[0] == "aiter" and str(getattr(m, "__file__", "")).startswith("<fp4moe stub")]
    assert not stubs, stubs


def test_wheel_api_conformance_reports_missing_conditional_keywords(wheel_results):
    r = by_check(wheel_results)
    # keywords and functions this old release lacks: absent (not FAIL), naming the condition
    assert r["api: fused_moe.gate_mode"].result == Result.ABSENT
    assert "interleave" in r["api: fused_moe.gate_mode"].detail.lower()
    assert r["api: fused_moe.swiglu_limit"].result == Result.ABSENT
    assert r["api: shuffle_weight.is_guinterleave"].result == Result.ABSENT
    assert r["api: shuffle_scale"].result == Result.ABSENT
    assert not [x for x in wheel_results if x.check.startswith("api") and x.result == Result.FAIL]


def test_wheel_layout_conforms_where_supported(wheel_results):
    layout_rows = [x for x in wheel_results if x.check.startswith("layout")]
    assert len(layout_rows) == len(reduced_cases())
    assert not [x for x in layout_rows if x.result == Result.FAIL], [x for x in layout_rows if x.result == Result.FAIL]
    r = by_check(wheel_results)
    for kind, shape in REDUCED_SHAPES:
        plain = r[judge_layout.LayoutCase(kind, shape, False, ()).name]
        itlv = r[judge_layout.LayoutCase(kind, shape, True, ()).name]
        if kind in ("w13", "w2"):  # both weight layouts exist in the old release
            assert plain.result == Result.PASS and itlv.result == Result.PASS
            assert "shuffle_weight_a16w4" in itlv.detail
        else:
            assert plain.result == Result.ABSENT and "not supported by this aiter" in plain.detail
            if shape[1] % 8:  # K/32 = 12 or 4: the old interleaved scale shuffle raises
                assert itlv.result == Result.ABSENT and "raises" in itlv.detail
            else:
                assert itlv.result == Result.PASS


def test_wheel_reports_pr4130_missing(wheel_results):
    r = by_check(wheel_results)
    probe = r["capability: PR #4130 (interleaved scale K/32=12, inter 384)"]
    assert probe.result == Result.ABSENT and "raises" in probe.detail
    assert r[f"capability: fused_moe reads {BOUND_ENV}"].result == Result.ABSENT
    assert not [x for x in wheel_results if x.result == Result.FAIL]  # nothing FAILs: what it lacks is absent
    assert ac.verdict(wheel_results, allow_missing=True) == 0
    assert ac.verdict(ac.apply_require(wheel_results, ("capability: PR #4130",)), allow_missing=True) == 1  # required
    assert ac.verdict(wheel_results, strict=True, allow_missing=True) == 1  # --strict: every absent row fails


# ---------------------------------------------------------------------- a post-#4130 shim
SHIM_SHUFFLE = textwrap.dedent(
    """
    # Test shim, NOT aiter code: re-exports fp4moe.reference.layout, which implements post-#4130 aiter.
    from aiter import dtypes  # exercises the stubbed import path like real aiter files do
    from fp4moe.reference.layout import shuffle_weight as _sw, shuffle_scale as _ss

    def shuffle_weight(x, layout=(16, 16), use_int4=False, is_guinterleave=False, gate_up=False):
        return _sw(x, layout, is_guinterleave=is_guinterleave, gate_up=gate_up)

    def shuffle_scale(src, experts_cnt=None, is_guinterleave=False, gate_up=False):
        return _ss(src, experts_cnt, is_guinterleave=is_guinterleave, gate_up=gate_up)
    """
)


def write_tree(root, shuffle_text: str, fused_moe_params: list[str]):
    (root / "aiter" / "ops").mkdir(parents=True)
    (root / "aiter" / "ops" / "shuffle.py").write_text(shuffle_text)
    args = ", ".join(f"{p}=None" for p in fused_moe_params)
    (root / "aiter" / "fused_moe.py").write_text(
        f"# signature stub written by the test\nimport os\nBOUND = os.environ.get('AITER_BF16_FP8_MOE_BOUND')\n"
        f"def fused_moe({args}):\n    raise NotImplementedError\n"
    )
    (root / "aiter" / "_version.py").write_text("__version__ = '9.9.9+shim'\n")
    return root


@pytest.fixture
def shim_tree(tmp_path):
    return write_tree(tmp_path, SHIM_SHUFFLE, list(AITER_CALL_KEYWORDS["fused_moe"]) + ["block_size_M"])


def test_shim_reports_everything_present(shim_tree):
    src = AiterSource.from_dir(shim_tree)
    results = source_checks.run_checks(src, reduced_cases())
    assert src.version() == "9.9.9+shim"
    bad = [x for x in results if x.result not in (Result.PASS, Result.PRESENT)]
    assert not bad, bad
    assert by_check(results)["capability: PR #4130 (interleaved scale K/32=12, inter 384)"].detail.endswith("-> 16")
    assert ac.verdict(results, strict=True) == 0


def test_layout_regression_is_detected(tmp_path):
    """A shuffle_scale that ignores gate_up (a plausible upgrade bug) must FAIL, not pass."""
    broken = SHIM_SHUFFLE.replace("gate_up=gate_up)\n", "gate_up=False)\n", 2)
    assert broken != SHIM_SHUFFLE
    src = AiterSource.from_dir(write_tree(tmp_path, broken, list(AITER_CALL_KEYWORDS["fused_moe"])))
    results = judge_layout.check_layout(src, reduced_cases())
    failed = {x.check for x in results if x.result == Result.FAIL}
    assert judge_layout.LayoutCase("w13", (E, 64, 128), True, ()).name in failed
    assert judge_layout.LayoutCase("w13_scale", (E * 64, 8), True, ()).name in failed
    assert ac.verdict(results) == 1
    for x in results:  # each FAIL names the tree's file:line and the first differing byte (issue #45 item 2)
        if x.result == Result.FAIL:
            assert "[aiter/ops/shuffle.py:" in x.detail and "; first at [" in x.detail and ", reference 0x" in x.detail, x


def test_a_keyword_the_tree_lacks_is_absent_and_fails_only_when_required(tmp_path):
    """An older tree's ``fused_moe`` without a keyword the backend passes: an ``absent`` row (a
    fact, exit 0), FAIL only under ``--require`` naming its row (issue #45 item 1)."""
    params = [p for p in AITER_CALL_KEYWORDS["fused_moe"] if p != "intermediate_pad"]
    src = AiterSource.from_dir(write_tree(tmp_path, SHIM_SHUFFLE, params))
    rows = judge_api.check_api(src)
    r = by_check(rows)
    assert r["api: fused_moe"].result == Result.ABSENT and "intermediate_pad" in r["api: fused_moe"].detail
    assert ac.verdict(rows) == 0 and ac.verdict(rows, strict=True) == 1
    required = ac.apply_require(rows, ("api: fused_moe",))
    assert by_check(required)["api: fused_moe"].result == Result.FAIL and ac.verdict(required) == 1
    assert "--require api: fused_moe" in by_check(required)["api: fused_moe"].detail
    with pytest.raises(ValueError, match="--require api: fused_mo3: no check of this run"):
        ac.apply_require(rows, ("api: fused_mo3",))  # a typo is never a requirement met


# ---------------------------------------------------------------------- sources and the CLI
def test_stubs_never_leak_and_real_modules_are_restored(shim_tree, monkeypatch):
    sentinel = types.ModuleType("aiter")
    monkeypatch.setitem(sys.modules, "aiter", sentinel)
    mod = load_shuffle_module(AiterSource.from_dir(shim_tree / "aiter"))  # the package dir form
    assert callable(mod.shuffle_scale)
    assert sys.modules["aiter"] is sentinel
    assert not [k for k in sys.modules if k.startswith("aiter.")]


def test_installed_lookup_ignores_namespace_dirs(monkeypatch):
    spec = importlib.machinery.ModuleSpec("aiter", None, is_package=True)  # a directory named aiter on sys.path
    monkeypatch.setattr("importlib.util.find_spec", lambda name: spec)
    assert AiterSource.from_installed() is None


def _in_process_child(monkeypatch):
    """The child's checks run in this process on the reduced grid (the real child: the
    reliability suite and the slow tests)."""
    from dataclasses import asdict

    def run(kind, path, *, timeout_s, differential, allow_kwargs, deadline=None, layout_grid="dsv4"):
        src = AiterSource.from_dir(path) if kind == "dir" else AiterSource.from_wheel(path)
        res = source_checks.run_checks(src, reduced_cases(), differential=differential, allow_kwargs=allow_kwargs)
        return {"source": src.origin, "version": src.version(), "results": [asdict(r) for r in res]}

    monkeypatch.setattr(ac, "run_in_child", run)


def test_cli_exit_codes(shim_tree, tmp_path, tmp_path_factory, monkeypatch, capsys):
    _in_process_child(monkeypatch)
    out_json = tmp_path_factory.mktemp("out") / "r.json"  # outside the aiter tree (an input)
    assert cli_main(["aiter-check", "--aiter-src", str(shim_tree), "--strict", "--no-differential", "--no-kernels", "--no-dispatch", "--json", str(out_json)]) == 0
    text = capsys.readouterr().out
    assert "check" in text and "result" in text and "detail" in text and "present" in text
    assert json.loads(out_json.read_text())["status"] == "pass" and '"results"' in out_json.read_text()
    assert cli_main(["aiter-check", "--aiter-src", str(tmp_path / "nowhere")]) == 2
    assert "--aiter-src" in capsys.readouterr().err
    monkeypatch.setattr(AiterSource, "from_installed", classmethod(lambda cls: None))
    assert cli_main(["aiter-check"]) == 2
    assert "no aiter sources" in capsys.readouterr().err


def test_lazy_aiter_imports_inside_functions(tmp_path):
    """Current aiter branches on get_gfx() (gfx1250 vs the rest) and may import lazily: the stubs
    answer gfx950 during the call too; a function needing unmodelled aiter ops FAILs loudly."""
    lazy = SHIM_SHUFFLE + textwrap.dedent(
        """
        _plain_scale = shuffle_scale

        def shuffle_scale(src, experts_cnt=None, is_guinterleave=False, gate_up=False):
            from aiter.jit.utils.chip_info import get_gfx
            assert get_gfx() == "gfx950"
            if is_guinterleave:
                from aiter import some_compiled_op  # not modelled by the stubs
                some_compiled_op(src)
            return _plain_scale(src, experts_cnt, is_guinterleave, gate_up)
        """
    )
    src = AiterSource.from_dir(write_tree(tmp_path, lazy, list(AITER_CALL_KEYWORDS["fused_moe"])))
    r = by_check(judge_layout.check_layout(src, reduced_cases()))
    assert r[judge_layout.LayoutCase("w2_scale", (E * 32, 16), False, ()).name].result == Result.PASS
    itlv = r[judge_layout.LayoutCase("w2_scale", (E * 32, 16), True, ()).name]
    assert itlv.result == Result.FAIL and "could not run from source" in itlv.detail


@pytest.mark.parametrize("extra, says", [
    (["--kernel-jobs", "gemm,tail"], "--kernel-jobs gemm,tail: 'tail' is none of gemm, pad, stage2, tails"),
    (["--kernel-jobs", "a16w4", "--no-kernels"], "--kernel-jobs a16w4: not with --no-kernels"),
])
def test_kernel_jobs_that_name_no_job_are_refused_before_any_child(tmp_path, monkeypatch, capsys, extra, says):
    (tmp_path / "aiter" / "ops" / "triton" / "moe").mkdir(parents=True)
    monkeypatch.setattr(ac, "run_in_child", lambda *a, **k: pytest.fail("no aiter code may run before the options are checked"))
    assert cli_main(["aiter-check", "--aiter-src", str(tmp_path), "--no-dispatch", *extra]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1, err


def test_kernel_jobs_run_one_child_with_only_those_jobs_and_say_so(tmp_path, monkeypatch):
    """``--kernel-jobs a16w4,routing``: the kernel child's plan gets ``--only a16w4,routing`` (one
    child, :func:`aiter_check.run_kernel_child`), and the notes say the other checks did not run."""
    (tmp_path / "aiter" / "ops" / "triton" / "moe").mkdir(parents=True)
    seen = []

    def child(tree, **kw):
        seen.append(kw["extra_args"])
        return {"rows": [], "tree": tree, "arch": "gfx950", "triton": "3.8", "interpreter": True, "seconds": 1.0,
                "judge_seconds": 0.0, "patches": [], "unjudged": {}}

    monkeypatch.setattr(ac, "run_kernel_child", child)
    notes: list[str] = []
    opts = ac.AiterCheckOptions(aiter_src=str(tmp_path), kernel_jobs=("a16w4", "routing"))
    ac.run_kernel_group(opts, "dir", str(tmp_path), notes=notes)
    assert seen == [("--only", "a16w4,routing")]
    assert notes[-1] == "kernel checks: only the jobs of --kernel-jobs a16w4,routing (the other kernel checks not run)"
    ac.run_kernel_group(ac.AiterCheckOptions(aiter_src=str(tmp_path)), "dir", str(tmp_path), notes=notes)
    assert seen[-1] == () and "--kernel-jobs" not in notes[-1]


class _Stop(Exception):
    pass


@pytest.mark.parametrize("grid, child_args", [("dsv4", []), ("reduced", ["--layout-grid", "reduced"])])
def test_layout_grid_reaches_the_child_and_the_replay_judges_the_same_cases(tmp_path, monkeypatch, grid, child_args):
    """``--layout-grid``: the (a)-(d) child is started with it (none for the default), and the
    replay in the gate's process runs the same grid (``judge.layout.LAYOUT_GRIDS``)."""
    from fp4moe.infra import runner

    (tmp_path / "aiter" / "ops").mkdir(parents=True)

    seen = {}

    def run_judged(module, args, **kw):
        seen["args"] = args
        raise _Stop

    monkeypatch.setattr(runner, "run_judged", run_judged)
    with pytest.raises(_Stop):
        ac.run_in_child("dir", str(tmp_path), timeout_s=10, differential=False, allow_kwargs=False, layout_grid=grid)
    assert seen["args"] == ["--aiter-src", str(tmp_path), "--no-differential", *child_args]
    cases = judge_layout.LAYOUT_GRIDS[judge_layout.LayoutGrid(grid)]()
    assert (len(cases) == 2 * len(REDUCED_SHAPES)) == (grid == "reduced") and len({c.name for c in cases}) == len(cases)
