"""aiter under test: its source tree or wheel, its pure-torch references, its kernels.

``source`` loads aiter files without running ``aiter/__init__.py``; ``conformance`` executes
aiter's references against ours; ``backend`` is the real ``fused_moe`` behind the backend protocol.
"""
