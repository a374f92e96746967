"""The warm start as a level of the study (docs/method.md, "Comparing arms", warm starts): when runs
carry a warm start, a comparison's units are (warm start, seed) pairs, and its per-unit Δ is also
read per warm start, tested with the warm start as the unit, and split into variance between and
within warm starts; `warm_starts` is the report's analysis of its answer's comparisons.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rbctl.report.analyses.comparisons import Comparison
from rbctl.report.stats import DELTA_BOUNDS, PairedDelta, VarianceComponents, holm, paired_delta, variance_components


@dataclass(frozen=True)
class WarmStartLevel:
    """One comparison read at the warm-start level."""

    per_warm_start: dict[str, PairedDelta]  # Δ over the seeds of each warm start (unadjusted)
    over_warm_starts: PairedDelta  # units = warm starts, each its mean Δ over its seeds; W − 1 df
    components: VarianceComponents  # Δ: σ² between warm starts vs within (one-way random effects)


def by_warm_start(units: tuple, deltas: tuple) -> dict[str, dict[int, float]]:
    """``{warm start: {seed: Δ}}`` from a `PairedDelta`'s units ``(warm start, seed)``."""
    out: dict[str, dict[int, float]] = {}
    for (ws, seed), d in zip(units, deltas):
        out.setdefault(ws, {})[seed] = d
    return out


def warm_start_level(delta: PairedDelta) -> WarmStartLevel:
    """Per warm start: the paired Δ over its seeds (its t-interval over those seeds); over warm
    starts: the one-sample t-test of the W per-warm-start mean Δs (the warm start as the unit, W − 1
    df: what generalises to another warm start; not testable below 3 warm starts); and the variance
    components of the per-unit Δ."""
    groups = by_warm_start(delta.units, delta.deltas)
    per = {ws: paired_delta(ds, dict.fromkeys(ds, 0.0), bounds=DELTA_BOUNDS) for ws, ds in groups.items()}
    means = {ws: float(np.mean(list(ds.values()))) for ws, ds in groups.items()}
    over = paired_delta(means, dict.fromkeys(means, 0.0), bounds=DELTA_BOUNDS)
    return WarmStartLevel(per, over, variance_components({ws: list(ds.values()) for ws, ds in groups.items()}))


@dataclass(frozen=True)
class WarmStarts:
    """The answer's comparisons read at the warm-start level: per comparison its `WarmStartLevel`, and
    the Holm-adjusted p of its test over warm starts; those tests form one family of their own (at
    ``alpha``, ``tested`` of them testable)."""

    warm_starts: tuple[str, ...]
    comparisons: tuple[Comparison, ...]
    levels: tuple[WarmStartLevel, ...]
    over_holm: tuple[float, ...]
    tested: int
    alpha: float


def warm_starts(names: list[str], headline: list[Comparison], principal_declared: bool,
                alpha: float) -> WarmStarts | None:
    """The warm-start analysis of the answer's comparisons ``headline`` (without principal
    comparisons, only the avg@n ones), None when the runs carry no warm start (``names``)."""
    if not names:
        return None
    comps = [c for c in headline if not c.same_config and (principal_declared or c.metric == "avg@n")]
    levels = [warm_start_level(c.delta) for c in comps]
    over_holm, _ = holm([lvl.over_warm_starts.p for lvl in levels], alpha)
    return WarmStarts(tuple(names), tuple(comps), tuple(levels), tuple(float(p) for p in over_holm),
                      sum(lvl.over_warm_starts.testable for lvl in levels), alpha)

