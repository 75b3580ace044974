"""The workloads a side gives ``fp4moe-gate perf ab``: ``registry(device)``, benchmark name ->
builder of ``(fn, inputs, meta)``, built from THIS checkout's code (its ``fp4moe`` backends, its
aiter, its SGLang) with seeded inputs, the same on both sides.

Only the workload: the worker process that imports this module, warms the benchmarks up and
times them is the gate's (``fp4moe/gates/perf/child/timing_worker.py`` with the gate's
``timer.py``), so a side cannot change how it is timed. The module keeps its name (and the gate
also finds its two older homes) so that older checkouts can still be the base.
"""

from __future__ import annotations


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
