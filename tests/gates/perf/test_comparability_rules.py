"""What makes two timing runs incomparable, judged on synthetic metadata (the perf tiers that
produce it need a GPU): hardware and measurement keys forbid the compare, software keys are
noted once, a host-timed run is judged by its machine; a worker that loaded files from outside
its checkout cannot be judged."""

from pathlib import Path

import numpy as np
import pytest

from fp4moe.gates.perf import ab, baseline
from fp4moe.gates.perf.baseline import BenchRecord, BenchRun
from fp4moe.infra.errors import GateCannotRun


def _run(extra, machine="x86_64", cpu="EPYC"):
    recs = {k: BenchRecord(k, k, np.ones(3), dict(v)) for k, v in extra.items()}
    return BenchRun("r.json", recs, {"machine": machine, "cpu": {"brand_raw": cpu}}, {})


GPU = {"gpu_name": "MI355X", "gpu_arch": "gfx950", "shape": "a", "backend": "aiter", "hidden_pad": 0,
       "intermediate_pad": 0, "timer": "events", "torch": "2.9", "aiter_version": "1"}


def test_identical_runs_are_comparable():
    assert baseline.comparability_problems(_run({"m": GPU}), _run({"m": GPU}), ["m"]) == ([], [])


@pytest.mark.parametrize("key, kind", [("gpu_name", "hardware"), ("gpu_arch", "hardware"), ("shape", "measurement"),
                                       ("backend", "measurement"), ("hidden_pad", "measurement"),
                                       ("intermediate_pad", "measurement"), ("timer", "measurement")])
def test_a_hardware_or_measurement_key_that_differs_forbids_the_compare(key, kind):
    head = {**GPU, key: "other"}
    problems, notes = baseline.comparability_problems(_run({"m": GPU}), _run({"m": head}), ["m"])
    assert problems == [f"m: {kind} key {key!r} differs: base={GPU[key]!r} head='other'"] and notes == []


def test_software_keys_are_noted_once_not_forbidden():
    b = _run({"m1": GPU, "m2": GPU})
    h = _run({"m1": {**GPU, "torch": "2.10"}, "m2": {**GPU, "torch": "2.10", "aiter_commit": "abc"}})
    problems, notes = baseline.comparability_problems(b, h, ["m1", "m2"])
    assert problems == [] and notes == ["aiter_commit base=None head='abc'", "torch base='2.9' head='2.10'"]


def test_host_timed_runs_are_judged_by_their_machine():
    host = {k: v for k, v in GPU.items() if k not in ("gpu_name", "gpu_arch")}
    ok = baseline.comparability_problems(_run({"m": host}), _run({"m": host}), ["m"])
    assert ok == ([], [])
    problems, _ = baseline.comparability_problems(_run({"m": host}), _run({"m": host}, cpu="Xeon"), ["m"])
    assert problems == ["hardware differs (machine_info): base=('x86_64', 'EPYC') head=('x86_64', 'Xeon')"]
    # with a GPU named, the host's CPU does not matter
    assert baseline.comparability_problems(_run({"m": GPU}), _run({"m": GPU}, cpu="Xeon"), ["m"]) == ([], [])


def test_ab_metadata_comparability():
    meta = {"timer": "events", "gpu_name": "MI355X", "gpu_arch": "gfx950", "shape": "s", "hidden_pad": 0,
            "intermediate_pad": 0}
    problems, only_base, only_head = ab.comparability({"a": meta, "b": meta}, {"a": {**meta, "shape": "t"}, "c": meta})
    assert problems == ["a: shape differs (base 's', head 't')"] and only_base == ["b"] and only_head == ["c"]
    assert ab.comparability({"a": meta}, {"a": dict(meta)}) == ([], [], [])


def _side(root, cmd=("python", "-m", ab.WORKER_MODULES[0])):
    return ab.Side("head", "/ck/head", list(cmd), {}, None, root)


def test_a_worker_must_say_it_loaded_only_its_checkouts_files(tmp_path):
    root = tmp_path.resolve()
    inside = str(root / "fp4moe" / "x.py")
    assert ab.check_loaded(_side(root), {"loaded": [inside]}) == [inside]
    with pytest.raises(GateCannotRun, match=r"^--head /ck/head: its worker loaded /elsewhere/fp4moe/x.py, outside the checkout$"):
        ab.check_loaded(_side(root), {"loaded": [inside, "/elsewhere/fp4moe/x.py"]})
    for bad in (None, "x.py", [1]):
        with pytest.raises(GateCannotRun, match=r"^--head /ck/head: its worker did not say which fp4moe files it loaded$"):
            ab.check_loaded(_side(root), {"loaded": bad})
    # the gate's worker reports them for every checkout, the oldest included: silence is refused
    with pytest.raises(GateCannotRun, match=r"did not say which fp4moe files"):
        ab.check_loaded(_side(root, ("python", "-m", ab.WORKER_MODULES[-1])), {})
    # an environment side (no checkout root): what it reports is passed on
    assert ab.check_loaded(_side(None), {"loaded": ["/a"]}) == ["/a"] and ab.check_loaded(_side(None), {}) == []
    assert Path(inside).is_relative_to(root)
