"""``fp4moe-gate sglang-check``: drive SGLang's own FP4 MoE code (a child process) and judge it.

Does the SGLang in front of you still load, pad, shuffle and call the DeepSeek-V4 MXFP4 routed
experts as this project expects? SGLang's own FusedMoE weight loading and aiter call are driven
in a child process, row by row (DeepSeek-V4-Pro/-Flash at TP 8 and 16), and every row is judged
outside it: the weights bitwise, the pads, the keywords passed to aiter, the output against the
reference within the kernel budget.

Inputs: an SGLang (the installed one, --sglang-root DIR, --sglang-wheel WHEEL or
--sglang-version V); optionally an aiter checkout (--aiter-src) whose shuffles and dispatch are
used.

Exit 0: every check held for every row
Exit 1: a check failed (each failure names the check, the SGLang version, the row and the
numbers)
Exit 2: no SGLang, its import failed, no DeepSeek-V4 FP4 aiter branch, or the child timed out
"""

from __future__ import annotations

import sys

from fp4moe.commands import output
from fp4moe.commands.options import add_command, add_outputs, bind, status_of
from fp4moe.infra.errors import GateCannotRun, exit_code_of
from fp4moe.infra.progress import progress


def run(args) -> int:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="fp4moe-sglang-") as work:  # nothing left in $TMPDIR, whatever happens
        return _run(args, work)


def _run(args, work: str) -> int:
    from fp4moe.gates import sglang_check as checks
    from fp4moe.infra.childproc import check_timeout
    from fp4moe.targets.sglang import source, target

    check_timeout("--timeout", args.timeout)  # the options first: a refused run costs no unpack
    rows = target.parse_rows(args.model, args.tp, args.tp_rank)
    src = source.resolve(wheel=args.sglang_wheel, version=args.sglang_version, root=args.sglang_root, quiet=args.quiet)
    try:
        fp4_branch = source.has_fp4_aiter_branch(src.fp8_text)  # cheap, before any child starts
    except SyntaxError as e:
        raise GateCannotRun(f"sglang {src.version} ({src.origin}): {src.root / source.FP8_FILE}: syntax error "
                            f"at line {e.lineno}: {e.msg}") from e
    if not fp4_branch:
        raise GateCannotRun(f"sglang {src.version} ({src.origin}): {source.FP8_FILE} has no DeepSeek-V4 FP4 aiter branch "
                            "(no `if _use_aiter and ... is_fp4_expert`)")
    progress("sglang-check", f"driving sglang {src.version} ({src.origin}) in a child: {len(rows)} row(s), "
             f"limit {args.timeout:.0f} s", quiet=args.quiet)
    d = target.drive(src, rows, aiter_src=args.aiter_src, mutant=args.mutant, timeout_s=args.timeout, mode=args.mode,
                     work=work)
    progress("sglang-check", f"child done in {d.seconds:.1f} s; judging", quiet=args.quiet)
    results, cannot = checks.judge(d)
    if cannot:
        raise GateCannotRun(cannot)
    if args.aiter_dispatch:
        results += _dispatch_checks(args, d, checks.Check)
    failed = [c for c in results if not c.ok]
    rec = d.record
    version = rec.get("sglang_version", src.version)
    summary = {
        "sglang_version": version, "sglang_origin": src.origin, "shuffle_source": rec.get("shuffle_source"),
        "aiter_src": args.aiter_src, "mutant": rec.get("mutant"), "mode": rec.get("mode"), "mode_why": rec.get("mode_why"), "rows": [r.label for r in rows],
        "status": status_of(regressed=bool(failed)), "failed_checks": sorted({c.name for c in failed}),
        "output_tolerance": checks.KERNEL_TOLERANCE if rec.get("mode") == "gfx950" else checks.OUTPUT_TOLERANCE, "child_seconds": round(d.seconds, 1),
        "patch_points": {"fp8": {k: v["found"] for k, v in rec.get("flags", {}).items()},
                         "runner": {k: v["found"] for k, v in rec.get("runner_flags", {}).items()},
                         "shuffle_imports": rec.get("shuffle_imports"),
                         "shuffle_names_missing": rec.get("shuffle_names_missing")},
        "stubbed_modules": rec.get("stubbed_modules"),
        "checks": [c.as_dict() for c in results],
    }
    kernel = (f"the real {rec.get('kernel')} (recorded)" if rec.get("mode") == "gfx950"
              else "spy + fp4moe reference MoE")
    print(f"sglang {version} ({src.origin}); mode {rec.get('mode')} ({rec.get('mode_why')}); aiter shuffles: "
          f"{rec.get('shuffle_source')}; fused_moe: {kernel}; child {d.seconds:.1f} s")
    if rec.get("mutant"):
        from fp4moe.targets.sglang.mutations import is_inert

        kind = "inert variant (must pass)" if is_inert(rec["mutant"].get("name", "")) else "mutant"
        print(f"{kind} applied inside the SGLang child: {rec['mutant']}")
    for c in results:
        print(c.line(version))
    print(f"sglang-check: {len(results) - len(failed)}/{len(results)} checks held over {len(rows)} rows"
          + (f"; FAILED: {', '.join(summary['failed_checks'])}" if failed else ""))
    output.write_json(args, {"status": summary.pop("status"), **summary})
    sys.stdout.flush()
    return exit_code_of(regressed=bool(failed))


