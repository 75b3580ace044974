"""Child process: drive an SGLang release's own FP4 MoE code for one or more catalogue rows.

``python -m fp4moe.targets.sglang.child.drive REQUEST.json`` -- run only by ``fp4moe.targets.sglang.target``
through ``fp4moe.infra.runner.run_judged``. It imports SGLang with stubs (``fp4moe.targets.sglang.child.stubs``),
sets the patch points of ``fp4moe.targets.sglang.child.patches``, and for each row runs SGLang's code:

``Fp8Config(is_fp4_experts=True)`` -> ``Fp8MoEMethod.create_weights`` (int8 packed weights,
e8m0 scales as SGLang makes them) -> rank 0's checkpoint shard copied in ->
``process_weights_after_loading`` -> ``maybe_get_hip_aiter_quant_info`` ->
``AiterRunnerCore.run`` -> ``aiter.fused_moe`` (the spy: records, then runs ``fp4moe.reference.moe``).

Two modes (``request["mode"]``: ``auto``, ``cpu`` or ``gfx950``; ``auto`` picks gfx950 when
this process sees a ROCm torch on a gfx950 GPU and ``import aiter`` works, else cpu):

- ``cpu``: aiter is a stub, the branch selectors are patched (``fp4moe.targets.sglang.child.patches``), the
  shuffles are ``fp4moe.reference.layout``'s or ``--aiter-src``'s, ``fused_moe`` is the spy, which
  records and runs ``fp4moe.reference.moe``.
- ``cpu`` with ``request["aiter_dispatch"]`` (``sglang-check --aiter-src T --aiter-dispatch``): no
  aiter stub; the tree's ``aiter`` is loaded first by the dispatch loader
  (``fp4moe.targets.sglang.child.dispatch_aiter``), SGLang imports it, its shuffles run and its real
  ``fused_moe`` computes SGLang's call (every compiled op a computing stand-in); each row's record
  carries the call's op records as driven and at full size (``dispatch``, ``dispatch_full``).
- ``gfx950``: no aiter stub and no flag patch. SGLang computes its own selectors at import on
  the real hardware (the drive refuses, exit 2, when they do not select the FP4 aiter branch),
  aiter's real shuffles run on the GPU and the real ``aiter.fused_moe`` computes the output.
  Both are wrapped transparently (same arguments in, same result out; ``functools.wraps`` keeps
  the signature SGLang inspects) only to record the calls, so the pad contract and field checks
  still run. Only modules that are not installed at all may be stubbed (never aiter, triton or
  torch), and the TP size still comes from ``patches.tp_functions`` / ``parallel_override``
  (no process group exists in the child). Never executed: no gfx950 machine was available.

It judges nothing: the processed tensors and the runner's output of each row go back as
``LABEL.safetensors`` (``runner.ChildSession.put_tensors``), and one record
(``fp4moe.targets.sglang.record.SCHEMA``) says what it saw; ``fp4moe.gates.sglang_check`` judges in
the parent. It also builds the same layer at full DeepSeek-V4 size on the ``meta`` device (shapes
only, no memory) so the parent can price SGLang's real footprint.

The session (``runner.child_session``) is taken before SGLang is imported. The stage it names
follows the drive: each SGLang module whose import-time code runs (``import_trail``), then each
row, so SGLang code that ends the process (``os._exit``, ``sys.exit``, a hang killed at the time
limit) is named by its file and line or by the module it was importing, never by its last line of
output. The DeepSeek-V4 FP4 aiter branch of fp8.py is looked for once, by the parent, before this
child starts (``fp4moe.targets.sglang.target.require_fp4_branch``).

One spine (:func:`main`), two setups (``SETUPS``: what happens before and after SGLang is
imported in each mode); the concepts live beside it: ``aiter_spy`` (aiter's enums, the recording
spy and shuffles), ``import_trail`` (importing SGLang, naming whose code runs), ``layer`` (the layer
built and loaded), ``rows`` (every row driven), ``probes`` (field, runner-path and empty-batch
probes), ``poison`` (fresh memory poisoned).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from fp4moe.infra import runner
from fp4moe.targets.sglang import modes, record
from fp4moe.targets.sglang.child import aiter_spy, import_trail, rows

T0 = time.perf_counter()


def _at(rec: dict, s, stage: str) -> None:
    rec["stage"] = stage
    s.stage(f"at stage {stage!r}")


# --------------------------------------------------------------------------- cpu mode


def cpu_before_import(req: dict, rec: dict) -> dict:
    """The shuffles (``fp4moe.reference.layout``'s or ``--aiter-src``'s) and, with ``--aiter-src``,
    that tree's ``fused_moe`` parameters for the spy."""
    rec["stage"] = "shuffle source"
    os.environ["TRITON_INTERPRET"] = "1"  # SGLang's Triton routers run on this CPU (router_numerics)
    shuffles, rec["shuffle_source"] = aiter_spy.shuffle_provider(req.get("aiter_src"))
    if req.get("aiter_src"):
        from fp4moe.targets.aiter.source import AiterSource, function_params

        src = AiterSource.from_dir(req["aiter_src"])
        aiter_spy.FUSED_MOE_PARAMS.update(names=function_params(src.read("aiter/fused_moe.py"), "fused_moe"),
                                          origin=f"{src.origin}/aiter/fused_moe.py")
        rec["fused_moe_params"] = aiter_spy.FUSED_MOE_PARAMS["names"]  # None: not found, keywords not checked
    return shuffles


