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
from fp4moe.infra.errors import exit_code_of
from fp4moe.infra.paths import data_path
from fp4moe.targets.sglang.modes import MODES, Mode
from fp4moe.targets.sglang.mutations import INERT_VARIANTS, MUTANTS


def run(args) -> int:
    from fp4moe.gates import sglang_check as gate

    opts = gate.Options(**{f: getattr(args, f) for f in gate.Options.__dataclass_fields__})
    res = gate.check(opts)
    rec, failed = res.drive.record, res.failed
    kernel = (f"the real {rec['kernel']} (recorded)" if rec["mode"] == Mode.GFX950 else rec["kernel"] if rec.get("dispatch")
              else "spy + fp4moe reference MoE")
    print(f"sglang {res.version} ({res.drive.source.origin}); mode {rec['mode']} ({rec['mode_why']}); aiter shuffles: "
          f"{rec['shuffle_source']}; fused_moe: {kernel}; child {res.drive.seconds:.1f} s")
    if rec["mutant"]:
        from fp4moe.targets.sglang.mutations import is_inert

        kind = "inert variant (must pass)" if is_inert(rec["mutant"].get("name", "")) else "mutant"
        print(f"{kind} applied inside the SGLang child: {rec['mutant']}")
    for c in res.checks:
        known = res.known.get((c.name, c.row))
        print(c.line(res.version).replace("FAIL", "KNOWN", 1) + f"\n     known ({args.known_defects}): {known['report']}"
              if known else c.line(res.version))
    for e in res.not_seen:  # the release should fail it and did not: the registry is out of date
        print(f"note: known defect {e['check']} ({e['row']}) did not occur in sglang {res.version}: remove its entry")
    print(f"sglang-check: {len(res.checks) - len(failed) - len(res.known)}/{len(res.checks)} checks held over "
          f"{len(res.drive.rows)} rows" + (f", {len(res.known)} known" if res.known else "")
          + (f"; FAILED: {', '.join(res.summary['failed_checks'])}" if failed else ""))
    output.write_json(args, {"status": status_of(regressed=bool(failed)), **res.summary})
    sys.stdout.flush()
    return exit_code_of(regressed=bool(failed))


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
    p.add_argument("--mutant", metavar="NAME", choices=sorted({**MUTANTS, **INERT_VARIANTS}),
                   help="apply a bug-zoo mutant (or an inert variant, which must pass) to SGLang's own code in the child "
                   "(a mutant of the zoo's sglang target, by name: fp4moe/targets/sglang/mutations.py)")
    p.add_argument("--timeout", type=float, default=CHILD_TIMEOUT_S, help=f"child time limit, s (default {CHILD_TIMEOUT_S:.0f})")
    p.add_argument("--known-defects", metavar="FILE", nargs="?", const=str(data_path("sglang_known_defects.json")),
                   help="a registry of known SGLang defects (default with no FILE: the packaged one): a failure one "
                        "entry names exactly (check, row, release, the recorded failure text) is KNOWN, not a "
                        "regression; an entry whose failure did not occur is noted")
    p.add_argument("--mode", choices=MODES,
                   help="auto (default; env FP4MOE_SGLANG_MODE): gfx950 where the child sees ROCm torch on a gfx950 GPU "
                        "with aiter (real shuffles and kernel, nothing patched), else cpu (stubs, spy + reference)")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress lines on stderr (the download, the child drive; each starting [sglang-check])")
    add_outputs(p, json="every check per row, the patch points found, the stubbed modules")
    bind(p, run, inputs=lambda a: [x for x in (a.sglang_wheel, a.sglang_root, a.aiter_src, a.known_defects) if x])
