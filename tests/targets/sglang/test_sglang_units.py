"""The SGLang adapter's own parts, without any SGLang: how a release is recognised, which
shuffle names it imports, how mutants find (or fail to find) their pattern, how the checks
read SGLang's shuffle calls, and the capability probe behind ``--require sglang``.

Mutants are exercised on a small module written to a temp dir whose method has the shape of
``Fp8MoEMethod.process_weights_after_loading_block_quant`` (the real one is mutated in the
sglang tier and by ``fp4moe-gate zoo --target sglang``).
"""

from __future__ import annotations

import importlib.util
import textwrap

import pytest
import torch

from fp4moe.infra import capabilities as hardware
from fp4moe.targets import capability_probes
from fp4moe.targets.sglang import checks, source
from fp4moe.targets.sglang.child import mutants, patches
from fp4moe.targets.sglang.mutations import MUTANT_ENV

#: the gate checks the SGLang child's dependencies before it reads fp8.py (fp4moe.targets.sglang.target.drive)
needs_child_deps = pytest.mark.skipif(bool(source.missing_deps()), reason=(
    f"{', '.join(source.missing_deps())} not installed (the sglang extra): sglang-check stops there before reading fp8.py"))

FP8_0_5_13 = """
if _use_aiter:
    from aiter.ops.shuffle import (
        shuffle_scale_a16w4,
        shuffle_weight,
        shuffle_weight_a16w4,
    )
"""
FP8_0_5_19 = """
if _use_aiter or _use_hip_int4:
    from aiter.ops.shuffle import (
        moe_shuffle_scale,
        moe_shuffle_weight,
        shuffle_scale,
        shuffle_weight,
    )

def later():
    from aiter.ops.shuffle import shuffle_scale_a16w4  # function-local: not a module-level import
"""
BRANCH = """
class Fp8MoEMethod:
    def process_weights_after_loading_block_quant(self, layer):
        if _use_aiter and self.is_fp4_expert:
            pass
"""


@pytest.mark.parametrize("text, names", [
    (FP8_0_5_13, ["shuffle_scale_a16w4", "shuffle_weight", "shuffle_weight_a16w4"]),
    (FP8_0_5_19, ["moe_shuffle_scale", "moe_shuffle_weight", "shuffle_scale", "shuffle_weight"]),
    ("import torch\n", []),
])
def test_shuffle_imports_are_read_from_the_syntax_tree(text, names):
    assert patches.shuffle_imports(text) == names


def test_fp4_aiter_branch_is_recognised_only_where_it_exists():
    assert source.has_fp4_aiter_branch(BRANCH)
    assert not source.has_fp4_aiter_branch(BRANCH.replace("_use_aiter and ", ""))
    assert not source.has_fp4_aiter_branch(FP8_0_5_19)


def test_version_is_read_from_the_generated_version_file(tmp_path):
    (tmp_path / "sglang").mkdir()
    (tmp_path / "sglang" / "_version.py").write_text("__version__ = version = '0.5.17'\n")
    assert source._version_of(tmp_path) == "0.5.17"


PROCESS = '''
import torch

class Fp8MoEMethod:
    def process_weights_after_loading_block_quant(self, layer):
        fp4_k_align = 128
        inter = layer.inter
        padded = (inter + fp4_k_align - 1) // fp4_k_align * fp4_k_align
        old = layer.w13
        new = torch.zeros(2 * padded, dtype=torch.uint8)
        new[:inter] = old[:inter]
        new[padded : padded + inter] = old[inter:]
        scale = torch.zeros(4, dtype=torch.float8_e8m0fnu)
        layer.w13, layer.scale, layer.intermediate_pad = new, scale, padded - inter
'''


def _fake_fp8(tmp_path, text=PROCESS, name="fake_fp8"):
    f = tmp_path / f"{name}.py"
    f.write_text(textwrap.dedent(text))
    spec = importlib.util.spec_from_file_location(name, f)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _Layer:
    def __init__(self, inter=96):
        self.inter = inter
        self.w13 = torch.arange(1, 2 * inter + 1, dtype=torch.uint8)  # gate 1..96, up 97..192


def _process(mod, inter=96):
    layer = _Layer(inter)
    mod.Fp8MoEMethod().process_weights_after_loading_block_quant(layer)
    return layer


