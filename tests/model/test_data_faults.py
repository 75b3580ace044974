"""Strict data: the checkpoint loader, the budget and threshold fixtures, the golden maps.

Defects shown gone here: a checkpoint missing its last expert loaded as one
expert fewer (the count was inferred from the highest id); a key present in two shard files
silently took the later one; in ``footprint_budget.json`` a later duplicate entry overrode an
over-budget one, ``"false"`` read as true, ``8.9`` as 8, ``1e400`` crashed with exit 1;
safetensors header errors, UTF-8 decode errors and a truncated golden ``.npz`` did not name
the file; plus the smaller ones (selfcheck --json, 3-digit TP/EP columns, FP4MOE_REQUIRE
named as --require, replay_server tracebacks).
"""

from __future__ import annotations

import copy
import json

import pytest
from safetensors.torch import load_file, save_file

from fp4moe.completions import replay_server
from fp4moe.gates.accuracy import thresholds
from fp4moe.infra.capabilities import parse_require
from fp4moe.infra.errors import GateCannotRun
from fp4moe.infra.strict_json import DataFileError
from fp4moe.model import checkpoint
from fp4moe.reference import footprint, golden

pytestmark = pytest.mark.reliability  # a fault table: `pytest -m reliability` selects every one



# ------------------------------------------------------------------ checkpoint


def _copy_ckpt(src, dst, *, drop=lambda k: False, config=True, split=None):
    """Rewrite a checkpoint without some keys; ``split``: {file name: predicate} to choose
    which keys go to which file (a key may go to several)."""
    tensors = {}
    for f in sorted(src.glob("*.safetensors")):
        tensors.update(load_file(str(f)))
    dst.mkdir()
    kept = {k: v for k, v in tensors.items() if not drop(k)}
    for name, pick in (split or {"model.safetensors": lambda k: True}).items():
        save_file({k: v for k, v in kept.items() if pick(k)}, str(dst / name))
    if config:
        (dst / checkpoint.CONFIG_FILE).write_bytes((src / checkpoint.CONFIG_FILE).read_bytes())
    return dst


def test_missing_last_expert_is_named_not_loaded_as_fewer(dsv4_checkpoint, tmp_path, file_digest):
    ck = _copy_ckpt(dsv4_checkpoint.path, tmp_path / "ck", drop=lambda k: k.startswith("layers.0.ffn.experts.2."))
    before = file_digest([ck])
    with pytest.raises(checkpoint.CheckpointError, match=r"layer 0 is missing expert\(s\) \[2\] of 0\.\.2 .*config\.json"):
        checkpoint.load_moe_layer(ck, 0)
    assert file_digest([ck]) == before


def test_every_missing_expert_and_tensor_is_named(dsv4_checkpoint, tmp_path):
    gone = ("layers.0.ffn.experts.0.", "layers.0.ffn.experts.2.")
    ck = _copy_ckpt(dsv4_checkpoint.path, tmp_path / "ck",
                    drop=lambda k: k.startswith(gone) or k in ("layers.0.ffn.experts.1.w2.scale", "layers.0.ffn.experts.1.w1.weight"))
    with pytest.raises(checkpoint.CheckpointError) as ei:
        checkpoint.load_moe_layer(ck, 0)
    msg = str(ei.value)
    assert "expert(s) [0, 2]" in msg
    assert "'layers.0.ffn.experts.1.w1.weight'" in msg and "'layers.0.ffn.experts.1.w2.scale'" in msg


def test_key_in_two_shards_is_an_error_naming_key_and_files(dsv4_checkpoint, tmp_path):
    dup = "layers.1.ffn.experts.0.w2.scale"
    ck = _copy_ckpt(dsv4_checkpoint.path, tmp_path / "ck",
                    split={"a.safetensors": lambda k: k.startswith("layers.0.") or k == dup,
                           "b.safetensors": lambda k: k.startswith("layers.1.")})
    with pytest.raises(checkpoint.CheckpointError, match=rf"1 key\(s\) in more than one file: {dup} \(a\.safetensors, b\.safetensors\)"):
        checkpoint.load_moe_layer(ck, 0)  # layer 0 itself is intact: a duplicate anywhere is ambiguous


