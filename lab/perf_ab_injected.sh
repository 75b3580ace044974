#!/usr/bin/env bash
# `fp4moe-gate perf ab` end to end on a GPU: base = a copy of this checkout, head = a copy with a
# 10% slowdown injected into the fast MoE (a spin kernel worth 10% of the measured T=1 median,
# appended after the stage-2 reduction). Expect exit 1 for the slow head, 0 for an identical pair.
#   bash lab/perf_ab_injected.sh          (writes $OUT/ab_slow.json, $OUT/ab_same.json)
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
rm -rf /tmp/abbase /tmp/abhead && mkdir -p /tmp/abbase /tmp/abhead
for d in /tmp/abbase /tmp/abhead; do cp -r fp4moe fixtures "$d"/; done
# measure the T1 median and the spin kernel's rate, then inject 10% of it after the stage-2 reduction
cycles=$(python3 - <<'PY'
import numpy as np, torch
from fp4moe.gates.perf import workloads
from fp4moe.gates.perf.timer import DeviceTimer, time_rounds
fn, inputs, _ = workloads.make_moe_workload(model="dsv4-pro", tp=8, align=128, tokens=1, device="cuda")
t = DeviceTimer("cuda")
med = float(np.median(time_rounds(fn, inputs, 100, 10, timer=t)))
big = 20_000_000
rate = big / float(np.median(time_rounds(lambda _: torch.cuda._sleep(big), [None], 5, 2, timer=t)))
print(int(0.10 * med * rate))
PY
)
echo "injected cycles: $cycles"
python3 - "$cycles" <<'PY'
import sys
p = "/tmp/abhead/fp4moe/reference/grouped_moe.py"
s = open(p).read()
old = "num_warps=warps, num_stages=stages,\n    )\n    return y.view(t, k, h).sum(1).to(x.dtype)\n"
assert s.count(old) == 1, "injection point not found"
new = old.replace("    return y.view", f"    torch.cuda._sleep({int(sys.argv[1])})  # injected slowdown\n    return y.view")
s = s.replace(old, new)
open(p, "w").write(s)
PY
sel='moe:*align128-T1,moe:*T4096,matmul:*'
python3 -m fp4moe.commands.main perf ab --base /tmp/abbase --head /tmp/abhead --benchmarks "$sel" --json "$OUT/ab_slow.json"
echo "perf ab slow head: rc=$?"
python3 -m fp4moe.commands.main perf ab --base /tmp/abbase --head /tmp/abbase --benchmarks "$sel" --json "$OUT/ab_same.json"
echo "perf ab identical: rc=$?"
