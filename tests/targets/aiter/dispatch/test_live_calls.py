"""The tree's fused_moe as the SGLang child runs it (fp4moe.targets.aiter.dispatch.calls.LiveCalls)
and the path -> reference options the parent compares its output with (sglang checks)."""

from __future__ import annotations

import pytest

from fp4moe.targets.aiter.dispatch import calls, table
from fp4moe.targets.aiter.dispatch.compute import StandInError
from fp4moe.targets.sglang import checks


class _Recorder:
    def __init__(self):
        self.calls, self.compute = [], {"op": object()}


def _real(rec, log, refuse_while_computing: bool):
    def fused_moe(x, *, k=0):
        """the tree's docstring"""
        rec.calls.append({"op": "ck_moe_stage1", "module": "m", "args": {"computing": bool(rec.compute)}})
        log.append({"cfg_args": [x], "cfg_kwargs": {}, "metadata": {}})
        if refuse_while_computing and rec.compute:
            raise StandInError("ck_moe_stage1: argument expert_mask is not modelled (got a value)")
        return [x + k]
    return fused_moe


def test_a_call_keeps_its_own_op_records_and_result_unchanged():
    rec, log = _Recorder(), []
    live = calls.LiveCalls(rec, log)
    f = live.wrap(_real(rec, log, False))
    assert f(3, k=4) == [7] and f(5) == [5]
    assert f.__doc__ == "the tree's docstring" and f.__wrapped__  # the signature SGLang inspects is the tree's
    assert [len(e["calls"]) for e in live.done] == [1, 1] and live.done[1]["cfgs"][0]["cfg_args"] == [5]
    assert "not_computed" not in live.done[0] and live.done[0]["result"] == [7]


def test_a_stand_in_that_does_not_model_an_argument_reruns_recording_only_and_says_so():
    rec, log = _Recorder(), []
    live = calls.LiveCalls(rec, log)
    out = live.wrap(_real(rec, log, True))(2)
    e = live.done[0]
    assert out == [2] and "expert_mask is not modelled" in e["not_computed"] and "error" not in e
    assert [c["args"]["computing"] for c in e["calls"]] == [False]  # the second attempt's records only
    assert rec.compute  # the computing table is back for the next call


def test_anything_else_the_tree_raises_reaches_the_caller_recorded():
    rec, log = _Recorder(), []
    live = calls.LiveCalls(rec, log)
    with pytest.raises(TypeError):
        live.wrap(_real(rec, log, False))(1, quant_dtype_a=1)
    assert "quant_dtype_a" in live.done[0]["error"] and live.done[0]["calls"] == []


def test_every_stage_one_path_has_reference_options():
    paths = {op.path for op in table.STAGE_OPS.values() if op.stage == 1}
    assert paths == set(checks.DISPATCH_REFERENCE)
    assert checks.dispatch_path({"calls": [{"op": "moe_sorting_fwd"}, {"op": "ck_moe_stage1"}, {"op": "ck_moe_stage2"}]}) \
        == "CK 2-stage"
    assert checks.dispatch_path({"calls": [{"op": "moe_sorting_fwd"}]}) is None
