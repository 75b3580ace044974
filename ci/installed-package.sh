#!/usr/bin/env bash
# The gate as a package, the way a runner takes it (issue: the wheel must carry its data and run
# from any folder). From this checkout's files, in a SECOND venv (fresh, or a copy of a base venv;
# pip's cache reused):
#   1. README's SGLang CI recipe, its two lines as printed, with a git+file:// clone standing in
#      for the repository URL and an SGLang-shaped checkout (python/sglang, the pinned release);
#   2. the wheel `pip wheel --no-deps .` builds, installed non-editable over the recipe's install
#      (whose declared dependencies are the same; `pip check` proves them met); from a temporary
#      folder: the main job, `python -m fp4moe --version`, `footprint --check-budget` (its record
#      carries the version) and `zoo` without --tests (exit 2 naming it); site-packages gains no
#      file. (sglang-check, the second gate, ran from the installed package in 1.)
#   3. the wheel holds every data file the code opens (tests/infra/test_package_data.py, from the
#      checkout, FP4MOE_WHEEL set), then part of tests/ against the INSTALLED package: the
#      suite copied without fp4moe/ (FP4MOE_EXPECT_INSTALLED=1 asserts which fp4moe ran).
# Exit 0 all held, 1 one did not (named on stderr), 2 could not run. $FP4MOE_CI_WHEEL_VENV moves
# the venv (default ${XDG_CACHE_HOME:-~/.cache}/fp4moe/ci-wheel-venv); $FP4MOE_CI_WHEEL_BASE=DIR starts
# it as a copy of the venv DIR (its torch kept) instead of a fresh one with torch installed.
# The recipe clones the checkout's commits (git clone): uncommitted edits are in the wheel, not in
# the recipe's install.
set -uo pipefail
cd "$(dirname "$0")/.."
CHECKOUT=$PWD
say() { echo "installed-package: $*" >&2; }
fail() { echo "installed-package: FAIL: $*" >&2; exit 1; }
cannot() { echo "installed-package: cannot run: $*" >&2; exit 2; }
cache=${XDG_CACHE_HOME:-$HOME/.cache}
case "$cache" in /*) ;; *) cache=$HOME/.cache ;; esac
VENV=${FP4MOE_CI_WHEEL_VENV:-$cache/fp4moe/ci-wheel-venv}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fp4moe-installed-XXXXXX") || cannot "mktemp failed"
trap 'rm -rf "$WORK"' EXIT
HOST_PY=$(command -v python3) || cannot "no python3 on PATH"
PIN=$(sed -n 's/^PINNED_SGLANG = "\(.*\)"$/\1/p' fp4moe/targets/sglang/__init__.py)
[ -n "$PIN" ] || cannot "PINNED_SGLANG not found in fp4moe/targets/sglang/__init__.py"
t=$SECONDS
lap() { say "$1: $((SECONDS - t)) s"; t=$SECONDS; }

# -- the second venv, with the runner's torch (ci/install.sh's rule: the CPU build here). Fresh, torch
# installed; or, with FP4MOE_CI_WHEEL_BASE=DIR, a copy of the venv DIR (.ci/run: the minimal image's,
# torch and the core dependencies; its triton 3.6 replaced by the pin below): the same proofs without
# pip unpacking a second torch
BASE=${FP4MOE_CI_WHEEL_BASE:-}
rm -rf "$VENV" || cannot "could not remove $VENV"
if [ -n "$BASE" ]; then
  [ -x "$BASE/bin/python3" ] && [ -f "$BASE/pyvenv.cfg" ] || cannot "FP4MOE_CI_WHEEL_BASE=$BASE: no venv there"
  # hard links where the file system allows (pip replaces files, never writes one in place: the base
  # stays as it was; this step fails on any file written into site-packages), else a copy
  cp -al "$BASE" "$VENV" 2>/dev/null || { rm -rf "$VENV"; cp -a "$BASE" "$VENV"; } \
    || cannot "copying the venv $BASE to $VENV failed"
  rm -f "$VENV/.fp4moe-minimal-image"
  # its console scripts start the copy's python, not the original's
  grep -lZ "^#!$BASE/bin/" "$VENV"/bin/* 2>/dev/null | xargs -0r sed -i "1s|^#!$BASE/bin/|#!$VENV/bin/|" \
    || cannot "could not point $VENV/bin's scripts at $VENV"
else
  "$HOST_PY" -m venv "$VENV" || cannot "python3 -m venv $VENV failed"
fi
PY=$VENV/bin/python3
export PATH="$VENV/bin:$PATH" VIRTUAL_ENV=$VENV
unset PYTHONPATH PYTHONHOME PYTHONOPTIMIZE  # PYTHONOPTIMIZE: the suite asserts
[ "$("$PY" -c 'import sys; print(sys.prefix)')" = "$VENV" ] || cannot "$PY does not run in the venv $VENV"
# a current pip, as a runner has: the pip that venv bundles with Python 3.11 (23.2) refuses a
# git+file:/// URL without a host ("Invalid requirement")
"$PY" -m pip install -q -U pip || cannot "pip could not upgrade itself"
if [ -n "$BASE" ]; then
  lap "venv (a copy of $BASE: its torch $("$PY" -c 'import torch; print(torch.__version__)') kept)"
else
  "$PY" -m pip install -q "torch==2.13.0" || cannot "torch==2.13.0 did not install"
  lap "venv + torch"
fi

# -- 1. README's SGLang CI recipe, as printed
RECIPE_PIP=$(grep -m1 '^pip install "fp4-moe-gate\[sglang\] @ git+https://<this repository>"' README.md | sed 's/ *#.*//')
RECIPE_RUN=$(grep -m1 '^fp4moe-gate sglang-check --sglang-root python' README.md | sed 's/ *#.*//')
[ -n "$RECIPE_PIP" ] && [ -n "$RECIPE_RUN" ] || fail "README.md: the SGLang CI recipe's two lines are not found as printed"
git clone -q "$CHECKOUT" "$WORK/repo" || cannot "git clone $CHECKOUT failed"
( cd "$WORK" && eval "${RECIPE_PIP/https:\/\/<this repository>/file://$WORK/repo} -q" ) \
  || fail "README's recipe line 1 (pip install from git+file://) failed"
