"""The SGLang child's aiter when a tree is executed: the dispatch loader's ``aiter`` is the one
SGLang imports, its real ``fused_moe`` computes SGLang's call (``sglang-check --aiter-dispatch``).

Index: :func:`load` (the tree loaded before SGLang is imported: ``aiter`` and ``csrc`` are the
loader's package objects, every compiled op a stand-in of the one table), :func:`shuffles` (the
tree's own ``aiter.ops.shuffle`` functions), :func:`wrap_fused_moe` (the tree's ``fused_moe``
kept, recorded twice: SGLang's keywords by the spy's ``record_call``, the kernel stages by
:class:`fp4moe.targets.aiter.dispatch.calls.LiveCalls`), :func:`row_fields` (a row's dispatch
records: the call as driven, and SGLang's keywords at the model's full per-rank shape on
``meta``, where aiter's tuned configs apply). CHILD PROCESS ONLY.

What SGLang imports from aiter on its FP4 MoE path (``ActivationType``, ``QuantType``,
``dtypes``, ``aiter.fused_moe.fused_moe``, ``aiter.ops.flydsl.moe_common.GateMode``,
``aiter.ops.shuffle.*``, ``aiter.utility.fp4_utils``) is the tree's own Python, executed by the
loader; nothing is added for SGLang. The one table of what is not the tree's code is
``fp4moe.targets.aiter.dispatch.loader.PATCHES`` plus ``standins.STANDINS``; the SGLang side
adds only recording (the shuffles and ``fused_moe`` wrapped, same arguments in, same result out).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from fp4moe.targets.sglang import modes
from fp4moe.targets.sglang.child import aiter_spy

#: the loaded tree, its recorder, the config log and the live calls (one load per child)
STATE: dict = {}


def load(aiter_src: str, rec: dict) -> None:
    """The tree's ``aiter`` loaded (``rec["dispatch"]``: what the parent needs to judge it)."""
    from fp4moe.targets.aiter.dispatch import calls, loader, standins

    tree = loader.locate(aiter_src)
    recorder = standins.Recorder()
    ld = loader.load_fused_moe(tree, Path(os.getcwd()), recorder, env={})
    cfg_log: list = []
    calls.observe_cfgs(ld.fused_moe, cfg_log)
    STATE.update(tree=tree, ld=ld, recorder=recorder, cfg_log=cfg_log, live=calls.LiveCalls(recorder, cfg_log))
    rec["dispatch"] = {"tree": str(tree.root), "config_file": os.path.basename(ld.config_file),
                       "config_sources": [os.path.relpath(p, tree.root) for p in ld.config_sources],
                       "computed": sorted(recorder.compute)}
    rec["kernel"] = f"aiter.fused_moe executed from {tree.root / 'aiter/fused_moe.py'} (compiled ops stood in, computing)"


def shuffles() -> tuple[dict, str]:
    """The tree's ``aiter/ops/shuffle.py`` functions, as the loader imported them."""
    import importlib

    mod = importlib.import_module("aiter.ops.shuffle")
    funcs = {k: v for k, v in vars(mod).items() if callable(v) and not k.startswith("_")}
    return funcs, f"aiter shuffle.py of {STATE['tree'].root} (executed by the dispatch loader)"


def wrap_fused_moe() -> None:
    afm = sys.modules["aiter.fused_moe"]
    STATE["real"] = afm.fused_moe
    afm.fused_moe = modes.recording(STATE["live"].wrap(afm.fused_moe), aiter_spy.record_call,
                                    lambda: aiter_spy.SPY_MODE["compute"])


def active() -> bool:
    return bool(STATE)


def count() -> int:
    return len(STATE["live"].done) if STATE else 0


def row_fields(row: dict, row_rec: dict, n0: int) -> dict:
    """``{"dispatch": the row's one executed call, "dispatch_full": SGLang's keywords at full
    size}`` for a row whose call was recorded (``row_rec`` holds ``fused_moe_kwargs``); {} when
    no tree is loaded or SGLang's call never reached ``fused_moe``."""
    if not STATE or "fused_moe_kwargs" not in row_rec:
        return {}
    from fp4moe.targets.aiter.dispatch import calls, sglang_call

    out: dict = {}
    live = STATE["live"].done[n0:]
    if len(live) == 1:
        out["dispatch"] = live[0]
    ep = max(1, len(row.get("expert_mask") or []) // max(1, row["experts"]))
    srow = sglang_call.SGLangRow(row["label"], row["model"], row["tp"], ep, row["experts"], row["hidden"],
                                 row["intermediate_per_partition"])
    drows, _ = sglang_call.rows_from_sglang([dict(row_rec, label=row["label"])], [srow])
    full = next(r for r in drows if r.id.endswith(sglang_call.FULL_SIZE))
    out["dispatch_full"] = calls.run_row(STATE["ld"], STATE["recorder"], full.to_child(), STATE["cfg_log"],
                                         STATE["real"])
    return out