def test_expert_count_comes_from_config_or_argument(dsv4_checkpoint, tmp_path):
    ck = _copy_ckpt(dsv4_checkpoint.path, tmp_path / "ck", config=False)
    with pytest.raises(checkpoint.CheckpointError, match="expert count is unknown.*num_experts"):
        checkpoint.load_moe_layer(ck, 0)
    assert checkpoint.load_moe_layer(ck, 0, num_experts=3).expert_ids == (0, 1, 2)
    with pytest.raises(checkpoint.CheckpointError, match=r"missing expert\(s\) \[3\] of 0\.\.3"):
        checkpoint.load_moe_layer(ck, 0, num_experts=4)
    with pytest.raises(checkpoint.CheckpointError, match=r"expert id\(s\) \[2\] beyond the 2 experts"):
        checkpoint.load_moe_layer(ck, 0, num_experts=2)
    for bad in (True, 0, 2.5):
        with pytest.raises(checkpoint.CheckpointError, match="num_experts"):
            checkpoint.load_moe_layer(ck, 0, num_experts=bad)
    with pytest.raises(checkpoint.CheckpointError, match="disagrees with n_routed_experts=3"):
        checkpoint.load_moe_layer(dsv4_checkpoint.path, 0, num_experts=4)


@pytest.mark.parametrize("content,words", [
    (b'{"n_routed_experts": "3"}', ["n_routed_experts is '3'"]),
    (b'{"n_routed_experts": true}', ["n_routed_experts is True"]),
    (b'{"n_routed_experts": 3', ["not a readable JSON"]),
    (b'\xff\xfe{}', ["not a readable JSON"]),
])
def test_bad_model_config_names_the_file(dsv4_checkpoint, tmp_path, content, words):
    ck = _copy_ckpt(dsv4_checkpoint.path, tmp_path / "ck", config=False)
    (ck / "config.json").write_bytes(content)
    with pytest.raises(checkpoint.CheckpointError) as ei:
        checkpoint.load_moe_layer(ck, 0)
    assert str(ck / "config.json") in str(ei.value) and all(w in str(ei.value) for w in words)


