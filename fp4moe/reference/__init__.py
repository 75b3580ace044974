"""The independent reference of the whole weight path, the judge of every target.

Weight path (pad, record the pads, gfx950 layouts), the pad contract (``quant_info``), the
backend protocol, the exact MoE and its float64 oracle, the GPU-bound grouped MoE, the
reference backend, seeded input builders, the kernel budget and the footprint arithmetic.
"""
