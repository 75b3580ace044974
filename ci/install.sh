#!/usr/bin/env bash
# Install fp4-moe-gate without ever replacing a runner's own torch (ROCm build) or aiter.
#  - torch already importable (a ROCm runner's image, a CUDA box): keep it.
#  - no torch: take torch==2.13.0, which on this project's CPU machines is a CPU build on
#    local disk (a bare `torch` requirement would pull a multi-GB CUDA build).
# Extras: eval (lm-eval, for the GSM8K gate), serve (aiohttp, for serve-bench), lint
# (actionlint, for ci/ workflows) and sglang (the few real dependencies of SGLang's FP4 MoE path).
# Each step says on stderr what it installs ("install.sh: ..."); FP4MOE_QUIET=1 silences that.
# `bash ci/install.sh` installs this checkout editable; `bash ci/install.sh PATH.whl` installs that
# built wheel (non-editable: what a runner gets from `pip install fp4-moe-gate`) the same way.
# Exit: 0 installed; 2 could not install (one line naming the command that failed): never 1,
# which the gates' contract keeps for a measured regression.
set -euo pipefail
trap 'rc=$?; echo "install.sh: cannot run: \"${BASH_COMMAND//$'"'"'\n'"'"'/ }\" exited $rc (line $LINENO)" >&2; exit 2' ERR
WHEEL=${1:-}
if [ -n "$WHEEL" ]; then
  [ -f "$WHEEL" ] || { echo "install.sh: $WHEEL: no such wheel" >&2; exit 2; }
  WHEEL=$(cd "$(dirname "$WHEEL")" && pwd)/$(basename "$WHEEL")
fi
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
say() { [ "${FP4MOE_QUIET:-0}" != 0 ] || echo "install.sh: $*" >&2; }
say "python: $("$PY" -c 'import sys; print(sys.executable, sys.version.split()[0])')"
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
  say "no torch importable: installing torch==2.13.0 (the CPU build) ..."
  "$PY" -m pip install -q "torch==2.13.0"
else
  say "keeping torch $("$PY" -c 'import torch; print(torch.__version__)') (never replaced)"
fi
EXTRAS="[eval,serve,lint,sglang,mutation]"
if [ -n "$WHEEL" ]; then
  say "installing fp4-moe-gate from $WHEEL (not editable) with extras $EXTRAS ..."
  "$PY" -m pip install -q "fp4-moe-gate${EXTRAS} @ file://$WHEEL"
else
  say "installing fp4-moe-gate (editable) with extras eval (lm-eval), serve (aiohttp), lint (actionlint, import-linter), sglang (msgspec, regex, dill, packaging, pydantic-core), mutation (mutmut) ..."
  "$PY" -m pip install -q -e ".$EXTRAS"
fi
# The SGLang under test (the sglang tier, `fp4moe-gate sglang-check`): ONE pinned release, the
# fast way -- its wheel without dependencies (torch, triton, transformers ... are never pulled
# in or replaced; the child stubs what the FP4 MoE path does not use). Pinned in one place:
SGLANG_PIN=$(sed -n 's/^PINNED_SGLANG = "\(.*\)"$/\1/p' fp4moe/targets/sglang/__init__.py)
say "installing the SGLang under test: sglang==${SGLANG_PIN:?PINNED_SGLANG not found in fp4moe/targets/sglang/__init__.py} (--no-deps) ..."
"$PY" -m pip install -q --no-deps "sglang==${SGLANG_PIN}"
say "done"
# aiter's Triton MoE kernels (aiter-check's kernel checks) run on a CPU under the Triton
# interpreter, which needs triton>=3.8. Installed ONLY when no triton is importable (a runner's
# own ROCm/CUDA triton is never replaced); ~10 s, ~1 GB on disk; FP4MOE_INSTALL_TRITON=0 skips it
# (an environment that never runs the kernel checks). Pinned in one place:
if [ "${FP4MOE_INSTALL_TRITON:-1}" != 0 ] && ! "$PY" -c "import triton" >/dev/null 2>&1; then
  TRITON_PIN=$(sed -n 's/^PINNED_TRITON = "\(.*\)"$/\1/p' fp4moe/targets/aiter/kernels/__init__.py)
  say "no importable triton: installing triton==${TRITON_PIN:?PINNED_TRITON not found} (aiter-check kernel checks; ~1 GB) ..."
  "$PY" -m pip install -q "triton==${TRITON_PIN}"
  say "done"
fi
