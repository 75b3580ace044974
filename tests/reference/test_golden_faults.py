"""The golden-layout reader and checker on files it must refuse (fp4moe/reference/golden.py),
with no shared data needed: every refusal names the file and the cause, and a case whose map
differs from the one computed here is named with what differs.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from fp4moe.infra.errors import GateCannotRun
from fp4moe.reference import golden, layout


@pytest.fixture
def golden_folder(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    monkeypatch.setenv("FP4MOE_SHARED", str(shared))
    return shared / golden.GOLDEN_SUBDIR


def _write_manifest(folder, data: bytes):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "layout_manifest.json").write_bytes(data)


def test_no_shared_folder_at_all_is_file_not_found(monkeypatch):
    monkeypatch.delenv("FP4MOE_SHARED", raising=False)
    monkeypatch.setattr(golden, "shared_dir", lambda: None)
    with pytest.raises(FileNotFoundError, match=r"^\.\./shared/golden/aiter-layouts is absent in this checkout$"):
        golden.golden_dir()


def test_a_shared_folder_without_the_golden_folder_names_it(golden_folder):
    with pytest.raises(FileNotFoundError, match=rf"^{golden_folder} is absent$"):
        golden.golden_dir()


@pytest.mark.parametrize("data, cause", [
    (b'{"cases": {"a": 1}}', "TypeError: 'cases' is a dict, not a list"),
    (b'{"cases": [', "JSONDecodeError: "),
    (b'{}', "KeyError: 'cases'"),
])
def test_an_unreadable_manifest_names_the_file_and_the_cause(golden_folder, data, cause):
    _write_manifest(golden_folder, data)
    with pytest.raises(GateCannotRun) as e:
        golden.load_cases()
    assert str(e.value).startswith(f"{golden_folder / 'layout_manifest.json'}: unreadable golden manifest ({cause}")


def test_index_maps_that_need_pickle_are_refused(golden_folder):
    _write_manifest(golden_folder, b'{"cases": []}')
    np.savez(golden_folder / "layout_index_maps.npz", a=np.array([{"x": 1}], dtype=object))
    with pytest.raises(GateCannotRun) as e:
        golden.load_cases()
    assert str(e.value).startswith(f"{golden_folder / 'layout_index_maps.npz'}: unreadable golden index maps (ValueError: ")


def test_a_truncated_npz_names_its_error_type(golden_folder):
    _write_manifest(golden_folder, b'{"cases": []}')
    np.savez(golden_folder / "layout_index_maps.npz", a=np.arange(1000))
    f = golden_folder / "layout_index_maps.npz"
    f.write_bytes(f.read_bytes()[:200])
    with pytest.raises(GateCannotRun, match=r"unreadable golden index maps \(BadZipFile: "):
        golden.load_cases()


def test_a_manifest_with_no_case_checks_nothing_and_says_so(golden_folder):
    _write_manifest(golden_folder, b'{"cases": []}')
    want = f"{golden_folder / 'layout_manifest.json'}: the golden manifest lists no case: nothing to check"
    with pytest.raises(GateCannotRun) as e:
        golden.check_all_golden()
    assert str(e.value) == want


def _case(function="shuffle_scale", shape=(64, 12), **params):
    case = {"id": "c1", "function": function, "input_shape": list(shape),
            "params": {"experts_cnt": 1, "is_guinterleave": True, "gate_up": True, **params}}
    m = golden.index_map_of(case)
    return dict(case, output_shape=list(m.shape), sha256_index_map=golden.sha256_of_map(m)), m


def test_an_interleaved_gate_up_scale_map_marks_exactly_the_fill_as_padding():
    case, m = _case()
    pad = layout.scale_padding_mask(64, 12, experts_cnt=1, is_guinterleave=True, gate_up=True).numpy()
    assert m.shape == (64, 16) and np.array_equal(m < 0, pad) and int(pad.sum()) == 64 * 4
    assert np.array_equal(np.sort(m[m >= 0]), np.arange(64 * 12))  # every input byte exactly once


def test_a_weight_map_is_a_permutation_of_the_input_positions():
    case, m = _case("shuffle_weight", (1, 32, 64), is_guinterleave=False, gate_up=False)
    assert m.shape == (1, 32, 64) and np.array_equal(np.sort(m.reshape(-1)), np.arange(32 * 64))
    assert not np.array_equal(m.reshape(-1), np.arange(32 * 64))
    golden.check_case(case, {"c1": m})


def test_a_case_that_differs_is_named_with_what_differs():
    case, m = _case()
    with pytest.raises(AssertionError, match=r"^c1: output shape \[64, 16\] != aiter's \[64, 12\]$"):
        golden.check_case(dict(case, output_shape=[64, 12]), {})
    other = m.copy()
    other[0, 0], other[0, 1] = m[0, 1], m[0, 0]
    with pytest.raises(AssertionError, match=r"^c1: 2 bytes differ from aiter's index map$"):
        golden.check_case(case, {"c1": other})
    with pytest.raises(AssertionError, match=r"^c1: index map sha256 differs from aiter's$"):
        golden.check_case(dict(case, sha256_index_map="0" * 64), {})
    golden.check_case(case, {"c1": m})


def test_check_all_golden_counts_the_cases(golden_folder):
    case, m = _case()
    _write_manifest(golden_folder, json.dumps({"cases": [case]}).encode())
    np.savez(golden_folder / "layout_index_maps.npz", c1=m)
    assert golden.check_all_golden() == 1
