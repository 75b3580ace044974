"""``fp4moe-gate aiter-check``: judge an aiter (source tree, wheel or installed) against this project: API, layouts, kernels, dispatch.

Is this aiter still the one the gate was written against? It reads aiter's signatures (every
keyword the backend passes must exist), runs aiter's own weight/scale shuffles against the
reference layouts at the DeepSeek-V4 shapes, probes the capabilities the backend depends on,
runs aiter's pure-torch MoE references against this project's, executes aiter's Triton MXFP4 MoE
kernels (on a CPU under the Triton interpreter: needs triton >= 3.8) against the reference, and
executes aiter's fused_moe dispatch with its compiled ops stood in. aiter's code runs in child
processes with a time limit; the verdict is made outside them. With --base-src OLD both trees are
judged and every check is classified between them: regressed, removed, fixed, still failing,
appeared; one verdict line, Accepted or Rejected, and a memo (both revisions, each regression
with the file:line its row cites in the new tree, what was fixed).

Inputs: the aiter to judge (--aiter-src DIR, --aiter-wheel WHEEL, else the installed aiter,
found without importing it); optionally a registry of known upstream defects (--known-defects)
and an older tree (--base-src).

Output: one row per check on stdout (--format markdown for a CI step summary), then the
provenance notes; --json PATH the record with every row.

Exit 0: nothing failed (--base-src: Accepted, nothing regressed or was removed)
Exit 1: --base-src: Rejected, a check regressed or was removed (with --strict also one still
failing or appeared failing); without it: a check FAILed or DIFFERed (each row names the check and
its figure), a check could not be made from source (n/a, unless --allow-missing), fused_moe hides
its keywords behind **kwargs (unless --allow-kwargs), an absent row --require names, with --strict
also a warn and every absent row (a runner whose aiter must have everything the backend can use).
A function, keyword, layout, capability or file this tree lacks (a later aiter has it) is an
`absent` row: a fact, never a failure unless --require names it
Exit 2: the check could not run (a file aiter's code needs, a child that exited or hung, a
triton too old), or nothing failed but a kernel component could not be judged (its row is in the
table), or --base-src: the base tree could not be judged, or a check fails in the new tree
that the base could not judge
"""

from __future__ import annotations

from fp4moe.commands import output
from fp4moe.commands.options import PASS, REGRESSION, add_command, add_outputs, bind
from fp4moe.infra.errors import EXIT_CANNOT_RUN, EXIT_OK
from fp4moe.infra.paths import data_path
from fp4moe.targets.aiter import CHECK_TIMEOUT_S


