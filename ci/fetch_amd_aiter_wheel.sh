#!/usr/bin/env bash
# Fetch the public PyPI release of aiter as a wheel for `fp4moe-gate aiter-check --aiter-wheel`
# and tests/gates/aiter_check/test_aiter_check.py. Downloaded, NEVER installed: installing amd-aiter
# would shadow a ROCm runner's own aiter. Lands in .wheels/ (gitignored); a second run is a no-op.
# Prints the wheel's path. Env: FP4MOE_AITER_WHEEL_VERSION (default 0.1.7.post2.dev18).
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${FP4MOE_AITER_WHEEL_VERSION:-0.1.7.post2.dev18}
DEST=.wheels
WHEEL="$DEST/amd_aiter-${VERSION}-py3-none-any.whl"
if [ ! -f "$WHEEL" ]; then
  mkdir -p "$DEST"
  "${PYTHON:-python3}" -m pip download -q --no-deps --only-binary :all: -d "$DEST" "amd-aiter==${VERSION}"
fi
[ -f "$WHEEL" ] || { echo "fetch_amd_aiter_wheel: $WHEEL not found after download" >&2; exit 1; }
echo "$WHEEL"
