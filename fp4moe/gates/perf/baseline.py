"""Read pytest-benchmark JSON, check two runs are comparable, store and find baselines.

Format (pytest-benchmark 5.x, see ``fixtures/perf/example-pytest-benchmark.json``): top-level
``machine_info``, ``commit_info``, ``benchmarks``; each benchmark has ``name``, ``fullname``,
``params``, ``extra_info`` and ``stats`` with ``stats.data`` = every round's seconds.
``pytest --benchmark-json=PATH`` always writes ``stats.data`` (it passes ``include_data=True``);
``--benchmark-save``/``--benchmark-autosave`` store it only with ``--benchmark-save-data``.
Without ``stats.data`` there is no sample and the compare refuses to run.

Validity (``extra_info`` keys written by the benchmarks): two runs are compared only when the
hardware keys and the measurement keys agree; software versions may differ (that is what the
gate measures) and are listed as notes.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fp4moe.infra.errors import GateCannotRun
from fp4moe.infra.files import atomic_write_json
from fp4moe.infra.strict_json import DataFileError, load_json_strict

HARDWARE_KEYS = ("gpu_name", "gpu_arch")
#: what is measured and how: a different shape, backend, pad or timer is a different benchmark
MEASUREMENT_KEYS = ("shape", "backend", "hidden_pad", "intermediate_pad", "timer")
SOFTWARE_KEYS = ("torch", "hip", "cuda", "aiter_version", "aiter_commit")

BASELINE_META_KEY = "fp4moe_baseline"
_SLUG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass
class BenchRecord:
    key: str  # fullname (unique across files), or name when fullname is absent
    name: str
    samples: np.ndarray
    extra_info: dict


@dataclass
class BenchRun:
    path: str
    benchmarks: dict[str, BenchRecord]
    machine_info: dict
    commit_info: dict
    raw: dict = field(repr=False, default_factory=dict)

    def info_values(self, key: str) -> set:
        return {json.dumps(b.extra_info.get(key)) for b in self.benchmarks.values()}


def load_run(path) -> BenchRun:
    """Load and validate a pytest-benchmark JSON file; every problem is a GateCannotRun naming
    the file (and the benchmark)."""
    p = Path(path)
    if not os.path.lexists(p):
        raise GateCannotRun(f"benchmark file {str(p)!r} does not exist")
    try:  # strict: a key given twice ("benchmarks" or "data": the later would win) and
        # non-finite numbers (1e400 reads as inf, NaN) are refused naming the file
        doc = load_json_strict(p, "benchmark file")
    except DataFileError as e:
        detail = str(e).replace(f"benchmark file {p}", "", 1).lstrip(":").strip()
        raise GateCannotRun(f"benchmark file {str(p)!r} is not valid JSON: {detail}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        raise GateCannotRun(f"benchmark file {str(p)!r} is not pytest-benchmark JSON (no 'benchmarks' list)")
    if not doc["benchmarks"]:
        raise GateCannotRun(f"benchmark file {str(p)!r} has no benchmarks (did every benchmark skip?)")
    records: dict[str, BenchRecord] = {}
    for i, b in enumerate(doc["benchmarks"]):
        if not isinstance(b, dict) or not (b.get("fullname") or b.get("name")):
            raise GateCannotRun(f"{p}: benchmarks[{i}] has no name/fullname")
        for k in ("fullname", "name"):
            if b.get(k) is not None and not isinstance(b[k], str):
                raise GateCannotRun(f"{p}: benchmarks[{i}].{k} is a {type(b[k]).__name__}, not a string")
        key = str(b.get("fullname") or b.get("name"))
        stats = b.get("stats") if isinstance(b.get("stats"), dict) else {}
        data = stats.get("data")
        if data is None:
            raise GateCannotRun(
                f"{p}: benchmark {key!r} has no stats.data (per-round timings); write the file with "
                f"'pytest --benchmark-json=PATH' (or add --benchmark-save-data to --benchmark-save)"
            )
        if not isinstance(data, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in data):
            raise GateCannotRun(f"{p}: benchmark {key!r} stats.data is not a list of numbers")
        arr = np.asarray(data, dtype=np.float64).ravel()
        if arr.size == 0:
            raise GateCannotRun(f"{p}: benchmark {key!r} has an empty stats.data (zero rounds)")
        if key in records:
            raise GateCannotRun(f"{p}: benchmark {key!r} appears twice")
        extra = b.get("extra_info", {})
        if extra is None:
            extra = {}
        if not isinstance(extra, dict):
            raise GateCannotRun(f"{p}: benchmark {key!r} extra_info is a {type(extra).__name__}, not an object")
        records[key] = BenchRecord(key=key, name=str(b.get("name") or key), samples=arr, extra_info=extra)
    info = {}
    for k in ("machine_info", "commit_info"):
        v = doc.get(k)
        if v is not None and not isinstance(v, dict):
            raise GateCannotRun(f"{p}: {k} is a {type(v).__name__}, not an object")
        info[k] = v or {}
    return BenchRun(path=str(p), benchmarks=records, raw=doc, **info)


def _host_identity(run: BenchRun) -> tuple:
    cpu = run.machine_info.get("cpu") or {}
    return (run.machine_info.get("machine"), cpu.get("brand_raw") if isinstance(cpu, dict) else None)


def comparability_problems(base: BenchRun, head: BenchRun, keys: list[str]) -> tuple[list[str], list[str]]:
    """(problems, notes) for the matched benchmark ``keys``. Problems forbid the compare."""
    problems, notes = [], []
    for key in keys:
        b, h = base.benchmarks[key].extra_info, head.benchmarks[key].extra_info
        for k in HARDWARE_KEYS + MEASUREMENT_KEYS:
            if b.get(k) != h.get(k):
                kind = "hardware" if k in HARDWARE_KEYS else "measurement"
                problems.append(f"{key}: {kind} key {k!r} differs: base={b.get(k)!r} head={h.get(k)!r}")
        for k in SOFTWARE_KEYS:
            if b.get(k) != h.get(k):
                notes.append(f"{k} base={b.get(k)!r} head={h.get(k)!r}")
    gpu_named = any(base.benchmarks[k].extra_info.get("gpu_name") for k in keys)
    if not gpu_named and _host_identity(base) != _host_identity(head):
        # host-timed runs carry no gpu_name: the CPU itself is the hardware
        problems.append(f"hardware differs (machine_info): base={_host_identity(base)} head={_host_identity(head)}")
    # the same note repeated per benchmark is noise: keep each once
    return problems, sorted(set(notes))


def _slug(value: str, what: str) -> str:
    text = str(value)
    if not _SLUG.match(text):
        text = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_.") or ""
        if not text:
            raise ValueError(f"{what} {value!r} has no usable characters for a file name")
    return text


def aiter_version_of(run: BenchRun) -> str:
    """The single aiter version a run was measured with ('none' when not recorded)."""
    versions = {b.extra_info.get("aiter_version") for b in run.benchmarks.values()}
    if len(versions) > 1:
        raise GateCannotRun(f"{run.path}: benchmarks disagree on aiter_version: {sorted(map(str, versions))}")
    v = versions.pop()
    return "none" if v in (None, "") else str(v)


def baseline_path(baseline_dir, runner: str, aiter_version: str) -> Path:
    """``DIR/<runner>/aiter-<version>.json``: one baseline per runner and aiter version."""
    return Path(baseline_dir) / _slug(runner, "--runner") / f"aiter-{_slug(aiter_version, 'aiter_version')}.json"


def accept_baseline(head_path, runner: str, baseline_dir) -> Path:
    """Validate HEAD and store it as the baseline for (runner, its aiter version)."""
    try:
        run = load_run(head_path)
    except GateCannotRun as e:
        raise GateCannotRun(f"{head_path}: not stored as a baseline: {e}") from None
    if not runner or not str(runner).strip():
        raise ValueError("--runner: a runner name is required (e.g. mi355x-ci-1)")
    from fp4moe.stats.compare import DEFAULT_MIN_SAMPLES, usable_rounds

    for key, rec in run.benchmarks.items():  # a baseline the default compare could not use is refused now
        try:
            usable_rounds(rec.samples, "HEAD", key, DEFAULT_MIN_SAMPLES)
        except ValueError as e:
            raise GateCannotRun(f"{head_path}: not stored as a baseline: {e}") from None
    version = aiter_version_of(run)
    target = baseline_path(baseline_dir, runner, version)
    doc = dict(run.raw)
    doc[BASELINE_META_KEY] = {
        "runner": runner,
        "aiter_version": version,
        "accepted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "source": str(head_path),
        "commit": (run.commit_info or {}).get("id"),
    }
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(target, doc, indent=1)  # a crash never leaves a half-written baseline
    except OSError as e:
        raise GateCannotRun(f"--baseline-dir {baseline_dir}: cannot store {target}: {e.strerror or e}") from None
    return target


def find_baseline(baseline_dir, runner: str, head: BenchRun) -> Path:
    """The stored baseline for ``runner`` and HEAD's aiter version, or a clear GateCannotRun."""
    target = baseline_path(baseline_dir, runner, aiter_version_of(head))
    if target.is_file():
        return target
    existing = sorted(str(p.relative_to(baseline_dir)) for p in Path(baseline_dir).glob("*/*.json")) if Path(baseline_dir).is_dir() else []
    mine = [e for e in existing if e.split("/")[0] == target.parent.name]
    # one readable line: this runner's stored versions, else a count and a few of the others
    if mine:
        have = f"this runner has {', '.join(mine[:3])}" + (f" (+{len(mine) - 3} more)" if len(mine) > 3 else "")
    else:
        have = (f"no baseline for this runner ({len(existing)} for others in {baseline_dir}"
                + (f", e.g. {', '.join(existing[:2])})" if existing else ")"))
    raise GateCannotRun(
        f"no baseline for runner {runner!r} and aiter {aiter_version_of(head)!r} ({target.name}); {have}; "
        f"store one with 'fp4moe-gate perf accept HEAD.json --runner {runner}'"
    )
