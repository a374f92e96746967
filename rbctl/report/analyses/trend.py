"""A trend of a paired Δ over a setting (the group size G, say): does Δ grow with it?

Each unit (a seed, or a (warm start, seed) pair) has a Δ at every level x_j of the setting (x = log2 G,
so the slope is per doubling of G). Per unit, the least-squares slope

    b_u = Σ_j (x_j − x̄)(Δ_uj − Δ̄_u) / Σ_j (x_j − x̄)²

and the slopes are tested as paired Δs are (`rbctl.report.stats.paired_delta` of b against 0: a
one-sample t-test over units, n − 1 df, and its t-interval). The call: "positive" or "negative" when the
test rejects slope 0 at ``alpha`` (two-sided), else "inconclusive" — a slope the test cannot tell from 0
with these units is not evidence of no trend.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rbctl.report.stats import PairedDelta, paired_delta


@dataclass(frozen=True)
class Trend:
    """Per-unit slopes of Δ over x and their paired test (slope units: Δ's unit per unit of x)."""

    x: tuple[float, ...]
    slopes: dict  # unit -> b_u
    test: PairedDelta  # mean slope, t-interval, two-sided p (NaN when not testable)
    call: str  # "positive", "negative" or "inconclusive"


def unit_slope(x, deltas) -> float:
    """The least-squares slope of ``deltas`` on ``x`` (same length, at least two distinct x)."""
    x, d = np.asarray(x, dtype=float), np.asarray(deltas, dtype=float)
    dx = x - x.mean()
    return float((dx * (d - d.mean())).sum() / (dx ** 2).sum())


def trend(x, deltas: dict, alpha: float = 0.05, level: float = 0.95) -> Trend:
    """The trend of ``deltas`` ``{unit: [Δ at x_0, x_1, …]}`` over ``x`` (module docstring)."""
    x = tuple(float(v) for v in x)
    if len(set(x)) < 2:
        raise ValueError(f"a trend needs at least two distinct x, got {x}")
    for u, d in deltas.items():
        if len(d) != len(x):
            raise ValueError(f"unit {u}: {len(d)} Δ values for {len(x)} levels of x")
    slopes = {u: unit_slope(x, d) for u, d in deltas.items()}
    test = paired_delta(slopes, {u: 0.0 for u in slopes}, level)
    rejected = test.testable and test.p <= alpha
    call = ("positive" if test.mean > 0 else "negative") if rejected else "inconclusive"
    return Trend(x, slopes, test, call)
