"""The power of a sweep's design (docs/method.md, "Comparing arms", power): per principal comparison
the units, the planning and measured SD of Δ, the MDE at the stated power and the power at the
stated MDE, for the paired two-sided t-test at α/m (m the principal comparisons that are tested:
Holm's family), from `rbctl.report.power`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from rbctl.config.sweep import Comparisons
from rbctl.report.analyses.comparisons import Comparison
from rbctl.report.power import mde_paired, power_paired, power_tost, units_for_power, units_for_tost


@dataclass(frozen=True)
class DesignPower:
    """The design's power: the sweep file's stated design (`spec`), the principal comparisons not
    refused as the same config, those tested, the level α/m, and one row per comparison (`rows`:
    tables/power.csv; SDs and MDEs in points)."""

    spec: Comparisons
    comparisons: tuple[Comparison, ...]
    tested: tuple[Comparison, ...]
    m: int
    level: float
    rows: pd.DataFrame


def design_power(spec: Comparisons | None, headline: list[Comparison]) -> DesignPower | None:
    """The power analysis of the principal comparisons ``headline`` under ``spec`` (None without a
    stated design)."""
    if spec is None:
        return None
    s = spec
    comps = [c for c in headline if not c.same_config]
    tested = [c for c in comps if c.delta.testable]
    m = max(1, len(tested))
    level = s.alpha / m
    rows = []
    for c in comps:
        n, measured = c.delta.n, 100 * c.delta.sd
        rows.append({"comparison": c.label, "units": n, "tested": c.delta.testable, "not_testable": c.delta.untestable,
                     "planning_sd": s.planning_sd, "measured_sd": measured,
                     "mde_planning": mde_paired(s.planning_sd, n, level, s.power),
                     "mde_measured": mde_paired(measured, n, level, s.power) if math.isfinite(measured) else math.nan,
                     "power_planning": power_paired(s.mde, s.planning_sd, n, level),
                     "power_measured": power_paired(s.mde, measured, n, level) if math.isfinite(measured) else math.nan,
                     "units_needed_planning": units_for_power(s.planning_sd, s.mde, m, s.power, s.alpha),
                     "units_needed_measured": units_for_power(measured, s.mde, m, s.power, s.alpha)
                     if math.isfinite(measured) and measured > 0 else math.nan,
                     **(_equivalence(s, n, m, measured) if s.margin is not None else {})})
    return DesignPower(s, tuple(comps), tuple(tested), m, level, pd.DataFrame(rows))


def _equivalence(s: Comparisons, n: int, m: int, measured: float) -> dict:
    """The design's power to call a true Δ = 0 equivalent within the stated margin (TOST at α/m), and the
    units that would take, at the planning and the measured SD (`rbctl.report.power.power_tost`)."""
    ok = math.isfinite(measured) and measured > 0
    return {"margin": s.margin,
            "power_tost_planning": power_tost(s.margin, s.planning_sd, n, s.alpha / m),
            "power_tost_measured": power_tost(s.margin, measured, n, s.alpha / m) if ok else math.nan,
            "units_tost_planning": units_for_tost(s.planning_sd, s.margin, m, s.power, s.alpha),
            "units_tost_measured": units_for_tost(measured, s.margin, m, s.power, s.alpha) if ok else math.nan}
