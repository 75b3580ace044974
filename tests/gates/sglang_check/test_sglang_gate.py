"""``fp4moe-gate sglang-check`` end to end: exit codes, named checks, printed comparisons.

Each case is a full child drive of an SGLang (15-25 s on 2 cores), so all are ``slow``
(CI: ``pytest --slow -m slow``). The must-holds: a release that pads but does not tell
``fused_moe``, or pads DeepSeek-V4-Pro TP8 to 512, exits 1 naming the check -- shown with
mutants of SGLang's own code and, where its wheel is in ``.wheels/``, with the real 0.5.13.
"""

from __future__ import annotations

import json
import re

import pytest
from shared_runs import SharedRuns

from fp4moe.commands import main as cli
from fp4moe.targets.sglang.source import WHEEL_DIR

pytestmark = [pytest.mark.sglang, pytest.mark.slow]
#: the xdist group of the two tests that read one ``--mutant scale_pad_0xff`` run
SCALE_PAD_FF_GROUP = "sglang-check-scale-pad-0xff"


def _run_gate(capsys, *args):
    rc = cli.main(["sglang-check", *args])
    cap = capsys.readouterr()
    return rc, cap.out + cap.err


#: one run per command line for the session (the pinned SGLang, a mutant of its code, the child's
#: seeded checkpoint: the output is a function of the arguments); each test judges what it reads
_GATE_RUNS = SharedRuns(_run_gate, lambda capsys, *args: args)


def _gate(capsys, *args):
    return _GATE_RUNS(capsys, *args)


#: the checks released SGLang fails through 0.5.23 (tests/targets/sglang/test_sglang_tier.py
#: KNOWN_ROUTER_FINDINGS: the HIP hash router's unfloored 0/0, the ROCm decode router's
#: as-written log(1 + exp(x))); nothing else may fail
KNOWN_FINDING = re.compile(r"; FAILED: (router_numerics:hash_topk_triton|router_numerics:rocm_router_gate)"
                           r"(, router_numerics:rocm_router_gate)?$", re.M)


def _held(rc: int, out: str) -> bool:
    """Every check held, or only the known router findings failed (exit 1 naming them alone)."""
    return rc == 0 or (rc == 1 and bool(KNOWN_FINDING.search(out)))


def test_pinned_sglang_exits_0_and_prints_every_comparison(capsys):
    rc, out = _gate(capsys, "--model", "dsv4-pro", "--tp", "16")
    assert _held(rc, out), out
    for name in ("processed_bytes", "scale_pad_bytes", "pad_contract", "layer_tensors", "gate_mode",
                 "quant_info_fields", "footprint", "output"):
        assert f"ok   {name}" in out, out
    assert "I_p 192 -> SGLang 256" in out and "intermediate_pad=64" in out


@pytest.mark.reproof  # a zoo --target sglang mutant: the zoo kills it at merge time
def test_pad_not_told_to_fused_moe_exits_1_naming_pad_contract(capsys):
    rc, out = _gate(capsys, "--model", "dsv4-pro", "--tp", "16", "--mutant", "pad_not_propagated")
    assert rc == 1, out
    assert "FAIL pad_contract" in out and "padded 192 -> 256 (pad 64) but fused_moe got intermediate_pad=0" in out, out


@pytest.mark.reproof  # a zoo --target sglang mutant: the zoo kills it at merge time
def test_pro_tp8_padded_to_512_exits_1_naming_footprint_and_bytes(capsys):
    rc, out = _gate(capsys, "--model", "dsv4-pro", "--tp", "8", "--mutant", "align_256", "--json", "-", "--quiet")
    assert rc == 1, out
    res = json.loads(out[out.index("{"):])
    assert {"footprint", "processed_bytes"} <= set(res["failed_checks"]), res["failed_checks"]
    fp = next(c for c in res["checks"] if c["name"] == "footprint")
    assert "2246049792 bytes (1.325 of budget" in fp["detail"], fp


@pytest.mark.reproof  # a zoo --target sglang mutant: the zoo kills it at merge time
@pytest.mark.parametrize("mutant, check", [("gate_up_one_block", "processed_bytes"), pytest.param(
    "scale_pad_0xff", "scale_pad_bytes", marks=pytest.mark.xdist_group(SCALE_PAD_FF_GROUP))])
def test_layout_and_nan_mutants_exit_1(capsys, mutant, check):
    rc, out = _gate(capsys, "--model", "dsv4-pro", "--tp", "16", "--mutant", mutant)
    assert rc == 1 and f"FAIL {check}" in out, out


