"""One page to paste into a paper, written beside report.md: ``summary.md`` and ``summary.tex``.

Both hold the question (the declared comparisons), the calls table (comparison, metric, units, Δ
with its 95% interval, the p that decided the call, the call), the figure of per-unit Δ and the
design (units, power, margin, declaration), from the same words as the report's first screen
(`rbctl.report.render.calls`). ``summary.tex`` is a fragment, not a document: a ``table`` with a
booktabs ``tabular`` and a ``figure`` (``\\includegraphics`` of figures/per_unit_delta.png, relative
to the report folder), ASCII only; it needs ``\\usepackage{booktabs,graphicx}`` in the preamble.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from rbctl.report.data import ReportData
from rbctl.report.render import calls
from rbctl.report.render.tables import latex_table, latex_text, markdown_table
from rbctl.store.atomic import write_atomic
from rbctl.store.rundir import REPORT_FIGURES, SUMMARY_MD, SUMMARY_TEX

FIGURE = "per_unit_delta.png"


def calls_frame(rows: list[calls.CallRow]) -> pd.DataFrame:
    """The calls table as the summary shows it (a family column only where there are several)."""
    df = pd.DataFrame({"comparison": [r.comparison for r in rows], "metric": [r.metric for r in rows],
                       "units": [r.units for r in rows], "Δ points [95% CI]": [r.delta for r in rows],
                       _p_header(rows): [(f"{r.p} ({r.p_name})" if r.p != "–" else "–") if r.p_name else r.p
                                         for r in rows],
                       "call": [r.call for r in rows]})
    if len({r.family for r in rows}) > 1:
        df.insert(0, "family", [r.family for r in rows])
    return df


def _p_header(rows: list[calls.CallRow]) -> str:
    """The deciding p's column; where a sequential design's look made some call, the look's test stands
    in its row instead (no fixed-design p decided it), and the column says so ("no test: interim" in the
    row of a comparison that is not a call)."""
    return "decides the call" if _at_looks(rows, "look") else "p (decides the call)"


def summary_markdown(data: ReportData, figure: bool) -> str:
    rows = calls.call_rows(data)
    out = ["# Summary", "", f"**Question.** {calls.question(data)}", ""]
    if rows:
        out += ["**Calls.**", "", markdown_table(calls_frame(rows))]
    else:
        out += ["**Calls.** None.", ""]
    if figure:
        out += [f"![per-unit Δ of each comparison]({REPORT_FIGURES}/{FIGURE})", ""]
    out += ["**Design.** " + " ".join(calls.design(data)), ""]
    missing = calls.missing_lines(data.sweep)
    if missing:
        out += ["**Incomplete** (not scored): " + "; ".join(missing) + ".", ""]
    looked = ("; a call at a look: the paired |t| over the look's units against its α-spending boundary, not a "
              "fixed-design p (docs/method.md, \"Sequential designs\")") if _at_looks(rows, "look") else ""
    out += ["Δ: 95% t-interval over units, unadjusted; p: Holm-adjusted within the declared family (TOST's for an "
            f"equivalence call); docs/method.md, \"Comparing arms\"{looked}.", ""]
    return "\n".join(out)


def _at_looks(rows: list[calls.CallRow], start: str = "") -> bool:
    """Whether no p decided some call (its row has none): a sequential design's look made it, or withheld it
    as interim, or it is interim without a design; ``start`` "look": a look's only."""
    return any(not r.p_name and r.p.startswith(start) for r in rows)


def summary_latex(data: ReportData, figure: bool) -> str:
    rows = calls.call_rows(data)
    question = latex_text(calls.question(data))
    design = latex_text(" ".join(calls.design(data)))
    how = ("at the sequential design's looks ($|t|$ against $\\alpha$-spending boundaries, graphical Holm within the "
           "declared family)" if _at_looks(rows, "look") else "Holm-adjusted within the declared family")
    out = ["% rbctl report: the calls on one page. A fragment to \\input{} or paste into a document whose",
           "% preamble has \\usepackage{booktabs} and \\usepackage{graphicx}; the figure's path is relative to",
           "% the report folder.",
           "\\begin{table}[t]", "\\centering", "\\small",
           f"\\caption{{{question} Calls: {how}; $\\Delta$ with its 95\\% t-interval over units.}}",
           "\\label{tab:rbctl-calls}"]
    out += [latex_table(calls_frame(rows)).rstrip()] if rows else ["No call."]
    out += ["\\end{table}", ""]
    if figure:
        out += ["\\begin{figure}[t]", "\\centering",
                f"\\includegraphics[width=\\linewidth]{{{REPORT_FIGURES}/{FIGURE}}}",
                f"\\caption{{Per-unit $\\Delta$ of each comparison (dots), its mean and 95\\% t-interval. {design}}}",
                "\\label{fig:rbctl-per-unit-delta}", "\\end{figure}"]
    else:
        out += [f"% Design: {design}"]
    return "\n".join(out) + "\n"


def write_summary(data: ReportData, out: Path) -> tuple[Path, Path]:
    """Write ``out/summary.md`` and ``out/summary.tex``; return their paths."""
    out = Path(out)
    figure = (out / REPORT_FIGURES / FIGURE).is_file()
    md, tex = out / SUMMARY_MD, out / SUMMARY_TEX
    write_atomic(md, summary_markdown(data, figure), kind="report")
    write_atomic(tex, summary_latex(data, figure), kind="report")
    return md, tex
