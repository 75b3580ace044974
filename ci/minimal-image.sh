#!/usr/bin/env bash
# The CPU tier on a minimal runner image (issue #44 item 4): a fresh venv holding torch (ci/install.sh's
# pin: the CPU build here), triton 3.6 (older than the 3.8 the kernel checks' CPU interpreter needs,
# as ROCm and CUDA images often carry) and ONLY pyproject.toml's core dependencies: no extra, no
# SGLang, the project NOT installed, this checkout on PYTHONPATH. Then the default tier
# (`python -m pytest -q -p no:cacheprovider -x`, more pytest arguments after ours): every test
# passes or skips saying what is missing (an extra, triton >= 3.8, SGLang). pip's cache is reused;
# the venv is made anew each run ($FP4MOE_MINIMAL_VENV, default
# ${XDG_CACHE_HOME:-~/.cache}/fp4moe/ci-minimal-venv, outside the checkout);
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
t=$SECONDS
rm -rf "$VENV" && "$HOST_PY" -m venv "$VENV" || cannot "python3 -m venv $VENV failed"
PY=$VENV/bin/python
# the core dependencies as pyproject.toml declares them (tomllib: Python >= 3.11; else its one array read as text)
CORE=$("$PY" - <<'EOF'
import re
text = open("pyproject.toml").read()
try:
    import tomllib
    deps = tomllib.loads(text)["project"]["dependencies"]
except ImportError:
    deps = re.findall(r'"([^"]+)"', re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M).group(1))
print(*(d for d in deps if not d.startswith("torch")))
EOF
) || cannot "could not read [project] dependencies from pyproject.toml"
say "$("$PY" -c 'import sys; print("python", sys.version.split()[0])'): installing $TORCH triton==$TRITON $CORE (no extra; the project not installed) ..."
# shellcheck disable=SC2086  # one requirement a word
"$PY" -m pip install -q "$TORCH" "triton==$TRITON" $CORE || cannot "pip install failed"
say "venv ready in $((SECONDS - t)) s ($(du -sh "$VENV" | cut -f1))"
t=$SECONDS
# the venv's interpreter first on PATH (a test that starts python3 or a console script gets this image),
# the checkout on PYTHONPATH; no FP4MOE_REQUIRE inherited (this image has no SGLang by design)
env -u FP4MOE_REQUIRE -u PYTHONHOME PATH="$VENV/bin:$PATH" VIRTUAL_ENV="$VENV" PYTHONPATH="$CHECKOUT" \
  "$PY" -m pytest -q -p no:cacheprovider -x "$@"
rc=$?
say "CPU tier: exit $rc in $((SECONDS - t)) s"
exit "$rc"
