"""The kernel checks' children: aiter's Triton MoE kernels run in harness children (two side by
side), a child killed inside one component re-run without it, and the rows judged here, in the
gate's process (``kernels.checks.judge_all``). ``fp4moe.gates.aiter_check`` calls
:func:`run_kernel_child` for a tree (and for the ``--base-src`` tree).

- :func:`run_kernel_child` -- one tree's kernel checks: the record, the judged rows, the clean outputs;
- :func:`kernel_plan_args` -- the child's plan options, parsed here as the child parses them;
- :func:`kernel_notes` -- the provenance notes (tree, arch, triton, stubs and patches).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fp4moe.infra.deadline import Deadline
from fp4moe.infra.errors import GateCannotRun

#: aiter's Triton MoE kernels in a tree: the kernel group runs where this folder exists
KERNEL_MOE_DIR = "aiter/ops/triton/moe"
#: the child entry, started by module name (never imported by a parent)
KERNEL_CHILD = "fp4moe.targets.aiter.child.kernel_checks"
DEFAULT_KERNEL_TIMEOUT_S = 600.0  # one tree's kernel checks; ~2 min on a loaded 2-core CPU
#: the kernel child's jobs in two children run side by side (the interpreter is one core each):
#: the GEMMs, quants and reduce; and routing (which skips the shim self-test, not the shims)
KERNEL_CHILD_GROUPS = (("gemm,pad,stage2,tails,quant,reduce", ()), ("routing", ("--skip", "shims")))
#: components of the kernel child, in the order their jobs run (what a crash is charged to)
KERNEL_COMPONENTS = ("shims", "a16w4", "a8w4", "a4w4", "quant", "reduce", "routing")
#: what ``--kernel-jobs`` may name: the job kinds (``kernels.cases.Kind``) and the components
#: that own jobs; a job runs when its kind or its component is named
KERNEL_JOB_NAMES = ("gemm", "pad", "stage2", "tails", "quant", "reduce", "routing", "a16w4", "a8w4", "a4w4")


def run_kernel_child(tree: str, *, arch: str, timeout_s: float, device: str = "cpu", shapes: str = "tiny",
                     extra_args: tuple = (), deadline: Deadline | None = None, label: str | None = None) -> dict:
    """The kernel checks of one tree (``tree``: the directory holding ``aiter/``): aiter's kernels
    run in harness children (on the CPU under ``TRITON_INTERPRET=1``, writes confined) that only
    compute -- two side by side (:data:`KERNEL_CHILD_GROUPS`) unless ``extra_args`` names
    ``--only`` -- and this process judges (``kernels.checks.judge_all``). Returns the first
    child's record with ``rows`` (dicts), ``saved`` (clean outputs per row label) and
    ``judge_seconds`` added.

    A child killed while running one component (a segfault on an out-of-range index, an
    ``os._exit`` in a kernel file) costs that component a FAIL row naming it; the child is run
    again without it, so the others are still judged. GateCannotRun (one line) otherwise."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    from fp4moe.targets.aiter.kernels import checks

    # the run's one deadline (--timeout, every child together), else this tree's own limit
    deadline = deadline if deadline is not None else Deadline(timeout_s)
    label = label or f"kernel checks ({tree}/aiter)"
    groups = [tuple(extra_args)] if "--only" in extra_args else \
        [tuple(extra_args) + ("--only", only, *more) for only, more in KERNEL_CHILD_GROUPS]
    with ThreadPoolExecutor(len(groups)) as pool:
        parts = list(pool.map(lambda g: _one_kernel_child(tree, arch, device, shapes, g, deadline, label), groups))
    t0 = time.perf_counter()
    rec = dict(parts[0][0])
    rows, saved, unjudged = [], {}, {}
    for prec, outputs, jobs, crashed in parts:
        r, sv = checks.judge_all(jobs, outputs, prec["jobs"], device=device, compiled=device != "cpu")
        rows += checks.shims_row(prec.get("shims")) + r
        saved.update(sv)
        rows += [checks.Row(f"{comp}: killed the kernel child", checks.FAIL, f"{why}; the other components were "
                            "judged in a fresh child without it") for comp, why in crashed.items()]
        unjudged.update(prec.get("unjudged") or {})
    rows += checks.not_judged_rows(unjudged)
    rec["unjudged"], rec["seconds"] = unjudged, max(p[0]["seconds"] for p in parts)
    rec["rows"], rec["saved"], rec["judge_seconds"] = checks.rows_to_dicts(rows), saved, round(time.perf_counter() - t0, 1)
    return rec


