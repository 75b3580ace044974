"""Infrastructure, the ground floor: nothing here knows MXFP4, MoE or any system under test.

Errors and exit codes, repository paths, strict JSON, child processes with time limits,
atomic result files, the one-line argument parser, and capability probing (probes passed in).
"""
