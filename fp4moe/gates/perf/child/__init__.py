"""perf's child entry: ``ab_worker``, one long-lived worker per side of ``perf ab``, started by
module name (``fp4moe.gates.perf.ab``), never imported by a parent.
"""
