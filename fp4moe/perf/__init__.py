"""The performance gate (issue 6): device timing, interleaved A/B runs, a statistical compare of
pytest-benchmark JSON files, baselines, reports, and a roofline helper.

Modules: ``timer`` (CUDA/HIP events, host fallback), ``abtest`` (interleaved base/head rounds),
``compare`` (Mann-Whitney test + Hodges-Lehmann ratio and interval, the verdict), ``baseline``
(reading/validating/storing pytest-benchmark JSON), ``report`` (markdown table, plot),
``roofline`` (bandwidth and achieved fraction), ``cli`` (``fp4moe-gate perf ...``).
"""
