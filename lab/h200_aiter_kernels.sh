#!/usr/bin/env bash
# aiter's Triton MXFP4 MoE kernels on a CUDA GPU (the H200 lent by the device tool), one batch,
# everything logged under $OUT (or ./out). Rerunnable:
#   HEAD_TREE=.../e4048607/aiter BASE_TREE=.../<older>/aiter bash lab/h200_aiter_kernels.sh [steps...]
# steps (default all, in this order, each under its own time limit so one slow step cannot eat
# the others): env relational zoo checks checks-tiny table ab
#   relational: tests/gates/perf/test_aiter_triton_pad.py (told vs untold at 64 tokens, Pro TP8)
#   zoo:        the pad_not_propagated mutant against that test (must be KILLED)
#   checks:     fp4moe-gate aiter-check --device cuda --shapes dsv4 (Pro + Flash TP8, 1/64/1024/4096; SwiGLU
#               limit 10; routing() with its defaults and with DeepSeek-V4's sqrtsoftplus / renorm / x1.5 /
#               correction bias at 8 and 1024 tokens; the fused MXFP8 output quant and the FP4 activation quant)
#   checks-tiny: the same rows at the CPU shapes, compiled: two K blocks, N/K tails, the told pad never
#               computed, the quant rows the CPU interpreter cannot run (n/a there)
#   table:      told/untold table for docs/perf-gate.md (lab/studies/aiter_triton_pad_table.py)
#   ab:         perf ab, the same checkout on both sides, BASE_TREE vs HEAD_TREE, aiter-triton:*T64*
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 MPLBACKEND=Agg
unset TRITON_INTERPRET
HEAD_TREE=${HEAD_TREE:-../shared/aiter/e4048607/aiter}
BASE_TREE=${BASE_TREE:-}
export FP4MOE_AITER_SRC=$HEAD_TREE
steps=${*:-env relational zoo checks checks-tiny table ab}
t0=$(date +%s)
stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*" | tee -a "$OUT/steps.txt"; }
lim() { local s=$1; shift; timeout -k 5 "$s" "$@"; echo "rc=$?" | tee -a "$OUT/steps.txt"; }
for step in $steps; do
  case $step in
    env)
      stamp env
      { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
        python3 -c "import torch,triton;print('torch',torch.__version__,'triton',triton.__version__,torch.cuda.get_device_name(0))"; } 2>&1 | tee "$OUT/env.txt" ;;
    relational)
      stamp "relational: telling aiter's Triton kernel the pad pays (Pro TP8, 64 tokens)"
      lim ${T_REL:-150} python3 -m pytest tests/gates/perf/test_aiter_triton_pad.py -q -rA -p no:cacheprovider 2>&1 | tail -25 | tee "$OUT/relational.txt" ;;
    zoo)
      stamp "zoo: pad_not_propagated against the aiter Triton relational test"
      lim ${T_ZOO:-240} python3 -m fp4moe.commands.main zoo --mutant pad_not_propagated --tests tests/gates/perf/test_aiter_triton_pad.py -j 1 2>&1 | tail -25 | tee "$OUT/zoo.txt" ;;
    checks)
      stamp "kernel checks at DeepSeek-V4 TP8 shapes on cuda"
      lim ${T_CHECKS:-300} python3 -m fp4moe.commands.main aiter-check --aiter-src "$HEAD_TREE" --no-differential --device cuda \
        --shapes dsv4 --known-defects fp4moe/data/aiter_known_defects.json --json "$OUT/checks.json" 2>&1 | tee "$OUT/checks.txt" | tail -15 ;;
    checks-tiny)
      stamp "kernel checks at the CPU shapes, compiled on cuda"
      lim ${T_CHECKS_TINY:-300} python3 -m fp4moe.commands.main aiter-check --aiter-src "$HEAD_TREE" --no-differential \
        --device cuda --shapes tiny --known-defects fp4moe/data/aiter_known_defects.json --json "$OUT/checks_tiny.json" 2>&1 \
        | tee "$OUT/checks_tiny.txt" | tail -15 ;;
    table)
      stamp "told/untold table"
      lim ${T_TABLE:-150} python3 -m lab.studies.aiter_triton_pad_table "$OUT/pad_table.md" --rounds ${TABLE_ROUNDS:-30} \
        --tokens ${TABLE_TOKENS:-1,64,1024,4096} 2>&1 | tail -30 | tee "$OUT/table.txt" ;;
    ab)
      stamp "perf ab: base tree $BASE_TREE vs head tree $HEAD_TREE"
      if [ -z "$BASE_TREE" ]; then echo "ab: BASE_TREE not set" | tee "$OUT/ab.txt"; continue; fi
      lim ${T_AB:-200} python3 -m fp4moe.commands.main perf ab --base . --head . --base-aiter-src "$BASE_TREE" \
        --head-aiter-src "$HEAD_TREE" --benchmarks "${AB_BENCH:-aiter-triton:*T64-a16w4}" --max-rounds 60 \
        --json "$OUT/ab.json" 2>&1 | tail -25 | tee "$OUT/ab.txt" ;;
    *) echo "unknown step $step" ;;
  esac
done
stamp done
