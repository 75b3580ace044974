"""Per-round timings measured on the device, not with host clocks around async launches.

On a GPU (CUDA, or ROCm/HIP through the same ``torch.cuda`` API) each round is bracketed by two
``torch.cuda.Event(enable_timing=True)`` recorded on the current stream; the elapsed time is
the GPU's own, so launch latency and host jitter are excluded. Without a GPU the timer falls
back to ``time.perf_counter_ns`` and says so: ``DeviceTimer.kind`` is ``"host"`` instead of
``"device-events"``, and the compare refuses to mix the two (``extra_info['timer']``).

Cache flattery: ``time_rounds`` rotates through a list of pre-built input sets, so round ``i``
uses ``inputs_list[i % len]`` and the weights/activations of one round are not still in L2
(or MI355X's 256 MB Infinity Cache) from the round before; optionally it also overwrites a
scratch buffer before every round (``flush_bytes``), outside the timed region.

pytest-benchmark integration: pytest-benchmark times ``timer(); fn(); timer()``. ``DeviceClock``
is a virtual clock that advances only by the device time of the rounds it wraps, so passing it
as the fixture's timer (``@pytest.mark.benchmark(timer=clock)``) makes ``stats.data`` hold
device seconds; ``pedantic_rounds`` does this and checks it did.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Sequence

DEVICE_EVENTS = "device-events"
HOST = "host"


def _is_gpu(device) -> bool:
    import torch

    dev = torch.device(device) if device is not None else None
    return dev is not None and dev.type == "cuda" and torch.cuda.is_available()


class DeviceTimer:
    """Times one call at a time. ``kind`` is ``'device-events'`` on a GPU, ``'host'`` otherwise.

    ``device``: a torch device ('cuda', 'cuda:0', 'cpu'); None picks cuda when available.
    ``allow_host``: with False, a machine without a GPU raises instead of falling back.
    Torch is imported only when needed: a host timer for ``'cpu'`` in a process that has not
    imported torch stays torch-free (``perf ab``'s worker loads this file by path, for workloads
    of any kind).
    """

    def __init__(self, device=None, *, allow_host: bool = True):
        if allow_host and device is not None and str(device).split(":")[0] == "cpu" and "torch" not in sys.modules:
            self.device, self.kind = "cpu", HOST
            return
        import torch

        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(f"DeviceTimer: device {device!r} requested but torch.cuda.is_available() is False")
        self.kind = DEVICE_EVENTS if _is_gpu(self.device) else HOST
        if self.kind == HOST and not allow_host:
            raise RuntimeError(f"DeviceTimer: no GPU for device {device!r} and allow_host=False")

    def synchronize(self) -> None:
        if self.kind == DEVICE_EVENTS:
            sys.modules["torch"].cuda.synchronize(self.device)

    def time_call(self, fn: Callable[[Any], Any], inputs: Any) -> float:
        """Seconds that ``fn(inputs)`` took on the device (host clock for ``kind == 'host'``)."""
        if self.kind == DEVICE_EVENTS:
            torch = sys.modules["torch"]
            with torch.cuda.device(self.device):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                fn(inputs)
                end.record()
                end.synchronize()
                return start.elapsed_time(end) * 1e-3  # elapsed_time is in milliseconds
        t0 = time.perf_counter_ns()
        fn(inputs)
        return (time.perf_counter_ns() - t0) * 1e-9

    def metadata(self) -> dict:
        """What to put in pytest-benchmark ``extra_info`` so the compare can check validity."""
        torch = sys.modules.get("torch")
        info = {"timer": self.kind, "torch": getattr(torch, "__version__", None)}
        if self.kind == DEVICE_EVENTS:
            props = torch.cuda.get_device_properties(self.device)
            hip = getattr(torch.version, "hip", None)
            info["gpu_name"] = props.name
            arch = getattr(props, "gcnArchName", None) if hip else f"sm_{props.major}{props.minor}"
            info["gpu_arch"] = arch.split(":")[0] if arch else None
            info["hip"] = hip
            info["cuda"] = torch.version.cuda
        return info


class CacheFlusher:
    """Overwrites ``nbytes`` of scratch memory: evicts the previous round's data from the caches.
    Size it above the last-level cache (H200 L2: 50 MB; MI355X: 256 MB Infinity Cache)."""

    def __init__(self, nbytes: int, device):
        if nbytes <= 0:
            raise ValueError(f"flush_bytes must be positive, got {nbytes}")
        import torch

        self.buffer = torch.empty(int(nbytes) // 4, dtype=torch.int32, device=device)
        self._value = 0

    def __call__(self) -> None:
        self._value ^= 1  # a different value each time so nothing can elide the write
        self.buffer.fill_(self._value)


def time_rounds(
    fn: Callable[[Any], Any],
    inputs_list: Sequence[Any],
    rounds: int,
    warmup: int = 3,
    *,
    timer: DeviceTimer | None = None,
    flush_bytes: int | None = None,
) -> list[float]:
    """Run ``fn(inputs_list[i % len(inputs_list)])`` for ``warmup`` untimed then ``rounds`` timed
    rounds; returns per-round seconds. ``fn`` takes one argument, the input set."""
    if rounds < 1 or warmup < 0:
        raise ValueError(f"time_rounds: rounds must be >= 1 and warmup >= 0 (got {rounds}, {warmup})")
    if len(inputs_list) == 0:
        raise ValueError("time_rounds: inputs_list is empty; pass at least one input set")
    timer = timer or DeviceTimer()
    flusher = CacheFlusher(flush_bytes, timer.device) if flush_bytes else None
    n = len(inputs_list)
    for i in range(warmup):
        fn(inputs_list[i % n])
    timer.synchronize()
    out = []
    for i in range(rounds):
        if flusher is not None:
            flusher()
        out.append(timer.time_call(fn, inputs_list[(warmup + i) % n]))
    return out


class DeviceClock:
    """A clock for pytest-benchmark that advances only by the device time of wrapped calls.

    ``@pytest.mark.benchmark(timer=clock)`` makes the fixture read ``clock()`` before and after
    each round; ``clock.wrap(fn)`` times ``fn`` with the ``DeviceTimer`` and advances the clock
    by exactly that, so the fixture's duration is the device time. ``samples`` keeps every
    measured round (warm-up included) for cross-checking.
    """

    __name__ = "fp4moe_device_clock"  # what pytest-benchmark writes as options.timer

    def __init__(self, timer: DeviceTimer | None = None):
        self.timer = timer or DeviceTimer()
        self.now = 0.0
        self.samples: list[float] = []

    def __call__(self) -> float:
        return self.now

    def wrap(self, fn: Callable[[Any], Any]) -> Callable[[Any], None]:
        def timed(inputs):
            seconds = self.timer.time_call(fn, inputs)
            self.samples.append(seconds)
            self.now += seconds

        return timed


def pedantic_rounds(benchmark, clock: DeviceClock, fn, inputs_list, *, rounds: int, warmup: int = 3, flush_bytes=None):
    """Run ``fn`` under ``benchmark.pedantic`` with device timing and input rotation.

    The test must carry ``@pytest.mark.benchmark(timer=clock)`` with the same ``clock``. Records
    the timer kind and device in ``benchmark.extra_info``. Raises if the fixture's recorded
    rounds are not the clock's device times (the marker was forgotten).
    """
    if len(inputs_list) == 0:
        raise ValueError("pedantic_rounds: inputs_list is empty")
    flusher = CacheFlusher(flush_bytes, clock.timer.device) if flush_bytes else None
    counter = {"i": 0}

    def setup():  # untimed: rotate the input set and flush caches between rounds
        if flusher is not None:
            flusher()
        inputs = inputs_list[counter["i"] % len(inputs_list)]
        counter["i"] += 1
        return (inputs,), {}

    benchmark.extra_info.update(clock.timer.metadata())
    first = len(clock.samples)
    benchmark.pedantic(clock.wrap(fn), setup=setup, rounds=rounds, warmup_rounds=warmup, iterations=1)
    if getattr(benchmark, "disabled", False):  # --benchmark-disable: ran once, nothing timed
        return []
    measured = clock.samples[first + warmup :]
    recorded = list(benchmark.stats.stats.data)
    if len(recorded) != len(measured) or any(abs(a - b) > 1e-12 + 1e-9 * b for a, b in zip(recorded, measured)):
        raise RuntimeError(
            "pedantic_rounds: pytest-benchmark did not record the device times; add "
            "@pytest.mark.benchmark(timer=clock) with this DeviceClock to the test"
        )
    return measured
