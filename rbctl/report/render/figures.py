"""Drawing the report's figures (matplotlib, headless; no statistics computed here).

One colour per arm from the Okabe–Ito palette (colour-blind safe; Okabe & Ito 2008), the same in
every figure of a report (`arm_styles`); past eight arms the colours repeat with another line style
and marker. Small multiples keep many arms readable: one panel per baseline (its base and + budget
arms), one per baseline with entropy-bonus arms (those against the baseline + budget). Legends are
built from the drawn lines, below each panel. Bands are clipped to the metric's range. PNGs are
1600 px wide (10 in at 160 dpi) with fonts of at least 11 pt, plus an SVG of each.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import wraps
from pathlib import Path

import numpy as np
import pandas as pd

from rbctl.algo.registry import is_entropy_bonus
from rbctl.store.atomic import atomic_output

# Okabe–Ito, ordered for contrast on white (yellow last: faint on white).
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")
LINESTYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
WIDTH_IN, DPI = 10.0, 160  # 1600 px wide
RC = {"font.size": 11, "axes.titlesize": 12, "axes.labelsize": 11, "xtick.labelsize": 11, "ytick.labelsize": 11,
      "legend.fontsize": 11, "figure.titlesize": 13, "lines.linewidth": 1.8}
X_LABEL = "step (rollout batches)"  # a step is one rollout batch, which may take several optimizer updates
BAND = "mean over units; band: 95% t-interval over units"


@dataclass(frozen=True)
class Style:
    color: str
    linestyle: str
    marker: str


def arm_styles(info: dict[str, tuple[str, str]]) -> dict[str, Style]:
    """One style per arm of ``info[arm] = (baseline, variant)``, in sorted arm order (independent of
    input order): arm i gets colour i of the palette, and line style and marker i // 8."""
    out = {}
    for i, arm in enumerate(sorted(info)):
        cycle = i // len(PALETTE)
        out[arm] = Style(PALETTE[i % len(PALETTE)], LINESTYLES[cycle % len(LINESTYLES)], MARKERS[cycle % len(MARKERS)])
    return out


def panel_groups(info: dict[str, tuple[str, str]]) -> list[tuple[str, list[str]]]:
    """(panel title, arms): per baseline its base and budget arms; per baseline with entropy-bonus
    arms, those arms and its budget arms; arms of any other variant share a last panel."""
    groups, placed = [], set()
    for baseline in sorted({b for b, _ in info.values()}):
        mine = {a: v for a, (b, v) in info.items() if b == baseline}
        core = sorted(a for a, v in mine.items() if v in ("base", "budget"))
        if core:
            groups.append((f"{baseline}: base vs + budget", core))
        budgets = sorted(a for a, v in mine.items() if v == "budget")
        ent = sorted(a for a, v in mine.items() if is_entropy_bonus(v))
        if ent:
            groups.append((f"{baseline}: entropy bonus vs + budget", budgets + ent))
        others = sorted(a for a, v in mine.items() if v not in ("base", "budget") and not is_entropy_bonus(v))
        if others:
            groups.append((f"{baseline}: other arms vs + budget", budgets + others))
        placed |= set(core) | set(ent) | set(others)
    rest = sorted(set(info) - placed)
    if rest:
        groups.append(("other arms", rest))
    return groups


def _styled(fn):
    """Draw inside the report's rc settings (fonts)."""

    @wraps(fn)
    def inner(*args, **kwargs):
        import matplotlib

        with matplotlib.rc_context(RC):
            return fn(*args, **kwargs)

    return inner


def _panels(n: int, title: str, height: float = 4.6, cols: int = 2, sharey: bool = False):
    from matplotlib.figure import Figure

    cols = min(n, cols)
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(WIDTH_IN, height * rows + 0.6), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False, sharey=sharey).ravel()
    for ax in axes[n:]:
        ax.set_visible(False)
    for ax in axes[:n]:
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    return fig, list(axes[:n])


def _legend(ax, ncol: int = 2, width: int = 18) -> None:
    """The panel's legend below it; one column when a label is longer than ``width`` characters (two
    columns of long labels run into the next panel)."""
    handles, labels = ax.get_legend_handles_labels()
    if labels:
        ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False, handlelength=3.0,
                  ncol=ncol if max(map(len, labels)) <= width else 1)


