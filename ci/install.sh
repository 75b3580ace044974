#!/usr/bin/env bash
# Install fp4-moe-gate without ever replacing a runner's own torch (ROCm build) or aiter.
#  - torch already importable (a ROCm runner's image, a CUDA box): keep it.
#  - no torch: take torch==2.13.0, which on this project's CPU machines is a CPU build on
#    local disk (a bare `torch` requirement would pull a multi-GB CUDA build).
# Extras: eval (lm-eval, for the GSM8K gate), serve (aiohttp, for serve-bench) and lint
# (actionlint, for ci/ workflows).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
  "$PY" -m pip install -q "torch==2.13.0"
fi
"$PY" -m pip install -q -e ".[eval,serve,lint]"