def _one_kernel_child(tree: str, arch: str, device: str, shapes: str, extra_args: tuple, deadline, label: str):
    """(record, outputs by job index, the plan, crashed components) of one kernel child, re-run
    without a component whose call killed it."""
    from fp4moe.infra import runner
    from fp4moe.targets.aiter.kernels import cases

    base_args = ["--aiter-src", str(Path(tree).resolve() / "aiter"), "--arch", arch, "--device", device,
                 "--shapes", shapes, *extra_args]
    env = {"TRITON_INTERPRET": "1" if device == "cpu" else "0"}  # a GPU run compiles the kernels
    crashed: dict[str, str] = {}
    while True:
        skip = ",".join([*crashed, *([base_args[base_args.index("--skip") + 1]] if "--skip" in base_args else [])])
        args = [a for i, a in enumerate(base_args) if a != "--skip" and (i == 0 or base_args[i - 1] != "--skip")]
        args += ["--skip", skip] if skip else []
        try:
            out = runner.run_judged(KERNEL_CHILD, args, label=label, timeout_s=deadline.remaining(label),
                                     schema=cases.record_schema(), env=env, deadline=deadline)
            break
        except GateCannotRun as e:
            comp = _crashed_component(str(e))
            if comp is None or comp in crashed or "timed out" in str(e) or "deadline" in str(e):
                raise
            crashed[comp] = " ".join(str(e).split())[:300]
    jobs = cases.plan_from_args(kernel_plan_args(base_args))
    names = set(out.names())
    outputs = {i: out.tensors(cases.output_name(i)) for i in range(len(jobs)) if cases.output_name(i) in names}
    return dict(out.record), outputs, jobs, crashed


def _crashed_component(line: str) -> str | None:
    """The component the kernel child named as its stage when it died (``component=NAME; ...``)."""
    import re

    m = re.search(r"component=([a-z0-9]+);", line)
    return m.group(1) if m and m.group(1) in KERNEL_COMPONENTS else None


def kernel_plan_args(argv: list[str]):
    """The kernel child's arguments as its plan reads them (parsed here with the same options,
    never by importing the child's entry module)."""
    p = argparse.ArgumentParser(add_help=False)
    for opt in ("--aiter-src", "--arch", "--skip"):
        p.add_argument(opt)
    p.add_argument("--device", default="cpu")
    p.add_argument("--shapes", default="tiny")
    p.add_argument("--routing-cases")
    p.add_argument("--only", default="")
    p.add_argument("--quick", action="store_true")
    return p.parse_args(argv)


def kernel_notes(rec: dict, date: dict) -> list[str]:
    where = (f" (interpreter, TRITON_INTERPRET=1, shims on, fast path {rec.get('interp_fastpath')})" if rec['interpreter'] else
             f" (compiled on {rec.get('device')}: {rec.get('gpu')}; shims {'ON' if rec.get('shims_active') else 'off'})")
    notes = [f"kernel checks: {rec['tree']}, --arch {rec['arch']}, triton {rec['triton']}{where}, shapes "
             f"{rec.get('shapes', 'tiny')}, child {rec['seconds']:.0f} s, judge {rec['judge_seconds']:.0f} s "
             "(the judge runs in the gate's process, apart from aiter's code); stubs and patches:"]
    notes += [f"  {i}. {n}: {w} -- {y}" for i, (n, w, y) in enumerate(rec["patches"], 1)]
    if date.get("date"):
        notes.append(f"  tree date: {date['date']} ({date['how']})")
    return notes