def _clip(values, limits):
    lo, hi = limits or (None, None)
    return np.clip(np.asarray(values, dtype=float), -np.inf if lo is None else lo, np.inf if hi is None else hi)


def save_figure(fig, figures_dir: Path, slug: str) -> Path:
    """Write ``slug.png`` (1600 px wide) and ``slug.svg`` (no timestamp: reproducible); return the PNG."""
    png = Path(figures_dir) / f"{slug}.png"
    with atomic_output(png) as tmp:
        fig.savefig(tmp, dpi=DPI, format="png")
    fig.set_layout_engine("none")  # keep the layout the PNG's draw computed: the SVG needs no second pass
    with atomic_output(Path(figures_dir) / f"{slug}.svg") as tmp:
        fig.savefig(tmp, format="svg", metadata={"Date": None})
    return png


def _line(ax, x, y, st: Style, label: str, markers: bool) -> None:
    ax.plot(x, y, color=st.color, linestyle=st.linestyle, marker=st.marker if markers else None, markersize=5,
            label=label)


@_styled
def plot_trajectory(bands: dict[str, pd.DataFrame], styles: dict[str, Style], groups: list[tuple[str, list[str]]],
                    title: str, ylabel: str, hline: tuple[float, str] | None = None,
                    limits: tuple[float | None, float | None] | None = None):
    """Small multiples of per-step mean lines with 95% t-bands over units (``bands[arm]`` from
    `rbctl.report.series.band`), bands clipped to ``limits`` (the metric's range). ``hline =
    (value, label)`` draws a horizontal reference (the ceiling)."""
    groups = [(t, [a for a in arms if a in bands]) for t, arms in groups]
    groups = [g for g in groups if g[1]] or [("", [])]
    fig, axes = _panels(len(groups), f"{title}\n{BAND}", sharey=True)
    for ax, (panel, arms) in zip(axes, groups):
        for arm in arms:
            b, st = bands[arm], styles[arm]
            _line(ax, b.index, b["mean"], st, f"{arm} (n = {int(b['seeds'].max())})", markers=len(b) <= 12)
            ax.fill_between(b.index, _clip(b["lo"], limits), _clip(b["hi"], limits), color=st.color, alpha=0.15,
                            linewidth=0)
        if hline is not None:
            ax.axhline(hline[0], color="black", linestyle=":", linewidth=1.2, label=hline[1])
        ax.set_title(panel)
        ax.set_xlabel(X_LABEL)
        ax.set_ylabel(ylabel)
        ax.yaxis.set_tick_params(labelleft=True)
        _legend(ax)
    return fig


@_styled
def plot_pass_at_k(curves: dict[str, pd.DataFrame], styles: dict[str, Style], groups: list[tuple[str, list[str]]],
                   benchmark: str):
    """pass@k against k per arm (k = 1 … n) with its 95% t-band over units clipped to [0, 1];
    ``curves[arm]`` has columns k, value, lo, hi."""
    from matplotlib.ticker import NullLocator

    groups = [(t, [a for a in arms if a in curves]) for t, arms in groups]
    groups = [g for g in groups if g[1]] or [("", [])]
    fig, axes = _panels(len(groups), f"pass@k on {benchmark} (final evaluation)\n{BAND}", sharey=True)
    for ax, (panel, arms) in zip(axes, groups):
        kmax = 1
        for arm in arms:
            c, st = curves[arm], styles[arm]
            _line(ax, c["k"], c["value"], st, arm, markers=True)
            ax.fill_between(c["k"], _clip(c["lo"], (0, 1)), _clip(c["hi"], (0, 1)), color=st.color, alpha=0.15,
                            linewidth=0)
            kmax = max(kmax, int(c["k"].max()))
        if kmax >= 8:
            ax.set_xscale("log", base=2)
            ticks = [k for k in (1, 2, 4, 8, 16, 32, 64, 128, 256) if k <= kmax]
            ax.set_xticks(ticks, [str(k) for k in ticks])
            ax.xaxis.set_minor_locator(NullLocator())
        ax.set_title(panel)
        ax.set_xlabel("k (samples per problem)")
        ax.set_ylabel("pass@k (fraction solved)")
        ax.yaxis.set_tick_params(labelleft=True)
        _legend(ax)
    return fig


