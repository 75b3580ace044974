"""``python -m fp4moe.targets.aiter.child.kernel_checks``: aiter's Triton MoE kernels, executed.

The child side of the kernel checks (``fp4moe-gate aiter-check``), a harness child
(``fp4moe.infra.runner.child_session``, taken before any aiter code runs): loads the tree with
``kernels.loader`` (which fills ``sys.modules['aiter']``), runs every job of ``kernels.cases.plan``
through ``kernels.compute`` and returns the outputs: each job's tensors as the harness output
``job-NNN``, each job's meta (configs, seconds, or where a call raised) in the record. It judges
nothing: the parent (``kernels.checks``) compares and decides. ``--skip COMPONENT,...`` leaves
components out (the parent re-runs without a component whose call killed the process).
The stage it names before each job is ``component=NAME; KEY`` (named when the process dies).
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


def parse(argv: list[str]):
    """The command line (the judge parses the same one: ``kernels.cases.plan_from_args``)."""
    p = argparse.ArgumentParser(prog="fp4moe.targets.aiter.child.kernel_checks")
    p.add_argument("--aiter-src", required=True)
    p.add_argument("--arch", default="gfx950")
    p.add_argument("--device", default="cpu")
    p.add_argument("--shapes", choices=("tiny", "dsv4"), default="tiny")
    p.add_argument("--routing-cases", help="EXPERTSxTOPK,... instead of cases.DEFAULT_ROUTING_CASES; '' for none")
    p.add_argument("--quick", action="store_true", help="one scale layout, no pad/tails/quant jobs, no DeepSeek-V4 routing")
    p.add_argument("--skip", default="", help="components not to run (a16w4,a8w4,a4w4,reduce,routing,quant)")
    p.add_argument("--only", default="", help="job kinds or components to run (tests): gemm,pad,stage2,tails,quant,reduce,routing,a16w4,...")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    a = parse(argv)
    from fp4moe.infra import runner
    from fp4moe.targets.aiter.kernels import cases

    with runner.child_session(cases.record_schema(), trees=[a.aiter_src], speaker="aiter") as s:
        t0 = time.perf_counter()
        from fp4moe.infra.errors import GateCannotRun
        from fp4moe.targets.aiter.kernels import triton_status

        if a.device != "cpu" and os.environ.get("TRITON_INTERPRET") == "1":
            raise GateCannotRun(f"--device {a.device}: TRITON_INTERPRET=1 is set; a GPU run compiles the kernels (unset it)")
        ok, line = triton_status(a.device)
        if not ok:
            raise GateCannotRun(line)
        from fp4moe.targets.aiter.kernels import compute, interp_fastpath, loader, shims

        s.stage(f"loading the tree {a.aiter_src}")
        am = loader.load_aiter_moe(a.aiter_src, arch=a.arch, device=a.device, strict=False)
        shim_res = None
        skip = {c for c in a.skip.split(",") if c}
        if os.environ.get("TRITON_INTERPRET") == "1" and "shims" not in skip:
            s.stage("component=shims; interpreter shim self-test")
            shim_res = {k: (v if isinstance(v, (int, dict)) else str(v)) for k, v in shims.self_test().items()}
        elif os.environ.get("TRITON_INTERPRET") == "1":
            shims.install()  # the self-test killed a previous child: the casts still need the shim
        jobs = cases.plan_from_args(a)
        metas = []
        for i, job in enumerate(jobs):
            meta = {"kind": job.kind.value, "key": job.key, "component": job.component}
            if job.component in skip or job.component in am.unjudged:
                metas.append({**meta, "skipped": True})
                continue
            s.stage(f"component={job.component}; {job.key}")
            tensors, m = compute.run_job(am, job, a.device)
            if tensors:
                s.put_tensors(cases.output_name(i), tensors)
            metas.append({**meta, **m})
        import triton

        s.stage("writing the record")
        s.finish({
            "tree": str(am.tree), "arch": am.arch, "triton": triton.__version__, "device": a.device, "shapes": a.shapes,
            "shims_active": bool(shims._ORIG),
            "interp_fastpath": interp_fastpath.status(), "gpu": torch_device_name(a.device),
            "interpreter": os.environ.get("TRITON_INTERPRET") == "1", "unjudged": dict(am.unjudged),
            "patches": [[pt.name, pt.what, pt.why] for pt in loader.PATCHES], "shims": shim_res,
            "jobs": metas, "seconds": round(time.perf_counter() - t0, 1),
            "writes_confined": s.unconfined is None, "unconfined": s.unconfined,
        })
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
