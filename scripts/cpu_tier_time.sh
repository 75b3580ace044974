#!/usr/bin/env bash
# Issue #44 item 3: the CPU tier's time (target <= 20 s on a quiet 2-core machine), measured, not
# asserted: `python3 -m pytest` (nothing selected: the default run, two pytest-xdist workers)
# N times (default 3), each run's pytest figure ("N passed, M skipped in S s") with the CPU seconds
# of the whole process tree and the load average before and after (other work on the machine
# inflates both: say so beside any figure). From the checkout root, with python3 the environment
# that has torch (e.g. `. venv/bin/activate`):
#   bash scripts/cpu_tier_time.sh [N] [extra pytest options]
# Exit 0 when every run passed (pytest exit 0), else pytest's last non-zero exit code.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
n=${1:-3}; shift $(( $# > 0 ? 1 : 0 ))
log=$(mktemp); trap 'rm -f "$log"' EXIT
status=0
echo "cores: $(nproc)  python3: $(command -v python3)"
for i in $(seq 1 "$n"); do
  before=$(cut -d' ' -f1-3 /proc/loadavg)
  TIMEFORMAT='%U %S'
  { time python3 -m pytest "$@" > "$log" 2>&1; rc=$?; } 2> "$log.cpu"
  [ "$rc" -ne 0 ] && status=$rc
  figure=$(grep -E '^=* ?[0-9]+ (passed|failed).* in [0-9.]+s' "$log" | tail -1 | tr -d '=' | sed 's/^ *//; s/ *$//')
  cpu=$(awk '{printf "%.1f", $1 + $2}' "$log.cpu" 2>/dev/null); rm -f "$log.cpu"
  echo "run $i: rc=$rc  ${figure:-no pytest figure (see below)}  cpu=${cpu:-?}s  load before: $before  after: $(cut -d' ' -f1-3 /proc/loadavg)"
  [ -z "$figure" ] && tail -20 "$log"
done
exit $status
