"""Studies run by hand (``python3 -m fp4moe.commands.studies.NAME --help``), never by the suite:
each measures what a gate or a choice of the weight path costs, on the machine it names.

Index:

- ``perf_study`` -- the perf gate's false-regression and detection rates (A/A, injected slowdowns).
- ``serve_study`` -- the same for ``serve-bench``, on loopback servers.
- ``moe_fast_bench`` -- the GPU reference MoE timed on DeepSeek-V4 shapes, on the roofline (GPU).
- ``aiter_triton_pad_table`` -- aiter's Triton MoE kernels, the pad told vs not told (GPU).
- ``gpu_memory`` -- what the weight path costs in GPU memory beyond tensor bytes (GPU).
- ``gpu_sandbox_probe`` -- whether GPU work runs inside each of the children's sandboxes (GPU).

The GPU studies import cleanly without a GPU (a test imports every one) and say so when run.
"""