def test_clean_fake_pads_each_half_on_its_own(tmp_path):
    layer = _process(_fake_fp8(tmp_path))
    assert layer.w13.numel() == 256 and layer.intermediate_pad == 32
    assert torch.equal(layer.w13[128:224], torch.arange(97, 193, dtype=torch.uint8))


def test_align_256_mutant_rewrites_the_align_constant(tmp_path):
    mod = _fake_fp8(tmp_path)
    rep = mutants.apply("align_256", mod)
    assert rep["applied"] and rep["changed"] == 1, rep
    layer = _process(mod)
    assert layer.w13.numel() == 512 and layer.intermediate_pad == 160


def test_gate_up_one_block_mutant_puts_up_rows_in_the_gate_half(tmp_path):
    mod = _fake_fp8(tmp_path)
    assert mutants.apply("gate_up_one_block", mod)["applied"]
    layer = _process(mod)
    assert torch.equal(layer.w13[96:192], torch.arange(97, 193, dtype=torch.uint8))  # up right after gate
    assert int(layer.w13[128:224].count_nonzero()) == 64  # the real up half is now mostly padding


def test_scale_pad_0xff_mutant_fills_new_e8m0_buffers_with_nan(tmp_path):
    mod = _fake_fp8(tmp_path)
    assert mutants.apply("scale_pad_0xff", mod)["applied"]
    layer = _process(mod)
    assert bool((layer.scale.view(torch.uint8) == 0xFF).all())
    assert int((layer.w13 == 0xFF).sum()) <= 1  # uint8 weight buffers untouched (one real byte may be 255)


@pytest.mark.parametrize("name, scale_byte, weight_byte", [("scale_pad_0x7f", 0x7F, 0), ("weight_pad_fp4_nonzero", 0, 0x22)])
def test_pad_fill_variants_fill_only_their_kind_of_buffer(tmp_path, name, scale_byte, weight_byte):
    mod = _fake_fp8(tmp_path, name=f"fake_fp8_{name}")
    rep = mutants.apply(name, mod)
    assert rep["applied"], rep
    layer = _process(mod)
    assert bool((layer.scale.view(torch.uint8) == scale_byte).all()), layer.scale.view(torch.uint8)
    assert torch.equal(layer.w13[:96], torch.arange(1, 97, dtype=torch.uint8))  # real bytes copied over the fill
    pads = torch.cat([layer.w13[96:128], layer.w13[224:]])
    assert bool((pads == weight_byte).all()), pads
    assert mutants.runtime_hits(name) >= 1


def test_inert_variants_pass_through_apply_but_never_reach_the_zoo():
    from fp4moe.gates.zoo.runner import TARGETS
    from fp4moe.targets.sglang.mutations import INERT_VARIANTS, MUTANTS, is_inert

    assert "scale_pad_0x7f" in INERT_VARIANTS and not set(INERT_VARIANTS) & set(MUTANTS)
    assert is_inert("scale_pad_0x7f") and not is_inert("scale_pad_0xff")
    assert not {m.name for m in TARGETS["sglang"].mutants()} & set(INERT_VARIANTS)


def test_pad_not_propagated_mutant_drops_the_recorded_pad(tmp_path):
    mod = _fake_fp8(tmp_path)
    assert mutants.apply("pad_not_propagated", mod)["applied"]
    layer = _process(mod)
    assert getattr(layer, "intermediate_pad", 0) == 0 and layer.w13.numel() == 256


def test_a_mutant_whose_pattern_is_absent_is_reported_not_applied(tmp_path):
    mod = _fake_fp8(tmp_path, PROCESS.replace("fp4_k_align = 128", "fp4_k_align = 64"), name="fake_fp8_other")
    rep = mutants.apply("align_256", mod)
    assert not rep["applied"] and "pattern not found" in rep["why"], rep
    assert not mutants.apply("no_such_mutant", mod)["applied"]


def test_zoo_target_sglang_lists_every_mutant():
    from fp4moe.gates.zoo.runner import TARGETS

    listed = TARGETS["sglang"].mutants()
    assert {m.name for m in listed} == set(mutants.MUTANTS) >= {"pad_not_propagated", "align_256", "gate_up_one_block",
                                                               "scale_pad_0xff"}

    class MP:
        env = {}

        def setenv(self, k, v):
            self.env[k] = v

    mp = MP()
    listed[0].apply(mp)
    assert mp.env == {MUTANT_ENV: listed[0].name}


