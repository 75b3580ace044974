#!/usr/bin/env bash
# Issue #46 item 4 on a GPU: what perf ab's clock attribution sees. Prints five samples of the
# SM/memory clocks, power and throttle reasons (nvidia-smi, amd-smi or rocm-smi, whichever is on
# PATH), then runs a perf ab A/A of this checkout on `matmul:4096` and prints the record's clocks
# (per arm: median SM/memory clock, power, throttle reasons seen; exit 2 if the arms differ by
# more than 1% or in throttle reasons). Changes no GPU setting. From the checkout root:
#   OUT=out bash scripts/perf_clocks_gpu.sh
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
python3 - <<'PY'
from fp4moe.gates.perf.clocks import ClockProbe
p = ClockProbe.find()
print("tool:", p and p.tool)
for _ in range(5):
    print(p.sample() if p else "no nvidia-smi/amd-smi/rocm-smi on PATH")
PY
python3 -m fp4moe.commands.main perf ab --base . --head . --benchmarks 'matmul:*' --json "$OUT/ab_clocks.json"
echo "perf ab A/A: rc=$?"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); c=d.get('clocks') or {}; print(json.dumps({k: c.get(k) for k in ('tool', 'base', 'head')}, indent=1))" "$OUT/ab_clocks.json"
