"""Every checkout path the user's docs name in backticks exists: a moved or deleted file fails
here, not in a reader's shell. Checked: README.md, docs/README.md, docs/operating.md,
docs/architecture.md and the gate docs this check was written with (docs/aiter.md, sglang.md and
perf-gate.md join it once their paths to lab/ are updated); ``docs/evidence/`` is a record of
what ran then, under the paths of then, and is not checked."""

from __future__ import annotations

import re

import pytest

from fp4moe.infra.paths import CHECKOUT

DOCS = ("README.md", "docs/README.md", "docs/operating.md", "docs/architecture.md", "docs/footprint.md",
        "docs/gsm8k.md", "docs/reference.md", "docs/serving-perf.md", "lab/README.md")
#: a path into the checkout as a doc writes it, in backticks (a command line's first path included)
PATH = re.compile(r"`(?:[^`\s]+\s+)*?((?:fp4moe|tests|docs|lab|scripts|ci|\.ci|fixtures|evidence)/[\w./*-]*)")
#: paths that stand for one the reader makes (docs/architecture.md's "add a gate")
PLACEHOLDER = re.compile(r"my_gate|/NAME(?:/|\.|$)")


def named_paths(text: str) -> list[str]:
    return sorted({m.group(1).rstrip(".").split("::")[0] for m in PATH.finditer(text)} - {""})


def _exists(doc: str, path: str) -> bool:
    roots = [CHECKOUT, (CHECKOUT / doc).parent, CHECKOUT / "docs"]
    return any((r / path).exists() or (("*" in path) and any(r.glob(path))) for r in roots)


@pytest.mark.parametrize("doc", DOCS)
def test_every_path_a_doc_names_exists(doc):
    if CHECKOUT is None or not (CHECKOUT / doc).is_file():
        pytest.skip(f"{doc}: not in this checkout (an installed package has no docs)")
    named = [p for p in named_paths((CHECKOUT / doc).read_text()) if not PLACEHOLDER.search(p)]
    assert named, f"{doc} names no path: the check checks nothing"
    missing = [p for p in named if not _exists(doc, p)]
    assert not missing, f"{doc} names paths that do not exist: {missing}"


def test_the_scan_sees_paths_and_a_missing_one_fails():
    if CHECKOUT is None:
        pytest.skip("an installed package: no checkout to look paths up in")
    text = "run `bash lab/h200_tier.sh memory` or `python3 -m pytest tests/infra/test_doc_paths.py::x`; see `docs/nope.md`."
    assert named_paths(text) == ["docs/nope.md", "lab/h200_tier.sh", "tests/infra/test_doc_paths.py"]
    assert not _exists("README.md", "docs/nope.md") and _exists("README.md", "lab/h200_tier.sh")
