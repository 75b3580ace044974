#!/usr/bin/env bash
# The serving perf gate on one 8-GPU gfx950 node: two SGLang servers side by side, judged by
# `fp4moe-gate serve-bench` (docs/serving-perf.md). Called by the serve-bench job of
# ci/workflows/gfx950-gate.yml; runnable by hand on the node.
#
#   BASE_IMAGE / HEAD_IMAGE  container images holding the two SGLang + aiter builds (required)
#   MODEL                    model path inside the containers (required), e.g. a local DeepSeek-V4 copy
#   MODEL_MOUNT              host folder mounted read-only at the same path (default: dirname of MODEL)
#   TP                       tensor parallel size per server (default 4: GPUs 0-3 base, 4-7 head)
#   SERVER_ARGS              extra sglang.launch_server arguments for both servers
#   GATE_ARGS                extra serve-bench arguments (default: --prompts random --input-len 1024
#                            --output-len 256 --concurrency 1,16,64)
#   FP4MOE_GATE_OUT          results folder (default out/serve-bench)
#   LAUNCH_TIMEOUT_S         seconds to wait for both servers' /health (default 5400, as SGLang's
#                            own DeepSeek-V4-Pro nightly allows)
# Exit: serve-bench's (0 pass, 1 regression, 2 could not run); 2 if a server could not be started
# or never came up, or the gate's container did not run it (docker's 125-127, a signal, any code
# but 0, 1, 2): one line naming it. Never 1 for anything but a measured regression.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${BASE_IMAGE:?set BASE_IMAGE}" "${HEAD_IMAGE:?set HEAD_IMAGE}" "${MODEL:?set MODEL}"
TP=${TP:-4}
OUT=${FP4MOE_GATE_OUT:-out/serve-bench}
MODEL_MOUNT=${MODEL_MOUNT:-$(dirname "$MODEL")}
LAUNCH_TIMEOUT_S=${LAUNCH_TIMEOUT_S:-5400}
BASE_PORT=30000
HEAD_PORT=30001
mkdir -p "$OUT" || { echo "serve-bench: cannot run: cannot create the results folder $OUT" >&2; exit 2; }

gpus() {  # gpus FIRST COUNT -> "FIRST,...,FIRST+COUNT-1"
  seq -s, "$1" $(($1 + $2 - 1))
}

launch() {  # launch NAME IMAGE PORT GPU_LIST
  docker rm -f "$1" >/dev/null 2>&1 || true
  # SGLANG_USE_AITER=1 and AITER_BF16_FP8_MOE_BOUND=0: the gfx950 DeepSeek-V4 launch environment
  # shellcheck disable=SC2086
  docker run -d --name "$1" --network host --ipc host --shm-size 32g \
    --device /dev/kfd --device /dev/dri --group-add video --security-opt seccomp=unconfined \
    -e HIP_VISIBLE_DEVICES="$4" -e SGLANG_USE_AITER=1 -e AITER_BF16_FP8_MOE_BOUND=0 \
    -v "$MODEL_MOUNT:$MODEL_MOUNT:ro" "$2" \
    python3 -m sglang.launch_server --model-path "$MODEL" --tp "$TP" --trust-remote-code \
    --host 127.0.0.1 --port "$3" ${SERVER_ARGS:-}
}

cleanup() {
  for n in fp4moe-serve-base fp4moe-serve-head; do
    docker logs "$n" >"$OUT/$n.log" 2>&1 || true
    docker rm -f "$n" >/dev/null 2>&1 || true
  done
}
trap cleanup EXIT

launch fp4moe-serve-base "$BASE_IMAGE" "$BASE_PORT" "$(gpus 0 "$TP")" >/dev/null \
  || { echo "serve-bench: cannot run: docker run of $BASE_IMAGE (the base server) failed" >&2; exit 2; }
launch fp4moe-serve-head "$HEAD_IMAGE" "$HEAD_PORT" "$(gpus "$TP" "$TP")" >/dev/null \
  || { echo "serve-bench: cannot run: docker run of $HEAD_IMAGE (the head server) failed" >&2; exit 2; }

deadline=$((SECONDS + LAUNCH_TIMEOUT_S))
for port in "$BASE_PORT" "$HEAD_PORT"; do
  until curl -sf --max-time 10 "http://127.0.0.1:$port/health" >/dev/null; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "serve-bench: cannot run: the server on port $port did not answer /health within ${LAUNCH_TIMEOUT_S} s" >&2
      exit 2
    fi
    sleep 10
  done
done

# The gate itself runs in the base image (its torch is kept; ci/install.sh adds the rest).
# shellcheck disable=SC2086
docker run --rm --network host -v "$PWD:/w" -w /w -e PYTHONUNBUFFERED=1 "$BASE_IMAGE" bash -c \
  "bash ci/install.sh && python3 -m fp4moe.commands.main serve-bench \
     --base-url http://127.0.0.1:$BASE_PORT --head-url http://127.0.0.1:$HEAD_PORT --model '$MODEL' \
     ${GATE_ARGS:---prompts random --input-len 1024 --output-len 256 --concurrency 1,16,64} \
     --json $OUT/serve-bench.json --markdown $OUT/summary.md --plot $OUT/ratios.png"
rc=$?
case "$rc" in
  0|1|2) ;;
  *) echo "serve-bench: cannot run: the gate's container exited $rc (docker, ci/install.sh or a signal; not a verdict)" >&2
     rc=2 ;;
esac
if [ -n "${GITHUB_STEP_SUMMARY:-}" ] && [ -f "$OUT/summary.md" ]; then
  cat "$OUT/summary.md" >>"$GITHUB_STEP_SUMMARY"
fi
exit "$rc"