@pytest.mark.parametrize("corrupt", ["garbage", "truncated", "huge-header"])
def test_bad_safetensors_header_names_the_file(dsv4_checkpoint, tmp_path, corrupt):
    ck = _copy_ckpt(dsv4_checkpoint.path, tmp_path / "ck")
    f = ck / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes({"garbage": b"not a safetensors file at all",
                   "truncated": data[: len(data) // 2],
                   "huge-header": (1 << 40).to_bytes(8, "little") + data[8:]}[corrupt])
    with pytest.raises(checkpoint.CheckpointError, match=rf"{f}: not a readable safetensors file"):
        checkpoint.load_moe_layer(ck, 0)


def test_checkpoint_error_is_a_valueerror_with_an_unquoted_message():
    e = checkpoint.CheckpointError("checkpoint x: bad")
    assert isinstance(e, ValueError) and isinstance(e, KeyError) and str(e) == "checkpoint x: bad"


# ------------------------------------------------------------------ budget and thresholds

BUDGET = json.loads(footprint.BUDGET_FILE.read_text())


def _budget_with(tmp_path, mutate):
    doc = copy.deepcopy(BUDGET)
    mutate(doc)
    f = tmp_path / "budget.json"
    f.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return f


@pytest.mark.parametrize(
    "mutate,words",
    [
        (lambda d: d["entries"].append(dict(d["entries"][0], max_bytes_per_layer=10**15)),
         ["entries[", "repeats entries[0]", "model='dsv4-pro', tp=1"]),
        (lambda d: d["entries"][0].update(gu_interleave="false"), ["entries[0].gu_interleave: 'false' is not of type 'boolean'"]),
        (lambda d: d["entries"][0].update(tp=8.9), ["entries[0].tp: 8.9 is not of type 'integer'"]),
        (lambda d: d["entries"][0].update(max_bytes_per_layer=-1), ["entries[0].max_bytes_per_layer: -1 is less than"]),
        (lambda d: d["entries"][0].update(role="budgett"), ["entries[0].role: 'budgett' is not one of"]),
        (lambda d: d["entries"][0].update(align=100), ["entries[0].align: 100 is not a multiple of 32"]),
        (lambda d: d["entries"][0].update(extra_key=1), ["entries[0]: Additional properties"]),
        (lambda d: d.update(entries={}), ["entries: {} is not of type 'array'"]),
    ],
    ids=["duplicate-overrides", "bool-as-string", "int-as-8.9", "negative", "role-typo", "align", "unknown-key", "not-a-list"],
)
def test_budget_schema_rejects_before_use(tmp_path, mutate, words):
    f = _budget_with(tmp_path, mutate)
    with pytest.raises(DataFileError) as ei:
        footprint.load_budget(f)
    assert str(f) in str(ei.value), ei.value
    for w in words:
        assert w in str(ei.value), ei.value


@pytest.mark.parametrize(
    "text,words",
    [
        ('{"entries": [{"tp": 1e400}]}', ["1e400 is out of range"]),
        ('{"entries": [{"tp": NaN}]}', ["NaN is not a JSON number"]),
        ('{"entries": [], "entries": [{}]}', ["key 'entries' appears twice"]),
        ('{"entries": [\n', [":2:1: invalid JSON"]),
    ],
    ids=["1e400", "NaN", "duplicate-key", "truncated"],
)
def test_budget_json_that_python_would_accept_is_rejected(tmp_path, text, words):
    _rejected(footprint.load_budget, tmp_path / "budget.json", text, words)


def _rejected(load, f, text: str, words) -> None:
    """``load(f)`` of ``text`` raises DataFileError naming ``f`` and every word."""
    f.write_text(text)
    with pytest.raises(DataFileError) as ei:
        load(f)
    assert str(f) in str(ei.value) and all(w in str(ei.value) for w in words), ei.value


def test_budget_not_utf8_names_the_file(tmp_path):
    f = tmp_path / "budget.json"
    f.write_bytes(b'{"entries": ["\xe9"]}')
    with pytest.raises(DataFileError, match=rf"{f}: not UTF-8 text \(byte 14"):
        footprint.load_budget(f)


def test_shipped_fixtures_pass_their_schemas():
    assert len(footprint.load_budget()) == len(BUDGET["entries"])
    assert thresholds.load_thresholds()["dsv4-pro"]["tp8"].value == 0.92


@pytest.mark.parametrize(
    "text,words",
    [
        ('{"thresholds": {"m": {"tp8": {"value": "0.9", "filter": "strict-match", "num_fewshot": 8, '
         '"num_questions": 1319, "source": "s"}}}}', ["thresholds.m.tp8.value: '0.9' is not of type 'number'"]),
        ('{"thresholds": {"m": {"tp8": {"value": true, "filter": "strict-match", "num_fewshot": 8, '
         '"num_questions": 1319, "source": "s"}}}}', ["thresholds.m.tp8.value: True is not of type 'number'"]),
        ('{"thresholds": {"m": {"tp8": {"value": 0.9, "filter": "strict-match", "num_fewshot": 8.5, '
         '"num_questions": 1319, "source": "s"}}}}', ["num_fewshot: 8.5 is not of type 'integer'"]),
        ('{"thresholds": {"m": {"tp8": {"value": 0.9, "filter": "strict-match", "num_fewshot": 8, '
         '"num_questions": 1319, "source": "  "}}}}', ["source: '  ' does not match"]),
        ('{"thresholds": {"m": {}, "m": {}}}', ["key 'm' appears twice"]),
    ],
    ids=["string-value", "bool-value", "fewshot-8.5", "blank-source", "duplicate-model"],
)
def test_thresholds_schema_rejects_before_use(tmp_path, text, words):
    _rejected(thresholds.load_thresholds, tmp_path / "thresholds.json", text, words)


# ------------------------------------------------------------------ golden maps


@pytest.fixture
def fake_shared(tmp_path, monkeypatch):
    d = tmp_path / "shared" / golden.GOLDEN_SUBDIR
    d.mkdir(parents=True)
    (d / "layout_manifest.json").write_text(json.dumps({"cases": []}))
    monkeypatch.setenv("FP4MOE_SHARED", str(tmp_path / "shared"))
    return d


@pytest.mark.parametrize("what", ["truncated-npz", "manifest-not-utf8", "manifest-no-cases"])
def test_broken_golden_files_are_cannot_run_naming_the_file(fake_shared, what):
    import numpy as np

    if what == "truncated-npz":
        np.savez(fake_shared / "layout_index_maps.npz", a=np.arange(1000))
        data = (fake_shared / "layout_index_maps.npz").read_bytes()
        (fake_shared / "layout_index_maps.npz").write_bytes(data[: len(data) // 2])
        name = "layout_index_maps.npz"
    else:
        (fake_shared / "layout_manifest.json").write_bytes(b"\xff" if what == "manifest-not-utf8" else b"{}")
        name = "layout_manifest.json"
    with pytest.raises(GateCannotRun, match=rf"{fake_shared / name}: unreadable golden"):
        golden.load_cases()


def test_selfcheck_with_a_truncated_golden_npz_exits_2_naming_it(gate, fake_shared):
    import numpy as np

    np.savez(fake_shared / "layout_index_maps.npz", a=np.arange(1000))
    f = fake_shared / "layout_index_maps.npz"
    f.write_bytes(f.read_bytes()[:100])
    gate("selfcheck", inputs=[f]).cannot_run("layout_index_maps.npz", "unreadable golden index maps")


# ------------------------------------------------------------------ smaller items


# selfcheck --json as one JSON document: tests/commands/test_cli.py::test_selfcheck_json_pad_table


def test_footprint_columns_stay_apart_for_3_digit_tp_ep(gate):
    r = gate("footprint", "--model", "dsv4-pro", "--tp", "128", "--ep", "128", "--align", "128")
    assert r.rc == 0, r.err
    head, _, row = r.out.splitlines()[:3]
    cells = row.split()
    assert cells[:4] == ["dsv4-pro", "128", "128", "128"], row
    assert len(cells) == len(head.split()) == 15


def test_fp4moe_require_is_named_as_the_source():
    with pytest.raises(ValueError, match=r"^FP4MOE_REQUIRE='gpux': unknown capability"):
        parse_require("gpux", "FP4MOE_REQUIRE")
    with pytest.raises(ValueError, match=r"^--require='gfx9': unknown"):
        parse_require("gfx9")


@pytest.mark.slow
def test_fp4moe_require_env_error_does_not_say_require_option(tmp_path):
    import subprocess
    import sys

    from fp4moe.infra.paths import REPO_ROOT

    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/model/test_catalogue.py"],
                       cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                       env={**__import__("os").environ, "FP4MOE_REQUIRE": "gpux"})
    out = r.stdout + r.stderr
    assert r.returncode == 4 and "FP4MOE_REQUIRE='gpux'" in out and "--require" not in out.split("ERROR:")[-1]


@pytest.mark.parametrize(
    "argv,words",
    [
        (["--data", "/nonexistent/test.jsonl"], ["--data /nonexistent/test.jsonl"]),
        (["--data", "README.md"], ["--data README.md"]),
        (["--data", "fp4moe/data/gsm8k/mini/test.jsonl", "--correct", "1.5"], ["--correct 1.5"]),
        (["--data", "fp4moe/data/gsm8k/mini/test.jsonl", "--correct", "nan"], ["--correct nan"]),
        (["--data", "fp4moe/data/gsm8k/mini/test.jsonl", "--port", "70000"], ["--port 70000"]),
        (["--data", "fp4moe/data/gsm8k/mini/test.jsonl", "--mode", "explode"], ["--mode", "explode"]),
        (["--correct", "x"], ["--correct", "'x'"]),
    ],
    ids=["missing-file", "not-gsm8k", "correct>1", "correct-nan", "port", "mode", "correct-text"],
)
def test_replay_server_bad_options_exit_2_in_one_line(capsys, monkeypatch, argv, words):
    from fp4moe.infra.paths import REPO_ROOT

    monkeypatch.chdir(REPO_ROOT)
    with pytest.raises(SystemExit) as ei:
        replay_server.main(argv)
    err = capsys.readouterr().err
    assert ei.value.code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert all(w in err for w in words), err


def test_check_budget_row_without_entry_is_cannot_run_not_a_regression(gate, monkeypatch):
    """A catalogue row with no budget entry cannot be judged: exit 2 naming it (was exit 1)."""
    from fp4moe.gates import footprint as footprint_gate

    entries = footprint.load_budget()
    dropped = next(e for e in entries if e.role == "budget")
    monkeypatch.setattr(footprint_gate, "load_budget", lambda: [e for e in entries if e is not dropped])
    monkeypatch.setattr(footprint_gate, "measured_row_bytes", lambda cfg, align, gu, **kw: 1)  # all within budget
    gate("footprint", "--check-budget").cannot_run("no budget entry", f"{dropped.model}-tp{dropped.tp}-ep{dropped.ep}")
    over = {e.key: e for e in entries}
    monkeypatch.setattr(footprint_gate, "load_budget", lambda: list(over.values()))
    monkeypatch.setattr(footprint_gate, "measured_row_bytes", lambda cfg, align, gu, **kw: 10**15)
    assert gate("footprint", "--check-budget").rc == 1


@pytest.mark.parametrize("text", ['{"models": {', '{"models": {"m": {"hidden": NaN}}}', '{"models": {"m": {}}}', '[]'],
                         ids=["truncated", "nan", "missing-field", "not-an-object"])
def test_a_broken_catalogue_names_models_json(gate, tmp_path, monkeypatch, text):
    """a truncated or NaN catalogue gave ``Expecting property
    name...`` with no file named."""
    from fp4moe.model import catalogue

    bad = tmp_path / "models.json"
    bad.write_text(text)
    monkeypatch.setattr(catalogue, "CATALOGUE_FILE", bad)
    catalogue.load_catalogue.cache_clear()  # it is read once per process
    try:
        gate("footprint", "--model", "dsv4-pro").cannot_run("models.json")
    finally:
        monkeypatch.undo()
        catalogue.load_catalogue.cache_clear()


def _catalogue_variant(mutate) -> str:
    from fp4moe.model import catalogue

    doc = json.loads(catalogue.CATALOGUE_FILE.read_text())
    return mutate(doc)


def _dup_model(doc) -> str:
    """The first model written twice (a JSON duplicate key): Python's json keeps the later."""
    name = next(iter(doc["models"]))
    text = json.dumps(doc)
    body = json.dumps({**doc["models"][name], "moe_layers": 1})
    return text.replace(f'"{name}": ', f'"{name}": {body}, "{name}": ', 1)


@pytest.mark.parametrize("mutate, words", [
    (lambda d: json.dumps({**d, "models": {}}), ["models.json", "non-empty"]),
    (lambda d: json.dumps({**d, "models": {k: {**m, "tp": []} for k, m in d["models"].items()}}), ["models.json", "tp"]),
    (lambda d: json.dumps({**d, "models": {k: {**m, "tp": [3], "ep": [8]} for k, m in d["models"].items()}}),
     ["models.json", "no (tp, ep) row"]),
    (lambda d: json.dumps({**d, "models": {k: {**m, "hidden": True} for k, m in d["models"].items()}}),
     ["models.json", "hidden"]),
    (_dup_model, ["models.json", "appears twice"]),
], ids=["no-models", "no-tp-rows", "no-valid-row", "bool-field", "model-twice"])
def test_a_catalogue_that_would_judge_nothing_or_the_wrong_thing_names_models_json(gate, tmp_path, monkeypatch,
                                                                                   mutate, words):
    """footprint --check-budget with a catalogue with no models, a model with no
    tp/ep rows, or a model defined twice (the later won) exited 0."""
    from fp4moe.model import catalogue

    bad = tmp_path / "models.json"
    bad.write_text(_catalogue_variant(mutate))
    monkeypatch.setattr(catalogue, "CATALOGUE_FILE", bad)
    catalogue.load_catalogue.cache_clear()
    try:
        gate("footprint", "--check-budget", inputs=[bad]).cannot_run(*words)
    finally:
        monkeypatch.undo()
        catalogue.load_catalogue.cache_clear()


def test_a_fifo_data_file_is_refused_at_once(tmp_path):
    """footprint --check-budget with the budget file a FIFO waited forever (open
    blocks until a writer comes); now it is named as a FIFO without waiting."""
    import os
    import time

    fifo = tmp_path / "footprint_budget.json"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    with pytest.raises(DataFileError, match=r"footprint_budget.json: cannot read: is a FIFO"):
        footprint.load_budget(fifo)
    assert time.monotonic() - t0 < 1


@pytest.mark.parametrize("what", ["empty-manifest", "fifo-manifest", "manifest-missing", "env-missing"])
def test_golden_layouts_that_check_nothing_are_cannot_run(fake_shared, monkeypatch, tmp_path, what):
    """selfcheck with an empty golden manifest, a FIFO manifest, or
    FP4MOE_SHARED naming a missing folder exited 0 (layouts "not checked", or 0 cases)."""
    import os

    manifest = fake_shared / "layout_manifest.json"
    words = {"empty-manifest": "lists no case", "fifo-manifest": "not a regular file",
             "manifest-missing": "manifest is missing", "env-missing": "FP4MOE_SHARED="}[what]
    if what == "fifo-manifest":
        manifest.unlink()
        os.mkfifo(manifest)
    elif what == "manifest-missing":
        manifest.unlink()
    elif what == "env-missing":
        monkeypatch.setenv("FP4MOE_SHARED", str(tmp_path / "nowhere"))
    with pytest.raises(GateCannotRun, match=words):
        golden.check_all_golden()


@pytest.mark.slow
def test_selfcheck_with_an_empty_golden_manifest_exits_2(gate, fake_shared):
    """selfcheck with an empty golden manifest exited 0 (end to end)."""
    gate("selfcheck").cannot_run("layout_manifest.json", "lists no case")


# ------------------------------------------------------------------ bounded reads (issue #48 item 2)

def _spoil(path, how):
    """Turn ``path`` into what an accident leaves: its text followed by GiBs of NULs (a sparse
    file: the size is set, no block written), a FIFO, or a link to /dev/zero."""
    import os

    if how == "3 GiB of NULs":
        text = path.read_bytes() if path.exists() else b"{}"
        path.write_bytes(text)
        os.truncate(path, len(text) + (3 << 30))
    elif how == "FIFO":
        path.unlink(missing_ok=True)
        os.mkfifo(path)
    elif how == "/dev/zero":
        path.unlink(missing_ok=True)
        path.symlink_to("/dev/zero")


BOUNDED = {"3 GiB of NULs": "bytes, more than", "FIFO": "is a FIFO", "/dev/zero": "is a character device"}


@pytest.mark.parametrize("how", list(BOUNDED))
def test_a_catalogue_that_reads_without_end_is_refused_naming_models_json(gate, tmp_path, monkeypatch, how):
    """``models.json`` followed by 3 GiB of NULs grew past 3 GB RSS; a FIFO or /dev/zero in its
    place is the same accident: each is exit 2 naming the file, read not at all."""
    from fp4moe.model import catalogue

    bad = tmp_path / "models.json"
    bad.write_bytes(catalogue.CATALOGUE_FILE.read_bytes())
    _spoil(bad, how)
    monkeypatch.setattr(catalogue, "CATALOGUE_FILE", bad)
    catalogue.load_catalogue.cache_clear()
    try:
        gate("footprint", "--model", "dsv4-pro").cannot_run(str(bad), BOUNDED[how])
    finally:
        monkeypatch.undo()
        catalogue.load_catalogue.cache_clear()


@pytest.mark.parametrize("how", list(BOUNDED))
def test_a_model_config_that_reads_without_end_is_named(dsv4_checkpoint, tmp_path, how):
    ck = _copy_ckpt(dsv4_checkpoint.path, tmp_path / "ck")
    _spoil(ck / "config.json", how)
    with pytest.raises(checkpoint.CheckpointError, match=rf"{ck / 'config.json'}: cannot read: .*{BOUNDED[how]}"):
        checkpoint.load_moe_layer(ck, 0)


@pytest.mark.parametrize("how", ["FIFO", "/dev/zero"])
def test_a_safetensors_file_that_is_not_a_file_is_named_never_opened(dsv4_checkpoint, tmp_path, how):
    """A FIFO among the shards blocked safe_open forever; /dev/zero would be read as a header."""
    ck = _copy_ckpt(dsv4_checkpoint.path, tmp_path / "ck")
    _spoil(ck / "model-extra.safetensors", how)
    with pytest.raises(checkpoint.CheckpointError, match=rf"{ck / 'model-extra.safetensors'}: {BOUNDED[how]}, not a regular file"):
        checkpoint.load_moe_layer(ck, 0)
    with pytest.raises(checkpoint.CheckpointError, match="not a regular file"):
        checkpoint.load_moe_layer(ck / "model-extra.safetensors", 0)
