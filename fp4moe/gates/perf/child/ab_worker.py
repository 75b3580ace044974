"""The worker of ``fp4moe-gate perf ab``: one long-lived process per side, importing ITS code.

Started by ``fp4moe.gates.perf.ab`` as ``python -m fp4moe.gates.perf.child.ab_worker`` from a checkout (with
``PYTHONPATH`` = that checkout) or with an environment's own interpreter, so the timed code is
that side's: its ``fp4moe`` backends, its aiter, its SGLang. It builds the selected benchmarks
once (seeded inputs, the same on both sides), warms them up, then times one call per ``run``
request with ``fp4moe.gates.perf.timer.DeviceTimer`` (CUDA/HIP events; host clock on a CPU).

Protocol (``fp4moe.gates.perf.worker.Worker``): one JSON request per stdin line, one reply per request
on the reply pipe. Requests: ``hello``; ``setup`` {device, patterns}; ``run`` {name, index};
``quit``. Errors are replied as {"error": message}, never raised past the loop.
"""

from __future__ import annotations

import fnmatch
import json
import os
import sys
import traceback

WARMUP = 3


def _moe(device, tokens, align, hidden=None, experts=None):
    from fp4moe.gates.perf import workloads

    def build():
        # the backend under test: $FP4MOE_BENCH_BACKEND (default reference; aiter where it imports)
        backend, why_not = workloads.bench_backend_from_env()
        if why_not:
            raise RuntimeError(why_not)
        fn, inputs, meta = workloads.make_moe_workload(
            model="dsv4-pro", tp=8, align=align, tokens=tokens, device=device, hidden=hidden, experts=experts, backend=backend
        )
        return fn, inputs, meta

    return build


def _aiter_triton(device, tokens, act_mode):
    def build():
        from fp4moe.gates.perf import workloads

        tree, why = workloads.aiter_tree_from_env()
        if tree is None:
            raise RuntimeError(why)
        return workloads.make_aiter_triton_workload(aiter_src=tree, model="dsv4-pro", tp=8, align=256, tokens=tokens,
                                                    act_mode=act_mode, device=device)

    return build


#: aiter's Triton kernels (the tree in $FP4MOE_AITER_SRC; ``perf ab --base-aiter-src/--head-aiter-src``)
AITER_TRITON_TOKENS = (1, 64, 1024, 4096)


def _matmul(device, size):
    def build():
        import torch

        dtype = torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32
        g = torch.Generator(device="cpu").manual_seed(0)
        inputs = [(torch.randn(size, size, generator=g).to(device, dtype), torch.randn(size, size, generator=g).to(device, dtype))
                  for _ in range(4)]
        out = torch.empty(size, size, device=device, dtype=dtype)

        def fn(ab):
            torch.matmul(ab[0], ab[1], out=out)

        return fn, inputs, {"shape": f"matmul-{str(dtype).split('.')[-1]}-{size}", "backend": "torch"}

    return build


def registry(device: str) -> dict:
    """Benchmark name -> builder. On a GPU: DeepSeek-V4-Pro TP8 MoE (the reference backend,
    i.e. the fast path on CUDA), a bf16 matmul and ``aiter-triton:*`` (aiter's Triton MXFP4 MoE
    kernels from the tree in ``$FP4MOE_AITER_SRC``, all 384 experts, align 256, pad told);
    on a CPU, tiny shapes (host timing)."""
    import torch

    if torch.device(device).type == "cuda":
        reg = {f"moe:dsv4-pro-tp8-align128-T{t}": _moe(device, t, 128) for t in (1, 16, 128, 4096)}
        reg["moe:dsv4-pro-tp8-align256-T16"] = _moe(device, 16, 256)
        reg["matmul:4096"] = _matmul(device, 4096)
        for mode in ("a16w4", "a8w4"):
            for t in AITER_TRITON_TOKENS:
                reg[f"aiter-triton:dsv4-pro-tp8-align256-T{t}-{mode}"] = _aiter_triton(device, t, mode)
        return reg
    return {
        "moe:dsv4-pro-tp8-align128-T4-H128": _moe(device, 4, 128, hidden=128, experts=6),
        "moe:dsv4-pro-tp8-align256-T4-H128": _moe(device, 4, 256, hidden=128, experts=6),
        "matmul:64": _matmul(device, 64),
    }


def select(names, patterns):
    if not patterns:
        return list(names)
    return [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)]


def _jsonable(meta: dict) -> dict:
    return {k: v for k, v in meta.items() if isinstance(v, (str, int, float, bool, type(None), list))}


def loaded_files() -> list[str]:
    """Every ``fp4moe`` module file this worker has imported (the gate checks they are its side's)."""
    def name(n, m):  # this module runs as __main__: its spec keeps the real name
        return getattr(getattr(m, "__spec__", None), "name", None) or n

    return sorted({os.path.abspath(m.__file__) for n, m in list(sys.modules.items())
                   if name(n, m).split(".")[0] == "fp4moe" and getattr(m, "__file__", None)})


def main() -> int:
    from fp4moe.gates.perf.worker import worker_reply

    state = {"benches": {}, "timer": None}
    for line in sys.stdin:
        try:
            req = json.loads(line)
            op = req.get("op")
            if op == "hello":
                import fp4moe

                worker_reply({"fp4moe": os.path.dirname(os.path.abspath(fp4moe.__file__)), "python": sys.version.split()[0],
                              "executable": sys.executable})
            elif op == "setup":
                import torch

                from fp4moe.gates.perf.timer import DeviceTimer

                device = req["device"]
                if torch.device(device).type == "cpu":  # host timing: no intra-op thread pool stalls
                    torch.set_num_threads(int(os.environ.get("FP4MOE_TORCH_THREADS", "1")))
                timer = state["timer"] = DeviceTimer(device)
                reg = registry(device)
                names = select(reg, req.get("patterns") or [])
                metas = {}
                for name in names:
                    fn, inputs, meta = reg[name]()
                    for i in range(WARMUP):
                        fn(inputs[i % len(inputs)])
                    timer.synchronize()
                    state["benches"][name] = (fn, inputs)
                    metas[name] = _jsonable({**meta, **timer.metadata()})
                worker_reply({"benchmarks": metas, "available": sorted(reg), "loaded": loaded_files()})
            elif op == "run":
                fn, inputs = state["benches"][req["name"]]
                worker_reply({"seconds": state["timer"].time_call(fn, inputs[int(req["index"]) % len(inputs)])})
            elif op == "quit":
                worker_reply({"bye": True, "loaded": loaded_files()})
                return 0
            else:
                worker_reply({"error": f"unknown request {op!r}"})
        except Exception as e:  # noqa: BLE001 -- reported to the gate, which exits 2
            worker_reply({"error": f"{type(e).__name__}: {e} [{traceback.format_exc().strip().splitlines()[-2].strip()}]"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