@pytest.mark.parametrize("call, kind, gate_up, want", [
    ({"name": "shuffle_weight", "args": [None], "kwargs": {"is_guinterleave": True, "gate_up": True}}, "weight", True, True),
    ({"name": "shuffle_weight", "args": [None], "kwargs": {"is_guinterleave": False, "gate_up": False}}, "weight", False, False),
    ({"name": "shuffle_scale", "args": [None, 4, True, False], "kwargs": {}}, "scale", False, True),
    ({"name": "shuffle_weight_a16w4", "args": [None, 16, True], "kwargs": {}}, "weight", True, True),
    ({"name": "shuffle_scale_a16w4", "args": [None, 4, False], "kwargs": {}}, "scale", False, True),
    ({"name": "shuffle_scale", "args": [None, 4, True, True], "kwargs": {}}, "scale", False, None),
])
def test_gate_mode_check_reads_the_layout_sglang_shuffled_with(call, kind, gate_up, want):
    assert checks.shuffle_flag([call], kind, gate_up) is want


def test_require_sglang_capability_is_missing_with_a_reason_when_nothing_can_be_driven(tmp_path, monkeypatch):
    monkeypatch.setenv("FP4MOE_SGLANG_ROOT", str(tmp_path))
    assert "sglang" in hardware.parse_require("sglang")
    caps = hardware.detect(shared_present=False, probes=capability_probes())
    assert not caps.has("sglang")
    assert str(tmp_path) in caps.reason("sglang") and "srt/layers/quantization/fp8.py" in caps.reason("sglang")


def _gate(capsys, *args):
    from fp4moe.commands import main as cli

    rc = cli.main(["sglang-check", *args])
    cap = capsys.readouterr()
    return rc, cap.out + cap.err


def test_no_sglang_to_drive_exits_2_naming_the_fix(capsys, monkeypatch):
    monkeypatch.delenv("FP4MOE_SGLANG_ROOT", raising=False)
    monkeypatch.delenv("FP4MOE_SGLANG_WHEEL", raising=False)
    monkeypatch.setattr(source, "installed", lambda: None)
    rc, out = _gate(capsys)
    assert rc == 2 and "no SGLang to drive" in out and "--no-deps sglang==" in out, out


@needs_child_deps
def test_release_without_the_fp4_aiter_branch_exits_2_before_any_child(capsys, tmp_path):
    for rel, text in ((source.FP8_FILE, FP8_0_5_19), (source.RUNNER_FILE, "")):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    (tmp_path / "sglang" / "_version.py").write_text("__version__ = '0.5.12'\n")
    rc, out = _gate(capsys, "--sglang-root", str(tmp_path))
    assert rc == 2 and "sglang 0.5.12" in out and "no DeepSeek-V4 FP4 aiter branch" in out, out


def test_wheel_that_is_not_a_zip_exits_2(capsys, tmp_path):
    whl = tmp_path / "sglang-9.9.9-py3-none-any.whl"
    whl.write_bytes(b"not a zip")
    rc, out = _gate(capsys, "--sglang-wheel", str(whl))
    assert rc == 2 and str(whl) in out, out


# --------------------------------------------------------------------------- gfx950 mode helpers
from fp4moe.targets.sglang import modes  # noqa: E402  (pure: no SGLang, no stubs)


@pytest.mark.parametrize("kwargs, tokens, bound, want", [
    ({"quant_dtype_a": torch.float8_e4m3fn, "gate_mode": "interleave"}, 16, None, "a8w4"),  # SGLang's fp8_activations
    ({"gate_mode": "interleave"}, 16, None, "a16w4"),  # aiter default bound 256 > 16 tokens
    ({"gate_mode": "interleave"}, 16, "0", "a8w4"),  # AITER_BF16_FP8_MOE_BOUND=0 (DeepSeek-V4 launch)
    ({"gate_mode": "interleave"}, 255, "256", "a16w4"),
    ({"gate_mode": "interleave"}, 256, "256", "a8w4"),
    ({}, 4096, "0", "a16w4"),  # separated: the bound rule does not apply
])
def test_effective_act_mode_follows_aiters_rule(monkeypatch, kwargs, tokens, bound, want):
    if bound is None:
        monkeypatch.delenv(modes.BOUND_ENV, raising=False)
    else:
        monkeypatch.setenv(modes.BOUND_ENV, bound)
    assert modes.effective_act_mode(kwargs, tokens) == want