def _dispatch_checks(args, d, check) -> list:
    """SGLang's call driven into --aiter-src's executed fused_moe (fp4moe.targets.aiter.dispatch.sglang_call)."""
    from fp4moe.targets.aiter.dispatch import group, sglang_call

    if not args.aiter_src:
        raise ValueError("--aiter-dispatch needs --aiter-src (the tree whose fused_moe is executed)")
    if not group.applies(args.aiter_src):
        raise ValueError(f"--aiter-dispatch: {args.aiter_src} has no aiter/fused_moe.py")
    group.preflight(args.aiter_src)
    rows = [sglang_call.SGLangRow(r.label, r.model, r.tp, r.ep, r.experts, r.hidden, r.ip) for r in d.rows]
    progress("sglang-check", f"driving SGLang's recorded calls into {args.aiter_src}'s dispatch", quiet=args.quiet)
    return [check(**c) for c in sglang_call.judge(args.aiter_src, d.record.get("rows", []), rows, timeout_s=args.timeout)]


def register(sub) -> None:
    from fp4moe.targets.sglang import CHILD_TIMEOUT_S

    p = add_command(sub, "sglang-check", __doc__)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--sglang-wheel", help="an SGLang wheel (unpacked into the wheel cache, $XDG_CACHE_HOME/fp4moe/wheels/unpacked/, never installed)")
    g.add_argument("--sglang-version", help="download this release's wheel with pip download --no-deps into the wheel cache (outside the checkout; size announced)")
    g.add_argument("--sglang-root", help="a directory holding sglang/ (a source checkout's python/)")
    p.add_argument("--aiter-src", help="an aiter checkout: its aiter/ops/shuffle.py does the shuffles (default: this project's reference layouts)")
    p.add_argument("--aiter-dispatch", action="store_true",
                   help="with --aiter-src: also drive SGLang's recorded fused_moe call into that tree's executed dispatch "
                        "(its Python, compiled ops stood in) and judge it at the kernel stages")
    p.add_argument("--model", choices=("dsv4-pro", "dsv4-flash"), help="only this model (default: both)")
    p.add_argument("--tp", type=int, help="only this TP size (default: 8 and 16)")
    p.add_argument("--tp-rank", type=int, help="write the whole layer's checkpoint and let SGLang's FusedMoE.weight_loader "
                   "take this TP rank's shard, for every selected row (default: the rows' own; see docs/sglang.md)")
    p.add_argument("--mutant", help="apply a bug-zoo mutant (or an inert variant, which must pass) to SGLang's own code in the child "
                   "(a mutant of the zoo's sglang target, by name)")
    p.add_argument("--timeout", type=float, default=CHILD_TIMEOUT_S, help=f"child time limit, s (default {CHILD_TIMEOUT_S:.0f})")
    p.add_argument("--mode", choices=("auto", "cpu", "gfx950"),
                   help="auto (default; env FP4MOE_SGLANG_MODE): gfx950 where the child sees ROCm torch on a gfx950 GPU "
                        "with aiter (real shuffles and kernel, nothing patched), else cpu (stubs, spy + reference)")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress lines on stderr (the download, the child drive; each starting [sglang-check])")
    add_outputs(p, json="every check per row, the patch points found, the stubbed modules")
    bind(p, run, inputs=lambda a: [x for x in (a.sglang_wheel, a.sglang_root, a.aiter_src) if x])
