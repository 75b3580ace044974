"""aiter under test: its source tree or wheel, its pure-torch references, its kernels.

``source`` loads aiter files without running ``aiter/__init__.py``; ``conformance`` executes
aiter's references against ours; ``backend`` is the real ``fused_moe`` behind the backend protocol.
"""

#: Seconds aiter's code may run in ``aiter-check``'s child, all checks together (~1 min on a
#: loaded 2-core CPU); here so that ``aiter-check --help`` shows it without importing torch.
CHECK_TIMEOUT_S = 600.0
