"""The list of runs, last: each run's arm, status, steps and what it lacks, and the runs the report
could not score, summarised by arm."""

from __future__ import annotations

import pandas as pd

from rbctl.report.data import ReportData
from rbctl.report.render.calls import missing_lines
from rbctl.report.render.page import Page
from rbctl.report.render.tables import plural
from rbctl.report.sections.base import LAST, section
from rbctl.store.rundir import REPORT_TABLES


@section("runs", "Runs", order=LAST)
def runs(data: ReportData, page: Page) -> None:
    sw, doc = data.sweep, page.doc
    rows = []
    for r in sw.runs:
        notes = [n for n, bad in (("no periodic evaluation", not r.evals), ("no final evaluation", not r.finals)) if bad]
        if r.config_steps and r.last_step < r.config_steps:
            notes.append(f"stopped at step {r.last_step} of {r.config_steps}")
        if r.final_step is not None and r.final_step < r.last_step:
            notes.append(f"final evaluation at step {r.final_step}")
        notes += [f"side evaluation at step {e['step']} ({', '.join(e['benchmarks'])}; {e['protocol']}): not scored"
                  for e in r.side_evals]
        rows.append({"run": r.name, "arm": r.arm, "warm_start": r.warm_start or "", "seed": r.seed,
                     "baseline": r.baseline, "variant": r.variant, "sweep": r.sweep or "", "status": r.status,
                     "last_step": r.last_step, "config_steps": r.config_steps,
                     "final_eval_step": "" if r.final_step is None else r.final_step,
                     "benchmarks": ",".join(sorted(r.finals)), "notes": "; ".join(notes), "path": str(r.path)})
    numbers = pd.DataFrame(rows)
    shown = numbers[["run", "baseline", "variant", "status", "last_step", "final_eval_step", "notes"]]
    shown.columns = ["run", "baseline", "variant", "status", "steps logged", "final eval step", "notes"]
    doc.heading(2, "Runs")
    doc.para(f"{plural(len(sw.runs), 'run')}, {plural(len(sw.arms), 'arm')}"
                 + (f", {plural(len(sw.warm_starts), 'warm start')}" if sw.warm_starts else "") + ".")
    page.table(numbers, shown, "runs")
    if sw.issues:  # summarised by arm; run by run in tables/incomplete.csv
        doc.heading(3, "Failed, unfinished or missing runs")
        doc.para("Not scored (a run its sweep records as not done is never scored; its logged steps are drawn): "
                 + "; ".join(missing_lines(sw)) + f". Run by run: {REPORT_TABLES}/incomplete.csv.")
        page.numbers(pd.DataFrame([{"run": i.name, "status": i.status, "detail": i.detail} for i in sw.issues]),
                     "incomplete")
