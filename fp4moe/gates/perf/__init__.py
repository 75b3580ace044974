"""The performance gate: device timing (``timer``), workloads, interleaved A/B (``abtest``),
``perf ab`` between two checkouts (``ab``; its worker ``child.ab_worker`` is started by
module name), baselines, the roofline and the MoE byte model. Statistics live in ``fp4moe.stats``.
"""