def test_inert_pad_difference_exits_0_saying_inert(capsys):
    """Scale padding 0x7F (e8m0 1.0) over FP4-zero weight pads, written by SGLang's own padding
    code in the child: every padded product is 1.0 x 0, so the output is bitwise the same and
    processed_bytes holds, printing the INERT line (real bytes still bitwise)."""
    rc, out = _gate(capsys, "--model", "dsv4-pro", "--tp", "16", "--mutant", "scale_pad_0x7f")
    assert _held(rc, out), out
    assert "ok   processed_bytes" in out and "INERT pad difference (not a regression)" in out, out
    assert "w13_scale: 8192 pad bytes differ from the reference (bytes 0x7F)" in out, out
    assert "ok   output" in out and "ok   scale_pad_bytes" in out, out


@pytest.mark.reproof  # a zoo --target sglang mutant: the zoo kills it at merge time
@pytest.mark.parametrize("mutant, says", [
    pytest.param("scale_pad_0xff", "scale pad bytes 0xFF (e8m0 NaN)", marks=pytest.mark.xdist_group(SCALE_PAD_FF_GROUP)),
    ("weight_pad_fp4_nonzero", "weight pad bytes hold non-zero FP4 codes (first 0x22)"),
    ("torch_empty_pads", "weight pad bytes hold non-zero FP4 codes (first 0xA5)"),  # the child's poison
])
def test_harmful_pad_bytes_still_fail_processed_bytes(capsys, mutant, says):
    """NaN scale pads and non-zero FP4 pad codes are not inert: exit 1 naming processed_bytes."""
    rc, out = _gate(capsys, "--model", "dsv4-pro", "--tp", "16", "--mutant", mutant)
    assert rc == 1 and "FAIL processed_bytes" in out and says in out, out


def test_real_release_0_5_13_pads_without_telling_fused_moe(capsys):
    wheels = sorted(WHEEL_DIR.glob("sglang-0.5.13-*.whl"))
    if not wheels:
        pytest.skip(f"no sglang 0.5.13 wheel in {WHEEL_DIR} (fp4moe-gate sglang-replay or pip download --no-deps sglang==0.5.13)")
    rc, out = _gate(capsys, "--sglang-wheel", str(wheels[0]), "--model", "dsv4-pro", "--tp", "8")
    assert rc == 1, out
    assert "FAIL pad_contract" in out and "padded 384 -> 512 (pad 128) but fused_moe got intermediate_pad=0" in out
    assert "FAIL footprint" in out and "sglang 0.5.13" in out


@pytest.mark.reliability  # a fault: no SGLang to drive / its import fails; exit 4 before any test
def test_require_sglang_fails_the_session_before_any_test(tmp_path):
    """``--require sglang`` where no SGLang can be driven: a usage error, no test ran."""
    import os
    import subprocess
    import sys

    from fp4moe.infra.paths import REPO_ROOT

    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--require", "sglang",
                        "tests/model/test_catalogue.py"], capture_output=True, text=True, cwd=REPO_ROOT, timeout=300,
                       env=dict(os.environ, FP4MOE_SGLANG_ROOT=str(tmp_path)))
    out = r.stdout + r.stderr
    assert r.returncode == 4 and "required capabilities missing" in out and str(tmp_path) in out, out
    assert " passed" not in out


def _shadow_tree(src, dst, rel: str):
    """``dst``: ``src`` as symlinks, except the folders on the way to ``rel`` (real) and ``rel``
    itself (a real copy, returned): one file of a 200 MB tree changed without copying the rest."""
    import os
    import shutil

    parts = rel.split("/")
    here_src, here_dst = src, dst
    for i, part in enumerate(parts):
        here_dst.mkdir(parents=True, exist_ok=True)
        for entry in os.scandir(here_src):
            if entry.name != part:
                os.symlink(entry.path, here_dst / entry.name)
        here_src, here_dst = here_src / part, here_dst / part
        if i == len(parts) - 1:
            shutil.copyfile(here_src, here_dst)
    return here_dst


@pytest.mark.reliability  # a fault: no SGLang to drive / its import fails; exit 4 before any test
def test_require_sglang_whose_import_fails_ends_the_session_before_any_test(tmp_path):
    """``--require sglang`` where SGLang is found (files read) but its child cannot import it: the
    proof runs beside collection (conftest's ``_Proofs``) and is joined before the first test, so the
    session still ends as a usage error (exit 4) naming the module, with no test run."""
    import os
    import subprocess
    import sys

    from fp4moe.infra.paths import REPO_ROOT
    from fp4moe.targets.sglang.source import FP8_FILE, installed

    src = installed()
    if src is None:
        pytest.skip("no installed SGLang to shadow")
    fp8 = _shadow_tree(src.root, tmp_path / "root", FP8_FILE)
    fp8.write_text(fp8.read_text() + "\nimport fp4moe_planted_missing_module\n")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--require", "sglang",
                        "tests/model/test_catalogue.py"], capture_output=True, text=True, cwd=REPO_ROOT, timeout=300,
                       env=dict(os.environ, FP4MOE_SGLANG_ROOT=str(tmp_path / "root")))
    out = r.stdout + r.stderr
    assert r.returncode == 4 and "required capabilities missing (--require=sglang)" in out, out
    assert "fp4moe_planted_missing_module" in out.split("ERROR:")[-1], out
    assert " passed" not in out and "no tests ran" in out, out


