"""GSM8K from local files: find the data folder, check it, and write lm-eval's task YAML.

A data folder holds ``test.jsonl`` (the questions scored) and a few-shot pool, ``train.jsonl``
or ``train_head200.jsonl`` (the layout of ``../shared/data/gsm8k``). Each line is one JSON
object with ``question`` and ``answer``; an answer is a worked solution whose last line is
``#### N`` (the GSM8K format, openai/grade-school-math).

The task definition lives in ``fp4moe/data/gsm8k/gsm8k_offline.yaml``. lm-eval finds tasks by
scanning ``include_path`` folders, and the data paths differ per run, so the gate writes a
child YAML into a fresh folder: it ``include:``s the shipped file by absolute path and sets
only the task name and ``dataset_kwargs.data_files``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from fp4moe.infra.errors import GateCannotRun
from fp4moe.infra.paths import data_path, shared_dir

BASE_TASK_YAML = data_path("gsm8k/gsm8k_offline.yaml")
MINI_DATA_DIR = data_path("gsm8k/mini")  # 40 test + 16 train records, for CI
TASK_NAME = "fp4moe_gsm8k"
FEWSHOT_FILES = ("train.jsonl", "train_head200.jsonl")


@dataclass(frozen=True)
class GsmData:
    directory: Path
    test_file: Path
    fewshot_file: Path
    n_test: int
    n_fewshot: int


def default_data_dir() -> Path | None:
    """``../shared/data/gsm8k`` when it exists, else None (the hub is never a fallback)."""
    shared = shared_dir()
    if shared is None:
        return None
    d = shared / "data" / "gsm8k"
    return d if d.is_dir() else None


def resolve_data_dir(data_dir: str | Path | None) -> Path:
    if data_dir is not None:
        return Path(data_dir)
    d = default_data_dir()
    if d is None:
        raise GateCannotRun(
            "no GSM8K data: pass --data-dir DIR (a folder with test.jsonl and train.jsonl or "
            "train_head200.jsonl); the default ../shared/data/gsm8k is absent, and this gate "
            "never downloads from the dataset hub"
        )
    return d


#: the largest data file read (GSM8K's test split is ~0.75 MB, its train split ~4 MB): a file
#: padded to GiBs is refused by its size, unread; a FIFO or a device is refused at once
MAX_DATA_BYTES = 64 << 20


def _read_records(path: Path) -> int:
    """Count records, checking each one; errors name the file and the line."""
    from fp4moe.infra.files import read_regular_bytes

    try:
        data = read_regular_bytes(path, limit=MAX_DATA_BYTES)
    except OSError as e:
        raise GateCannotRun(f"{path}: cannot read: {str(e).removeprefix(f'{path}: ')}") from None
    n = 0
    for lineno, raw in enumerate(data.split(b"\n"), start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise GateCannotRun(f"{path}:{lineno}: not UTF-8 text (byte {e.start}: {e.reason})") from None
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise GateCannotRun(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
        except RecursionError:
            raise GateCannotRun(f"{path}:{lineno}: not valid JSON (nested too deeply)") from None
        if not isinstance(rec, dict) or not isinstance(rec.get("question"), str) or not isinstance(
            rec.get("answer"), str
        ):
            raise GateCannotRun(f"{path}:{lineno}: a record needs string fields 'question' and 'answer'")
        if "#### " not in rec["answer"]:
            raise GateCannotRun(f"{path}:{lineno}: 'answer' lacks the final '#### N' line of GSM8K")
        n += 1
    return n


def load_data_dir(data_dir: str | Path | None, *, num_fewshot: int) -> GsmData:
    """Resolve and validate the data folder; any problem is GateCannotRun (exit 2)."""
    d = resolve_data_dir(data_dir)
    if not d.is_dir():
        raise GateCannotRun(f"--data-dir {d}: not a folder")
    test_file = d / "test.jsonl"
    if not test_file.exists():
        raise GateCannotRun(f"--data-dir {d}: test.jsonl is missing")
    fewshot = next((d / n for n in FEWSHOT_FILES if (d / n).exists()), None)
    if fewshot is None:
        raise GateCannotRun(f"--data-dir {d}: no few-shot pool (one of {', '.join(FEWSHOT_FILES)})")
    n_test = _read_records(test_file)
    n_fewshot = _read_records(fewshot)
    if n_test == 0:
        raise GateCannotRun(f"{test_file}: no records")
    if n_fewshot < num_fewshot:
        raise GateCannotRun(f"{fewshot}: {n_fewshot} records, fewer than --num-fewshot {num_fewshot}")
    return GsmData(d.resolve(), test_file.resolve(), fewshot.resolve(), n_test, n_fewshot)


#: the datasets cache of one run, inside the run's own folder: never ``$XDG_CACHE_HOME`` or
#: ``~/.cache`` (unwritable on a locked-down runner; and a stale cache could feed a run old data)
DATASETS_CACHE = "datasets-cache"


def write_task_yaml(data: GsmData, folder: Path) -> Path:
    """Write the child task YAML into ``folder`` (to be lm-eval's ``include_path``); the
    datasets cache of the run goes to ``folder/DATASETS_CACHE``."""
    # JSON is valid YAML; json.dumps quotes the paths safely whatever characters they hold.
    text = (
        f"include: {json.dumps(str(BASE_TASK_YAML))}\n"
        f"task: {TASK_NAME}\n"
        "dataset_kwargs:\n"
        f"  cache_dir: {json.dumps(str(folder.resolve() / DATASETS_CACHE))}\n"
        "  data_files:\n"
        f"    train: {json.dumps(str(data.fewshot_file))}\n"
        f"    test: {json.dumps(str(data.test_file))}\n"
    )
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{TASK_NAME}.yaml"
    path.write_text(text)
    return path
