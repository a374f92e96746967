"""`rbctl report`: comparison tables and figures rebuilt from run directories.

Modules, one job each: `load` (finding runs and sweeps, read through `rbctl.store.read`), `series`
(per-step curves and final values), `stats`, `power`, `robust` (rliable's aggregates), `survival`
(Kaplan–Meier, log-rank, RMST), `warmstart` (pure statistics), `compare` (scores, the principal and
exploratory families), `plateau` and `escape` (the premature-convergence test, escape times),
`diagnostics` (per-arm entropy/κ numbers, entropy vs pass@1 between and within arms), `figures`
(matplotlib), `tables` (CSV/Markdown/LaTeX), `document` (report.md and report.html from one list of
blocks), and the sections in reading order: `verdict` (the answer, power, warm starts),
`convergence` (plateau, escape), `sections` (the rest); `build` assembles them.
No module imports torch or transformers.
"""

from rbctl.report.build import final_scores_table, make_report

__all__ = ["final_scores_table", "make_report"]
