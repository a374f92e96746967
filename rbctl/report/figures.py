"""Drawing the report's figures (matplotlib, headless; no statistics computed here).

Readable with many arms: small multiples. One panel per baseline (its base and + budget arms in
that baseline's hue, solid vs dashed) and one panel per baseline that has entropy-bonus arms
(those arms against the baseline + budget). Every arm has one style (`arm_styles`) in every figure;
legends sit below each panel, outside the data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from rbctl.store.atomic import atomic_output

# matplotlib's tab10 for baselines; further hues for entropy-bonus arms.
BASELINE_PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#17becf", "#7f7f7f", "#bcbd22")
OTHER_PALETTE = ("#ff7f0e", "#e377c2", "#17becf", "#bcbd22", "#8c564b", "#aec7e8", "#ffbb78", "#98df8a")
X_LABEL = "step (optimizer updates)"
BAND = "mean over seeds; band: 95% t-interval over seeds"


@dataclass(frozen=True)
class Style:
    color: str
    linestyle: str


def arm_styles(info: dict[str, tuple[str, str]]) -> dict[str, Style]:
    """One style per arm from ``info[arm] = (baseline, variant)``: a hue per baseline (base solid,
    budget dashed), a hue of its own per other arm (dash-dot). Independent of input order."""
    baselines = sorted({b for b, _ in info.values()})
    hue = {b: BASELINE_PALETTE[i % len(BASELINE_PALETTE)] for i, b in enumerate(baselines)}
    out, other = {}, 0
    for arm in sorted(info):
        baseline, variant = info[arm]
        if variant in ("base", "budget"):
            out[arm] = Style(hue[baseline], "-" if variant == "base" else "--")
        else:
            out[arm] = Style(OTHER_PALETTE[other % len(OTHER_PALETTE)], "-.")
            other += 1
    return out


def panel_groups(info: dict[str, tuple[str, str]]) -> list[tuple[str, list[str]]]:
    """(panel title, arms): per baseline its base and budget arms; per baseline with entropy-bonus
    arms, those arms and its budget arms; arms of any other variant share a last panel."""
    groups, placed = [], set()
    for baseline in sorted({b for b, _ in info.values()}):
        mine = {a: v for a, (b, v) in info.items() if b == baseline}
        core = sorted(a for a, v in mine.items() if v in ("base", "budget"))
        if core:
            groups.append((f"{baseline}: base (solid) vs + budget (dashed)", core))
        budgets = sorted(a for a, v in mine.items() if v == "budget")
        ent = sorted(a for a, v in mine.items() if v in ("entropy_static", "entropy_adaptive"))
        if ent:
            groups.append((f"{baseline}: entropy bonus vs + budget", budgets + ent))
        others = sorted(a for a, v in mine.items() if v not in ("base", "budget", "entropy_static", "entropy_adaptive"))
        if others:
            groups.append((f"{baseline}: other arms vs + budget", budgets + others))
        placed |= set(core) | set(ent) | set(others)
    rest = sorted(set(info) - placed)
    if rest:
        groups.append(("other arms", rest))
    return groups


def _panels(n: int, title: str):
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(4.6 * cols, 4.0 * rows + 0.4), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in axes[n:]:
        ax.set_visible(False)
    for ax in axes[:n]:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=11)
    return fig, list(axes[:n])


def _legend(ax) -> None:
    labels = ax.get_legend_handles_labels()[1]
    if labels:
        ncol = 1 if max(map(len, labels)) > 24 else 2
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=ncol, frameon=False)


def save_figure(fig, figures_dir: Path, slug: str) -> Path:
    """Write ``slug.png`` and ``slug.svg`` (no timestamp: reproducible); return the PNG's path."""
    png = Path(figures_dir) / f"{slug}.png"
    with atomic_output(png) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    with atomic_output(Path(figures_dir) / f"{slug}.svg") as tmp:
        fig.savefig(tmp, format="svg", metadata={"Date": None})
    return png


def plot_trajectory(bands: dict[str, pd.DataFrame], styles: dict[str, Style], groups: list[tuple[str, list[str]]],
                    title: str, ylabel: str, hline: tuple[float, str] | None = None):
    """Small multiples of per-step mean lines with 95% t-bands over seeds; ``bands[arm]`` from
    `rbctl.report.series.band`. ``hline = (value, label)`` draws a horizontal reference (the ceiling)."""
    groups = [(t, [a for a in arms if a in bands]) for t, arms in groups]
    groups = [g for g in groups if g[1]] or [("", [])]
    fig, axes = _panels(len(groups), f"{title}\n{BAND}")
    for ax, (panel, arms) in zip(axes, groups):
        for arm in arms:
            b, st = bands[arm], styles[arm]
            seeds = int(b["seeds"].max())
            ax.plot(b.index, b["mean"], color=st.color, linestyle=st.linestyle,
                    label=f"{arm} ({seeds} seed{'s' * (seeds != 1)})", marker="o" if len(b) < 3 else None,
                    markersize=3)
            ax.fill_between(b.index, b["lo"], b["hi"], color=st.color, alpha=0.15, linewidth=0)
        if hline is not None:
            ax.axhline(hline[0], color="black", linestyle=":", linewidth=1, label=hline[1])
        ax.set_title(panel, fontsize=9)
        ax.set_xlabel(X_LABEL)
        ax.set_ylabel(ylabel)
        _legend(ax)
    return fig


def plot_pass_at_k(curves: dict[str, pd.DataFrame], styles: dict[str, Style], groups: list[tuple[str, list[str]]],
                   benchmark: str):
    """pass@k against k per arm (k = 1 … n) with its 95% t-band over seeds; ``curves[arm]`` has
    columns k, value, lo, hi."""
    groups = [(t, [a for a in arms if a in curves]) for t, arms in groups]
    groups = [g for g in groups if g[1]] or [("", [])]
    fig, axes = _panels(len(groups), f"pass@k on {benchmark} (final evaluation)\nmean over seeds; band: 95% "
                                     "t-interval over seeds")
    for ax, (panel, arms) in zip(axes, groups):
        kmax = 1
        for arm in arms:
            c, st = curves[arm], styles[arm]
            ax.plot(c["k"], c["value"], color=st.color, linestyle=st.linestyle, marker="o", markersize=3, label=arm)
            ax.fill_between(c["k"], c["lo"], c["hi"], color=st.color, alpha=0.15, linewidth=0)
            kmax = max(kmax, int(c["k"].max()))
        if kmax >= 8:
            ax.set_xscale("log", base=2)
        ax.set_title(panel, fontsize=9)
        ax.set_xlabel("k (samples per problem)")
        ax.set_ylabel("pass@k (fraction of problems solved)")
        _legend(ax)
    return fig


def plot_scatter(points: pd.DataFrame, styles: dict[str, Style], x: str, y: str, xlabel: str, ylabel: str,
                 title: str):
    """One point per run (``points`` has columns arm, ``x``, ``y``), coloured by arm."""
    fig, (ax,) = _panels(1, title)
    for arm, g in points.groupby("arm", sort=True):
        ax.scatter(g[x], g[y], color=styles[arm].color, label=arm, s=22,
                   marker="o" if styles[arm].linestyle == "-" else ("s" if styles[arm].linestyle == "--" else "^"))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    _legend(ax)
    return fig
