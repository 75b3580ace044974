"""The accuracy gate: GSM8K through lm-eval against a running server (``gsm8k``), per-model
floors (``thresholds``), the noise-aware verdict (``verdict``). lm-eval (the ``eval`` extra)
is never imported at module import time.
"""
