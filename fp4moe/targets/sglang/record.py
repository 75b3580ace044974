"""The SGLang child's record: ONE schema for the child that writes it, the judge and the summary.

Index:

- ``SCHEMA`` -- the record ``python -m fp4moe.targets.sglang.child`` finishes with
  (``fp4moe.infra.runner.RecordSchema``, validated by ``runner.run_judged``): every key always
  present, ``None`` where the drive never got there.
- :func:`initial` -- that record before the child's first stage (the child fills it in).
- ``DRIVEN_ROW`` / ``FAILED_ROW`` -- one entry of ``rows``: a row SGLang's code ran to its
  ``fused_moe`` call, or one where a step raised (``step``; ``setup`` when the step is this
  harness's own, see ``SETUP_STEPS``).
- :func:`validate_rows` -- each row against its schema: an unknown or missing key is a
  ``GateCannotRun`` naming the row and the keys (exit 2), never a ``KeyError`` in a check.
- :func:`summary` -- the keys of the record the command's JSON result carries.

No SGLang, no torch here: the parent, the judge and the child all import it.
"""

from __future__ import annotations

from fp4moe.infra.errors import GateCannotRun
from fp4moe.infra.runner import RecordSchema, one_line

NAME = "sglang-drive"
VERSION = 1
_STR = (str, type(None))
_LIST = (list, type(None))
_DICT = (dict, type(None))
_NUM = (int, float, type(None))

#: the child's record: key -> type(s)
FIELDS = {
    "stage": str,  # where the drive got to ("done" when every row was driven)
    "rows": list,  # one DRIVEN_ROW or FAILED_ROW per row driven
    "writes_confined": bool, "unconfined": _STR,  # fp4moe.infra.confine: why not, when not
    "sglang_version": str, "mode": _STR, "mode_why": _STR,  # fp4moe.targets.sglang.modes
    "shuffle_source": _STR, "kernel": _STR,  # what shuffled the bytes; what computed fused_moe (gfx950)
    "fused_moe_params": _LIST,  # cpu mode with --aiter-src: that tree's fused_moe parameters
    "import_seconds": _NUM, "seconds": _NUM,
    "shuffle_imports": _LIST, "shuffle_names_missing": _LIST,  # aiter shuffles fp8.py imports
    "flags": dict, "runner_flags": dict,  # patch points: name -> {"found", "was", "now"}
    "mutant": _DICT, "pad_poison": _DICT, "stubbed_modules": _LIST,
    "error": _STR, "where": list, "missing_module": _STR,  # the drive stopped: why, where, what
    #: --aiter-dispatch: the tree whose fused_moe SGLang's call ran into ({"tree", "config_file",
    #: "config_sources", "computed"}); None otherwise
    "dispatch": _DICT,
    #: SGLang's sqrtsoftplus routers on the probe logits (child/router_numerics.py); None: not asked
    "router_numerics": _DICT,
}
SCHEMA = RecordSchema(NAME, VERSION, FIELDS)

#: Steps of one row. A failure in a SETUP step is this harness's (exit 2: could not drive);
#: in the others it is SGLang's weight path or runner with this aiter (exit 1).
SETUP_STEPS = ("create_weights", "load", "footprint (meta device)")

DRIVEN_ROW = RecordSchema(f"{NAME}.row", VERSION, {
    "label": str, "created": dict, "loader": dict, "shuffle_calls": list, "layer_pads": dict, "is_shuffled": bool,
    "processed": dict, "quant_info": dict, "quant_info_is_layer": dict, "runner_paths": dict,
    "pre_permute_output": dict, "a8w4_via": str, "fused_moe_kwargs": dict, "act_mode": str, "w_attrs": dict,
    "aiter_inputs": dict, "fused_moe_receives_layer": dict, "empty_batch": dict, "field_probe": dict,
    "field_probe_each": dict, "footprint": dict, "routed": dict, "moe_path": dict, "layout_env": dict, **(DISPATCH_FIELDS := {"dispatch": dict, "dispatch_full": dict}),
}, optional=frozenset({"pre_permute_output", "a8w4_via", *DISPATCH_FIELDS}))  # no pre-permute registered; not an
# fp8 row; no tree executed (DISPATCH_FIELDS: the call's op records as driven and at full size,
# fp4moe.targets.aiter.dispatch.records.ROWS_OUTPUT's per-row shape)
#: a row whose fused_moe call was refused keeps the call (child/refused_call.py), and with a tree
#: executed its op records (the refusal, then SGLang's keywords at full size)
REFUSED_CALL_FIELDS = {"fused_moe_kwargs": dict, "act_mode": str, "w_attrs": dict, "aiter_inputs": dict,
                       "fused_moe_refused": str, **DISPATCH_FIELDS}
FAILED_ROW = RecordSchema(f"{NAME}.failed-row", VERSION, {
    "label": str, "error": str, "where": list, "step": str, "setup": bool, **REFUSED_CALL_FIELDS,
}, optional=frozenset(REFUSED_CALL_FIELDS))


def initial(sglang_version: str, unconfined: str | None) -> dict:
    """The record before the first stage: every key of ``FIELDS``."""
    rec = {k: None for k in FIELDS}
    rec.update(stage="start", rows=[], writes_confined=unconfined is None, unconfined=unconfined,
               sglang_version=sglang_version, flags={}, runner_flags={}, where=[])
    return rec


def validate_rows(body: dict, label: str) -> list[dict]:
    """Each row of a validated record against DRIVEN_ROW or FAILED_ROW (by its ``error`` key)."""
    out = []
    for i, row in enumerate(body["rows"]):
        if not isinstance(row, dict):
            raise GateCannotRun(f"{label}: record {NAME}: rows[{i}] is {type(row).__name__}, not an object")
        schema = FAILED_ROW if "error" in row else DRIVEN_ROW
        name = row.get("label") if isinstance(row.get("label"), str) else f"rows[{i}]"
        out.append(schema.validate({"schema": schema.name, "schema_version": schema.version, **row},
                                   one_line(f"{label}: row {name}", 120)))
    return out


#: record keys the command's JSON result carries as they are
SUMMARY_KEYS = ("shuffle_source", "mutant", "mode", "mode_why")


def patch_points(body: dict) -> dict:
    """The patch points the drive found (the JSON result's ``patch_points``)."""
    return {"fp8": {k: v["found"] for k, v in body["flags"].items()},
            "runner": {k: v["found"] for k, v in body["runner_flags"].items()},
            "shuffle_imports": body["shuffle_imports"], "shuffle_names_missing": body["shuffle_names_missing"]}
