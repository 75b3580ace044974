"""``fp4moe-gate perf compare/accept`` fail closed, in bounded memory.

Defects shown gone here: ``--min-samples 4`` (or negative) let a 10x slowdown exit
0; ``--alpha abc`` did not name the option; ``machine_info``/``commit_info`` of the wrong JSON
type crashed with exit 1; an unwritable ``--markdown``/``--json`` failed after the verdict; an
exit-2 run left an earlier run's results in place; a benchmark named ``<!--`` hid the
REGRESSED row; the Hodges-Lehmann interval built the rounds(base) x rounds(head) matrix
(10k rounds per side: 2.2 GB; 100k: 74 GiB).
"""

from __future__ import annotations

import json
import os
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from fp4moe.stats import compare
from fp4moe.stats.report import markdown_table

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"  # the tests' own fixtures (checkout)

pytestmark = pytest.mark.reliability  # a fault table: `pytest -m reliability` selects every one

EXAMPLE = FIXTURES / "perf" / "example-pytest-benchmark.json"
INFO = {"gpu_name": "AMD Instinct MI355X", "gpu_arch": "gfx950", "timer": "device-events", "backend": "aiter",
        "shape": "T16"}


def rounds(seed: int, factor: float = 1.0, n: int = 30) -> list[float]:
    """Seeded lognormal rounds (3% noise) around 300 us * factor."""
    return (300e-6 * factor * np.random.default_rng(seed).lognormal(0, 0.03, n)).tolist()


def bench_file(path, benches: dict, **top):
    """{name: rounds} -> pytest-benchmark JSON (the shipped example as the template)."""
    doc = json.loads(EXAMPLE.read_text())
    template = doc["benchmarks"][0]
    doc["benchmarks"] = [
        {**template, "name": name, "fullname": name, "extra_info": dict(INFO),
         "stats": {**template["stats"], "data": data}}
        for name, data in benches.items()
    ]
    doc.update(top)
    path.write_text(json.dumps(doc))
    return path


# ------------------------------------------------------------------ Hodges-Lehmann bounds


def _brute(x, y, k):
    return np.sort((x[None, :] - y[:, None]).ravel())[k]


