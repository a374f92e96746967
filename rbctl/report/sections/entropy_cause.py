"""Is entropy the cause? Final entropy and κ_eff against held-out pass@1, between arms and within arms
(the reward-budgeting study's question: an optional section, docs/method.md, "Report sections")."""

from __future__ import annotations

import pandas as pd

from rbctl.report.analyses import entropy as ent
from rbctl.report.data import ReportData
from rbctl.report.render.figures import plot_association
from rbctl.report.render.page import Page
from rbctl.report.render.tables import num, pval
from rbctl.report.sections.base import SWEEP, final_evaluations, section
from rbctl.report.sections.final_entropy import KAPPA_EFF_WHAT


@section("entropy_cause", "Is entropy the cause? Entropy and κ_eff vs pass@1", needs=(final_evaluations(),),
         optional=True, default_for=(SWEEP,), order=100)
def associations(data: ReportData, page: Page) -> None:
    e, doc = data.entropy, page.doc
    if e.benchmark is None:
        return
    bench, points, refused, corr = e.benchmark, e.points, e.refused, e.correlations
    page.data_file(points, "run_finals.csv")
    doc.heading(2, "Is entropy the cause? Entropy and κ_eff vs pass@1")
    doc.para(f"Final entropy and final κ_eff (each run's mean over its last quarter of logged values; {KAPPA_EFF_WHAT}) "
                 f"against held-out pass@1 (avg@n of the final evaluation on {bench}), at two levels that must not be "
                 "pooled: **between arms** (one point per arm: its means; n = arms units, t on n − 2 df) and **within "
                 "arms** (each run minus its arm's means, pooled: N runs − k arm means independent units; the "
                 "repeated-measures correlation, rmcorr, t on N − k − 1 df). Pearson r, Fisher-z 95% interval "
                 "atanh(r) ± 1.96/√(df − 1), two-sided p; unadjusted; withheld on fewer than "
                 f"{ent.MIN_CORRELATION_DF} df (3 arms give 1 df: no interval, and any r).")
    if e.kappa_eff_note:
        doc.para(e.kappa_eff_note)
    shown = pd.DataFrame({"x": corr["x"].map(dict(ent.ASSOCIATED)), "level": corr["level"], "points": corr["points"],
                          "units": corr["units"],
                          "df": corr["df"],
                          "r [95% CI]": ["not compared (see the note)" if no else f"withheld ({few})" if few else
                                         f"{num(r, 2)} [{num(lo, 2)}, {num(hi, 2)}]"
                                         for r, lo, hi, no, few in zip(corr["r"], corr["r_lo"], corr["r_hi"],
                                                                       corr["refused"], _withheld(corr))],
                          "p": [pval(p) for p in corr["p"]]})
    page.table(corr, shown, "entropy_cause")
    for key, label in ent.ASSOCIATED:
        if points[key].notna().any():
            between, within = ent.split_levels(points, key)
            notes = []
            for level in ("between arms", "within arms"):
                r = corr[(corr["x"] == key) & (corr["level"] == level)].iloc[0]
                few = r["withheld"] if isinstance(r.get("withheld"), str) else ""
                notes.append("not compared between arms (different updates per step)" if r["refused"] else
                             f"no r {level} ({few})" if few else
                             f"r = {num(r['r'], 2)} over {int(r['points'])} arms" if level == "between arms" else
                             f"r = {num(r['r'], 2)} over {int(r['points'])} runs ({int(r['units'])} independent "
                             "after centring on arm means)")
            if key in refused:
                between = between.iloc[:0]
            page.figure(plot_association(between, within, page.styles, "x", label, f"pass@1 on {bench}", tuple(notes)),
                       f"scatter_{key}", f"{label} vs held-out pass@1")


def _withheld(corr: pd.DataFrame) -> list[str]:
    """Why each correlation is withheld ("" where it is shown; a table without the column: none)."""
    col = corr["withheld"] if "withheld" in corr else pd.Series([""] * len(corr), index=corr.index)
    return [w if isinstance(w, str) else "" for w in col]
