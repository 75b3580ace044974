"""The compare's markdown: time units at their boundaries, inert text, one row per benchmark
with its verdict word, the unmatched benchmarks and the notes."""

import math

import pytest

from fp4moe.stats.compare import IMPROVED, REGRESSED, UNCHANGED, Comparison
from fp4moe.stats.report import _time, markdown_table, md_text


@pytest.mark.parametrize("seconds, text", [
    (2.5, "2.500 s"), (1.0, "1.000 s"), (math.nextafter(1.0, 0), "1000.000 ms"), (1e-3, "1.000 ms"),
    (0.25e-3, "250.000 us"), (1e-6, "1.000 us"), (math.nextafter(1e-6, 0), "1000.0 ns"), (5e-7, "500.0 ns"),
    (0.0, "0.0 ns"),
])
def test_time_units(seconds, text):
    assert _time(seconds) == text


def test_md_text_makes_every_markup_character_inert():
    assert md_text("a|b<c>&`d`\\e") == "a&#124;b&lt;c&gt;&amp;&#96;d&#96;&#92;e"
    assert md_text("two\nlines\t and  spaces") == "two lines and spaces"
    assert md_text(7) == "7"


def _cmp(name, verdict, ratio=1.0, notes=()):
    return Comparison(name=name, n_base=10, n_head=10, base_median=2e-3, head_median=3e-6, median_ratio=ratio,
                      ratio=ratio, ci_low=ratio * 0.9, ci_high=ratio * 1.1, confidence=0.98, p_slower=0.0123,
                      p_faster=0.5, threshold=0.05, alpha=0.01, verdict=verdict, notes=list(notes))


def test_table_rows_marks_and_header():
    md = markdown_table([_cmp("moe|a", REGRESSED, 1.2, ["slow"]), _cmp("b", IMPROVED, 0.5), _cmp("c", UNCHANGED)],
                        unmatched={"head": ["new<x>"], "base": ["gone"]}, notes=["one <note>"])
    lines = md.splitlines()
    assert lines[0] == ("Threshold 5.0%, one-sided alpha 0.01, interval 98% "
                        "(Hodges-Lehmann ratio head/base; Mann-Whitney U).")
    assert lines[1] == ""
    assert lines[2] == "| benchmark | base median | head median | ratio | CI | p (slower) | verdict |"
    assert lines[3] == "|---|---:|---:|---:|---|---:|---|"
    assert lines[4] == "| moe&#124;a | 2.000 ms | 3.000 us | 1.200 | [1.080, 1.320] | 0.012 | **REGRESSED** |"
    assert lines[5] == "| b | 2.000 ms | 3.000 us | 0.500 | [0.450, 0.550] | 0.012 | improved |"
    assert lines[6] == "| c | 2.000 ms | 3.000 us | 1.000 | [0.900, 1.100] | 0.012 | unchanged |"
    assert lines[7] == "| new&lt;x&gt; | | | | | | only in head |"
    assert lines[8] == "| gone | | | | | | only in base |"
    assert lines[9:] == ["", "Notes:", "- moe&#124;a: slow", "- one &lt;note&gt;"]
    assert md.endswith("\n") and not md.endswith("\n\n")


def test_table_without_notes_has_no_notes_block_and_empty_input_says_so():
    md = markdown_table([_cmp("c", UNCHANGED)])
    assert "Notes:" not in md and md.count("\n") == 5
    assert markdown_table([]) == "_no benchmarks compared_\n"
