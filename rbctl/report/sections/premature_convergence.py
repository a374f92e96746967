"""The plateau test (premature convergence) of the GRPO base arm against a reachable ceiling, and of
every plain arm, by the thresholds the sweep file declares (`report.plateau`; docs/method.md,
"Premature convergence"): the reward-budgeting study's question, an optional section
(docs/method.md, "Report sections")."""

from __future__ import annotations

from fractions import Fraction

import pandas as pd

from rbctl.config.sweep import PlateauCriteria
from rbctl.report.data import ReportData
from rbctl.report.render.page import Page
from rbctl.report.render.tables import criterion_cell, num, pct, plural, yes_no
from rbctl.report.sections.base import SWEEP, section


def fraction_text(x: float) -> str:
    """``1/3`` for a ratio that is a fraction with a small denominator, else ``0.3`` (``:g``)."""
    f = Fraction(x).limit_denominator(12)
    return f"{f.numerator}/{f.denominator}" if f.denominator > 1 and abs(float(f) - x) < 1e-12 else f"{x:g}"


def criteria_text(t: PlateauCriteria) -> str:
    """The criteria as the report states them, and where their thresholds were declared."""
    where = "docs/method.md" if t == PlateauCriteria() else "declared in `report.plateau`; docs/method.md"
    return (f"Criteria ({where}): held-out pass@1 changes < {t.stall_points:g} points over the last quarter, "
            f"≥ {t.below_ceiling_points:g} points below a reachable ceiling, final entropy < "
            f"{fraction_text(t.entropy_ratio)} of the warm start's; each over units (means), then per unit."
            + (" The divergence guard: final pass@1 above step 0's (an arm that ended at or below its warm start "
               "diverged, and is no plateau)." if t.improved_on_start else " The divergence guard is off "
               "(`report.plateau.improved_on_start: false`)."))


@section("plateau", "Plateau test", optional=True, default_for=(SWEEP,), order=60)
def plateau(data: ReportData, page: Page) -> None:
    p, doc = data.plateau, page.doc
    doc.heading(2, "Plateau test (premature convergence)")
    if p.verdict is None:
        doc.para("No GRPO base arm (baseline grpo, variant base) with held-out evaluations.")
        plain_arms(data, page)
        return
    v, c = p.verdict, p.ceiling
    ceiling = f"unknown ({c.source})" if c.value is None else f"{pct(c.value)}% ({c.source})"
    doc.para(f"Arm `{p.arm}` on {p.benchmark}, {plural(v.seeds, 'unit')}: the plateau "
             f"**{'held' if v.held else 'did not hold'}**. Ceiling: {ceiling}. {criteria_text(p.thresholds)}")
    table = p.criteria
    shown = table.assign(held=[yes_no(h) for h in table["held"]])[["criterion", "held", "detail"]]
    page.table(table, shown, "plateau")
    units = p.units
    if len(units):
        shown = pd.DataFrame({
            "unit": units["unit"], "steps ¾T, T": [f"{num(a, 0)}, {num(b, 0)}" for a, b in zip(units["t_ref"], units["t"])],
            "|Δ pass@1| (points)": [num(x, 2) for x in units["change"]], "stalled": [yes_no(h) for h in units["stalled"]],
            "step-0 pass@1": [num(x, 1) for x in units["start"]], "final pass@1": [num(x, 1) for x in units["final"]], "below ceiling (points)": [num(x, 1) for x in units["gap"]],
            f"≥ {p.thresholds.below_ceiling_points:g} below": [yes_no(h) for h in units["below_ceiling"]],
            "entropy final / warm": [num(x, 2) for x in units["entropy_ratio"]],
            "collapsed": [yes_no(h) for h in units["entropy_collapsed"]]})
        page.table(units, shown, "plateau_units")
    plain_arms(data, page)


def plain_arms(data: ReportData, page: Page) -> None:
    """The plateau test of every plain arm (each baseline X without a variant, or each setting of a
    sweep over settings), one row each, when there is more than one."""
    from rbctl.report.analyses.plateau import plain_table

    p, doc = data.plateau, page.doc
    if len(p.plain) < 2:
        return
    table, t = plain_table(p.plain), p.thresholds
    doc.para("Every plain arm (no budget, no bonus, no other variant), by the same test and ceiling: the "
             "last-quarter change of held-out pass@1 (points), the distance below the ceiling (points), the "
             f"final token entropy beside the threshold ({fraction_text(t.entropy_ratio)} of the warm start's), and "
             "final pass@1 − step 0's (points; at or below 0, the arm diverged).")
    cells = lambda key, d: [criterion_cell(v, h, d) for v, h in zip(table[f"{key}_value"], table[f"{key}_held"])]  # noqa: E731
    shown = pd.DataFrame({
        "arm": table["arm"], "units": table["units"], f"stalled (< {t.stall_points:g})": cells("stalled", 2),
        f"below the ceiling (≥ {t.below_ceiling_points:g})": cells("below_ceiling", 1),
        "final entropy (collapsed)": cells("entropy_collapsed", 3),
        "final − step 0 (> 0)": cells("improved", 1),
        "plateau": [yes_no(h) for h in table["plateau"]]})
    page.table(table, shown, "plateau_arms")
