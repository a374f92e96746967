"""Escape time: when each run leaves the plateau's shortcut, Kaplan–Meier per arm, RMST and log-rank
tests (docs/method.md, "Premature convergence"); on where the sweep file sets `escape:` or the runs log
its default metric."""

from __future__ import annotations

import math

import pandas as pd

from rbctl.config.sweep import Escape
from rbctl.report.data import ReportData
from rbctl.report.render.figures import plot_survival
from rbctl.report.render.page import Page
from rbctl.report.render.tables import num, pval
from rbctl.report.sections.base import need, section


def fmt_step(v: float) -> str:
    """A step, or "not reached" for an infinite median."""
    return "not reached" if not math.isfinite(v) else f"{v:g}"


@section("escape", "Escape time", order=70,
         needs=(need("an escape setting", lambda d: d.escape is not None,
                     f"no `escape:` setting, and no run logs its default metric `{Escape().metric}`"),))
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
