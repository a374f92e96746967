"""Final entropy, κ and κ_eff per arm (descriptive: each run's last-quarter mean, a t-interval over
units), and whether κ_eff may be compared between arms (docs/method.md, "Sharpness")."""

from __future__ import annotations

import pandas as pd

from rbctl.report.analyses import entropy as ent
from rbctl.report.data import ReportData
from rbctl.report.render.page import Page
from rbctl.report.render.tables import num
from rbctl.report.sections.base import section
from rbctl.store.rundir import REPORT_TABLES

KAPPA_EFF_WHAT = ("κ_eff is measured after all of a step's optimizer updates, so it is cumulative over the step's "
                  "optimizer updates (mini-batches × epochs at the learning rate)")


@section("final_entropy", "Final entropy, κ and κ_eff", order=110)
def descriptives(data: ReportData, page: Page) -> None:
    e, doc = data.entropy, page.doc
    numbers = e.descriptives
    shown = pd.DataFrame({"arm": numbers["arm"], "units": numbers["seeds"]})
    for key, label in ent.DESCRIPTIVE:
        if key == "kappa_eff" and e.kappa_eff_note:
            continue  # its numbers stay in the CSV; side by side they would compare arms
        shown[f"final {label} [95% CI]"] = [f"{num(m)} [{num(lo)}, {num(hi)}]" for m, lo, hi in
                                            zip(numbers[f"{key}_final"], numbers[f"{key}_final_lo"], numbers[f"{key}_final_hi"])]
    doc.heading(2, "Final entropy, κ and κ_eff")
    doc.para("Each run's mean over the last quarter of its logged values; mean over units with a 95% t-interval "
                 f"over units (descriptive). {KAPPA_EFF_WHAT}.")
    if e.kappa_eff_note:
        doc.para(e.kappa_eff_note + f" The final κ_eff column is left out of this table ({REPORT_TABLES}/final_entropy_kappa.csv "
                     "keeps each arm's numbers).")
    page.table(numbers, shown, "final_entropy_kappa")
