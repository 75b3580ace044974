"""The gates: each one folder or file, each returns a verdict (0 pass, 1 regression, 2 cannot run).

selfcheck, footprint, zoo, aiter_check, perf, accuracy, serve_bench, sglang_check. Gates never
import each other and never parse arguments (``fp4moe.commands`` does).
"""
