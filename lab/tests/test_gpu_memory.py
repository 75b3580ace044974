"""CPU checks of ``lab/studies/gpu_memory.py``'s logic (the H200 run itself is by hand).

The dry run must plan the four Pro TP8 configurations with the model's exact bytes; a CPU run
at reduced size must exercise the same measuring code and write its JSON/markdown; without a
GPU and without those flags it must exit 2 (could not run), never 0.
"""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

STUDY = "lab.studies.gpu_memory"


@pytest.fixture(scope="module")
def gpu_memory():
    return importlib.import_module(STUDY)


def test_dry_run_plans_four_configs_with_exact_bytes(gpu_memory, capsys):
    assert gpu_memory.main(["--dry-run"]) == 0
    out = capsys.readouterr().out
    for cfg in ("align128-gu", "align256-gu", "align128-nogu", "align256-nogu"):
        assert f"dsv4-pro-tp8-ep1-{cfg}:" in out
    # 384 experts x H 7168 x I_p 384: raw 384*7168*384*51/32; padded 512 at align 256
    assert f"raw={384 * 7168 * 384 * 51 // 32:,} B/layer" in out
    assert f"model={384 * 7168 * 512 * 51 // 32:,} B/layer" in out
    assert f"model={384 * 7168 * 384 * 51 // 32 + 384 * 7168 * 4:,} B/layer" in out


def test_cpu_logic_run_writes_json_and_markdown(gpu_memory, tmp_path, capsys):
    rc = gpu_memory.main(["--device", "cpu", "--experts", "2", "--hidden", "256", "--layers", "2", "--out", str(tmp_path)])
    assert rc == 0
    data = json.loads((tmp_path / "gpu_memory.json").read_text())
    assert len(data["results"]) == 4
    assert all(r["model_equals_measured"] and len(r["per_layer"]) == 2 for r in data["results"])
    assert "| dsv4-pro-tp8-ep1-align256-gu | 512 |" in (tmp_path / "gpu_memory.md").read_text()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_without_gpu_it_cannot_run(gpu_memory, capsys):
    assert gpu_memory.main([]) == 2
    assert "no GPU" in capsys.readouterr().err