def register(subparsers) -> None:
    p = add_command(subparsers, "aiter-check", __doc__)
    p.add_argument("--aiter-src", metavar="PATH", help="aiter checkout (holding aiter/) or the aiter package directory")
    p.add_argument("--aiter-wheel", metavar="PATH", help="an aiter wheel, read with zipfile (never installed)")
    p.add_argument("--strict", action="store_true", help="also exit 1 on warn and on every absent row (the runner's aiter must "
                   "have all the backend can use; ci/gfx950-gate.sh's default)")
    p.add_argument("--allow-missing", action="store_true", help="a check that could not be made from source (n/a) does not fail")
    p.add_argument("--require", action="append", default=[], metavar="NAME",
                   help="an `absent` row whose check name holds NAME fails (the caller depends on it), e.g. "
                        "'capability: PR #4130' or 'routing'; repeatable; a NAME no check holds is exit 2")
    p.add_argument("--allow-kwargs", action="store_true", help="accept a fused_moe whose keywords hide behind **kwargs (unverifiable)")
    p.add_argument("--no-differential", action="store_true", help="skip running aiter's pure-torch MoE references against this project's")
    p.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="ONE time limit in seconds for all of aiter's code in this run: every child process, the "
                        f"--base-src side included, shares it (default: {CHECK_TIMEOUT_S:g} s for each child)")
    p.add_argument("--format", choices=("text", "markdown"), default="text", help="table format on stdout (markdown for a CI step summary)")
    p.add_argument("--no-kernels", action="store_true",
                   help="skip executing aiter's Triton MoE kernels (the kernel checks); said in the output")
    p.add_argument("--kernel-jobs", metavar="JOBS", default="",
                   help="only these kernel-check jobs, comma-separated job kinds (gemm, pad, stage2, tails, quant, reduce, "
                        "routing) or kernels (a16w4, a8w4), in one child: to probe one kernel file fast; the other "
                        "kernel checks are not run (said in the output; default: every job)")
    p.add_argument("--layout-grid", choices=("dsv4", "reduced"), default="dsv4",
                   help="layout cases: dsv4 (every DeepSeek-V4 per-rank shape, the default) or reduced (small "
                        "shapes plus the two K/32 edge cases: to probe a fault fast; said in the output)")
    p.add_argument("--no-dispatch", action="store_true",
                   help="skip executing aiter's fused_moe dispatch with stood-in ops (the dispatch checks); said in the output")
    p.add_argument("--dispatch-rows", choices=("default", "full"), default="default",
                   help="dispatch rows: default (TP8, ep 1 and 8) or full (every catalogue TP/EP row)")
    p.add_argument("--dispatch-table", action="store_true", help="also print the dispatch table (per row: path, kernels, ...)")
    p.add_argument("--arch", default="gfx950", help="AMD arch the kernels' dispatch and tuned configs are pinned to (default gfx950)")
    p.add_argument("--device", default=None, choices=("cpu", "cuda"),
                   help="where the kernel checks run: cuda (compiled, no shims; the default where torch sees a CUDA or ROCm "
                        "GPU) or cpu (the Triton interpreter, shims on, triton >= 3.8; the default without one)")
    p.add_argument("--shapes", default="tiny", choices=("tiny", "dsv4"),
                   help="kernel-check shapes: tiny (E8 H256 I128->256, the CPU's) or dsv4 (DeepSeek-V4-Pro/-Flash TP8 "
                        "at 1/64/1024/4096 tokens, a GPU)")
    p.add_argument("--known-defects", metavar="FILE", nargs="?", const=str(data_path("aiter_known_defects.json")),
                   help="accept the known upstream defects of this registry (KNOWN, not FAIL); the option alone: the "
                        "registry that comes with the package (without it, defects are named, never accepted)")
    p.add_argument("--base-src", metavar="OLD",
                   help="the aiter in use today: both trees judged, every check classified (regressed, removed, fixed, "
                        "still failing, appeared); verdict Accepted/Rejected and a memo")
    add_outputs(p, json="every check: name, status, detail")
    bind(p, run, inputs=lambda a: [x for x in (a.aiter_src, a.aiter_wheel, a.known_defects, a.base_src) if x])


def options(args):
    """The gate's options from this command's parsed arguments (``aiter-bisect`` parses its
    pass-through aiter-check options with this command's parser and builds them here too)."""
    from fp4moe.gates.aiter_check import AiterCheckOptions

    if args.device is None:  # a GPU runner's own triton (often < 3.8) compiles the kernels; a CPU interprets them
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    return AiterCheckOptions(
        aiter_src=args.aiter_src, aiter_wheel=args.aiter_wheel, timeout_s=args.timeout, differential=not args.no_differential,
        allow_kwargs=args.allow_kwargs, strict=args.strict, allow_missing=args.allow_missing,
        outputs={"--json": None if args.json in (None, "-") else args.json}, kernels=not args.no_kernels,
        arch=args.arch, known_defects_file=args.known_defects, base_src=args.base_src, device=args.device,
        shapes=args.shapes, dispatch=not args.no_dispatch, dispatch_scope=args.dispatch_rows,
        kernel_jobs=tuple(j for j in args.kernel_jobs.split(",") if j), layout_grid=args.layout_grid,
        require=tuple(getattr(args, "require", None) or ()))


def run(args) -> int:
    import sys

    from fp4moe.commands.main import EXIT_LINE_CHARS
    from fp4moe.gates.aiter_check import check_aiter, format_table, unjudged_line
    from fp4moe.infra.culprit import bounded

    res = check_aiter(options(args))
    print(format_table(res.results, res.source, res.version, args.format))
    if args.dispatch_table and res.dispatch_table:
        from fp4moe.targets.aiter.dispatch.table import format_table as dispatch_table

        print(dispatch_table(res.dispatch_table, args.format))
    for note in res.notes:
        print(note)
    if res.upgrade is not None:
        from fp4moe.targets.aiter.judge.upgrade import format_memo

        print(format_memo(res.upgrade, args.format))
    if res.exit_code == EXIT_CANNOT_RUN:  # the table is printed; main writes the cannot-run record
        line = res.upgrade["cannot_judge"] if res.upgrade is not None else unjudged_line(res.results)
        print(bounded(f"fp4moe-gate aiter-check: cannot run: {line}", EXIT_LINE_CHARS), file=sys.stderr)
        return res.exit_code
    output.write_json(args, {"status": PASS if res.exit_code == EXIT_OK else REGRESSION, **res.to_dict()})
    return res.exit_code
