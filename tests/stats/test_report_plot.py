"""The compare's plot, read back from the figure itself (the PNG is a rendering of it): one row
per benchmark in order, ratio and interval as drawn, red for regressed, green for improved,
the lines at 1 and at the threshold, the labels; a PNG written whole, nothing to plot refused."""

import importlib.util

import pytest

from fp4moe.stats import report
from fp4moe.stats.compare import IMPROVED, REGRESSED, UNCHANGED, Comparison

# matplotlib is imported by the tests, not at collection (~0.4 s of every pytest-xdist worker's
# start, paid where no test of this file runs)
pytestmark = pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None,
                                reason="matplotlib is not installed (the plot extra)")


def to_rgba(c):
    from matplotlib.colors import to_rgba

    return to_rgba(c)


def _cmp(name, verdict, ratio, lo, hi, threshold=0.05):
    return Comparison(name=name, n_base=10, n_head=10, base_median=1.0, head_median=ratio, median_ratio=ratio,
                      ratio=ratio, ci_low=lo, ci_high=hi, confidence=0.98, p_slower=0.5, p_faster=0.5,
                      threshold=threshold, alpha=0.01, verdict=verdict)


@pytest.fixture
def figure(monkeypatch):
    import matplotlib.pyplot as plt

    kept = {}
    real_close = plt.close

    def close(fig=None):
        kept["fig"] = fig
        real_close(fig)

    monkeypatch.setattr(plt, "close", close)
    return kept


def test_plot_rows_colours_lines_and_labels(tmp_path, figure):
    rows = [_cmp("slow", REGRESSED, 1.2, 1.1, 1.3, threshold=0.08), _cmp("fast", IMPROVED, 0.8, 0.7, 0.9),
            _cmp("same", UNCHANGED, 1.0, 0.95, 1.06)]
    out = report.plot_ratios(rows, tmp_path / "r.png", title="T")
    assert out == tmp_path / "r.png"
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.png"]  # no temporary file left
    fig = figure["fig"]
    (ax,) = fig.axes
    assert ax.get_title() == "T" and ax.get_xlabel() == "time ratio head/base (>1 = slower)"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["slow", "fast", "same"]
    assert list(ax.get_yticks()) == [0, 1, 2] and ax.yaxis_inverted()
    points = [ln for ln in ax.lines if ln.get_marker() == "o"]
    assert [(ln.get_xdata()[0], ln.get_ydata()[0]) for ln in points] == [(1.2, 0), (0.8, 1), (1.0, 2)]
    assert [to_rgba(ln.get_color()) for ln in points] == [to_rgba(c) for c in ("tab:red", "tab:green", "tab:gray")]
    bars = [c for c in ax.collections if len(c.get_segments()) == 1]
    spans = sorted((round(float(s[0][0][0]), 6), round(float(s[0][1][0]), 6), round(float(s[0][0][1]), 6))
                   for s in (b.get_segments() for b in bars))
    assert spans == [(0.7, 0.9, 1.0), (0.95, 1.06, 2.0), (1.1, 1.3, 0.0)]
    vlines = [ln for ln in ax.lines if ln.get_marker() in (None, "None", "") and len(set(ln.get_xdata())) == 1]
    assert sorted(float(ln.get_xdata()[0]) for ln in vlines) == [1.0, 1.08]  # the first row's threshold
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["threshold +8%"]
    assert fig.get_size_inches()[1] == pytest.approx(1.0 + 0.35 * 3)


def test_plot_default_title_and_nothing_to_plot(tmp_path, figure):
    report.plot_ratios([_cmp("a", UNCHANGED, 1.0, 0.9, 1.1)], tmp_path / "p.png")
    assert figure["fig"].axes[0].get_title() == "head / base (Hodges-Lehmann, interval)"
    with pytest.raises(ValueError, match=r"^plot_ratios: no results to plot$"):
        report.plot_ratios([], tmp_path / "q.png")
    assert not (tmp_path / "q.png").exists()


#: the plot's look, as a CI summary shows it: 8 inches at 110 dpi (880 px: the width a job
#: summary shows unscaled), the unity line thin solid black, the threshold line equally thin but
#: red and dashed (never mistaken for it), 3-point caps on the intervals, small labels so that
#: dozens of benchmark names fit, the legend in the corner away from the rows' names
STYLE = {"width_in": 8, "dpi": 110, "line_width": 0.8, "cap_px_at_110dpi": 2 * 3, "tick_font": 7,
         "title_font": 9, "legend_font": 7, "legend_loc": "lower right"}


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[12:16] == b"IHDR"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_plot_style_as_a_summary_shows_it(tmp_path, figure):
    from matplotlib.legend import Legend

    rows = [_cmp(f"b{i}", UNCHANGED, 1.0, 0.9, 1.1) for i in range(4)]
    out = report.plot_ratios(rows, tmp_path / "s.png")
    height_in = 1.0 + 0.35 * len(rows)
    assert _png_size(out.read_bytes()) == (STYLE["width_in"] * STYLE["dpi"], round(height_in * STYLE["dpi"]))
    fig = figure["fig"]
    assert tuple(fig.get_size_inches()) == pytest.approx((STYLE["width_in"], height_in))
    (ax,) = fig.axes
    vlines = sorted((ln for ln in ax.lines if ln.get_marker() in (None, "None", "") and len(set(ln.get_xdata())) == 1),
                    key=lambda ln: float(ln.get_xdata()[0]))
    unity, threshold = vlines
    assert to_rgba(unity.get_color()) == to_rgba("black") and unity.get_linestyle() == "-"
    assert to_rgba(threshold.get_color()) == to_rgba("tab:red") and threshold.get_linestyle() == "--"
    assert unity.get_linewidth() == threshold.get_linewidth() == STYLE["line_width"]
    caps = [ln for ln in ax.lines if ln.get_marker() == "|"]
    assert len(caps) == 2 * len(rows) and {ln.get_markersize() for ln in caps} == {STYLE["cap_px_at_110dpi"]}
    assert {t.get_fontsize() for t in ax.get_yticklabels()} == {STYLE["tick_font"]}
    assert ax.title.get_fontsize() == STYLE["title_font"]
    legend = ax.get_legend()
    assert {t.get_fontsize() for t in legend.get_texts()} == {STYLE["legend_font"]}
    assert legend._loc == Legend.codes[STYLE["legend_loc"]]
