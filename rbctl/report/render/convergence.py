"""The report's sections on premature convergence: the plateau test of the GRPO arm against a
reachable ceiling, and escape times (docs/method.md, "Premature convergence"). Each renders its
analysis of the `rbctl.report.data.ReportData` onto the page.
"""

from __future__ import annotations

import math

import pandas as pd

from rbctl.report.data import ReportData
from rbctl.report.render.figures import plot_survival
from rbctl.report.render.page import Page
from rbctl.report.render.tables import criterion_cell, num, pct, plural, pval, yes_no


def fmt_step(v: float) -> str:
    """A step, or "not reached" for an infinite median."""
    return "not reached" if not math.isfinite(v) else f"{v:g}"


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
             f"**{'held' if v.held else 'did not hold'}**. Ceiling: {ceiling}. Criteria (docs/method.md): held-out "
             "pass@1 changes < 2 points over the last quarter, ≥ 15 points below a reachable ceiling, final "
             "entropy < 1/3 of the warm start's; each over units (means), then per unit.")
    table = p.criteria
    shown = table.assign(held=[yes_no(h) for h in table["held"]])[["criterion", "held", "detail"]]
    page.table(table, shown, "plateau")
    units = p.units
    if len(units):
        shown = pd.DataFrame({
            "unit": units["unit"], "steps ¾T, T": [f"{num(a, 0)}, {num(b, 0)}" for a, b in zip(units["t_ref"], units["t"])],
            "|Δ pass@1| (points)": [num(x, 2) for x in units["change"]], "stalled": [yes_no(h) for h in units["stalled"]],
            "final pass@1": [num(x, 1) for x in units["final"]], "below ceiling (points)": [num(x, 1) for x in units["gap"]],
            "≥ 15 below": [yes_no(h) for h in units["below_ceiling"]],
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
    table = plain_table(p.plain)
    doc.para("Every plain arm (no budget, no bonus, no other variant), by the same test and ceiling: the "
             "last-quarter change of held-out pass@1 (points), the distance below the ceiling (points), the "
             "final token entropy beside the threshold (1/3 of the warm start's).")
    cells = lambda key, d: [criterion_cell(v, h, d) for v, h in zip(table[f"{key}_value"], table[f"{key}_held"])]  # noqa: E731
    shown = pd.DataFrame({
        "arm": table["arm"], "units": table["units"], "stalled (< 2)": cells("stalled", 2),
        "below the ceiling (≥ 15)": cells("below_ceiling", 1), "final entropy (collapsed)": cells("entropy_collapsed", 3),
        "plateau": [yes_no(h) for h in table["plateau"]]})
    page.table(table, shown, "plateau_arms")


def escape(data: ReportData, page: Page) -> None:
    e, doc = data.escape, page.doc
    if e is None:
        return
    spec, bench, rows = e.setting, e.benchmark, e.rows
    doc.heading(2, "Escape time")
    sign = "≥" if spec.direction == "above" else "≤"
    if not len(rows):
        where = "training metrics (escape.signal: train)" if spec.signal == "train" else f"periodic evaluation on {bench}"
        doc.para(f"No run logged `{spec.metric}` in its {where}: no escape times.")
        return
    page.data_file(rows, "escape_times.csv")
    table, curves, tau = e.table, e.curves, e.tau
    where = (f"the training batch's `{spec.metric}` (logged every step)" if spec.signal == "train" else
             f"the periodic evaluation's `{spec.metric}` on {bench} (step 0 = the warm start included)")
    lasting = (f" and stays so at the next {spec.hold} point{'s' * (spec.hold != 1)} (a crossing with fewer points "
               "left before the run ends is not confirmed: censored)" if spec.hold else "")
    doc.para(f"A run escapes at the first point of {where} that is {sign} {spec.threshold:g}{lasting} ({e.source}); "
             f"a run that never does is "
             f"censored at its last point. Kaplan–Meier estimate per arm; median = first step with S ≤ 0.5 "
             f"(S from exact counts, so an S of exactly 0.5 counts); "
             f"RMST = mean escape step restricted to τ = {tau:g} (the last step every run reached; never escaping "
             "counts as τ), 95% normal interval (Greenwood-type variance).")
    shown = pd.DataFrame({"arm": table["arm"], "runs": table["runs"], "escaped": table["escaped"],
                          "median escape step": [fmt_step(m) for m in table["median"]],
                          f"RMST to step {tau:g} [95% CI]": [f"{num(a, 1)} [{num(lo, 1)}, {num(hi, 1)}]" for a, lo, hi in
                                                            zip(table["rmst"], table["rmst_lo"], table["rmst_hi"])]})
    page.table(table, shown, "escape")
    page.figure(plot_survival(curves, page.styles, f"Escape time: runs with {spec.metric} still below {spec.threshold:g}"
                              if spec.direction == "above" else f"Escape time: runs with {spec.metric} still above "
                              f"{spec.threshold:g}"), "escape_km", "Kaplan–Meier curves of escape time")
    lr = e.logrank
    if len(lr):
        strat = bool(lr["stratified"].any())
        doc.para("Log-rank test per " + ("principal comparison" if e.pairs_are_principal else "stated pair")
                 + " (χ² on 1 df; p unadjusted, exploratory; "
                 + ("stratified by warm start, so runs are compared only within their warm start; it does not use "
                    "the pairing by seed)." if strat else "it treats runs as independent, ignoring the pairing by unit)."))
        shown = pd.DataFrame({"comparison": lr["arm"] + " − " + lr["ref"], "runs": [f"{a} / {b}" for a, b in
                                                                                   zip(lr["runs_arm"], lr["runs_ref"])],
                              "χ²": [num(x, 2) for x in lr["chi2"]], "p (unadjusted)": [pval(p) for p in lr["p"]]})
        page.table(lr, shown, "escape_logrank")
