"""The report's sections, one module each, registered in `rbctl.report.sections.base` (the registry:
how a section declares what it needs, its settings and its place) and rendered in reading order by
`rbctl.report.render.report`: the first screen and the calls (`calls_sections`), the plateau test
(`premature_convergence`, optional), escape time (`escape_survival`), final scores (`final_scores`),
the exploratory comparisons (`exploratory`), entropy and κ_eff against pass@1 (`entropy_cause`,
optional), final entropy, κ and κ_eff (`final_entropy`), training trajectories
(`trajectory_figures`) and the list of runs (`run_list`). A module named in the environment variable
`RBCTL_SECTIONS` (comma-separated) is imported after them, so its sections register too.
"""

from __future__ import annotations

import importlib
import os

from rbctl.config.sweep import SECTIONS_ENV
from rbctl.report.sections import (calls_sections, entropy_cause, escape_survival, exploratory,  # noqa: F401
                                   final_entropy, final_scores, premature_convergence, run_list, trajectory_figures)
from rbctl.report.sections.base import (LAST, MANIFEST, SECTIONS, SWEEP, Need, ReportSection, arm, asked,  # noqa: F401
                                        declared_comparisons, final_evaluations, further_families, logged, need,
                                        periodic_evaluations, plan, register, section, settings_for,
                                        warm_starts)

__all__ = ["LAST", "MANIFEST", "SECTIONS", "SWEEP", "Need", "ReportSection", "arm", "asked", "declared_comparisons",
           "final_evaluations", "further_families", "logged", "need", "periodic_evaluations", "plan", "register",
           "section", "settings_for", "warm_starts"]

for _module in filter(None, (m.strip() for m in os.environ.get(SECTIONS_ENV, "").split(","))):
    importlib.import_module(_module)
