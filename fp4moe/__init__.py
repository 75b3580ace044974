"""fp4-moe-gate: an independent reference of the MXFP4 MoE weight path that SGLang runs
for DeepSeek-V4 routed experts on gfx950 through aiter, and the gates built on it."""

__version__ = "0.1.0"