def cpu_after_import(fp8, runner_mod, shuffles: dict, rec: dict) -> bool:
    """fp8.py's shuffles and selectors patched (``patches``); False when the patch points of the
    FP4 aiter branch are not there (stage "no branch", exit 2)."""
    from fp4moe.targets.sglang.child import patches

    rec["stage"] = "patch"
    names = patches.shuffle_imports(Path(fp8.__file__).read_text())
    rec["shuffle_imports"] = names
    provided = {n: aiter_spy.recording(n, shuffles[n]) if n in shuffles else aiter_spy.missing(n) for n in names}
    for n in ("shuffle_weight", "shuffle_scale"):
        provided.setdefault(n, aiter_spy.recording(n, shuffles[n]) if n in shuffles else aiter_spy.missing(n))
    shuffle_mod = sys.modules.get("aiter.ops.shuffle") or __import__("aiter.ops.shuffle", fromlist=["x"])
    for n, f in provided.items():
        if n in names:
            setattr(fp8, n, f)
        setattr(shuffle_mod, n, f)
    rec["shuffle_names_missing"] = [n for n in names if n not in shuffles]
    rec["flags"] = patches.set_flags(fp8, patches.FP8_FLAGS)
    rec["runner_flags"] = patches.set_flags(runner_mod, patches.RUNNER_FLAGS)
    missing = [f for f in patches.REQUIRED_FLAGS if not rec["flags"][f]["found"]]
    if missing:
        rec["stage"] = "no branch"
        rec["error"] = (f"sglang {rec['sglang_version']}: fp8.py lacks {missing}, a selector of its DeepSeek-V4 FP4 "
                        "aiter branch (patches.REQUIRED_FLAGS)")
        return False
    return True


# --------------------------------------------------------------------------- cpu mode, a tree executed


def dispatch_before_import(req: dict, rec: dict) -> dict:
    """``--aiter-dispatch``: the tree's aiter loaded (the dispatch loader's package objects are the
    ``aiter`` SGLang imports); the shuffles are the tree's own."""
    from fp4moe.targets.sglang.child import dispatch_aiter

    rec["stage"] = "loading the aiter tree"
    os.environ["TRITON_INTERPRET"] = "1"  # SGLang's Triton routers run on this CPU (router_numerics)
    dispatch_aiter.load(req["aiter_src"], rec)
    shuffles, rec["shuffle_source"] = dispatch_aiter.shuffles()
    return shuffles


def dispatch_after_import(fp8, runner_mod, shuffles: dict, rec: dict) -> bool:
    """As the cpu mode (selectors and shuffles patched), then the tree's ``fused_moe`` recorded."""
    from fp4moe.targets.sglang.child import dispatch_aiter

    if not cpu_after_import(fp8, runner_mod, shuffles, rec):
        return False
    dispatch_aiter.wrap_fused_moe()
    import aiter  # the tree's: its topk_gating is a compiled op; the router is not what this mode executes

    aiter.topk_gating = aiter_spy.spy_topk_gating
    return True


# --------------------------------------------------------------------------- gfx950 mode


def gfx950_before_import(req: dict, rec: dict) -> None:
    if req.get("aiter_src"):
        raise ValueError("--aiter-src: the gfx950 mode runs the installed aiter's own shuffles; drop the option")
    req["device"] = "cuda"  # ROCm torch names HIP devices "cuda"


