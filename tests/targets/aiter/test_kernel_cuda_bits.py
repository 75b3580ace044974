"""The CUDA-only pieces of the aiter kernel adapter, tested without a GPU: the AMD launch-option
dropper (a fake kernel object records what it was launched with), the kernel child's refusal of
``TRITON_INTERPRET=1`` on a GPU, ``aiter-check --shapes`` parsing, and ``perf ab``'s
``--base-aiter-src/--head-aiter-src`` validation. CPU tier, ~2 s (one child start)."""

from __future__ import annotations

import os
import types

import pytest

from fp4moe.infra import runner
from fp4moe.infra.errors import GateCannotRun
from fp4moe.targets.aiter.kernels import loader
from fp4moe.targets.aiter.results import CheckResult, Result


class JITFunction:  # the type name the dropper looks for (triton.runtime.jit.JITFunction)
    def __init__(self):
        self.launches = []

    def __getitem__(self, grid):
        def launch(*a, **kw):
            self.launches.append((grid, a, kw))
            return "ran"
        return launch


def _fake_module():
    m = types.ModuleType("fake_gemm")
    m.__file__ = "/tree/aiter/ops/triton/moe/fake.py"
    m._moe_gemm_a16w4 = JITFunction()
    m._moe_gemm_helper_not_a_kernel = 3  # not a kernel object: left alone
    m.moe_gemm_a16w4 = lambda: None
    return m


AMD = dict(waves_per_eu=2, matrix_instr_nonkdim=16, kpack=1)


def test_amd_launch_options_are_dropped_on_cuda_only():
    kern = JITFunction()
    wrapped = loader._DropAmdOptions(kern)
    assert wrapped[(4, 1)](1, 2, num_warps=4, BLOCK_M=16, **AMD) == "ran"
    assert kern.launches == [((4, 1), (1, 2), {"num_warps": 4, "BLOCK_M": 16})]

    cpu, cuda = {"a16w4": _fake_module()}, {"a16w4": _fake_module(), "a8w4": _fake_module()}
    assert loader.wrap_launches_for("cpu", cpu) == {}
    assert type(cpu["a16w4"]._moe_gemm_a16w4).__name__ == "JITFunction"  # untouched off CUDA
    assert loader.wrap_launches_for("cuda:0", cuda) == {"a16w4": ["_moe_gemm_a16w4"], "a8w4": ["_moe_gemm_a16w4"]}
    k = cuda["a16w4"]._moe_gemm_a16w4
    assert isinstance(k, loader._DropAmdOptions) and cuda["a16w4"]._moe_gemm_helper_not_a_kernel == 3
    k[(1,)](x=1, **AMD)
    assert k.kernel.launches[-1][2] == {"x": 1}


def test_a_module_without_a_kernel_object_on_cuda_names_the_file():
    m = types.ModuleType("m")
    m.__file__ = "/tree/aiter/ops/triton/moe/moe_op_gemm_a8w4.py"
    with pytest.raises(loader.AiterTreeError, match="moe_op_gemm_a8w4.py: no _moe_gemm"):
        loader.wrap_launches_for("cuda", {"a8w4": m})


@pytest.mark.slow
def test_kernel_child_refuses_triton_interpret_on_a_gpu(tmp_path):
    res = runner.run_python(["-m", "fp4moe.targets.aiter.child.kernel_checks", "--aiter-src", str(tmp_path),
                                "--device", "cuda"], timeout_s=120, env=dict(os.environ, TRITON_INTERPRET="1"))
    assert res.record is not None, res.why_no_record()
    assert "TRITON_INTERPRET=1 is set" in res.record["cannot_run"] and "--device cuda" in res.record["cannot_run"]


