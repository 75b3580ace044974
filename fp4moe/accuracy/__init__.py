"""Accuracy gates: GSM8K through lm-eval against a running OpenAI-compatible server.

``gsm8k`` runs the evaluation, ``verdict`` decides pass/fail with the measurement's noise,
``thresholds`` reads the per-model floors from ``fixtures/``, ``data`` handles the offline
dataset, ``replay_server`` is a scripted completions server for tests, ``cli`` registers
``fp4moe-gate gsm8k``. Nothing here imports lm-eval at module import time: it is an optional
extra (``pip install -e .[eval]``).
"""
