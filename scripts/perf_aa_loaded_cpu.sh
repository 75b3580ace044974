#!/usr/bin/env bash
# Issue #46 item 5: perf ab A/As of this checkout against itself on a CPU with two busy loops
# beside it (a study, not a timed test). From the checkout root, with python3 the environment
# that has torch (e.g. `. venv/bin/activate`):
#   bash scripts/perf_aa_loaded_cpu.sh N OUTDIR [extra perf ab options, e.g. --workers separate]
# OUTDIR/summary.txt: one line per run (exit code, head/base ratio and interval, p(slower), the
# 1-minute load average at the end of the run); OUTDIR/aaI.json: each run's record.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
n=$1; out=$2; shift 2; mkdir -p "$out"
( while :; do :; done ) & b1=$!
( while :; do :; done ) & b2=$!
trap 'kill $b1 $b2' EXIT
for i in $(seq 1 "$n"); do
  python3 -m fp4moe.commands.main perf ab --device cpu --benchmarks 'moe:*align128*' --base "$PWD" --head "$PWD" \
    --seed "$i" --json "$out/aa$i.json" "$@" > "$out/aa$i.log" 2>&1
  echo "$i rc=$? $(grep -o 'head/base [0-9.]* \[[0-9., ]*\], p(slower) [0-9.e-]*' "$out/aa$i.log" | tail -1) load=$(cut -d' ' -f1 /proc/loadavg)" >> "$out/summary.txt"
done
