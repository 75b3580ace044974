"""(a) API conformance: the signatures of aiter's ``fused_moe``, ``shuffle_weight`` and
``shuffle_scale``, read with ``ast`` (no aiter code runs), against the keywords the backend passes
(``fp4moe.targets.aiter.backend.AITER_CALL_KEYWORDS``).

- :func:`check_api` -- one row per function: a function or keyword the backend passes and this
  tree lacks -> ``absent`` (a fact about the tree; ``--require api: fused_moe`` makes it fail),
  naming the condition under which it is passed; a function that hides its keywords behind
  ``**kwargs`` -> FAIL unless ``allow_kwargs``.
"""

from __future__ import annotations

from fp4moe.infra.errors import GateCannotRun
from fp4moe.targets.aiter.backend import AITER_CALL_KEYWORDS, ALWAYS
from fp4moe.targets.aiter.results import CheckResult, Result
from fp4moe.targets.aiter.source import FUSED_MOE_FILE, SHUFFLE_FILE, AiterSource, function_params

#: the file that defines each function whose keywords are checked
FUNCTION_FILES = {"fused_moe": FUSED_MOE_FILE, "shuffle_weight": SHUFFLE_FILE, "shuffle_scale": SHUFFLE_FILE}
#: hidden keywords named in a ``**kwargs`` row
KWARGS_NAMED = 4


def _params_or_cannot_run(src: AiterSource, relpath: str, func: str) -> list[str] | None:
    try:
        return function_params(src.read(relpath), func)
    except SyntaxError as e:
        raise GateCannotRun(f"{src.origin}: {relpath}: syntax error at line {e.lineno}: {e.msg}") from e


def _absent_function(name: str, func: str, wanted: dict[str, str]) -> CheckResult:
    where = FUNCTION_FILES[func]
    conds = sorted({w for w in wanted.values() if w != ALWAYS})
    passed = "the backend always calls it" if any(w == ALWAYS for w in wanted.values()) else "; ".join(conds)
    return CheckResult(name, Result.ABSENT, f"{func} not defined in {where} ({passed})")


def _hidden_behind_kwargs(name: str, kwargs: str, hidden: list[str], allow_kwargs: bool) -> CheckResult:
    shown = ", ".join(hidden[:KWARGS_NAMED]) + (" ..." if len(hidden) > KWARGS_NAMED else "")
    tail = "; accepted by --allow-kwargs" if allow_kwargs else "; --allow-kwargs accepts this"
    return CheckResult(name, Result.PASS if allow_kwargs else Result.FAIL,
                       f"takes {kwargs}: {len(hidden)} keyword(s) not in its signature cannot be verified ({shown}){tail}")


def _keyword_rows(name: str, wanted: dict[str, str], params: list[str]) -> list[CheckResult]:
    missing_always = [k for k, when in wanted.items() if when == ALWAYS and k not in params]
    missing_cond = [(k, when) for k, when in wanted.items() if when != ALWAYS and k not in params]
    out = []
    if missing_always:
        out.append(CheckResult(name, Result.ABSENT, f"no keyword(s) {', '.join(missing_always)}: the backend always passes them"))
    out += [CheckResult(f"{name}.{k}", Result.ABSENT, f"keyword absent; {when}") for k, when in missing_cond]
    if not out:
        out.append(CheckResult(name, Result.PASS, f"all {len(wanted)} keywords present"))
    return out


def check_api(src: AiterSource, keywords: dict[str, dict[str, str]] = AITER_CALL_KEYWORDS,
              allow_kwargs: bool = False) -> list[CheckResult]:
    out = []
    for func, wanted in keywords.items():
        name = f"api: {func}"
        params = _params_or_cannot_run(src, FUNCTION_FILES[func], func)
        if params is None:
            out.append(_absent_function(name, func, wanted))
            continue
        named = [p for p in params if not p.startswith("*")]
        kwargs = [p for p in params if p.startswith("**")]
        hidden = [k for k in wanted if k not in named]
        if kwargs and hidden:
            out.append(_hidden_behind_kwargs(name, kwargs[0], hidden, allow_kwargs))
            continue
        out += _keyword_rows(name, wanted, params)
    return out