def test_recording_wrapper_is_transparent_and_never_computes_in_the_probe():
    """gfx950 mode wraps the real aiter.fused_moe: same signature (SGLang inspects it), same
    arguments through, same result back; during the field probe the kernel is never called."""
    import inspect

    got, seen = [], []

    def real_fused_moe(hidden_states, w1, w2, topk_weight, topk_ids, expert_mask=None, output=None, intermediate_pad=0):
        got.append((hidden_states, w1, expert_mask, intermediate_pad))
        return hidden_states * 2

    compute = {"on": True}
    wrapped = modes.recording(real_fused_moe, lambda *a: seen.append(a[-1]), lambda: compute["on"])
    assert "output" in inspect.signature(wrapped).parameters and wrapped.__wrapped__ is real_fused_moe
    x, mask = torch.randn(3, 4), torch.tensor([1, 0], dtype=torch.int32)
    out = wrapped(x, "w1", "w2", "tw", "ids", expert_mask=mask, intermediate_pad=64)
    assert torch.equal(out, x * 2) and got[0][0] is x and got[0][2] is mask and got[0][3] == 64
    assert seen == [{"expert_mask": mask, "intermediate_pad": 64}]
    compute["on"] = False
    out = wrapped(x, "w1", "w2", "tw", "ids", intermediate_pad=160)
    assert len(got) == 1 and torch.equal(out, torch.zeros_like(x)) and seen[-1] == {"intermediate_pad": 160}


def test_mode_detection_here_is_cpu_with_a_reason_and_forcing_gfx950_raises():
    mode, why = modes.detect_mode("auto")
    if mode == "gfx950":  # pragma: no cover - only on a gfx950 runner with aiter
        pytest.skip(f"this machine is a gfx950 runner ({why})")
    assert mode == "cpu" and why
    with pytest.raises(RuntimeError, match="gfx950 mode requested but"):
        modes.detect_mode("gfx950")
    assert modes.detect_mode("cpu") == ("cpu", "requested")
    with pytest.raises(ValueError, match="not one of"):
        modes.detect_mode("h200")


# --------------------------------------------------------------------------- a relative --sglang-root
def test_relative_sglang_root_is_resolved_before_the_child(tmp_path, monkeypatch):
    """``--sglang-root python`` from an SGLang checkout: the root reaching the child is absolute
    (the child runs in its own work directory), whatever the caller's cwd."""
    import os

    from fp4moe.targets.sglang import source

    inst = source.installed()
    if inst is None:
        pytest.skip("no installed SGLang")
    checkout = tmp_path / "checkout"
    (checkout / "python").mkdir(parents=True)
    (checkout / "python" / "sglang").symlink_to(inst.root / "sglang")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(checkout)
    src = source.resolve(root="python")
    monkeypatch.chdir(elsewhere)
    assert src.root.is_absolute() and src.root == (checkout / "python").resolve(), src
    assert (src.root / source.FP8_FILE).is_file() and str(checkout) in src.origin
    assert os.getcwd() == str(elsewhere)


def _fresh_tmpdir(tmp_path, monkeypatch):
    import tempfile

    t = tmp_path / "tmpdir"
    t.mkdir()
    monkeypatch.setenv("TMPDIR", str(t))
    monkeypatch.setattr(tempfile, "tempdir", None)
    return t


