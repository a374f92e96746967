"""The comparisons in no declared family (exploratory: interval and unadjusted p, no call), or, without
declared comparisons, the stated pairs in detail; and the budget-vs-base tables (docs/method.md,
"Comparing arms")."""

from __future__ import annotations

import pandas as pd

from rbctl.report.analyses.comparisons import EXPLORATORY, STATED
from rbctl.report.data import ReportData
from rbctl.report.render.page import Page
from rbctl.report.render.tables import delta, num, pct, points_list, pval, unequal_cells
from rbctl.report.sections.base import section
from rbctl.report.stats import MIN_HIERARCHICAL_UNITS, NOT_TESTABLE

DETAIL = ("Δ in points with its 95% t-interval over units (n − 1 df), clipped to [−100, +100]; a comparison with fewer "
          "than 3 units or the same Δ in every unit is not testable (no p, outside the Holm family). The hierarchical "
          f"bootstrap is shown from {MIN_HIERARCHICAL_UNITS} units on: with fewer it covers less than 0.93 (docs/method.md).")


@section("exploratory", "Exploratory comparisons", order=90)
def exploratory(data: ReportData, page: Page) -> None:
    numbers, spec, doc = data.comparisons.rows, data.sweep.spec, page.doc
    fam = EXPLORATORY if spec is not None else STATED
    part = numbers[numbers["family"] == fam] if len(numbers) else numbers
    if spec is not None:
        page.numbers(numbers, "comparisons")  # every comparison, its family in a column
        doc.heading(2, "Exploratory comparisons")
        doc.para("Every stated pair (each baseline + budget vs the baseline, each other arm vs its baseline + budget "
                     "and vs its baseline) on every benchmark, avg@n and pass@n, that is in no declared family. "
                     "**Exploratory**: the interval and an unadjusted p, no multiplicity adjustment and no call "
                     f"(docs/method.md, \"Comparing arms\"). {DETAIL}")
    else:
        doc.heading(2, "Comparisons in detail")
        doc.para(f"The stated pairs of the answer with every unit's Δ and a hierarchical bootstrap (units, then "
                     f"problems within units) beside the t-interval. {DETAIL}")
    if not len(part):
        doc.para("None.")
        return
    untestable = part["not_testable"].fillna("").astype(str)
    shown = pd.DataFrame({
        "comparison": part["arm"] + " − " + part["ref"], "benchmark": part["benchmark"], "metric": part["metric"],
        "units": part["seeds"],
        "Δ points [95% t-CI, unadj.]": [delta(*x) for x in zip(part["delta"], part["delta_lo"], part["delta_hi"])],
        "per-unit Δ": [points_list(float(v) for v in str(s).split(",")) if str(s) not in ("", "nan") else ""
                       for s in part["per_seed_delta"]],
        "hier. bootstrap [95%]": [delta(d, lo, hi) for d, lo, hi in zip(part["delta"], part["hb_lo"], part["hb_hi"])],
        "p (unadj.)": [pval(p, NOT_TESTABLE if u else "–") for p, u in zip(part["p"], untestable)],
        **({} if spec is not None else {"Holm p": [pval(p, NOT_TESTABLE if u else "–")
                                                   for p, u in zip(part["p_holm"], untestable)],
                                        "call": list(part["call"])}),
        "P(improvement)": [num(p, 2) for p in part["p_improve"]],
        "flag": ["; ".join(x for x in ("same config" if s else (f"not testable: {u}" if u else ""),
                                         f"unequal compute: {c}" if c else "") if x)
                 for s, u, c in zip(part["same_config"], untestable, unequal_cells(part))]})
    page.table(part, shown, "exploratory" if spec is not None else "comparisons")
    budget = part[part["kind"] == "budget_vs_base"]
    for prefix, name in (("avg@n", "budget_vs_base_avg"), ("pass@", "budget_vs_base_pass_k")):
        sub = budget[budget["metric"].str.startswith(prefix)]
        if len(sub):
            wide = pd.DataFrame({"baseline": sub["baseline"], "comparison": sub["arm"] + " − " + sub["ref"],
                                 "benchmark": sub["benchmark"], "metric": sub["metric"],
                                 "base": [pct(v) for v in sub["ref_score"]], "budget": [pct(v) for v in sub["arm_score"]],
                                 "Δ [95% t-CI]": [delta(*x) for x in zip(sub["delta"], sub["delta_lo"], sub["delta_hi"])],
                                 "units": sub["seeds"]})
            doc.heading(3, f"Budget vs base, {prefix.rstrip('@')}")
            page.table(sub, wide, name)
