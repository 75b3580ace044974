"""``python -m fp4moe.targets.aiter.child.kernel_checks``: aiter's Triton MoE kernels, executed.

The child side of the kernel checks (``fp4moe-gate aiter-check``): loads the tree with
``fp4moe.targets.aiter.kernels.loader`` (which fills ``sys.modules['aiter']``, so it lives in a
process of its own), runs ``kernels.checks.run_all`` and writes ONE record
(``fp4moe.infra.childproc.record_writer``, taken before any aiter code runs): the patch table, the triton version, the rows; or
``{"cannot_run": line}`` naming the file/symbol. ``--save FILE`` also writes the outputs of
every clean run and every routing call (``torch.save``), for ``--base-src`` comparisons.
On a CPU the parent sets ``TRITON_INTERPRET=1`` before this process imports triton.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def torch_device_name(device: str) -> str | None:
    import torch

    return torch.cuda.get_device_name(torch.device(device)) if torch.device(device).type == "cuda" else None


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="fp4moe.targets.aiter.child.kernel_checks")
    p.add_argument("--aiter-src", required=True)
    p.add_argument("--arch", default="gfx950")
    p.add_argument("--device", default="cpu")
    p.add_argument("--shapes", choices=("tiny", "dsv4"), default="tiny",
                   help="tiny: the CPU shape; dsv4: DeepSeek-V4-Pro/-Flash TP8 at 1/64/1024/4096 tokens (a GPU)")
    p.add_argument("--save")
    p.add_argument("--routing-cases", help="EXPERTSxTOPK,... instead of checks.ROUTING_CASES (tests); '' for none")
    p.add_argument("--quick", action="store_true", help="one scale layout, no pad probe, no DeepSeek-V4 routing (tests)")
    a = p.parse_args(argv)
    from fp4moe.infra import childproc

    write_record = childproc.record_writer()  # before any aiter code runs (it must not get one)
    from fp4moe.infra.confine import confine_from_env

    # before any aiter code runs: writes only beneath the scratch folder the parent named
    unconfined = confine_from_env(also=[os.path.dirname(os.environ.get(childproc.RESULT_ENV, "") or ".")])
    from fp4moe.infra import culprit
    from fp4moe.infra.errors import GateCannotRun

    # an os._exit in aiter's code leaves no traceback: the record names the file that called it
    culprit.note_exits([a.aiter_src], lambda line: write_record({"cannot_run": line}))
    t0 = time.perf_counter()
    try:
        from fp4moe.targets.aiter.kernels import triton_status

        if a.device != "cpu" and os.environ.get("TRITON_INTERPRET") == "1":
            raise GateCannotRun(f"--device {a.device}: TRITON_INTERPRET=1 is set; a GPU run compiles the kernels (unset it)")
        ok, line = triton_status(a.device)
        if not ok:
            raise GateCannotRun(line)
        from fp4moe.targets.aiter.kernels import checks, loader, shims

        am = loader.load_aiter_moe(a.aiter_src, arch=a.arch, device=a.device, strict=False)
        rows = []
        if os.environ.get("TRITON_INTERPRET") == "1":
            res = shims.self_test()
            det = (f"{res['n_values']} values + 256 e4m3 codes; wrong bit patterns with the shim: {res['on']}, "
                   f"decode {res['e4m3 decode mismatches']}; without it: {res['off']}")
            rows.append(checks.Row("shims: interpreter casts == RNE/saturating rounding",
                                   checks.PASS if shims.self_test_ok(res) else checks.FAIL, det))
        save: dict | None = {} if a.save else None
        if a.shapes == "dsv4":
            kw = dict(layouts=(None,), pad_probe=False) if a.quick else {}
            rows += checks.run_dsv4(am, device=a.device, save=save, **kw)
        else:
            kw = dict(layouts=(None,), pad_probe=False, routing_cases=()) if a.quick else {}
            if a.routing_cases is not None:  # "256x6,384x6": DeepSeek-V4 routing cases (tests: fewer, for time)
                kw["routing_cases"] = tuple(tuple(int(v) for v in c.split("x")) for c in a.routing_cases.split(",") if c)
            rows += checks.run_all(am, save=save, device=a.device, **kw)
        if a.save:
            import torch

            torch.save(save, a.save)
        import triton

        write_record({
            "tree": str(am.tree), "arch": am.arch, "triton": triton.__version__, "device": a.device, "shapes": a.shapes,
            "shims_active": bool(shims._ORIG),
            "gpu": torch_device_name(a.device),
            "interpreter": os.environ.get("TRITON_INTERPRET") == "1",
            "unjudged": dict(am.unjudged), "tree_date": loader.tree_date(am.tree),
            "patches": [[pt.name, pt.what, pt.why] for pt in loader.PATCHES],
            "rows": checks.rows_to_dicts(rows), "seconds": round(time.perf_counter() - t0, 1),
            "writes_confined": unconfined is None, **({"unconfined": unconfined} if unconfined else {}),
        })
    except BaseException as e:  # noqa: BLE001 -- the tree's own SystemExit included: the parent says could-not-run
        if isinstance(e, GateCannotRun):
            why = culprit.bounded(str(e))
        else:  # the innermost frame inside the tree names the file; aiter's own text quoted
            why = culprit.describe(e, [a.aiter_src], stage="loading or running the kernel checks", speaker="aiter")
        write_record({"cannot_run": why})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
