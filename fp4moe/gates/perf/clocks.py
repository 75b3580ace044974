"""Which clocks each arm of ``perf ab`` ran at: a verdict is only as good as the machine under it.

An audit of FlyDSL timing (ROCm/FlyDSL#924) measured ~14% clock variation on gfx950: a base timed
at one SM clock and a head at another is a comparison of clocks, not of code. ``ClockProbe``
samples the GPU's SM and memory clocks, power and throttle reasons with whichever of
``nvidia-smi``, ``amd-smi`` or ``rocm-smi`` is on ``PATH`` (a bounded subprocess: a hung or
slow tool costs at most :data:`QUERY_TIMEOUT_S` per sample and its sample is an error, never a
hang). ``perf ab`` takes one sample right after a timed call of each arm at every look
(``fp4moe.gates.perf.ab.time_pairs``); :func:`judge` says "the arms ran at different clocks"
when their median SM clocks differ by more than :data:`MAX_SM_CLOCK_DIFF` or the throttle
reasons seen differ. The record carries every sample.

Parsing: nvidia-smi's CSV query (``clocks.sm,clocks.mem,power.draw,clocks_throttle_reasons.active``,
the reasons a bit mask; the idle bit 0x1 is dropped: a sample between calls may see the GPU
idle). amd-smi (``metric --json``) and rocm-smi (``--json``) are read leniently by key name (an
SM/graphics clock key holding ``sclk``/``gfx``, a memory one holding ``mclk``/``mem``, a power
one holding ``power``, a throttle one holding ``throttle``): their JSON differs between releases
and has not been checked on an MI355X here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import statistics
import subprocess

TOOLS = ("nvidia-smi", "amd-smi", "rocm-smi")
QUERY_TIMEOUT_S = 5.0
#: the arms' median SM clocks may differ by at most this fraction
MAX_SM_CLOCK_DIFF = 0.01
#: nvidia-smi's throttle-reason bits (``nvidia-smi --help-query-gpu``); 0x1, GPU idle, is ignored
NVIDIA_REASONS = {0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x10: "sync_boost",
                  0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown",
                  0x100: "display_clock_setting"}
_NVIDIA_QUERY = "clocks.sm,clocks.mem,power.draw,clocks_throttle_reasons.active"


def _number(text) -> float | None:
    m = re.search(r"[-+]?\d+(?:\.\d+)?", str(text))
    return float(m.group()) if m else None


def parse_nvidia(out: str) -> dict:
    fields = [f.strip() for f in out.strip().splitlines()[0].split(",")]
    if len(fields) != 4:
        raise ValueError(f"expected 4 fields, got {out.strip()[:120]!r}")
    sm, mem, power, mask = fields
    bits = int(mask, 16) if mask.lower().startswith("0x") else 0
    reasons = sorted(name for bit, name in NVIDIA_REASONS.items() if bits & bit)
    reasons += [f"0x{b:x}" for b in range(9, 64) if bits & (1 << b)]
    return {"sm_mhz": _number(sm), "mem_mhz": _number(mem), "power_w": _number(power), "throttle": reasons}


def _walk(obj, path=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _walk(v, path + (str(k).lower(),))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _walk(v, path + (str(i),))
    else:
        yield path, obj


def parse_amd(out: str) -> dict:
    """amd-smi ``metric --json`` or rocm-smi ``--json``: the first value under a key naming the
    graphics clock, the memory clock, the power; throttle values that are not 0/none/false."""
    got = {"sm_mhz": None, "mem_mhz": None, "power_w": None, "throttle": []}
    for path, value in _walk(json.loads(out)):
        key = "/".join(path)
        if "throttle" in key:
            if str(value).strip().lower() not in ("0", "none", "false", "n/a", "", "0x0", "unthrottled"):
                got["throttle"].append(f"{key}={value}")
            continue
        n = _number(value)
        if n is None or path and path[-1] in ("unit", "min", "max"):
            continue
        if got["sm_mhz"] is None and ("sclk" in key or "gfx" in key) and ("clk" in key or "clock" in key):
            got["sm_mhz"] = n
        elif got["mem_mhz"] is None and ("mclk" in key or "mem" in key) and ("clk" in key or "clock" in key):
            got["mem_mhz"] = n
        elif got["power_w"] is None and "power" in key:
            got["power_w"] = n
    got["throttle"].sort()
    return got


class ClockProbe:
    """One GPU's clocks through ``tool`` (a path to one of :data:`TOOLS`)."""

    def __init__(self, tool: str, gpu: int = 0):
        self.tool, self.gpu = tool, gpu
        self.name = tool.rsplit("/", 1)[-1]

    @classmethod
    def find(cls, gpu: int = 0, path: str | None = None) -> ClockProbe | None:
        for t in TOOLS:
            found = shutil.which(t, path=path)
            if found:
                return cls(found, gpu)
        return None

    def command(self) -> list[str]:
        if self.name == "nvidia-smi":
            return [self.tool, f"--query-gpu={_NVIDIA_QUERY}", "--format=csv,noheader,nounits", "-i", str(self.gpu)]
        if self.name == "amd-smi":
            return [self.tool, "metric", "-g", str(self.gpu), "--clock", "--power", "--throttle", "--json"]
        return [self.tool, "-d", str(self.gpu), "--showclocks", "--showpower", "--json"]

    def sample(self) -> dict:
        """One sample; ``{"error": ...}`` when the tool fails, times out or says nothing readable."""
        try:  # its own process group: a tool's children die with it on the deadline
            p = subprocess.Popen(self.command(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as e:
            return {"error": f"{self.name}: {e}"[:300]}
        try:
            out, err = p.communicate(timeout=QUERY_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
            return {"error": f"{self.name} took more than {QUERY_TIMEOUT_S:g} s"}
        if p.returncode != 0:
            return {"error": f"{self.name} exit {p.returncode}: {err.strip()[:200]!r}"}
        try:
            got = parse_nvidia(out) if self.name == "nvidia-smi" else parse_amd(out)
        except (ValueError, IndexError) as e:
            return {"error": f"{self.name}: {e}"[:300]}
        if got["sm_mhz"] is None:
            return {"error": f"{self.name}: no SM clock in {out.strip()[:200]!r}"}
        return got


def summary(samples: list[dict]) -> dict:
    good = [s for s in samples if "error" not in s]
    med = (lambda k: statistics.median(v for s in good if (v := s.get(k)) is not None)
           if any(s.get(k) is not None for s in good) else None)
    return {"samples": len(samples), "errors": len(samples) - len(good), "sm_mhz_median": med("sm_mhz"),
            "mem_mhz_median": med("mem_mhz"), "power_w_median": med("power_w"),
            "throttle": sorted({r for s in good for r in s.get("throttle", [])})}


def judge(base: list[dict], head: list[dict]) -> str | None:
    """Why the arms cannot be compared, or None. No samples at all (no tool) is None; samples of
    one arm only, or only errors, are a reason (the clocks were meant to be seen and were not)."""
    if not base and not head:
        return None
    b, h = summary(base), summary(head)
    if b["sm_mhz_median"] is None or h["sm_mhz_median"] is None:
        return f"no SM clock read for an arm (base {b['errors']}/{b['samples']} errors, head {h['errors']}/{h['samples']})"
    diff = abs(h["sm_mhz_median"] - b["sm_mhz_median"]) / b["sm_mhz_median"]
    if diff > MAX_SM_CLOCK_DIFF:
        return (f"median SM clock base {b['sm_mhz_median']:g} MHz, head {h['sm_mhz_median']:g} MHz "
                f"({diff:.1%} apart, more than {MAX_SM_CLOCK_DIFF:.0%})")
    if b["throttle"] != h["throttle"]:
        return f"throttle reasons differ (base {b['throttle'] or 'none'}, head {h['throttle'] or 'none'})"
    return None
