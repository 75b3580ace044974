"""Child program of ``test_gsm8k_gate.py``'s background gate runs (started by path, never imported).

``python gsm8k_runs_child.py RUNS KINDS``: for each named run ``[server mode, extra argv]`` of
RUNS, a replay server scripted by KINDS (one kind per question) and ``fp4moe-gate gsm8k`` on it,
in this process, stdout and stderr captured as the tests' capsys would; sockets to anything but
loopback refused. One record: per run the exit code, stdout, stderr, the JSON result and the
samples file; and the completion cap applied as lm-eval parses (``_completion_cap``). lm-eval (~1 s to import, ~0.5 s a run) then runs on the second core while the CPU
tier runs on the first (tests/conftest.py, background children).
"""

import contextlib
import io
import json
import os
import sys
import tempfile
from pathlib import Path

from fp4moe.infra import runner

write_record = runner.record_writer()

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/: the shared network guard
import loopback_guard  # noqa: E402

loopback_guard.install()
os.environ.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")

from fp4moe.commands.main import main  # noqa: E402
from fp4moe.completions.data import MINI_DATA_DIR  # noqa: E402
from fp4moe.completions.replay_server import ReplayServer, load_records, seeded_script  # noqa: E402

runs, kinds = json.loads(sys.argv[1]), json.loads(sys.argv[2])
records = load_records(MINI_DATA_DIR / "test.jsonl")
results = {}
with tempfile.TemporaryDirectory(prefix="fp4moe-gsm8k-runs-") as tmp:
    for name, (mode, extra) in runs.items():
        where = Path(tmp) / name
        where.mkdir()
        res, out, err = where / "gsm8k.json", io.StringIO(), io.StringIO()
        with ReplayServer(seeded_script(records, kinds), mode=mode, sleep_s=3.0) as srv:
            argv = ["gsm8k", "--base-url", srv.base_url, "--model", "replay-gsm8k", "--data-dir", str(MINI_DATA_DIR),
                    "--concurrency", "8", "--json", str(res), *extra]
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                rc = main(argv)
        samples = where / "gsm8k.samples.jsonl"
        results[name] = {
            "rc": rc, "out": out.getvalue(), "err": err.getvalue(),
            "json": json.loads(res.read_text()) if res.exists() else None,
            "samples": [json.loads(x) for x in samples.read_text().splitlines()] if samples.exists() else None,
        }
# lm-eval's own parser with the gate's completion cap (test_completion_cap_is_applied_as_lm_eval_parses)
from fp4moe.gates.accuracy import gsm8k  # noqa: E402

lm = gsm8k.capped_completions_model(4096, model="m", base_url="http://127.0.0.1:9/v1/completions",
                                    tokenizer_backend=None, tokenized_requests=False)
texts = lm.parse_generations(outputs={"choices": [{"index": 0, "text": "7" * 5_000_000}, {"index": 1, "text": "#### 3"}]})
results["_completion_cap"] = {"lengths": [len(t) for t in texts], "over_cap": lm.over_cap, "longest": lm.longest}
write_record(results)
