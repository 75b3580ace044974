"""``fp4moe-gate perf compare/accept`` end to end on pytest-benchmark JSON written in tmp_path.

The file format is the one pytest-benchmark 5.x writes with --benchmark-json; the real example
in fixtures/perf/ is the template, so a format change there breaks these tests.
"""

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from fp4moe.commands.main import main

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"  # the tests' own fixtures (checkout)

EXAMPLE = FIXTURES / "perf" / "example-pytest-benchmark.json"
GPU = {"gpu_name": "AMD Instinct MI355X", "gpu_arch": "gfx950", "timer": "device-events", "backend": "aiter",
       "hidden_pad": 0, "intermediate_pad": 64, "torch": "2.9.0", "hip": "7.0", "aiter_version": "0.1.6"}


def samples(seed, shift=0.0, n=30):
    """Seeded lognormal rounds (3% noise) around 300 us * (1 + shift)."""
    return (300e-6 * (1 + shift) * np.random.default_rng(seed).lognormal(0, 0.03, n)).tolist()


def write_run(path, benches, **top):
    """benches: {shape: (data, extra_info overrides)} -> pytest-benchmark JSON at path."""
    doc = json.loads(EXAMPLE.read_text())
    template = doc["benchmarks"][0]
    doc["benchmarks"] = []
    for shape, (data, extra) in benches.items():
        b = copy.deepcopy(template)
        b["name"] = f"test_moe[{shape}]"
        b["fullname"] = f"tests/gates/perf/test_bench_moe.py::test_moe[{shape}]"
        b["extra_info"] = {**GPU, "shape": shape, **extra}
        if data is None:
            del b["stats"]["data"]
        else:
            b["stats"]["data"] = data
        doc["benchmarks"].append(b)
    doc.update(top)
    path.write_text(json.dumps(doc))
    return path


def test_example_fixture_is_real_pytest_benchmark_output():
    doc = json.loads(EXAMPLE.read_text())
    assert {"machine_info", "commit_info", "benchmarks", "version"} <= doc.keys()
    assert len(doc["benchmarks"][0]["stats"]["data"]) == doc["benchmarks"][0]["stats"]["rounds"]


def test_unchanged_passes_and_regression_fails_with_reports(tmp_path, capsys):
    base = write_run(tmp_path / "base.json", {"T16": (samples(1), {}), "T256": (samples(2), {})})
    same = write_run(tmp_path / "same.json", {"T16": (samples(3), {}), "T256": (samples(4), {})})
    slow = write_run(tmp_path / "slow.json", {"T16": (samples(5), {}), "T256": (samples(6, 0.18), {})})
    assert main(["perf", "compare", str(base), str(same)]) == 0
    md, png, js = tmp_path / "s.md", tmp_path / "s.png", tmp_path / "s.json"
    rc = main(["perf", "compare", str(base), str(slow), "--threshold", "5", "--markdown", str(md), "--plot", str(png), "--json", str(js)])
    assert rc == 1
    table = md.read_text()
    assert "| benchmark | base median |" in table and "**REGRESSED**" in table and "T256" in table
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    verdicts = {r["name"].split("[")[-1]: r["verdict"] for r in json.loads(js.read_text())["results"]}
    assert verdicts == {"T16]": "unchanged", "T256]": "regressed"}
    # a higher threshold lets the 18% slowdown through: the threshold option is honoured
    assert main(["perf", "compare", str(base), str(slow), "--threshold", "0.25"]) == 0


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("gpu_name", "NVIDIA H200", "hardware key 'gpu_name' differs"),
        ("gpu_arch", "gfx942", "hardware key 'gpu_arch' differs"),
        ("shape", "dsv4-pro-tp8-align256-T16", "measurement key 'shape' differs"),
        ("timer", "host", "measurement key 'timer' differs"),
        ("intermediate_pad", 0, "measurement key 'intermediate_pad' differs"),
    ],
)
def test_refuses_mismatched_runs(tmp_path, capsys, key, value, message):
    base = write_run(tmp_path / "b.json", {"T16": (samples(1), {})})
    head_extra = {key: value} if key != "shape" else {}
    head = write_run(tmp_path / "h.json", {"T16": (samples(1, 0.3), head_extra)})
    if key == "shape":  # same benchmark name, different shape string in extra_info
        doc = json.loads(head.read_text())
        doc["benchmarks"][0]["extra_info"]["shape"] = value
        head.write_text(json.dumps(doc))
    assert main(["perf", "compare", str(base), str(head)]) == 2
    assert message in capsys.readouterr().err