def test_shapes_option_parses_and_reaches_the_gate(monkeypatch, capsys, tmp_path):
    from fp4moe.commands.main import main as cli_main
    from fp4moe.gates import aiter_check as ac

    with pytest.raises(SystemExit) as e:  # argparse's usage error: exit 2, one line naming the option
        cli_main(["aiter-check", "--shapes", "huge"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--shapes" in err and "huge" in err and len(err.strip().splitlines()) == 1
    seen = {}

    def fake(opts):
        seen.update(vars(opts))
        return ac.AiterCheckResult("fake", None, [CheckResult("x", Result.PASS, "")], 0)

    monkeypatch.setattr(ac, "check_aiter", fake)
    assert cli_main(["aiter-check", "--aiter-src", str(tmp_path), "--shapes", "dsv4", "--device", "cuda"]) == 0
    assert seen["shapes"] == "dsv4" and seen["device"] == "cuda"
    assert cli_main(["aiter-check", "--aiter-src", str(tmp_path)]) == 0 and seen["shapes"] == "tiny"


def test_perf_ab_aiter_src_options_are_validated(tmp_path):
    from fp4moe.gates.perf import ab

    pkg = tmp_path / "t" / "aiter"
    (pkg / "ops" / "triton" / "moe").mkdir(parents=True)
    assert ab.resolve_aiter_src("base", str(pkg)) == str(pkg.resolve())
    assert ab.resolve_aiter_src("head", str(pkg.parent)) == str(pkg.resolve())  # the checkout holding aiter/
    with pytest.raises(GateCannotRun, match=r"--head-aiter-src .*: no ops/triton/moe/"):
        ab.resolve_aiter_src("head", str(tmp_path / "nowhere"))
    side = ab.resolve_side("base", os.sys.executable, str(pkg))
    assert side.env[ab.AITER_SRC_ENV] == str(pkg.resolve())
    with pytest.raises(GateCannotRun, match="--base-aiter-src"):
        ab.resolve_side("base", os.sys.executable, str(tmp_path))


def test_compiled_slot_check_measures_rounding_flips_per_slot_row():
    """A compiled kernel's slot row may round to the neighbouring bf16 value (its own float32
    order): after a cancelling top-k sum that is many output ulps, still inside the bound; a
    deviation of three flips in one slot is counted outside it. Reported (info); NaN fails. The
    interpreter judges the same bound on at most 1% of the values."""
    import torch

    from fp4moe.targets.aiter.kernels import checks

    g = torch.Generator().manual_seed(5)
    slots = (torch.randn((64, 2, 32), generator=g) * 4).to(torch.bfloat16).float()
    slots[:, 1] = -slots[:, 0] + (torch.randn((64, 32), generator=g) * 1e-3).to(torch.bfloat16).float()  # cancels
    ref = slots.sum(1).to(torch.bfloat16)
    flip = checks.ulp_bf16(slots[:, 0])
    y_ok = ref.clone()
    y_ok[0, :3] = (slots[0, 0, :3] + flip[0, :3] + slots[0, 1, :3]).to(torch.bfloat16)  # one slot rounded up
    row = checks._slot_row(y_ok, ref, "t", slots, compiled=True)
    assert row.result == checks.INFO and "0 beyond one rounding flip" in row.detail, row
    assert checks.ulp_diff_bf16(y_ok, ref)["max_ulp"] > 1
    # the interpreter (the machine's BLAS orders its sums): one flip per slot row on <= 1% passes, judged
    cpu = checks._slot_row(y_ok, ref, "t", slots, compiled=False)
    assert cpu.result == checks.PASS and "3 by one slot-row rounding flip, 0 beyond it" in cpu.detail, cpu
    y_bad = ref.clone()
    y_bad[0, 0] = (slots[0, 0, 0] + 3 * flip[0, 0] + slots[0, 1, 0]).to(torch.bfloat16)
    assert "1 beyond one rounding flip" in checks._slot_row(y_bad, ref, "t", slots, compiled=True).detail
    assert checks._slot_row(y_bad, ref, "t", slots, compiled=False).result == checks.FAIL
    many = (slots[:, 0] + flip + slots[:, 1]).to(torch.bfloat16)  # every value flipped: no per-slot rounding model
    assert "MORE than" in checks._slot_row(many, ref, "t", slots, compiled=True).detail
    assert checks._slot_row(many, ref, "t", slots, compiled=False).result == checks.FAIL  # > 1% differ
    nan = ref.clone()
    nan[0, 0] = float("nan")
    assert checks._slot_row(nan, ref, "t", slots, compiled=True).result == checks.FAIL
    assert checks._slot_row(nan, ref, "t", slots, compiled=False).result == checks.FAIL