def gfx950_after_import(fp8, runner_mod, shuffles, rec: dict) -> bool:
    """Real aiter, real selectors (read, never set), recorded (not replaced) shuffles and fused_moe."""
    import importlib

    import torch

    from fp4moe.targets.sglang.child import patches, stubs

    fake = sorted({m.split(".")[0] for m in stubs.STUBBED} & set(modes.REAL_IN_GFX950))
    if fake:
        raise RuntimeError(f"gfx950 mode: {fake} resolved to stubs (not installed?)")
    rec["stage"] = "selectors"
    rec["flags"] = {n: {"found": hasattr(fp8, n), "was": repr(getattr(fp8, n, None)), "now": repr(getattr(fp8, n, None))}
                    for n in modes.GFX950_SELECTORS}
    off = [n for n in modes.GFX950_SELECTORS if hasattr(fp8, n) and not getattr(fp8, n)]
    if off or not hasattr(fp8, "_use_aiter"):
        raise RuntimeError(f"gfx950 mode: SGLang did not select its aiter FP4 branch on this runner: {off or ['_use_aiter absent']} "
                           f"false (SGLANG_USE_AITER={os.environ.get('SGLANG_USE_AITER')!r})")
    rec["runner_flags"] = {}
    rec["stage"] = "record"
    names = patches.shuffle_imports(Path(fp8.__file__).read_text())
    rec["shuffle_imports"] = names
    fallback, _ = aiter_spy.shuffle_provider(None)
    for n in names:  # fp8.py's own bindings of aiter's shuffles, recorded
        if hasattr(fp8, n):
            setattr(fp8, n, aiter_spy.recording(n, getattr(fp8, n), meta_fallback=fallback.get(n)))
    rec["shuffle_names_missing"] = [n for n in names if not hasattr(fp8, n)]
    afm = importlib.import_module("aiter.fused_moe")
    real = afm.fused_moe
    afm.fused_moe = modes.recording(real, aiter_spy.record_call, lambda: aiter_spy.SPY_MODE["compute"])  # the runner imports it at call time
    import aiter

    if getattr(aiter, "fused_moe", None) is real:
        aiter.fused_moe = afm.fused_moe
    rec["shuffle_source"] = f"aiter {getattr(aiter, '__file__', '?')} (real, on {torch.cuda.get_device_name(0)})"
    rec["kernel"] = f"aiter.fused_moe from {getattr(afm, '__file__', '?')}"
    return True


#: the setup of the cpu mode with a tree executed (``request["aiter_dispatch"]``)
DISPATCH = "cpu, aiter tree executed"


class Setup(NamedTuple):
    """What one mode does before SGLang is imported (returns the shuffles to provide) and after
    (patch or record; False: SGLang lacks the branch, the drive stops)."""
    before_import: Callable
    after_import: Callable


SETUPS = {modes.Mode.CPU: Setup(cpu_before_import, cpu_after_import), modes.Mode.GFX950: Setup(gfx950_before_import, gfx950_after_import),
          DISPATCH: Setup(dispatch_before_import, dispatch_after_import)}


# --------------------------------------------------------------------------- the spine


def drive(req: dict, rec: dict, s) -> None:
    """Mode, setup, SGLang imported, setup after import, then every row."""
    _at(rec, s, "mode")
    mode, rec["mode_why"] = modes.detect_mode(req.get("mode") or "auto")
    rec["mode"] = mode
    executed = mode == "cpu" and bool(req.get("aiter_dispatch"))
    if req.get("aiter_dispatch") and not executed:
        raise ValueError("--aiter-dispatch: the gfx950 mode runs the installed aiter itself; drop the option")
    setup = SETUPS[DISPATCH if executed else mode]
    shuffles = setup.before_import(req, rec)
    _at(rec, s, "import")
    fp8, runner_mod = import_trail.import_sglang(req["sglang_root"], {}, mode=mode, stub_aiter=not executed,
                                                 trail=lambda stack, raised: s.stage(import_trail.stage_text(stack, raised)))
    rec["import_seconds"] = round(time.perf_counter() - T0, 2)
    _at(rec, s, "imported")  # SGLang's code that ends the process later is named by its stage
    from fp4moe.targets.sglang.child import stubs

    rec["stubbed_modules"] = sorted({m.split(".")[0] for m in stubs.STUBBED})
    if req.get("import_only"):  # `pytest --require sglang`: can the child import SGLang's FP4 path?
        return
    if not setup.after_import(fp8, runner_mod, shuffles, rec):
        return
    rows.drive_rows(fp8, runner_mod, req, rec, put=lambda label, t: s.put_tensors(f"{label}.safetensors", t), stage=s.stage)
    if req.get("router_probes"):
        from fp4moe.targets.sglang.child import router_numerics

        _at(rec, s, "router numerics")
        rec["router_numerics"] = router_numerics.run(req["router_probes"], req.get("device", "cpu"))
        rec["stage"] = "done"
    rec["stubbed_modules"] = sorted({m.split(".")[0] for m in stubs.STUBBED})  # and those the rows imported


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    req = json.loads(Path(argv[0]).read_text())
    trees = [Path(req["sglang_root"]).resolve() / "sglang"]  # the code under test: named when it exits
    with runner.child_session(record.SCHEMA, trees=trees, speaker="SGLang") as s:  # before SGLang is imported
        rec = record.initial(req.get("sglang_version") or import_trail.sglang_version(req["sglang_root"]), s.unconfined)
        try:
            drive(req, rec, s)
        except Exception as e:  # the verdict: SGLang's code raised here (the parent decides 1 or 2)
            rec["error"] = f"{type(e).__name__}: {e}"
            rec["where"] = rows.where(e)
            if isinstance(e, ModuleNotFoundError) and rec["stage"] == "import" and e.name:
                rec["missing_module"] = e.name  # neither installed nor stubbed: the parent names its package
        rec["seconds"] = round(time.perf_counter() - T0, 2)
        s.finish(rec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