def test_software_version_difference_is_a_note_not_a_refusal(tmp_path, capsys):
    base = write_run(tmp_path / "b.json", {"T16": (samples(1), {})})
    head = write_run(tmp_path / "h.json", {"T16": (samples(2), {"aiter_commit": "abc123"})})
    assert main(["perf", "compare", str(base), str(head)]) == 0
    assert "aiter_commit" in capsys.readouterr().out


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: p.write_text("{not json"), "is not valid JSON"),
        (lambda p: p.write_text(json.dumps({"benchmarks": []})), "has no benchmarks"),
        (lambda p: p.write_text(json.dumps([1, 2])), "not pytest-benchmark JSON"),
        (lambda p: write_run(p, {"T16": (None, {})}), "has no stats.data"),
        (lambda p: write_run(p, {"T16": ([], {})}), "empty stats.data"),
        (lambda p: write_run(p, {"T16": (samples(1, n=4), {})}), "at least 10 are needed"),
        (lambda p: None, "does not exist"),
    ],
)
def test_bad_head_file_exits_2_with_message(tmp_path, capsys, make, message):
    base = write_run(tmp_path / "b.json", {"T16": (samples(1), {})})
    head = tmp_path / "head.json"
    make(head)
    before = base.read_bytes()
    assert main(["perf", "compare", str(base), str(head)]) == 2
    assert message in capsys.readouterr().err
    assert base.read_bytes() == before  # the caller's files are untouched


def test_unmatched_benchmarks_are_listed_and_lost_coverage_fails(tmp_path, capsys):
    base = write_run(tmp_path / "b.json", {"T16": (samples(1), {}), "T4096": (samples(2), {})})
    head = write_run(tmp_path / "h.json", {"T16": (samples(3), {}), "T1": (samples(4), {})})
    assert main(["perf", "compare", str(base), str(head)]) == 2
    out = capsys.readouterr()
    assert "only in base (missing from head)" in out.out and "only in head (new, no baseline)" in out.out
    assert "missing from HEAD" in out.err
    assert main(["perf", "compare", str(base), str(head), "--allow-missing"]) == 0


def test_accept_then_compare_against_stored_baseline(tmp_path, capsys):
    store = tmp_path / "baselines"
    first = write_run(tmp_path / "first.json", {"T16": (samples(1), {})})
    assert main(["perf", "accept", str(first), "--runner", "mi355x-ci-1", "--baseline-dir", str(store)]) == 0
    stored = store / "mi355x-ci-1" / "aiter-0.1.6.json"
    assert json.loads(stored.read_text())["fp4moe_baseline"]["runner"] == "mi355x-ci-1"
    slow = write_run(tmp_path / "slow.json", {"T16": (samples(2, 0.2), {})})
    assert main(["perf", "compare", "--runner", "mi355x-ci-1", "--baseline-dir", str(store), str(slow)]) == 1
    # another aiter version has no baseline yet: cannot run, with the accept command in the message
    newer = write_run(tmp_path / "newer.json", {"T16": (samples(3), {"aiter_version": "0.1.7"})})
    capsys.readouterr()
    assert main(["perf", "compare", "--runner", "mi355x-ci-1", "--baseline-dir", str(store), str(newer)]) == 2
    assert "perf accept" in capsys.readouterr().err


def test_usage_errors_exit_2(tmp_path, capsys):
    base = write_run(tmp_path / "b.json", {"T16": (samples(1), {})})
    assert main(["perf", "compare", str(base)]) == 2  # one file and no --runner
    assert "--runner" in capsys.readouterr().err
    assert main(["perf", "compare", str(base), str(base), "--threshold", "abc"]) == 2
    assert "--threshold" in capsys.readouterr().err
