"""Roofline line per benchmark: bytes the kernel must move over the device's measured bandwidth.

A MoE decode step is memory bound: it must at least read the weights of the experts the batch
touches and read/write the activations. ``achieved_fraction`` says how close a measured time is
to that floor; the caller computes ``bytes_moved`` for the MoE shapes.
"""

from __future__ import annotations

import torch

from fp4moe.gates.perf.timer import DEVICE_EVENTS, DeviceTimer, time_rounds


def achieved_fraction(bytes_moved: float, seconds: float, bandwidth_bytes_per_s: float) -> float:
    """(bytes_moved / seconds) / bandwidth: 1.0 means the kernel ran at the copy bandwidth."""
    for name, v in (("bytes_moved", bytes_moved), ("seconds", seconds), ("bandwidth_bytes_per_s", bandwidth_bytes_per_s)):
        if not (v > 0):
            raise ValueError(f"achieved_fraction: {name} must be positive, got {v!r}")
    return (bytes_moved / seconds) / bandwidth_bytes_per_s


def roofline_seconds(bytes_moved: float, bandwidth_bytes_per_s: float) -> float:
    """The memory-bound floor: the least time moving ``bytes_moved`` can take."""
    if not (bytes_moved > 0 and bandwidth_bytes_per_s > 0):
        raise ValueError("roofline_seconds: bytes_moved and bandwidth must be positive")
    return bytes_moved / bandwidth_bytes_per_s


def measure_bandwidth(device=None, *, nbytes: int = 1 << 30, rounds: int = 20, warmup: int = 3) -> dict:
    """Device-to-device copy bandwidth: ``dst.copy_(src)`` of ``nbytes``, timed with events.

    Counts read + write (2 * nbytes per copy) and reports the best round (the attainable
    rate; the median is returned too). ``nbytes`` well above the last-level cache (H200 L2
    50 MB, MI355X Infinity Cache 256 MB) so the copy hits HBM. Returns a dict with
    ``bytes_per_s``, ``median_bytes_per_s``, ``timer``, ``nbytes``.
    """
    timer = DeviceTimer(device)
    if timer.kind != DEVICE_EVENTS:
        nbytes = min(nbytes, 64 << 20)  # host fallback: keep it quick, and label it
    n = int(nbytes) // 4
    src = torch.ones(n, dtype=torch.float32, device=timer.device)
    dst = torch.empty_like(src)
    secs = time_rounds(lambda _: dst.copy_(src), [None], rounds, warmup, timer=timer)
    moved = 2.0 * n * 4
    secs_sorted = sorted(secs)
    return {
        "bytes_per_s": moved / secs_sorted[0],
        "median_bytes_per_s": moved / secs_sorted[len(secs_sorted) // 2],
        "timer": timer.kind,
        "nbytes": n * 4,
    }
