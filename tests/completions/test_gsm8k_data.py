"""Offline GSM8K data: folder checks, the task YAML, and the base-URL forms."""

import json
import shutil

import pytest

from fp4moe.completions import data as gdata
from fp4moe.completions.data import BASE_TASK_YAML, MINI_DATA_DIR, TASK_NAME, load_data_dir, write_task_yaml
from fp4moe.completions.endpoint import completions_url
from fp4moe.infra.errors import GateCannotRun
from fp4moe.infra.paths import shared_dir


def test_mini_fixture_loads():
    d = load_data_dir(MINI_DATA_DIR, num_fewshot=8)
    assert (d.n_test, d.n_fewshot) == (40, 16)
    assert d.fewshot_file.name == "train.jsonl"
    assert (MINI_DATA_DIR / "LICENSE").read_text().startswith("MIT License")


@pytest.mark.shared
def test_shared_data_is_the_full_test_split():
    if shared_dir() is None:
        pytest.skip("../shared is absent")
    d = load_data_dir(None, num_fewshot=8)  # the default folder
    assert (d.n_test, d.n_fewshot) == (1319, 200)
    assert d.fewshot_file.name == "train_head200.jsonl"


def test_no_data_dir_and_no_shared_is_cannot_run(monkeypatch):
    monkeypatch.setattr(gdata, "shared_dir", lambda: None)
    with pytest.raises(GateCannotRun, match="--data-dir.*never downloads"):
        load_data_dir(None, num_fewshot=8)


def _copy_mini(tmp_path):
    d = tmp_path / "gsm8k"
    shutil.copytree(MINI_DATA_DIR, d)
    return d


def test_folder_problems_are_named(tmp_path):
    with pytest.raises(GateCannotRun, match="not a folder"):
        load_data_dir(tmp_path / "absent", num_fewshot=8)
    d = _copy_mini(tmp_path)
    with pytest.raises(GateCannotRun, match="fewer than --num-fewshot 17"):
        load_data_dir(d, num_fewshot=17)
    (d / "train.jsonl").unlink()
    with pytest.raises(GateCannotRun, match="no few-shot pool"):
        load_data_dir(d, num_fewshot=8)
    (d / "test.jsonl").unlink()
    with pytest.raises(GateCannotRun, match="test.jsonl is missing"):
        load_data_dir(d, num_fewshot=8)


def test_bad_record_names_file_and_line(tmp_path):
    d = _copy_mini(tmp_path)
    lines = (d / "test.jsonl").read_text().splitlines()
    rec = json.loads(lines[2])
    rec["answer"] = rec["answer"].replace("#### ", "")
    lines[2] = json.dumps(rec)
    lines[5] = "{not json"
    (d / "test.jsonl").write_text("\n".join(lines[:5]) + "\n")
    with pytest.raises(GateCannotRun, match=r"test.jsonl:3: 'answer' lacks"):
        load_data_dir(d, num_fewshot=8)
    (d / "test.jsonl").write_text("\n".join(lines[5:8]) + "\n")
    with pytest.raises(GateCannotRun, match=r"test.jsonl:1: not valid JSON"):
        load_data_dir(d, num_fewshot=8)


def test_task_yaml_mirrors_lm_eval_gsm8k_and_child_points_at_data(tmp_path):
    yaml = pytest.importorskip("yaml", reason="PyYAML comes with the eval extra")
    base = yaml.safe_load(BASE_TASK_YAML.read_text())
    assert base["dataset_path"] == "json"
    assert base["doc_to_text"] == "Question: {{question}}\nAnswer:"
    assert base["generation_kwargs"]["until"] == ["Question:", "</s>", "<|im_end|>"]
    filters = {f["name"]: f["filter"][0] for f in base["filter_list"]}
    assert filters["strict-match"]["regex_pattern"] == "#### (\\-?[0-9\\.\\,]+)"
    assert filters["flexible-extract"]["group_select"] == -1
    child = yaml.safe_load(write_task_yaml(load_data_dir(MINI_DATA_DIR, num_fewshot=8), tmp_path).read_text())
    assert child["task"] == TASK_NAME and child["include"] == str(BASE_TASK_YAML)
    assert child["dataset_kwargs"]["data_files"]["test"] == str((MINI_DATA_DIR / "test.jsonl").resolve())
    # the datasets cache is the run's own folder, never $XDG_CACHE_HOME (unwritable on a locked-down runner)
    assert child["dataset_kwargs"]["cache_dir"] == str(tmp_path.resolve() / "datasets-cache")


@pytest.mark.parametrize(
    "given", ["http://h:30000", "http://h:30000/", "http://h:30000/v1", "http://h:30000/v1/completions"]
)
def test_base_url_forms(given):
    assert completions_url(given) == ("http://h:30000", "http://h:30000/v1/completions")


def test_base_url_without_scheme_is_rejected():
    with pytest.raises(ValueError, match="--base-url"):
        completions_url("localhost:30000")


def _spoil(path, how):
    import os

    if how == "3 GiB of NULs":  # a sparse file: the size is set, no block is written
        text = path.read_bytes()
        path.write_bytes(text)
        os.truncate(path, len(text) + (3 << 30))
    else:
        path.unlink()
        os.mkfifo(path) if how == "FIFO" else path.symlink_to(how)


@pytest.mark.parametrize("name", ["test.jsonl", "train.jsonl"])
@pytest.mark.parametrize("how, says", [("3 GiB of NULs", "bytes, more than"), ("FIFO", "is a FIFO"),
                                       ("/dev/zero", "is a character device")])
def test_a_data_file_that_reads_without_end_is_refused_naming_it(tmp_path, name, how, says):
    """A FIFO named test.jsonl read as "missing"; GiBs of NULs were read as one line, whole."""
    d = _copy_mini(tmp_path)
    _spoil(d / name, how)
    with pytest.raises(GateCannotRun, match=rf"{d / name}: cannot read: .*{says}"):
        load_data_dir(d, num_fewshot=8)


def test_a_deeply_nested_record_names_file_and_line(tmp_path):
    d = _copy_mini(tmp_path)
    (d / "test.jsonl").write_text("[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(GateCannotRun, match=r"test.jsonl:1: not valid JSON \(nested too deeply\)"):
        load_data_dir(d, num_fewshot=8)
