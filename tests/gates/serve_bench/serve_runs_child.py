"""Child program of ``test_serve_bench.py``'s timed runs (started by path, never imported).

``python serve_runs_child.py SCENARIOS``: each scenario ``{"name", "base": Profile kwargs, "head":
Profile kwargs, "twin": bool, "argv": [...]}`` starts two loopback streaming servers (``twin``:
the head is ``base.twin(...)``, one process-wide clock for both) and runs ``fp4moe-gate
serve-bench --model stream-replay ARGV --base-url B --head-url H`` in this process, stderr
captured; sockets to anything but loopback refused. ``{tmp}`` in ARGV is a scratch folder. One
record: per scenario the exit code, stderr, the JSON result, the markdown report and the
requests each server answered. The timed runs (~2.5 s of streaming) then run on the second core
while the CPU tier runs on the first (tests/conftest.py, background children).
"""

import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path

from fp4moe.infra import runner

write_record = runner.record_writer()

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/: the shared network guard
import loopback_guard  # noqa: E402

loopback_guard.install()

from fp4moe.commands.main import main  # noqa: E402
from fp4moe.completions.stream_server import Profile, StreamServer  # noqa: E402

results = {}
with tempfile.TemporaryDirectory(prefix="fp4moe-serve-runs-") as tmp:
    for sc in json.loads(sys.argv[1]):
        where = Path(tmp) / sc["name"]
        where.mkdir()
        b = StreamServer(Profile(**sc["base"]))
        h = b.twin(Profile(**sc["head"])) if sc["twin"] else StreamServer(Profile(**sc["head"]))
        err = io.StringIO()
        with contextlib.ExitStack() as servers:
            servers.enter_context(b)  # a twin is served by its parent's thread
            if not sc["twin"]:
                servers.enter_context(h)
            argv = ["serve-bench", "--model", "stream-replay", "--base-url", b.base_url, "--head-url", h.base_url,
                    *[a.replace("{tmp}", str(where)) for a in sc["argv"]]]
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                rc = main(argv)
            served = [b.requests, h.requests]
        js, md = where / "serve.json", where / "s.md"
        results[sc["name"]] = {"rc": rc, "err": err.getvalue(), "served": served,
                               "json": json.loads(js.read_text()) if js.exists() else None,
                               "markdown": md.read_text() if md.exists() else None}
write_record(results)
