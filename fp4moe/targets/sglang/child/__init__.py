"""The SGLang child process: started by module name (``python -m ...child.drive``), never
imported by a parent. ``drive`` imports SGLang with ``stubs``, applies ``patches`` and drives
its FP4 MoE layer to ``fused_moe``, writing a record the parent judges.
"""
