"""Every study imports cleanly (the GPU ones included, on a machine without a GPU) and has a
``main``. That nothing outside the lab imports it: tests/infra/test_scripts_floor.py; that the
wheel holds no ``lab/``: tests/infra/test_package_data.py."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest

LAB = Path(__file__).resolve().parents[1]
STUDY_MODULES = sorted(m.name for m in pkgutil.iter_modules([str(LAB / "studies")]))


def test_the_five_studies_are_there():
    assert STUDY_MODULES == ["aiter_triton_pad_table", "gpu_memory", "moe_fast_bench", "perf_study", "serve_study"]


@pytest.mark.parametrize("name", STUDY_MODULES)
def test_every_study_imports_cleanly_and_has_a_main(name):
    mod = importlib.import_module(f"lab.studies.{name}")
    assert callable(getattr(mod, "main", None)) and mod.__doc__