def test_work_directory_removed_on_refused_options_and_child_failure(tmp_path, monkeypatch):
    from fp4moe.infra import runner
    from fp4moe.infra.errors import GateCannotRun
    from fp4moe.targets.sglang import source, target

    t = _fresh_tmpdir(tmp_path, monkeypatch)
    monkeypatch.setattr(target, "missing_deps", lambda: [])  # judged here: the work folder, not this machine's deps
    src = source.SGLangSource(root=tmp_path, origin="test", version="0")
    (tmp_path / source.FP8_FILE).parent.mkdir(parents=True)
    (tmp_path / source.FP8_FILE).write_text("if _use_aiter and layer.is_fp4_expert:\n    pass\n")
    rows = [target.Row("dsv4-pro", 16)]
    with pytest.raises(ValueError, match="--aiter-src"):
        target.drive(src, rows, aiter_src=str(tmp_path / "no-aiter"), mode="cpu")
    with pytest.raises(ValueError, match="mode"):
        target.drive(src, rows, mode="tpu")
    assert list(t.iterdir()) == []

    class NoRecord:
        record, partial, seconds, timed_out = None, None, 0.0, False

        def why_no_record(self):
            return "timed out (test)"

    seen = []

    def fake_run(args, **kw):
        from pathlib import Path

        seen.append(args[-1])
        assert Path(args[-1]).is_file() and any(Path(args[-1]).parent.glob("ckpt-*")), "the inputs were written"
        return NoRecord()

    monkeypatch.setattr(runner, "run_python", fake_run)
    with pytest.raises(GateCannotRun, match="timed out"):
        target.drive(src, rows, mode="cpu")
    assert seen and list(t.iterdir()) == [], list(t.iterdir())


def test_pad_bytes_judged_by_meaning():
    import torch

    from fp4moe.targets.sglang.checks import pad_bytes_harmful, pad_mask

    u8 = lambda *v: torch.tensor(v, dtype=torch.uint8)
    assert pad_bytes_harmful("w13_scale", u8(0x7F, 0x00, 0x7F)) == ""  # scale 1.0 over FP4 zeros: inert
    assert "0xFF" in pad_bytes_harmful("w2_scale", u8(0x7F, 0xFF))
    assert pad_bytes_harmful("w13", u8(0x00, 0x08, 0x80, 0x88)) == ""  # +0 / -0 codes
    assert "non-zero FP4" in pad_bytes_harmful("w2", u8(0x00, 0x10))
    m13 = pad_mask("w13", (1, 2 * 128, 4), 96, 128)
    assert int(m13.sum()) == 2 * 32 * 4 and not m13[0, :96].any() and m13[0, 96:128].all() and m13[0, 224:].all()
    m2 = pad_mask("w2_scale", (1, 8, 4), 96, 128)
    assert not m2[..., :3].any() and m2[..., 3:].all()


def test_aiter_attribute_table_matches_the_shared_aiter_tree():
    """Every attribute of the table is read where it says in aiter e4048607, and the tree reads
    no other attribute of w1/w2 (a new one would need a meaning before the gate can judge it)."""
    from fp4moe.infra.paths import REPO_ROOT
    from fp4moe.targets.aiter import tensor_attrs

    tree = REPO_ROOT.parent / "shared" / "aiter" / "e4048607"
    if not (tree / "aiter" / "fused_moe.py").is_file():
        pytest.skip(f"no aiter tree at {tree}")
    got = tensor_attrs.scan(tree)
    assert set(got) == set(tensor_attrs.KNOWN), (sorted(got), sorted(tensor_attrs.KNOWN))
    for key, a in tensor_attrs.KNOWN.items():
        assert set(a.where) == set(got[key]), (key, a.where, got[key])
    attrs, origin = tensor_attrs.attrs_for(str(tree))
    assert "aiter tree" in origin and all(a.meaning != "unknown" for a in attrs)


def test_new_mutants_are_catalogued():
    from fp4moe.targets.sglang.mutations import MUTANTS

    assert {"is_shuffled_lost", "all_mxfp8_activations", "swiglu_limit_fp8_only", "topk_renormalised",
            "topk_bf16_prepermute", "gate_up_swap_padding", "torch_empty_pads"} <= set(MUTANTS)


def _sglang_tree_importing(tmp_path, module: str):
    """A minimal SGLang tree (the two files the gate looks for) whose fp8.py imports ``module``
    first, as SGLang 0.5.23's msgspec_utils imports pydantic_core."""
    root = tmp_path / "sg"
    fp8 = root / source.FP8_FILE
    runner = root / source.RUNNER_FILE
    for f in (fp8, runner):
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("")
    (root / "sglang" / "version.py").write_text('__version__ = "0.0.1"\n')
    fp8.write_text(f"import {module}\n\nif _use_aiter and layer.is_fp4_expert:\n    pass\n")
    return root


