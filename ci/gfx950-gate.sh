#!/usr/bin/env bash
# The gfx950 gate a ROCm runner calls (ci/workflows/gfx950-gate.yml runs it in the container).
#   1. fp4moe-gate aiter-check against the runner's own aiter (API keywords, byte layouts,
#      PR #4130 / AITER_BF16_FP8_MOE_BOUND capabilities); --strict by default, so an aiter the
#      backend cannot fully drive fails the gate. Override: FP4MOE_AITER_CHECK_ARGS="".
#   2. the whole suite with --require gfx950,aiter,sglang: a runner that lost its GPU, whose aiter
#      no longer imports or whose SGLang cannot be driven is a usage error (exit 4) before any
#      test runs, never a green skip. tests/targets/sglang/test_sglang_gfx950.py runs SGLang's own FP4
#      path with the real aiter shuffles and kernel (nothing patched) there.
#      Extra arguments go to pytest (e.g. -m "not slow", -k tp8).
#   3. junit XML + a markdown summary in $FP4MOE_GATE_OUT (default out/gfx950-gate), the summary
#      also appended to $GITHUB_STEP_SUMMARY when set.
# Exit (the gates' contract): 1 when aiter-check measured a regression or a test failed (pytest
# exit 1); else 2 when either could not judge (aiter-check 2; pytest 2 interrupted, 3 internal
# error, 4 a required capability missing, 5 no tests; any other code: a crash, a signal); else 0.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${FP4MOE_GATE_OUT:-out/gfx950-gate}
mkdir -p "$OUT" || { echo "gfx950-gate: cannot run: cannot create the results folder $OUT" >&2; exit 2; }
verdict() {  # verdict RC...: 1 if any is 1 (measured), else 2 if any is not 0, else 0
  local rc worst=0
  for rc in "$@"; do
    if [ "$rc" -eq 1 ]; then worst=1; elif [ "$rc" -ne 0 ] && [ "$worst" -eq 0 ]; then worst=2; fi
  done
  return "$worst"
}
# the suite's checks are assert statements: a runner's PYTHONOPTIMIZE would strip them (a pass)
unset PYTHONOPTIMIZE
export SGLANG_USE_AITER="${SGLANG_USE_AITER:-1}"
# fp8 activations at every token count on gfx950, as SGLang's DeepSeek-V4 launch sets it
export AITER_BF16_FP8_MOE_BOUND="${AITER_BF16_FP8_MOE_BOUND:-0}"

echo "== fp4moe-gate aiter-check"
# ${VAR-default}: unset -> --strict; set (even to "") -> its words, e.g. "--aiter-src /opt/aiter"
# shellcheck disable=SC2086
"$PY" -m fp4moe.commands.main aiter-check ${FP4MOE_AITER_CHECK_ARGS---strict} --format markdown \
  --json "$OUT/aiter-check.json" >"$OUT/aiter-check.md" 2>&1
check_rc=$?
cat "$OUT/aiter-check.md"

echo "== pytest --require gfx950,aiter,sglang"
"$PY" -m pytest --require gfx950,aiter,sglang --junitxml "$OUT/junit.xml" -o junit_family=xunit2 "$@"
test_rc=$?

"$PY" - "$OUT" "$check_rc" "$test_rc" <<'PY'
"""junit XML + aiter-check table -> summary.md (and the GitHub step summary)."""
import os
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

out, check_rc, test_rc = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
lines = ["## fp4-moe-gate on gfx950", ""]
junit = out / "junit.xml"
try:
    if junit.is_file() and junit.stat().st_size > 64 << 20:
        raise ValueError(f"{junit.stat().st_size} bytes, more than 64 MiB")
    root = ET.parse(junit).getroot() if junit.is_file() else None
    suites = [] if root is None else [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    tot = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
except (ET.ParseError, ValueError, OSError) as e:  # a session killed mid-write: said, not a traceback
    root = None
    lines.append(f"pytest (exit {test_rc}): the junit XML is unreadable ({' '.join(str(e).split())[:200]})")
if root is not None:
    passed = tot["tests"] - tot["failures"] - tot["errors"] - tot["skipped"]
    lines.append(f"pytest (exit {test_rc}): {passed} passed, {tot['failures']} failed, {tot['errors']} errors, {tot['skipped']} skipped")
    bad = [c for c in root.iter("testcase") if c.find("failure") is not None or c.find("error") is not None]
    if bad:
        lines += ["", "| failed test | message |", "| --- | --- |"]
        for c in bad[:50]:
            node = c.find("failure") if c.find("failure") is not None else c.find("error")
            msg = next(iter((node.get("message") or "").splitlines()), "")[:200].replace("|", "/")
            lines.append(f"| {c.get('classname')}::{c.get('name')} | {msg} |")
elif not junit.is_file():
    lines.append(f"pytest (exit {test_rc}): no junit XML: the session did not start (exit 4 = a required capability is missing; see the log)")
lines += ["", f"aiter-check (exit {check_rc}):", ""]
table = out / "aiter-check.md"
lines.append(table.read_text(errors="replace")[-200_000:] if table.is_file() else "(no output)")
text = "\n".join(lines) + "\n"
(out / "summary.md").write_text(text)
summary = os.environ.get("GITHUB_STEP_SUMMARY")
if summary:
    with open(summary, "a") as f:
        f.write(text)
print(f"summary: {out / 'summary.md'}")
PY
[ $? -eq 0 ] || echo "gfx950-gate: the summary was not written (the verdict below stands)" >&2

verdict "$check_rc" "$test_rc"
rc=$?
echo "gfx950-gate: exit $rc (aiter-check exited $check_rc, pytest $test_rc)" >&2
exit "$rc"