# README: triton >= 3.8 where none is importable (the router check's CPU interpreter), as ci/install.sh does;
# in a copy of the minimal image, its triton 3.6 replaced (there sglang-check names "triton 3.6.0 < 3.8", exit 2)
TRITON_PIN=$(sed -n 's/^PINNED_TRITON = "\(.*\)"$/\1/p' fp4moe/targets/aiter/kernels/__init__.py)
if [ -n "$BASE" ] || ! "$PY" -c "import triton" 2>/dev/null; then
  "$PY" -m pip install -q "triton==${TRITON_PIN:?no PINNED_TRITON}" || cannot "triton==$TRITON_PIN did not install"
fi
# (--no-compile: a source checkout holds no .pyc; byte-compiling SGLang's ~2000 files was ~13 CPU s of this step)
"$PY" -m pip install -q --no-deps --no-compile --target "$WORK/sglang-checkout/python" "sglang==$PIN" \
  || cannot "sglang==$PIN: could not lay out an SGLang-shaped checkout"
( cd "$WORK/sglang-checkout" && eval "$RECIPE_RUN" ) >"$WORK/recipe.out" 2>&1 \
  || { tail -5 "$WORK/recipe.out" >&2; fail "README's recipe line 2 ($RECIPE_RUN) did not exit 0"; }
grep -q "checks held over" "$WORK/recipe.out" || fail "README's recipe: sglang-check printed no verdict table"
lap "README SGLang CI recipe (git+file://, --sglang-root python)"

# -- 2. the wheel, from the files git knows (no build/ or egg-info leftovers), installed
mkdir -p "$WORK/src" "$WORK/dist" "$WORK/run"
git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$WORK/src" || cannot "copying the checkout failed"
"$PY" -m pip wheel -q --no-deps -w "$WORK/dist" "$WORK/src" || fail "pip wheel --no-deps . failed"
WHEEL=$(ls "$WORK"/dist/fp4_moe_gate-*.whl) || fail "pip wheel made no fp4_moe_gate wheel"
"$PY" -m pip install -q --force-reinstall --no-deps "$WHEEL" || fail "pip install $WHEEL failed"
if ! "$PY" -m pip check >"$WORK/check.out" 2>&1; then
  ! grep -i "^fp4-moe-gate" "$WORK/check.out" >&2 || fail "the wheel's declared dependencies are not met"
fi
SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
lap "wheel built and installed ($(basename "$WHEEL"))"

touch "$WORK/marker"
cd "$WORK/run"
gate() {  # gate WANT_RC ARGS...: fp4moe-gate ARGS from the temporary folder
  local want=$1 rc
  shift
  fp4moe-gate "$@" >"$WORK/gate.out" 2>&1
  rc=$?
  [ "$rc" -eq "$want" ] || { tail -5 "$WORK/gate.out" >&2; fail "fp4moe-gate $* exited $rc, not $want"; }
}
gate 0
gate 0 footprint --check-budget --json "$WORK/footprint.json"
"$PY" -c "import json,sys; r=json.load(open(sys.argv[1])); assert r['status']=='pass' and r['fp4moe_version'] and r['fp4moe_commit'] is None, r" \
  "$WORK/footprint.json" || fail "footprint's record lacks its status or the package version"
"$PY" -m fp4moe --version | grep -q "^fp4moe-gate .* (installed package" || fail "python -m fp4moe --version"
gate 2 zoo
tail -1 "$WORK/gate.out" | grep -q -- "--tests" || fail "zoo without --tests: its line does not name --tests"
cd "$CHECKOUT"
written=$(find "$SITE" -newer "$WORK/marker" -print -quit)
[ -z "$written" ] || fail "the gate wrote into site-packages: $written"
lap "gates from a temporary folder"

# -- 3. the wheel's contents, then part of the suite against the installed package
FP4MOE_WHEEL=$WHEEL "$PY" -m pytest -q -p no:cacheprovider tests/infra/test_package_data.py \
  || fail "the wheel lacks a file the gates open"
mkdir "$WORK/suite"
cp -r conftest.py pyproject.toml tests fixtures "$WORK/suite/"
( cd "$WORK/suite" && FP4MOE_EXPECT_INSTALLED=1 "$PY" -m pytest -q -p no:cacheprovider \
    tests/infra/test_package_data.py tests/mx tests/model tests/reference/test_footprint_budget.py \
    tests/commands/test_cli.py tests/commands/test_version.py tests/gates/perf/test_perf_faults.py ) \
  || fail "part of tests/ failed against the installed package"
lap "tests against the installed package"
say "ok"
