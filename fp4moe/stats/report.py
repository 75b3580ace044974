"""The compare's human outputs: a markdown table for the CI summary and a ratio-with-interval plot."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Sequence

from fp4moe.infra.files import atomic_write_bytes
from fp4moe.stats.compare import IMPROVED, REGRESSED, Comparison


def _time(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3f} {unit}"
    return f"{seconds / 1e-9:.1f} ns"


_MARK = {REGRESSED: "**REGRESSED**", IMPROVED: "improved"}
_MD_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "|": "&#124;", "`": "&#96;", "\\": "&#92;"}


def md_text(text) -> str:
    """Untrusted text (a benchmark name, a note) as inert markdown: HTML and markdown
    characters become entities, line breaks spaces. A name such as ``<!--`` must never open
    an HTML comment that hides the rows after it (a REGRESSED row included)."""
    return "".join(_MD_ESCAPES.get(c, c) for c in " ".join(str(text).split()))


def markdown_table(results: Sequence[Comparison], *, unmatched: dict[str, list[str]] | None = None, notes: Sequence[str] = ()) -> str:
    """Benchmark, medians, HL ratio with its interval, p-value (one-sided, slower), verdict."""
    if not results:
        return "_no benchmarks compared_\n"
    r0 = results[0]
    lines = [
        f"Threshold {r0.threshold:.1%}, one-sided alpha {r0.alpha:g}, interval {r0.confidence:.0%} "
        "(Hodges-Lehmann ratio head/base; Mann-Whitney U).",
        "",
        "| benchmark | base median | head median | ratio | CI | p (slower) | verdict |",
        "|---|---:|---:|---:|---|---:|---|",
    ]
    for r in results:
        lines.append(
            f"| {md_text(r.name)} | {_time(r.base_median)} | {_time(r.head_median)} | {r.ratio:.3f} | "
            f"[{r.ci_low:.3f}, {r.ci_high:.3f}] | {r.p_slower:.2g} | {_MARK.get(r.verdict, r.verdict)} |"
        )
    for side, names in (unmatched or {}).items():
        for n in names:
            lines.append(f"| {md_text(n)} | | | | | | only in {side} |")
    extra = [f"- {md_text(r.name)}: {md_text(x)}" for r in results for x in r.notes] + [f"- {md_text(n)}" for n in notes]
    if extra:
        lines += ["", "Notes:", *extra]
    return "\n".join(lines) + "\n"


def plot_ratios(results: Sequence[Comparison], path, *, title: str = "head / base (Hodges-Lehmann, interval)") -> Path:
    """One row per benchmark: ratio with its interval as a horizontal error bar; lines at 1 and
    at the regression threshold. Writes a PNG with the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    if not results:
        raise ValueError("plot_ratios: no results to plot")
    names = [r.name for r in results]
    y = list(range(len(results)))
    ratio = [r.ratio for r in results]
    err = [[r.ratio - r.ci_low for r in results], [r.ci_high - r.ratio for r in results]]
    colors = ["tab:red" if r.verdict == REGRESSED else "tab:green" if r.verdict == IMPROVED else "tab:gray" for r in results]
    fig, ax = plt.subplots(figsize=(8, 1.0 + 0.35 * len(results)))
    for i in y:  # one call per row: errorbar takes a single colour
        ax.errorbar([ratio[i]], [i], xerr=[[err[0][i]], [err[1][i]]], fmt="o", color=colors[i], capsize=3)
    ax.axvline(1.0, color="black", lw=0.8)
    ax.axvline(1.0 + results[0].threshold, color="tab:red", ls="--", lw=0.8, label=f"threshold +{results[0].threshold:.0%}")
    ax.set_yticks(y)
    ax.set_yticklabels(names, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time ratio head/base (>1 = slower)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    out = Path(path)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(out, buf.getvalue())  # never a half-written PNG beside the verdict
    return out
