"""Infrastructure, the ground floor: nothing here knows MXFP4, MoE or any system under test.

Errors and exit codes, repository paths, strict JSON, the one child runner (``runner``: a child
with a deadline, bounded output and a JSON record the parent judges), naming the file that ended
a child (``culprit``), atomic result files and output nodes (``files``), the one-line argument
parser, and capability probing (probes passed in).
"""
