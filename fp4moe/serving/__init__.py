"""The end-to-end serving perf gate (``fp4moe-gate serve-bench``).

``client`` streams and times one completion, ``prompts`` builds seeded prompt streams, ``bench``
interleaves base and head servers and judges every metric with ``fp4moe.perf.compare``,
``stream_server`` is a loopback server with scripted timing and faults (tests and the study),
``cli`` registers the subcommand. docs/serving-perf.md explains the method and the study.
"""