def test_forced_gfx950_mode_without_one_exits_2_naming_why(capsys):
    from fp4moe.targets.sglang import modes

    if modes.detect_mode("auto")[0] == "gfx950":  # pragma: no cover - on a gfx950 runner it would run
        pytest.skip("this machine is a gfx950 runner")
    rc, out = _gate(capsys, "--model", "dsv4-pro", "--tp", "8", "--mode", "gfx950")
    assert rc == 2 and "gfx950 mode requested but" in out, out


def test_every_default_row_through_sglangs_own_weight_loader(capsys):
    """The whole layer's checkpoint, TP-sharded by SGLang's FusedMoE.weight_loader as rank 7
    (the CPU tier does one such row, dsv4-flash-tp8-rank5): same bytes as fp4moe.model.checkpoint's
    own shard after SGLang's processing, at Pro/Flash TP 8/16."""
    rc, out = _gate(capsys, "--tp-rank", "7")
    assert _held(rc, out), out
    assert out.count("TP rank 7/") == 4 and "shard taken by SGLang's FusedMoE.weight_loader" in out, out


def test_a8w4_keyword_unknown_to_the_aiter_tree_exits_1(capsys):
    """With ``--aiter-src``, the spy takes only the keywords that tree's ``aiter.fused_moe``
    accepts (its syntax tree), as the real function would: SGLang 0.5.23's fp8_activations path
    passes ``quant_dtype_a``, which aiter e4048607a5's fused_moe has no parameter for."""
    tree = WHEEL_DIR / "aiter-e4048607a5"
    if not (tree / "aiter" / "fused_moe.py").is_file():
        pytest.skip(f"no aiter tree with fused_moe.py at {tree} (fp4moe-gate sglang-replay --aiter current=e4048607a5 makes it)")
    rc, out = _gate(capsys, "--model", "dsv4-pro", "--tp", "8", "--aiter-src", str(tree))
    if "fp8_activations" not in out:  # a release without SGLang's fp8_activations passes no quant_dtype_a
        pytest.skip("this SGLang has no AiterMoeQuantInfo.fp8_activations")
    assert rc == 1, out
    assert "FAIL drive             dsv4-pro-tp8-a8w4" in out and "unexpected keyword argument(s) ['quant_dtype_a']" in out, out


def _recipe_line(path) -> str:
    from fp4moe.infra.paths import REPO_ROOT

    lines = [ln for ln in (REPO_ROOT / path).read_text().splitlines() if "sglang-check --sglang-root" in ln and ln.startswith("fp4moe-gate")]
    assert len(lines) == 1, lines
    return lines[0].split("#")[0].strip()


#: the documents that print SGLang's CI recipe
RECIPE_DOCS = ("README.md", "docs/sglang.md")


def test_ci_recipe_runs_as_printed_from_an_sglang_checkout(tmp_path):
    """The second line of the two-line recipe, exactly as printed, from an SGLang source tree
    (python/sglang): exit 0, and $TMPDIR gains nothing. README.md and docs/sglang.md print the
    same line (asserted, so one run is the run of both). (The first line, pip install from git,
    needs the network: not run here.)"""
    import os
    import shlex
    import subprocess
    import sys

    from fp4moe.infra.paths import REPO_ROOT
    from fp4moe.targets.sglang import source

    inst = source.installed()
    if inst is None:
        pytest.skip("no installed SGLang to stand in for a checkout")
    lines = {doc: _recipe_line(doc) for doc in RECIPE_DOCS}
    assert set(lines.values()) == {"fp4moe-gate sglang-check --sglang-root python --known-defects"}, lines
    line = lines[RECIPE_DOCS[0]]
    (tmp_path / "sglang-checkout" / "python").mkdir(parents=True)
    (tmp_path / "sglang-checkout" / "python" / "sglang").symlink_to(inst.root / "sglang")
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    argv = shlex.split(line)
    cmd = [sys.executable, "-m", "fp4moe.commands.main", *argv[1:]]  # fp4moe-gate, from this checkout
    env = dict(os.environ, TMPDIR=str(tmpdir), PYTHONPATH=str(REPO_ROOT), FP4MOE_SGLANG_MODE="cpu")
    r = subprocess.run(cmd, cwd=tmp_path / "sglang-checkout", capture_output=True, text=True, env=env, timeout=300)
    assert _held(r.returncode, r.stdout), (r.stdout[-3000:], r.stderr[-2000:])
    assert "checks held over" in r.stdout and str(tmp_path / "sglang-checkout" / "python") in r.stdout
    assert [p for p in tmpdir.iterdir() if p.name.startswith("fp4moe-sglang-")] == [], list(tmpdir.iterdir())