@pytest.mark.parametrize("ties", [False, True], ids=["continuous", "ties"])
def test_selection_equals_the_full_pairwise_matrix_bitwise(ties):
    """Selection is exact (same float as sorting all n*m differences), also on tied timings
    (a coarse timer); materialize_below=1 forces every step through the selection loop."""
    rng = np.random.default_rng(11 if ties else 12)
    for _ in range(40):
        n, m = (int(v) for v in rng.integers(1, 30, 2))
        if ties:
            y, x = rng.integers(0, 3, n) * 0.25, rng.integers(0, 3, m) * 0.25
        else:
            y, x = np.log(rng.lognormal(0, 0.05, n)), np.log(rng.lognormal(0.02, 0.05, m))
        x, y = np.sort(x.astype(np.float64)), np.sort(y.astype(np.float64))
        for k in {0, n * m - 1, (n * m) // 2, int(rng.integers(n * m))}:
            assert compare.kth_pairwise_difference(x, y, k, materialize_below=1) == _brute(x, y, k)


def test_estimate_and_interval_unchanged_from_the_pairwise_definition():
    rng = np.random.default_rng(3)
    base, head = 3e-4 * rng.lognormal(0, 0.03, 50), 3.3e-4 * rng.lognormal(0, 0.03, 40)
    est, lo, hi = compare.hodges_lehmann_log_ratio(base, head, 0.98)
    d = np.sort((np.log(head)[None, :] - np.log(base)[:, None]).ravel())
    assert est == 0.5 * (d[(d.size - 1) // 2] + d[d.size // 2])
    assert lo in d and hi in d and lo < est < hi


@pytest.mark.parametrize("n", [10_000, pytest.param(100_000, marks=pytest.mark.slow)])
def test_compare_memory_is_linear_in_rounds(n):
    """Peak Python/numpy allocation (tracemalloc) for n rounds per side. The pairwise matrix
    alone would be 8*n^2 bytes: 0.8 GB at 10k, 80 GB at 100k; the bound is 64 MB (measured
    ~22 MB at 100k: sorted logs, per-row positions, the last candidates)."""
    rng = np.random.default_rng(5)
    base, head = 3e-4 * rng.lognormal(0, 0.03, n), 3e-4 * rng.lognormal(0, 0.03, n)
    tracemalloc.start()
    try:
        r = compare.compare_samples(base, head)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64e6, f"{peak / 1e6:.0f} MB for {n} rounds per side"
    assert r.verdict == compare.UNCHANGED and r.ci_low < 1 < r.ci_high


# ------------------------------------------------------------------ --min-samples floor


def test_min_samples_floor_is_where_the_test_can_first_reach_alpha():
    # exact one-sided p of complete separation n vs n is 1/C(2n, n): 1/70 for 4, 1/252 for 5
    assert compare.min_samples_floor(0.01) == 5
    assert compare.min_samples_floor(0.02) == 4
    assert compare.min_samples_floor(0.2) == 2
    with pytest.raises(ValueError, match="--min-samples 4: below 5"):
        compare.compare_samples(rounds(1), rounds(2), min_samples=4)  # the library refuses it too


@pytest.mark.parametrize("value", ["4", "0", "-3"])
def test_min_samples_below_the_floor_exits_2_before_reading_files(gate, tmp_path, value):
    gate("perf", "compare", tmp_path / "missing-base.json", tmp_path / "missing-head.json", "--min-samples", value
         ).cannot_run("--min-samples", value)


def test_ten_x_slowdown_on_four_rounds_is_never_a_pass(gate, tmp_path):
    """The defect: --min-samples 4 with 4 rounds per side, a 10x slowdown exited 0."""
    base = bench_file(tmp_path / "b.json", {"t": rounds(1, n=4)})
    head = bench_file(tmp_path / "h.json", {"t": rounds(2, 10.0, n=4)})
    gate("perf", "compare", base, head, "--min-samples", "4", inputs=[base, head]).cannot_run("--min-samples 4")
    gate("perf", "compare", base, head, inputs=[base, head]).cannot_run("4 rounds")
    base5 = bench_file(tmp_path / "b5.json", {"t": rounds(1, n=5)})
    head5 = bench_file(tmp_path / "h5.json", {"t": rounds(2, 10.0, n=5)})
    r = gate("perf", "compare", base5, head5, "--min-samples", "5", inputs=[base5, head5])
    assert r.rc == 1 and "regressed" in r.err


# ------------------------------------------------------------------ options, files, outputs


@pytest.mark.parametrize("alpha", ["abc", "nan", "0.7", ""])
def test_alpha_that_is_not_a_level_names_the_option(gate, tmp_path, alpha):
    gate("perf", "compare", tmp_path / "b.json", tmp_path / "h.json", "--alpha", alpha).cannot_run("--alpha")


@pytest.mark.parametrize("key,value", [("machine_info", ["x"]), ("commit_info", "abc"), ("machine_info", 3)])
def test_info_of_the_wrong_json_type_names_file_and_key(gate, tmp_path, key, value):
    base = bench_file(tmp_path / "b.json", {"t": rounds(1)})
    head = bench_file(tmp_path / "h.json", {"t": rounds(2)}, **{key: value})
    gate("perf", "compare", base, head, inputs=[base, head]).cannot_run("h.json", key)


def test_extra_info_that_is_not_an_object_is_not_ignored(gate, tmp_path):
    base = bench_file(tmp_path / "b.json", {"t": rounds(1)})
    head = bench_file(tmp_path / "h.json", {"t": rounds(2)})
    doc = json.loads(head.read_text())
    doc["benchmarks"][0]["extra_info"] = ["gpu_name", "other"]
    head.write_text(json.dumps(doc))
    gate("perf", "compare", base, head, inputs=[base, head]).cannot_run("h.json", "extra_info")


def test_non_utf8_benchmark_file_names_the_file(gate, tmp_path):
    base = bench_file(tmp_path / "b.json", {"t": rounds(1)})
    head = tmp_path / "h.json"
    head.write_bytes(b'{"benchmarks": ["\xff"]}')
    gate("perf", "compare", base, head, inputs=[base, head]).cannot_run("h.json")


@pytest.mark.parametrize("option", ["--markdown", "--json", "--plot"])
def test_unwritable_output_fails_before_the_compare(gate, tmp_path, option, monkeypatch):
    base = bench_file(tmp_path / "b.json", {"t": rounds(1)})
    head = bench_file(tmp_path / "h.json", {"t": rounds(2)})
    from fp4moe.gates.perf import baseline

    monkeypatch.setattr(baseline, "load_run", lambda p: pytest.fail("files were read before the options were checked"))
    gate("perf", "compare", base, head, option, tmp_path / "no-such-dir" / "out", inputs=[base, head]
         ).cannot_run(option, "does not exist")
    gate("perf", "compare", base, head, option, tmp_path, inputs=[base, head]).cannot_run(option, "is a folder")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through permission bits")
def test_read_only_output_folder_fails_before_the_compare(gate, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        gate("perf", "compare", tmp_path / "b.json", tmp_path / "h.json", "--json", ro / "r.json").cannot_run("not writable")
    finally:
        ro.chmod(0o700)


def test_a_run_that_cannot_run_replaces_an_earlier_pass(gate, tmp_path):
    base = bench_file(tmp_path / "b.json", {"t": rounds(1)})
    head = bench_file(tmp_path / "h.json", {"t": rounds(2)})
    js, md = tmp_path / "r.json", tmp_path / "r.md"
    assert gate("perf", "compare", base, head, "--json", js, "--markdown", md).rc == 0
    assert json.loads(js.read_text())["status"] == "pass"
    gate("perf", "compare", base, tmp_path / "gone.json", "--json", js, "--markdown", md).cannot_run("gone.json")
    record = json.loads(js.read_text())
    assert record["status"] == "cannot-run" and "gone.json" in record["reason"] and "results" not in record
    assert "could not run" in md.read_text() and "unchanged" not in md.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.json", "h.json", "r.json", "r.md"]  # no temp files left


@pytest.mark.parametrize("evil", ["<!--", "<!-- x -->", "a|b", "`x`", "<script>", "x\n| fake | row |"])
def test_benchmark_name_cannot_hide_the_regressed_row(evil):
    slow = compare.compare_samples(rounds(1), rounds(2, 1.5), name="test_moe[T256]")
    named = compare.compare_samples(rounds(3), rounds(4), name=evil)
    md = markdown_table([named, slow], unmatched={"head (new)": [evil]}, notes=[evil])
    assert "<" not in md and "`" not in md
    rows = [ln for ln in md.splitlines() if ln.startswith("| ")]
    assert all(ln.count("|") - ln.count("\\|") == 8 for ln in rows[1:]), md  # every row keeps its 7 cells
    assert any("test_moe[T256]" in ln and "**REGRESSED**" in ln for ln in rows)


def test_perf_accept_into_an_unusable_baseline_dir_names_it(gate, tmp_path):
    head = bench_file(tmp_path / "h.json", {"t": rounds(2)})
    blocker = tmp_path / "baselines"
    blocker.write_text("a file where the folder should be")
    gate("perf", "accept", head, "--runner", "r1", "--baseline-dir", blocker, inputs=[head, blocker]
         ).cannot_run("--baseline-dir", "baselines")


# ------------------------------------------------------------------ hostile inputs


def _dup_key_head(tmp_path, key):
    """HEAD with ``key`` given twice: first a 2x slowdown, then the unchanged rounds (Python's
    json keeps the later: the regression was hidden)."""
    slow, same = rounds(2, 2.0), rounds(2)
    bench_file(tmp_path / "h1.json", {"b": slow})
    text = (tmp_path / "h1.json").read_text()
    if key == "benchmarks":
        doc = json.loads(text)
        second = json.dumps([{**doc["benchmarks"][0], "stats": {**doc["benchmarks"][0]["stats"], "data": same}}])
        text = text[:-1] + f', "benchmarks": {second}}}'
    else:
        text = text.replace('"data": [', f'"data": {json.dumps(same)}, "data": [', 1)
    (tmp_path / "head.json").write_text(text)
    return tmp_path / "head.json"


@pytest.mark.parametrize("key", ["benchmarks", "data"])
def test_a_key_given_twice_in_a_benchmark_file_is_cannot_run(gate, tmp_path, key):
    """perf compare with 'benchmarks' or 'data' given twice in HEAD (first list
    slow, second unchanged) exited 0."""
    base = bench_file(tmp_path / "base.json", {"b": rounds(1)})
    head = _dup_key_head(tmp_path, key)
    gate("perf", "compare", base, head, inputs=[base, head]).cannot_run("head.json", f"key '{key}' appears twice")


@pytest.mark.parametrize("how", ["hard-link", "symlink", "copy"])
def test_head_the_same_run_as_base_is_cannot_run(gate, tmp_path, how):
    """perf compare with HEAD a hard link to BASE exited 0 (the path check
    compared resolved names only)."""
    import shutil

    base = bench_file(tmp_path / "base.json", {"b": rounds(1)})
    head = tmp_path / "head.json"
    {"hard-link": os.link, "symlink": lambda a, b: os.symlink(a, b), "copy": shutil.copyfile}[how](base, head)
    gate("perf", "compare", base, head, inputs=[base]).cannot_run("base.json", "head.json", "with itself")


def test_a_round_of_10_to_the_400_names_the_file(gate, tmp_path):
    """a round of 10**400 read as inf and the line did not name the file."""
    base = bench_file(tmp_path / "base.json", {"b": rounds(1)})
    head = bench_file(tmp_path / "head.json", {"b": rounds(2)})
    head.write_text(head.read_text().replace('"data": [', '"data": [1e400, ', 1))
    gate("perf", "compare", base, head).cannot_run("head.json", "1e400")
