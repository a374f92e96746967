"""What `rbctl report` and `rbctl ablate` print last: the declared comparisons' calls (comparison, Δ
with its interval, the p that decided the call, the call) as a Rich table that fits 80 columns, and
a study's claims with their calls. The answer ends the output, as pytest's summary line does."""

from __future__ import annotations

from pathlib import Path

from rbctl.report.data import ReportData
from rbctl.report.render import calls


def calls_table(data: ReportData):
    """The calls (`rbctl.report.render.calls.call_rows`) as a Rich table, None without any. Narrow
    columns keep their cells on one line; the comparison and the call wrap, so that the table fits 80
    columns without cutting a word."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    rows = calls.call_rows(data)
    if not rows:
        return None
    families = len({r.family for r in rows}) > 1
    what = "declared comparisons" if data.sweep.spec is not None else "stated pairs, one Holm family (none declared)"
    table = Table(title=f"calls: {what}", box=box.SIMPLE_HEAD, pad_edge=False, title_justify="left")
    table.add_column("comparison", overflow="fold")
    table.add_column("Δ pts [95% CI]", justify="right", no_wrap=True)
    table.add_column("n", justify="right", no_wrap=True)
    table.add_column("p", justify="right", no_wrap=True)
    table.add_column("call", overflow="fold")
    for r in rows:
        label = (f"{r.family}: " if families else "") + f"{r.comparison} ({r.metric})"
        table.add_row(*map(Text, (label, r.delta, str(r.units), _p_cell(r), _call_cell(r))))  # Text: "[n/a]" is no markup tag
    table.caption = "p: Holm-adjusted in its family (TOST: of the equivalence test)"
    if any(_at_look(r) for r in rows):  # a look's call: no fixed-design p decided it
        table.caption += "; look k: the sequential design's look k, its |t| and boundary on the lines above"
    table.caption_justify = "left"
    return table


def _at_look(r) -> bool:
    """A row whose call a sequential design's look made (or left open): no fixed-design p decided it."""
    return not r.p_name and r.p.startswith("look")


def _call_cell(r) -> str:
    """The call column's cell: the call; at a look, its word alone ("higher", "interim: not decided"),
    since the look is the p column's and its test is on the lines printed above the table
    (`rbctl.report.render.looks.decided_lines`)."""
    return r.call.split(" at look ")[0] if _at_look(r) else r.call


def _p_cell(r) -> str:
    """The p column's cell: the deciding p ("0.012", "0.003 TOST"), or, where none decided the call, the
    sequential design's look that does ("look 1": its |t| and boundary are in the call), else "–"."""
    if not r.p_name:
        return r.p.split(":")[0] if r.p.startswith("look") else "–"
    return "–" if r.p == "–" else (r.p if r.p_name == "Holm p" else f"{r.p} TOST")


def report_paths(report_md: Path) -> list[str]:
    """Where the report is (its path alone on a line: a path does not fold) and what is beside it."""
    from rbctl.store.rundir import REPORT_HTML, SUMMARY_MD, SUMMARY_TEX

    return [f"report: {report_md}", f"  beside it: {REPORT_HTML}, {SUMMARY_MD} and {SUMMARY_TEX} (one page)"]


def claims_table(verdicts: dict):
    """A study's claims, each with its call (outcome) and the reason, as a Rich table (None without a
    claim); ``verdicts[claim] = Verdict`` (`rbctl.report.study.rules`)."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    if not verdicts:
        return None
    table = Table(title="claims", box=box.SIMPLE_HEAD, pad_edge=False, title_justify="left")
    table.add_column("claim", overflow="fold")
    table.add_column("call", overflow="fold")
    table.add_column("why", overflow="fold")
    for cid, v in verdicts.items():
        table.add_row(Text(cid), Text(v.outcome), Text(v.reason))
    return table


def study_claims_table(study):
    """`claims_table` of a loaded study (`rbctl.report.study.load_study`): each claim's rule applied to
    the study's families, as its claims document calls it."""
    from rbctl.report.study.claims_document import verdicts
    from rbctl.report.study.families import families

    return claims_table(verdicts(study, families(study)))
