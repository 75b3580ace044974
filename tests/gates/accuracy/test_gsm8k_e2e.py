"""GSM8K against a live model server: ``pytest -m e2e --server-url URL --server-model NAME``.

Mandatory under ``--require server``. Scores the full test split of ``../shared/data/gsm8k``
(or $FP4MOE_GSM8K_DATA) and decides with the threshold of $FP4MOE_GSM8K_KEY (default
``dsv4-pro/tp8``, 0.92 as SGLang's CI), through the same CLI a runner calls.
"""

import os

import pytest

from fp4moe.commands.main import main

pytestmark = pytest.mark.e2e


def test_gsm8k_clears_the_model_threshold(request, tmp_path):
    pytest.importorskip("lm_eval", reason="lm-eval not installed (pip install -e '.[eval]')")
    url = request.config.getoption("--server-url")
    model = request.config.getoption("--server-model")
    if not model:
        pytest.fail("--server-model (or FP4MOE_SERVER_MODEL) is required with --server-url")
    model_key, _, parallel = os.environ.get("FP4MOE_GSM8K_KEY", "dsv4-pro/tp8").partition("/")
    argv = ["gsm8k", "--base-url", url, "--model", model, "--model-key", model_key, "--parallel", parallel or "tp8",
            "--json", str(tmp_path / "gsm8k.json")]
    if os.environ.get("FP4MOE_GSM8K_DATA"):
        argv += ["--data-dir", os.environ["FP4MOE_GSM8K_DATA"]]
    rc = main(argv)
    assert rc == 0, f"fp4moe-gate gsm8k exited {rc} (1 = below threshold, 2 = could not run); see {tmp_path}"
