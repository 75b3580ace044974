"""The models and their checkpoints: DeepSeek-V4 routed-expert shapes and parallel rows.

``catalogue`` reads ``fp4moe/data/models.json`` (models, TP/EP rows); ``checkpoint`` reads and
writes DeepSeek-V4-format FP4 expert tensors from safetensors, sharded for TP or EP.
"""