@_styled
def plot_deltas(rows: list[dict], title: str):
    """The answer's figure: per comparison (one row each, top to bottom) every unit's Δ (points) as a
    dot, the mean Δ with its 95% t-interval as a bar, and 0 as a reference line. ``rows`` have keys
    label (a second line may carry the verdict), deltas (points), mean, lo, hi."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(WIDTH_IN, 1.4 + 0.85 * max(1, len(rows))), layout="constrained")
    ax = fig.subplots()
    rng = np.random.default_rng(0)  # vertical jitter of the dots only: reproducible
    for i, r in enumerate(rows):
        y = len(rows) - 1 - i
        d = np.asarray(r["deltas"], dtype=float)
        ax.scatter(d, y + rng.uniform(-0.18, 0.18, len(d)), s=22, color="#56B4E9", alpha=0.8, zorder=2,
                   label="one unit's Δ" if i == 0 else None)
        if math.isfinite(r["lo"]):
            ax.plot([r["lo"], r["hi"]], [y, y], color="#000000", linewidth=2.5, zorder=3,
                    label="mean Δ, 95% t-interval" if i == 0 else None)
        ax.plot([r["mean"]], [y], marker="D", color="#D55E00", markersize=8, zorder=4, linestyle="none",
                label="mean Δ" if i == 0 else None)
    ax.axvline(0, color="black", linewidth=1, linestyle=":")
    ax.set_yticks(range(len(rows)), [r["label"] for r in reversed(rows)])
    ax.set_xlabel("Δ = arm − reference (points)")
    ax.set_title(title)
    ax.grid(alpha=0.3, axis="x")
    handles, labels = ax.get_legend_handles_labels()
    if labels:  # below the figure, outside the axes: with one or two rows a legend under the axes covered the x label
        fig.legend(handles, labels, loc="outside lower center", ncol=3, frameon=False, handlelength=3.0)
    return fig


@_styled
def plot_profiles(profiles: dict[str, pd.DataFrame], styles: dict[str, Style], metric: str, benchmark: str):
    """Score distributions (rliable's performance profiles): per arm the fraction of runs whose
    final score exceeds τ, over τ, with its bootstrap band; ``profiles[arm]`` has columns tau,
    value, lo, hi (fractions)."""
    fig, (ax,) = _panels(1, f"Final {metric} on {benchmark}: fraction of runs scoring above τ\n"
                            "band: 95% bootstrap over runs", height=5.2, cols=1)
    lo_tau, hi_tau = 1.0, 0.0  # the τ range where some profile is strictly between 0 and 1
    for arm, p in sorted(profiles.items()):
        st = styles[arm]
        ax.step(100 * p["tau"], p["value"], where="post", color=st.color, linestyle=st.linestyle, label=arm)
        ax.fill_between(100 * p["tau"], _clip(p["lo"], (0, 1)), _clip(p["hi"], (0, 1)), step="post", color=st.color,
                        alpha=0.15, linewidth=0)
        moving = p["tau"][(p["hi"] > 0) & (p["lo"] < 1)]
        if len(moving):
            lo_tau, hi_tau = min(lo_tau, float(moving.min())), max(hi_tau, float(moving.max()))
    if lo_tau < hi_tau:
        ax.set_xlim(100 * max(0.0, lo_tau - 0.05), 100 * min(1.0, hi_tau + 0.05))
    ax.set_xlabel(f"τ ({metric}, %)")
    ax.set_ylabel("fraction of runs > τ")
    ax.set_ylim(-0.02, 1.02)
    _legend(ax, ncol=3, width=40)
    return fig


@_styled
def plot_survival(curves: dict[str, pd.DataFrame], styles: dict[str, Style], title: str):
    """Kaplan–Meier curves of escape time per arm (``curves[arm]`` has columns step, survival and
    censored, the steps at which runs were censored)."""
    fig, (ax,) = _panels(1, title, height=5.2, cols=1)
    arms = sorted(curves)
    for i, arm in enumerate(arms):
        st = styles[arm]
        # arms whose curves coincide would hide each other: each is drawn a hair apart (≤ ±0.012)
        shift = 0.008 * (i - (len(arms) - 1) / 2) if len(arms) > 1 else 0.0
        c = curves[arm]
        ax.step(c["step"], c["survival"] + shift, where="post", color=st.color, linestyle=st.linestyle, label=arm,
                linewidth=1.8)
        cens = c[c["censored"] > 0]
        ax.plot(cens["step"], cens["survival"] + shift, linestyle="none", marker="|", markersize=12, color=st.color)
    if len(arms) > 1:
        ax.text(0.99, 0.01, "curves drawn up to ±0.012 apart so equal ones stay visible", transform=ax.transAxes,
                ha="right", va="bottom", fontsize=7, color="0.4")
    ax.set_xlabel(X_LABEL)
    ax.set_ylabel("fraction of runs not yet escaped")
    ax.set_ylim(-0.02, 1.02)
    _legend(ax, ncol=3, width=40)
    return fig


@_styled
def plot_association(between: pd.DataFrame, within: pd.DataFrame, styles: dict[str, Style], x: str, xlabel: str,
                     ylabel: str, notes: tuple[str, str]):
    """Two panels: arm means (one point per arm; between arms) and each run's values minus its arm's
    mean (within arms), coloured by arm. ``between`` has columns arm, x, y; ``within`` arm, x, y."""
    fig, axes = _panels(2, f"{xlabel} vs {ylabel}", height=4.8)
    for ax, df, name, note in zip(axes, (between, within), ("between arms: arm means", "within arms: run − arm mean"),
                                  notes):
        for arm, g in df.groupby("arm", sort=True):
            st = styles[arm]
            ax.scatter(g[x], g["y"], color=st.color, marker=st.marker, s=40 if df is between else 24, label=arm)
        ax.set_title(f"{name}\n{note}")
        ax.set_xlabel(xlabel if df is between else f"{xlabel} − arm mean")
        ax.set_ylabel(ylabel if df is between else f"{ylabel} − arm mean")
    _legend(axes[0])
    return fig


def curve_bands(by_arm: dict, metric: str, benchmark: str, arms: list[str] | None = None) -> dict[str, pd.DataFrame]:
    """`draw_curves`'s numbers: per arm that has ``metric``, its per-step band over units
    (`rbctl.report.series.band`); a training curve's key is read from the metrics log with that curve's
    rolling window (`rbctl.report.analyses.trajectories.TRAINING_CURVES`), else ``benchmark``'s evaluations."""
    from rbctl.report.analyses.trajectories import training_curve
    from rbctl.report.series import arm_bands

    spec = training_curve(metric)
    return arm_bands(by_arm, metric, spec[4] if spec else 1, None if spec else benchmark, arms)


def draw_curves(by_arm: dict, metric: str, benchmark: str, figures_dir: Path, slug: str, title: str,
                arms: list[str] | None = None) -> bool:
    """One figure of ``metric`` over steps for ``by_arm``'s runs (arm -> runs): the held-out ``metric``
    (avg@n, pass@k) of ``benchmark``'s periodic evaluations, or a training curve's key of the metrics log
    (`rbctl.report.analyses.trajectories.TRAINING_CURVES`: entropy, κ_eff, ..., smoothed and bounded as
    the sweep report draws it). Per arm the mean over units with its 95% t-band
    (`rbctl.report.series.band`), all arms in one panel, written as ``figures_dir/slug.png`` (and .svg);
    False when no arm has the metric."""
    from rbctl.report.analyses.trajectories import training_curve

    spec = training_curve(metric)
    limits = spec[5] if spec else (0, 1)
    bands = curve_bands(by_arm, metric, benchmark, arms)
    if not bands:
        return False
    figures_dir.mkdir(parents=True, exist_ok=True)
    styles = arm_styles({a: ("", "") for a in by_arm})
    label = spec[3] if spec else "held-out pass@1 (avg@n)" if metric == "avg@n" else f"held-out {metric}"
    save_figure(plot_trajectory(bands, styles, [("", list(bands))], title, label, limits=limits), figures_dir, slug)
    return True
