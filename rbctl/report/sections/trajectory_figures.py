"""Training trajectories: per curve and arm the mean over units with its 95% band, the ceiling and the
escape threshold drawn where they apply (`rbctl.report.analyses.trajectories`)."""

from __future__ import annotations

import pandas as pd

from rbctl.report.data import ReportData
from rbctl.report.render.figures import plot_trajectory
from rbctl.report.render.page import Page
from rbctl.report.render.tables import pct, slug
from rbctl.report.sections.base import section
from rbctl.report.series import KAPPA_EFF_WINDOW


@section("trajectories", "Training trajectories", order=120)
def trajectories(data: ReportData, page: Page) -> None:
    doc, note = page.doc, data.entropy.kappa_eff_note
    doc.heading(2, "Training trajectories")
    doc.para("Mean over the units that logged the step; band: 95% t-interval over those units, clipped to the "
             f"metric's range. κ_eff (cumulative over the step's optimizer updates): centred rolling mean over "
             f"{KAPPA_EFF_WINDOW} logged values per run. Dotted "
             "line: the plateau test's ceiling on held-out curves, the escape threshold on the escape metric's.")
    escape = data.escape.setting if data.escape is not None else None
    if note:
        doc.para(note + " Its trajectories are not drawn side by side.")
    ceiling, frames = data.ceiling, []
    for c in data.trajectories.curves:
        frames += [b.rename_axis("step").reset_index().assign(arm=arm, metric=c.key) for arm, b in c.bands.items()]
        hline = None
        if c.metric == "avg@n" and ceiling.value is not None:
            hline = (ceiling.value, f"ceiling {pct(ceiling.value)}%")
        elif escape is not None and c.metric == escape.metric:
            hline = (escape.threshold, f"escape threshold {escape.threshold:g}")
        page.figure(plot_trajectory(c.bands, page.styles, page.groups, c.title, c.ylabel, hline, c.limits),
                    "traj_" + "_".join(slug(x) for x in c.name), c.title)
    if frames:
        page.data_file(pd.concat(frames)[["arm", "metric", "step", "mean", "lo", "hi", "seeds"]], "trajectories.csv")
