"""``fp4moe-gate selfcheck``: CPU self-check of the reference path plus the DeepSeek-V4 pad table (default).

The quick check a machine can run before anything else: prints the DeepSeek-V4 routed-expert pad
table per rank (every catalogue TP/EP, align 128 and 256) and runs the reference MXFP4 MoE path
on seeded inputs on the CPU, one line per check.

Inputs: none (the packaged model catalogue).

Exit 0: every check held
Exit 1: a check did not hold (its line says which and by how much)
Exit 2: the self-check could not run
"""

from __future__ import annotations

from fp4moe.commands import output
from fp4moe.commands.options import STATUS_BY_EXIT, add_command, add_outputs, bind
from fp4moe.infra.errors import exit_code_of


def register(sub) -> None:
    p = add_command(sub, "selfcheck", __doc__)
    add_outputs(p, json="the pad table and each check")
    bind(p, run)


def run(args) -> int:
    from fp4moe.gates.selfcheck import pad_rows, selfcheck

    print("DeepSeek-V4 routed-expert pad table (per rank)")
    print(f"{'model':<11} {'tp':>4} {'ep':>4} {'experts':>7} {'align':>5} {'I_p':>5} {'padded':>6} {'pad':>4}")
    for r in pad_rows():
        print(f"{r['model']:<11} {r['tp']:>4} {r['ep']:>4} {r['experts']:>7} {r['align']:>5} {r['I_p']:>5} {r['padded']:>6} {r['pad']:>4}")
    res = selfcheck(on_check=lambda c: print(f"{'PASS' if c['ok'] else 'FAIL'}  {c['name']:<9} {c['detail']}", flush=True))
    rc = exit_code_of(regressed=bool(res.failed))
    output.write_json(args, {"status": STATUS_BY_EXIT[rc], **res.to_dict()})
    print(f"selfcheck: {'FAILED' if res.failed else 'ok'} in {res.seconds:.1f} s")
    return rc
