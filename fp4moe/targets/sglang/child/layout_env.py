"""The layer rebuilt under every combination of the environment variables SGLang reads on this
path at call time, recording the layout the weights got and the gate mode ``fused_moe`` got.
CHILD PROCESS ONLY.

:func:`env_names` reads them from the syntax trees of the functions the drive runs (fp8.py's
``process_weights_after_loading_block_quant`` and ``maybe_get_hip_aiter_quant_info``, the runner's
``AiterRunnerCore.run``): ``envs.NAME.get()``, ``get_bool_env_var("NAME", ...)``,
``os.environ.get("NAME")``, ``os.getenv("NAME")``. :func:`combinations` sets each unset, "1"
and "0" (all together when there are at most ``JOINT_MAX``, else one at a time). Flags read at
import time (``_SMALLM_MOE_ON``, ``_use_aiter_a8w4``, ...) are fixed for the child and named in
the record. The parent judges (``fp4moe.targets.sglang.checks``' ``layout_env``).
"""

from __future__ import annotations

import ast
import inspect
import itertools
import os
import textwrap

VALUES = (None, "1", "0")
#: at most this many names are combined jointly (3^n builds); more are varied one at a time
JOINT_MAX = 3


def _names(fn) -> set[str]:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return set()
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "envs" \
                and node.attr.isupper():
            out.add(node.attr)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str) and node.args[0].value.isupper():
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name in ("get_bool_env_var", "getenv", "get_int_env_var") or \
                    (name == "get" and isinstance(f, ast.Attribute) and "environ" in ast.unparse(f.value)):
                out.add(node.args[0].value)
    return out


def env_names(fp8, runner_mod) -> list[str]:
    """Environment variables read at call time by the functions the drive runs."""
    from fp4moe.targets.sglang.child.mutants import BUILDER, CLASS, PROCESS, RUNNER_CLASS

    cls = getattr(fp8, CLASS)
    fns = [getattr(cls, PROCESS, None), getattr(cls, BUILDER, None), getattr(getattr(runner_mod, RUNNER_CLASS), "run", None)]
    return sorted(set().union(*(_names(f) for f in fns if f is not None)))


def combinations(names: list[str]) -> list[dict]:
    if len(names) <= JOINT_MAX:
        return [dict(zip(names, vs)) for vs in itertools.product(VALUES, repeat=len(names))]
    out = [dict.fromkeys(names)]
    for n in names:
        out += [{**dict.fromkeys(names), n: v} for v in VALUES[1:]]
    return out


def _set(env: dict) -> dict:
    was = {k: os.environ.get(k) for k in env}
    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    return was


def probe(names: list[str], build) -> list[dict]:
    """For each combination: ``build()`` (the row's layer created, loaded, processed, its quant
    info built and run once, recording only) under that environment -> {"env", **what it returned}
    or {"env", "error"}."""
    out = []
    for env in combinations(names):
        was = _set(env)
        try:
            out.append({"env": env, **build()})
        except Exception as e:  # judged (FAIL naming the combination), never a drive failure
            out.append({"env": env, "error": f"{type(e).__name__}: {e}"[:300]})
        finally:
            _set(was)
    return out
