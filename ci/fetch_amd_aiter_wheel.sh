#!/usr/bin/env bash
# Fetch the public PyPI release of aiter as a wheel for `fp4moe-gate aiter-check --aiter-wheel`
# and tests/gates/aiter_check/test_aiter_check.py. Downloaded, NEVER installed: installing amd-aiter
# would shadow a ROCm runner's own aiter. Lands in the wheel cache outside the checkout
# (fp4moe.infra.paths.wheel_dir(): $FP4MOE_WHEEL_DIR, else $FP4MOE_CACHE_DIR/wheels, else
# ${XDG_CACHE_HOME:-~/.cache}/fp4moe/wheels); a second run is a no-op. The download and its size
# are announced on stderr; stdout is the wheel's path only.
# Env: FP4MOE_AITER_WHEEL_VERSION (default 0.1.7.post2.dev18).
# Exit: 0 the wheel's path printed; 2 could not fetch it (one line naming what failed).
set -euo pipefail
trap 'rc=$?; echo "fetch_amd_aiter_wheel: cannot run: \"$BASH_COMMAND\" exited $rc (line $LINENO)" >&2; exit 2' ERR
cd "$(dirname "$0")/.."
VERSION=${FP4MOE_AITER_WHEEL_VERSION:-0.1.7.post2.dev18}
CACHE=${FP4MOE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/fp4moe}
case "$CACHE" in /*) ;; *) CACHE=$HOME/.cache/fp4moe ;; esac  # XDG: a relative path is ignored
DEST=${FP4MOE_WHEEL_DIR:-$CACHE/wheels}
WHEEL="$DEST/amd_aiter-${VERSION}-py3-none-any.whl"
if [ ! -f "$WHEEL" ]; then
  mkdir -p "$DEST"
  echo "fetch_amd_aiter_wheel: downloading amd-aiter==${VERSION} into $DEST ..." >&2
  "${PYTHON:-python3}" -m pip download -q --no-deps --only-binary :all: -d "$DEST" "amd-aiter==${VERSION}" </dev/null
  [ -f "$WHEEL" ] && echo "fetch_amd_aiter_wheel: downloaded $WHEEL ($(du -h "$WHEEL" | cut -f1))" >&2
fi
[ -f "$WHEEL" ] || { echo "fetch_amd_aiter_wheel: cannot run: $WHEEL not found after download" >&2; exit 2; }
echo "$WHEEL"
