#!/usr/bin/env bash
# The CPU tier on a minimal runner image (issue #44 item 4): a fresh venv holding torch (ci/install.sh's
# pin: the CPU build here), triton 3.6 (older than the 3.8 the kernel checks' CPU interpreter needs,
# as ROCm and CUDA images often carry) and ONLY pyproject.toml's core dependencies: no extra, no
# SGLang, the project NOT installed, this checkout on PYTHONPATH. Then the default tier
# (`python -m pytest -q -p no:cacheprovider -x`, more pytest arguments after ours): every test
# passes or skips saying what is missing (an extra, triton >= 3.8, SGLang). The venv
# ($FP4MOE_MINIMAL_VENV, default ${XDG_CACHE_HOME:-~/.cache}/fp4moe/ci-minimal-venv, outside the
# checkout) is kept between runs while it holds exactly what it was made with (its `pip freeze`, the
# Python, the requirements: else made anew, pip's cache reused; FP4MOE_MINIMAL_FRESH=1 always anew):
# its ~2 GB of torch and triton cost ~1 min of pip on a quiet machine, 4 min on a busy one.
# $FP4MOE_MINIMAL_TRITON picks another triton. Exit: pytest's, or 2 when the image could not be built.
set -uo pipefail
cd "$(dirname "$0")/.."
CHECKOUT=$PWD
say() { echo "minimal-image: $*" >&2; }
cannot() { say "cannot run: $*"; exit 2; }
cache=${XDG_CACHE_HOME:-$HOME/.cache}
case "$cache" in /*) ;; *) cache=$HOME/.cache ;; esac
VENV=${FP4MOE_MINIMAL_VENV:-$cache/fp4moe/ci-minimal-venv}
TRITON=${FP4MOE_MINIMAL_TRITON:-3.6.0}
TORCH=$(grep -o 'torch==[0-9][0-9.]*' ci/install.sh | head -n 1)
[ -n "$TORCH" ] || cannot "no torch==X pin found in ci/install.sh"
HOST_PY=$(command -v python3) || cannot "no python3 on PATH"
# the core dependencies as pyproject.toml declares them (tomllib: Python >= 3.11; else its one array read as text)
CORE=$("$HOST_PY" - <<'EOF2'
import re
text = open("pyproject.toml").read()
try:
    import tomllib
    deps = tomllib.loads(text)["project"]["dependencies"]
except ImportError:
    deps = re.findall(r'"([^"]+)"', re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M).group(1))
print(*(d for d in deps if not d.startswith("torch")))
EOF2
) || cannot "could not read [project] dependencies from pyproject.toml"
PY=$VENV/bin/python
WANT="$("$HOST_PY" -c 'import sys; print("python", sys.version.split()[0])'): $TORCH triton==$TRITON $CORE"
STAMP=$VENV/.fp4moe-minimal-image
t=$SECONDS
if [ "${FP4MOE_MINIMAL_FRESH:-0}" = 0 ] && [ -f "$STAMP" ] && [ -x "$PY" ] \
   && [ "$(cat "$STAMP")" = "$WANT"$'\n'"$("$PY" -m pip freeze 2>/dev/null)" ]; then
  say "$WANT: the venv $VENV as made (pip freeze unchanged)"
else
  rm -rf "$VENV" && "$HOST_PY" -m venv "$VENV" || cannot "python3 -m venv $VENV failed"
  say "$WANT: installing (no extra; the project not installed) ..."
  # shellcheck disable=SC2086  # one requirement a word
  "$PY" -m pip install -q "$TORCH" "triton==$TRITON" $CORE || cannot "pip install failed"
  { echo "$WANT"; "$PY" -m pip freeze; } >"$STAMP" || cannot "could not write $STAMP"
  say "venv made in $((SECONDS - t)) s ($(du -sh "$VENV" | cut -f1))"
fi
t=$SECONDS
# the venv's interpreter first on PATH (a test that starts python3 or a console script gets this image),
# the checkout on PYTHONPATH; no FP4MOE_REQUIRE inherited (this image has no SGLang by design)
env -u FP4MOE_REQUIRE -u PYTHONHOME PATH="$VENV/bin:$PATH" VIRTUAL_ENV="$VENV" PYTHONPATH="$CHECKOUT" \
  "$PY" -m pytest -q -p no:cacheprovider -x "$@"
rc=$?
say "CPU tier: exit $rc in $((SECONDS - t)) s"
exit "$rc"
