"""`rbctl report`: comparison tables and figures rebuilt from run directories, in three layers.

- Input and statistics: `load` (finding runs and sweeps, read through `rbctl.store.read`), `series`
  (per-step curves and final values), and pure functions: `stats`, `power` (power of the paired
  t-test), `robust` (rliable's aggregates), `survival` (Kaplan–Meier, log-rank, RMST).
- Analyses (`rbctl.report.analyses`), one per question, each returning a typed dataclass; `data`
  runs the shared ones once into a `ReportData` (`report_data`), which scripts read too.
- Sections (`rbctl.report.sections`): a registry of the report's sections, one module each, each
  declaring what it needs and rendering itself; optional ones (a study's question) on where the
  sweep file's `report.sections` asks. Rendering (`rbctl.report.render`): report.md, report.html,
  tables and figures from the `ReportData`.
No module imports torch or transformers.
"""

from rbctl.report.data import ReportData, report_data
from rbctl.report.render.report import final_scores_table, make_report

__all__ = ["ReportData", "final_scores_table", "make_report", "report_data"]
