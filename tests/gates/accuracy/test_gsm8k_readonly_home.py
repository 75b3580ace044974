"""``fp4moe-gate gsm8k`` on a runner whose HOME and XDG_CACHE_HOME cannot be written.

Regression: with both unwritable the gate ended "lm-eval could not complete the run" (the datasets
cache under ``$XDG_CACHE_HOME/huggingface``). The run's cache is its own temporary folder now;
the whole gate, in a child process with ``HOME`` a missing folder and ``XDG_CACHE_HOME`` under
``/proc`` (nothing can be made there), scores the replay server's scripted answers. One child
with lm-eval (~5-10 s): slow.
"""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

from fp4moe.completions.data import MINI_DATA_DIR
from fp4moe.completions.replay_server import ReplayServer, load_records, seeded_script
from fp4moe.infra.paths import REPO_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.reliability,
              pytest.mark.skipif(importlib.util.find_spec("lm_eval") is None, reason="lm-eval is not installed")]


def test_the_gate_scores_with_home_and_cache_unwritable(tmp_path, gate_child, loopback_only):
    records = load_records(MINI_DATA_DIR / "test.jsonl")
    kinds = ["correct" if i % 4 else "wrong" for i in range(len(records))]  # 30 of 40 right: 0.75
    env = dict(os.environ, HOME="/nonexistent-ro", XDG_CACHE_HOME="/proc/ro", HF_HUB_OFFLINE="1",
               HF_DATASETS_OFFLINE="1", PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    out = tmp_path / "gsm8k.json"
    with ReplayServer(seeded_script(records, kinds)) as srv:
        r = gate_child("gsm8k", "--base-url", srv.base_url, "--model", "replay-gsm8k", "--data-dir", MINI_DATA_DIR,
                       "--threshold", "0.7", "--json", out, env=env, timeout_s=300)
    assert r.rc == 0, r.err[-2000:]
    rec = json.loads(out.read_text())
    assert rec["status"] == "pass" and rec["scores"]["flexible-extract"]["exact_match"] == 0.75, rec["scores"]