def test_missing_module_line_names_the_package_and_the_extra():
    line = source.missing_module_line("pydantic_core.core_schema", "0.5.23")
    assert "cannot import pydantic_core.core_schema" in line and "pip install pydantic-core" in line
    assert "fp4-moe-gate[sglang]" in line
    line = source.missing_module_line("undeclared_xyz", "0.5.23")
    assert "neither in the sglang extra" in line and "nor stubbed" in line and "pip install undeclared_xyz" in line


@pytest.mark.slow
def test_a_module_the_child_cannot_import_is_exit_2_naming_it(gate, tmp_path):
    """The SGLang child hits a module neither installed nor stubbed: one line naming it and
    where it should be declared (for a REAL_DEPS module: its pip name and the extra)."""
    root = _sglang_tree_importing(tmp_path, "fp4moe_undeclared_dep_xyz")
    gate("sglang-check", "--sglang-root", root, "--model", "dsv4-pro", "--tp", "8", "--quiet", inputs=[root]).cannot_run(
        "cannot import fp4moe_undeclared_dep_xyz", "sglang extra", "stubbed")


@pytest.mark.slow
def test_require_sglang_proves_the_child_can_import(tmp_path, monkeypatch):
    """``--require sglang``'s deep probe runs the child's import, not only finds SGLang."""
    root = _sglang_tree_importing(tmp_path, "fp4moe_undeclared_dep_xyz")
    monkeypatch.setenv("FP4MOE_SGLANG_ROOT", str(root))
    shallow_ok, _ = capability_probes()["sglang"]()
    ok, why = capability_probes(deep=["sglang"])["sglang"]()
    assert shallow_ok and not ok and "cannot import fp4moe_undeclared_dep_xyz" in why, why


@pytest.mark.parametrize("eb, says", [
    ({"output": {"tensor": True, "shape": [0, 512], "dtype": "bfloat16"}, "fused_moe_calls": 0}, None),
    ({"output": {"tensor": True, "shape": [0, 512], "dtype": "bfloat16"}, "fused_moe_calls": 1}, "fused_moe called 1 time"),
    ({"output": {"tensor": True, "shape": [0, 512], "dtype": "float32"}, "fused_moe_calls": 0}, "output float32 [0, 512]"),
    ({"error": "IndexError: index 0 is out of bounds", "fused_moe_calls": 0}, "raised IndexError"),
    (None, "no empty-batch run"),
])
def test_empty_batch_judgement(eb, says):
    from fp4moe.targets.sglang.checks import empty_batch_problems

    bad = empty_batch_problems(eb, 512)
    assert (bad == []) if says is None else (bad and says in bad[0]), bad


@pytest.mark.parametrize("fp8, says", [
    ("def f(layer):\n    return 0\n", "has no DeepSeek-V4 FP4 aiter branch"),
    ("def broken(:\n", "syntax error at line 1"),
    (None, "cannot read it: FileNotFoundError"),
], ids=["no-branch", "syntax-error", "no-fp8"])
@needs_child_deps
def test_the_fp4_branch_is_looked_for_once_before_any_input_or_child(tmp_path, monkeypatch, fp8, says):
    """``target.drive`` (the command and the tier both drive through it) refuses a tree whose
    fp8.py lacks the DeepSeek-V4 FP4 aiter branch before it writes an input or starts a child;
    the child does not look again."""
    from fp4moe.infra import runner
    from fp4moe.infra.errors import GateCannotRun
    from fp4moe.infra.paths import REPO_ROOT
    from fp4moe.targets.sglang import target

    t = _fresh_tmpdir(tmp_path, monkeypatch)
    if fp8 is not None:
        (tmp_path / source.FP8_FILE).parent.mkdir(parents=True)
        (tmp_path / source.FP8_FILE).write_text(fp8)
    monkeypatch.setattr(runner, "run_python", lambda *a, **k: pytest.fail("a child was started"))
    src = source.SGLangSource(root=tmp_path, origin="test", version="0.5.12")
    with pytest.raises(GateCannotRun) as e:
        target.drive(src, [target.Row("dsv4-pro", 16)], mode="cpu")
    assert str(e.value).startswith("sglang 0.5.12 (test): ") and says in str(e.value), str(e.value)
    assert list(t.iterdir()) == []
    drive_src = (REPO_ROOT / "fp4moe" / "targets" / "sglang" / "child").glob("*.py")
    assert not [p.name for p in drive_src if "has_fp4_aiter_branch" in p.read_text()]
