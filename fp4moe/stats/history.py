"""A history of perf verdicts, and the change points in it (Apache Otava).

Every ``perf ab`` and ``perf compare`` verdict can append one row per benchmark to a file the
user names (``--history FILE``): JSON lines, or CSV when the name ends in ``.csv``. A row is one
``os.write`` of one whole line to a descriptor opened with ``O_APPEND``: concurrent writers
(two CI jobs, one file) interleave whole lines, never parts of them (a CSV header may then be
written twice; the reader skips repeated headers).

``perf history FILE`` groups the rows by (benchmark, device) in file order and runs Apache
Otava's change-point detection (``otava.analysis.compute_change_points``: E-divisive split in
sliding windows, then merge by a two-sided t-test at ``max_pvalue``; Fleming et al., ICPE 2023)
on the head's median seconds of each row: the revision's level, measured afresh each time, so a
drift made of steps each below any per-PR threshold (five +1.5% steps under a 5% gate) is one
change of +7.7% there. A change point is reported with the head revision of the first row after
it and its size (mean after / mean before - 1). apache-otava is an optional extra
(``pip install 'fp4moe-gate[otava]'``), imported only here.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import time
from pathlib import Path

COLUMNS = ("time", "gate", "benchmark", "device", "clocks", "base_rev", "head_rev", "ratio", "ci_low", "ci_high",
           "verdict", "base_median", "head_median", "threshold", "rounds")
#: the largest history file read (a nightly history of 30 benchmarks for 10 years is ~30 MB)
MAX_HISTORY_BYTES = 256 * 1024 * 1024
NUMERIC = ("ratio", "ci_low", "ci_high", "base_median", "head_median", "threshold")


def _line(path: Path, row: dict) -> bytes:
    if path.suffix.lower() == ".csv":
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerow(["" if row.get(c) is None else row.get(c) for c in COLUMNS])
        return buf.getvalue().encode()
    return (json.dumps({c: row.get(c) for c in COLUMNS}, default=str) + "\n").encode()


def append_rows(path, rows: list[dict]) -> None:
    """Append ``rows`` to ``path``, each one line in one ``os.write`` with ``O_APPEND``; a CSV
    file that is empty gets the header first. OSError names the path."""
    path = Path(path)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        if path.suffix.lower() == ".csv" and os.fstat(fd).st_size == 0:
            os.write(fd, (",".join(COLUMNS) + "\n").encode())
        for row in rows:
            data = _line(path, {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **row})
            if os.write(fd, data) != len(data):  # a regular file takes it whole, or raises (ENOSPC)
                raise OSError(f"{path}: short write of a history row")
    finally:
        os.close(fd)


def read_rows(path) -> list[dict]:
    """Rows of a history file; ValueError naming ``path:line`` on anything unreadable."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: not a file")
    if path.stat().st_size > MAX_HISTORY_BYTES:
        raise ValueError(f"{path}: larger than {MAX_HISTORY_BYTES >> 20} MiB")
    text = path.read_text(encoding="utf-8", errors="replace")
    rows = []
    if path.suffix.lower() == ".csv":
        for n, rec in enumerate(csv.reader(io.StringIO(text)), 1):
            if not rec or rec == list(COLUMNS):
                continue
            if len(rec) != len(COLUMNS):
                raise ValueError(f"{path}:{n}: {len(rec)} fields, expected {len(COLUMNS)} ({','.join(COLUMNS)})")
            rows.append(_typed(path, n, dict(zip(COLUMNS, rec))))
    else:
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not JSON ({e.msg})") from None
            if not isinstance(rec, dict):
                raise ValueError(f"{path}:{n}: not a JSON object")
            rows.append(_typed(path, n, rec))
    return rows


def _typed(path, n, rec: dict) -> dict:
    for key in ("benchmark", "head_rev", "head_median"):
        if rec.get(key) in (None, ""):
            raise ValueError(f"{path}:{n}: no {key}")
    out = dict(rec)
    for key in NUMERIC:
        v = rec.get(key)
        if v in (None, ""):
            out[key] = None
            continue
        try:
            out[key] = float(v)
        except (TypeError, ValueError):
            raise ValueError(f"{path}:{n}: {key} {v!r} is not a number") from None
    if not (out["head_median"] > 0 and math.isfinite(out["head_median"])):
        raise ValueError(f"{path}:{n}: head_median {out['head_median']!r} is not a positive time")
    return out


def series(rows: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """Rows by (benchmark, device), in file order."""
    out: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        out.setdefault((str(r["benchmark"]), str(r.get("device") or "")), []).append(r)
    return out


def otava_analysis():
    """``otava.analysis``; ImportError naming the extra when apache-otava is absent."""
    try:
        from otava import analysis
    except ImportError as e:
        raise ImportError(f"apache-otava is not installed (pip install 'fp4moe-gate[otava]'): {e}") from None
    return analysis


#: Otava's settings: its defaults for the p-value and window; a change smaller than 1% is merged
#: away (on a 300-night A/A series at 0.3% noise, p < 0.001 alone found a +0.7%/-0.7% pair)
MAX_PVALUE, WINDOW, MIN_MAGNITUDE = 0.001, 50, 0.01


def change_points(rows: list[dict], *, max_pvalue: float = MAX_PVALUE, window: int = WINDOW,
                  min_magnitude: float = MIN_MAGNITUDE) -> list[dict]:
    """Every change point of every (benchmark, device) series of head medians: benchmark,
    device, the index and head revision where the new level starts, the previous row's head
    revision, means before/after, size (after / before - 1), p-value."""
    analysis = otava_analysis()
    found = []
    for (bench, device), rs in series(rows).items():
        values = [r["head_median"] for r in rs]
        if len(values) < 3:
            continue
        cps, _ = analysis.compute_change_points(values, window_len=window, max_pvalue=max_pvalue, min_magnitude=min_magnitude)
        for cp in cps:
            st = cp.stats
            found.append({"benchmark": bench, "device": device, "index": int(cp.index), "rev": rs[cp.index]["head_rev"],
                          "after_rev": rs[cp.index - 1]["head_rev"], "mean_before": float(st.mean_1),
                          "mean_after": float(st.mean_2), "size": float(st.forward_rel_change()),
                          "pvalue": float(st.pvalue)})
    return found
