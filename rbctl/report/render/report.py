"""`rbctl report`: rendering report.md and report.html from the report's data (`write_report`), the
whole command (`make_report`: read, analyse, render), and the CLI's table of final scores
(`final_scores_table`).

Output folder: ``report.md`` and ``report.html`` (the same blocks in the same order: the question
and the answer first, the list of runs last; the HTML self-contained, its details folded);
``summary.md`` and ``summary.tex`` (one page: `rbctl.report.render.summary`); ``tables/<name>.{csv,md,tex}`` (CSV:
fractions in long form; Markdown/LaTeX: percent with 95% intervals); ``figures/<name>.{png,svg}``;
``data/*.csv`` (the numbers behind the curves). Statistics follow docs/method.md, "Comparing arms"
and "Premature convergence". The sections are the registered ones (`rbctl.report.sections`), in
reading order; those left out are listed with why ("Not in this report") before the list of runs.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from rbctl.report.data import ReportData, analyse, sweep_data
from rbctl.report.load import default_out
from rbctl.report.render.calls import missing_lines
from rbctl.report.render.page import Page, TablePage
from rbctl.report.render.summary import write_summary
from rbctl.report.render.tables import finite, with_ci
from rbctl.report.sections import LAST, plan
from rbctl.report.sections.final_scores import score_interval_caption
from rbctl.store.atomic import write_atomic
from rbctl.store.rundir import REPORT_HTML, REPORT_MD, REPORT_TABLES


def render_sections(data: ReportData, page: Page) -> None:
    """Every registered section that is on and whose needs are met, in reading order, with the list of
    those left out, each with why, after the analyses and before the list of runs (`LAST`)."""
    planned = plan(data)
    left = [f"{s.title} (`{s.name}`): {why}" for s, why in planned if why is not None]
    for s, why in planned:
        if left and s.order >= LAST:
            page.doc.heading(2, "Not in this report")
            page.doc.bullets(left)
            left = []
        if why is None:
            s.render(data, page)
    if left:
        page.doc.heading(2, "Not in this report")
        page.doc.bullets(left)


def write_report(data: ReportData, out: Path) -> Path:
    """Render ``data`` into the folder ``out`` (tables, figures, data files, report.md, report.html,
    summary.md and summary.tex); return the path of report.md."""
    page = Page(out, data.sweep.info)
    page.doc.heading(1, "rbctl report")
    page.doc.para("Inputs: " + ", ".join(f"`{d}`" for d in data.sweep.dirs))
    render_sections(data, page)
    path = page.out / REPORT_MD
    write_atomic(path, page.doc.markdown(), kind="report")
    write_atomic(page.out / REPORT_HTML, page.doc.html("rbctl report"), kind="report")
    write_summary(data, page.out)
    return path


def shown_tables(data: ReportData) -> dict[str, pd.DataFrame]:
    """Every table of the report as the document shows it (what ``tables/<name>.md`` holds), by
    name, rendered from ``data`` without writing anything."""
    page = TablePage(data.sweep.info)
    render_sections(data, page)
    return page.shown


def make_report(dirs: list[Path], out: Path | None = None, n_boot: int = 2000) -> Path:
    """Read every run under ``dirs``, write tables, figures, ``report.md`` and ``report.html`` into
    ``out`` (default: `rbctl.report.load.default_out`), and return the path of report.md. Errors come
    in the order a user can act on: no runs first, then the output folder."""
    return build_report(dirs, out, n_boot)[0]


def build_report(dirs: list[Path], out: Path | None = None, n_boot: int = 2000) -> tuple[Path, ReportData]:
    """`make_report`, returning the report's data beside the path of report.md (what the terminal shows)."""
    dirs = [Path(d) for d in dirs]
    sw = sweep_data(dirs, n_boot)
    out = Path(out) if out is not None else default_out(dirs)
    out.mkdir(parents=True, exist_ok=True)
    data = analyse(sw)
    return write_report(data, out), data


def incomplete_lines(data: ReportData) -> list[str]:
    """What the report could not score, summarised by arm (`missing_lines`), and each remark on what the
    runs do not log, for the terminal."""
    return [f"incomplete: {x}" for x in missing_lines(data.sweep)] + [f"note: {r}" for r in data.sweep.remarks]


def final_scores_table(report_dir: Path):
    """A Rich table of a written report's final scores (None when there are none)."""
    from rich.table import Table
    from rich.text import Text

    path = Path(report_dir) / REPORT_TABLES / "final_scores.csv"
    if not path.exists():
        return None
    df = pd.read_csv(path)
    table = Table(title=f"final scores: % correct with {score_interval_caption(df['interval'])}")
    for col in ("arm", "benchmark", "units", "avg@n", "pass@n", "maj@k", "interval"):
        table.add_column(col, justify="left" if col in ("arm", "benchmark", "interval") else "right", overflow="fold")
    for r in df.itertuples(index=False):
        maj = f"maj@{int(r.maj_k)} {with_ci(r.maj, r.maj_lo, r.maj_hi)}" if finite(r.maj_k) else "–"
        table.add_row(*map(Text, (r.arm, r.benchmark, str(r.seeds), with_ci(r.avg, r.avg_lo, r.avg_hi),
                                   with_ci(r.pass_k, r.pass_k_lo, r.pass_k_hi), maj, str(r.interval))))  # "[n/a]": no tag
    return table
