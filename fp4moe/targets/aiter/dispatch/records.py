"""The record schemas the dispatch children write and the parent reads.

Index: :data:`SCHEMA` (the child's record), :data:`ROWS_OUTPUT` (the JSON output holding the
per-row call records: ``{"rows": [{"id", "calls": [{"op", "module", "args", "build"?,
"unmodelled"?, "computed"?}], "cfgs": [{"cfg_args", "cfg_kwargs", "metadata"}], "result"? |
"error"?}], "import_calls": [...]}``), :data:`ROWS_INPUT` (the rows, written by the parent), :data:`CHILD_MODULE` (started by name, never imported); the numerics
child's: :data:`NUMERICS_CHILD`, :data:`NUMERICS_SPEC`, :data:`NUMERICS_OUTPUT_PREFIX`,
:data:`NUMERICS_SCHEMA`; one call's records as another child returns them (the SGLang child's
``dispatch`` / ``dispatch_full``): :data:`CALL_SCHEMA`, :data:`OP_SCHEMA`, :data:`CFG_SCHEMA`.
"""

from __future__ import annotations

from fp4moe.infra.runner import RecordSchema

CHILD_MODULE = "fp4moe.targets.aiter.dispatch.child"
ROWS_OUTPUT = "dispatch-rows.json"
#: the rows the parent asks for: one uint8 tensor ``json`` holding them as UTF-8 JSON
ROWS_INPUT = "rows"
SCHEMA = RecordSchema("aiter-dispatch", 1, {"tree": str, "config_file": str, "config_sources": list, "rows": int,
                                            "computed": list})

#: the numerics child (fp4moe.targets.aiter.dispatch.numerics): the spec (uint8 ``json``), one
#: output ``out-<i>`` per case, the record ``{"cases": [{"id", "ops": [{"op", "args"}], "error"?}]}``
NUMERICS_CHILD = "fp4moe.targets.aiter.dispatch.child.numerics"
NUMERICS_SPEC = "spec"
NUMERICS_OUTPUT_PREFIX = "out-"
NUMERICS_SCHEMA = RecordSchema("aiter-dispatch-numerics", 1, {"cases": list})

#: one fused_moe call's records (fp4moe.targets.aiter.dispatch.calls): the ops in order, the
#: get_2stage_cfgs questions and answers, its result or error, and why its output was not computed
CALL_SCHEMA = RecordSchema("aiter-dispatch.call", 1, {"id": str, "calls": list, "cfgs": list, "result": (dict, list),
                                                      "error": str, "not_computed": str},
                           optional=frozenset({"id", "result", "error", "not_computed"}))
OP_SCHEMA = RecordSchema("aiter-dispatch.op", 1, {"op": str, "module": str, "args": dict, "build": dict,
                                                  "unmodelled": bool, "computed": bool},
                         optional=frozenset({"build", "unmodelled", "computed"}))
CFG_SCHEMA = RecordSchema("aiter-dispatch.cfg", 1, {"cfg_args": list, "cfg_kwargs": dict, "metadata": dict})
