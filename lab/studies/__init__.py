"""Studies run by hand from a checkout (``python3 -m lab.studies.NAME --help``), never by the
gate's suite: each measures what a gate or a choice of the weight path costs, on the machine it
names. They import ``fp4moe``; nothing in ``fp4moe``, ``tests/`` or ``ci/`` imports them.

Index:

- ``perf_study`` -- the perf gate's false-regression and detection rates (A/A, injected slowdowns).
- ``serve_study`` -- the same for ``serve-bench``, on loopback servers.
- ``moe_fast_bench`` -- the GPU reference MoE timed on DeepSeek-V4 shapes, on the roofline (GPU).
- ``aiter_triton_pad_table`` -- aiter's Triton MoE kernels, the pad told vs not told (GPU).
- ``gpu_memory`` -- what the weight path costs in GPU memory beyond tensor bytes (GPU).

The GPU studies import cleanly without a GPU (``lab/tests/`` imports every one) and say so when run.
"""
