"""`rbctl report`: comparison tables and figures rebuilt from run directories.

Modules, one job each: `load` (finding and reading runs and sweeps), `series` (per-step curves and
final values), `stats` (pure statistics), `compare` (scores and paired comparisons), `plateau` (the
premature-convergence test), `diagnostics` (per-arm entropy/κ numbers, the plateau of the GRPO arm,
entropy vs pass@1), `figures` (matplotlib), `tables` (CSV/Markdown/LaTeX), `build` (report.md).
No module imports torch or transformers.
"""

from rbctl.report.build import final_scores_table, make_report

__all__ = ["final_scores_table", "make_report"]
