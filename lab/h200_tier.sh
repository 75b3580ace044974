#!/usr/bin/env bash
# The GPU tier on a CUDA (or ROCm) machine, in one go, everything logged under $OUT (or ./out).
# Run on an H200 from the checkout root:  bash lab/h200_tier.sh [steps...]
# steps: env pytest memory bench zoo fast study ab (default: all). The repo need not be installed:
# it runs from the checkout with PYTHONPATH=. (the image has torch, scipy, pytest-benchmark...;
# not jsonschema: carry its wheels (jsonschema, jsonschema-specifications, referencing, rpds-py)
# and put them on PYTHONPATH first, else two test modules fail to collect and pytest stops).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 MPLBACKEND=Agg
steps=${*:-env pytest memory bench zoo fast study ab}
t0=$(date +%s)
stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
for step in $steps; do
  case $step in
    env)
      stamp env
      nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee "$OUT/env.txt"
      python3 -c "import torch,sys;print('python',sys.version.split()[0],'torch',torch.__version__,'cuda',torch.version.cuda,'hip',torch.version.hip,torch.cuda.get_device_name(0))" 2>&1 | tee -a "$OUT/env.txt"
      ;;
    pytest)
      stamp "pytest: every tier this machine has (perf benchmarks excluded here)"
      python3 -m pytest -q -m "not perf" -p no:cacheprovider --junitxml="$OUT/pytest-gpu.xml" 2>&1 | tail -40 | tee "$OUT/pytest-gpu.txt"
      ;;
    memory)
      stamp "gpu memory: DeepSeek-V4-Pro TP8 weight path, align 128 vs 256"
      python3 -m lab.studies.gpu_memory --out "$OUT/memory" 2>&1 | tail -30
      ;;
    bench)
      stamp "perf benchmarks and relational assertions"
      python3 -m pytest tests/gates/perf -m perf -q -p no:cacheprovider --benchmark-json="$OUT/bench.json" \
        --benchmark-columns=median,iqr,rounds 2>&1 | tail -60 | tee "$OUT/bench.txt"
      ;;
    zoo)
      stamp "zoo: pad_not_propagated must be killed by the relational perf assertion on the GPU"
      python3 -m fp4moe.commands.main zoo --mutant pad_not_propagated --tests tests/gates/perf/test_relational.py -j 1 2>&1 | tee "$OUT/zoo-gpu.txt"
      ;;
    fast)
      stamp "GPU-bound reference MoE: times and roofline fractions (fp4moe.reference.grouped_moe)"
      python3 -m lab.studies.moe_fast_bench --out "$OUT/fast" 2>&1 | tail -20
      ;;
    study)
      stamp "perf study (sequential rule, injections verified): fast MoE decode and bf16 matmul"
      for w in moe matmul; do
        python3 -m lab.studies.perf_study --workload $w --device cuda --tokens 1 -n 200 --n-aa 300 --slowdowns 0,2,3,5,10 \
          --threshold 0.02 --max-rounds 200 --no-samples --out "$OUT/study-$w" 2>&1 | tail -13
      done
      ;;
    ab)
      stamp "perf ab: base vs a head with an injected 10% slowdown (exit 1), and an identical pair (exit 0)"
      bash lab/perf_ab_injected.sh 2>&1 | grep -E "^perf ab|injected|rc="
      ;;
    *) echo "unknown step $step" >&2; exit 2 ;;
  esac
done
stamp done
