"""Infrastructure, the ground floor: nothing here knows MXFP4, MoE or any system under test.

Errors and exit codes, repository paths, strict JSON, child processes with time limits (each in
a PID namespace of its own: ``pidns``, executed by path), their sandbox (``confine``), naming the
file that ended a child (``culprit``), atomic result files and output nodes (``files``), the
one-line argument parser, and capability probing (probes passed in).
"""
