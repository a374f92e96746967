"""The report's first screen: the question (the declared comparisons), the calls in plain words with
Δ, interval and deciding p, the figure of per-unit Δ, the design's power and declaration, what is
missing (summarised by arm), and the method as short footnotes linked to docs/method.md. Every
section after it is the details (folded in report.html: `rbctl.report.render.document.Doc.fold`).
"""

from __future__ import annotations

import os
from pathlib import Path

from rbctl.report.analyses.comparisons import MIN_BOOTSTRAP_UNITS, Comparison, call, call_text
from rbctl.report.data import ReportData
from rbctl.report.render import calls
from rbctl.report.render.figures import plot_deltas
from rbctl.report.render.page import Page
from rbctl.report.render.tables import pval
from rbctl.report.stats import MIN_UNITS, NOT_TESTABLE
from rbctl.store.rundir import REPORT_TABLES

METHOD_MD = Path(__file__).resolve().parents[3] / "docs" / "method.md"  # in a source checkout

INTERVALS = ("95% t-interval over units (n − 1 df), unadjusted, clipped to Δ's range [−100, +100]; no interval "
             "where every unit gave the same Δ")
CALLS = ("Each comparison gets one of four calls: **higher** or **lower** (the paired t-test rejects Δ = 0 after "
         "Holm), **equivalent within ±δ** (two one-sided tests, Holm-adjusted alike, reject |Δ| ≥ δ, the declared "
         "margin; without a margin nothing is called equivalent), or **inconclusive**, with the direction of Δ and "
         "the smallest |Δ| the test detects at power 0.8 with these units and their measured sd(Δ) (at α/m)")
LOOK_CALLS = ("Under the sequential design each comparison is called at a look: the paired t over that look's units "
              "against the look's α-spending boundary (graphical Holm within each declared family), **higher** or "
              "**lower** where |t| crosses it, **equivalent within ±δ** where TOST's boundary is crossed, "
              "**inconclusive** at the last look (or stopped for futility); until then **interim**, not a call. The "
              "look's units, |t| and boundary are printed with the call: no fixed-design p over the units at hand "
              "decides it")
UNTESTABLE = (f"A comparison with fewer than {MIN_UNITS} units, or with the same Δ in every unit (sd(Δ) = 0), is not "
              "testable: no p-value, no call, and it is not counted in the Holm family.")
P_IMPROVEMENT = ("P(improvement) = P(a run of the arm beats a run of the reference; rliable's unpaired form) with two "
                 "95% intervals: a **paired** bootstrap (units resampled, each unit's two runs kept together; rbctl's) "
                 "and rliable's independent stratified bootstrap (each arm's runs resampled on their own), shown from "
                 f"{MIN_BOOTSTRAP_UNITS} units on (with fewer, a percentile interval of so few distinct resamples "
                 "lands on the estimate: the estimate alone)")


def method_ref(out: Path, section: str) -> str:
    """``docs/method.md, "Comparing arms"``, as a link to the checkout's docs/method.md relative to the
    report folder ``out`` where the package runs from a source checkout (plain text otherwise)."""
    text = f'docs/method.md, "{section}"'
    if not METHOD_MD.is_file():
        return text
    anchor = section.lower().replace(" ", "-")
    return f"[{text}]({Path(os.path.relpath(METHOD_MD, Path(out).resolve())).as_posix()}#{anchor})"


def method_notes(out: Path, at_looks: bool = False) -> list[tuple[str, str]]:
    """The footnotes of the first screen: how Δ, its interval and the calls are computed (``at_looks``:
    the calls are a sequential design's looks')."""
    ref = method_ref(out, "Comparing arms")
    calls_note = (f"{LOOK_CALLS} ({method_ref(out, 'Sequential designs')})." if at_looks else
                  f"{CALLS}. Holm–Bonferroni within each declared family at its α ({ref}).")
    return [("1", f"Δ = arm − reference, in points of the metric, paired by unit; {INTERVALS} ({ref})."),
            ("2", calls_note),
            ("3", UNTESTABLE),
            ("4", f"{P_IMPROVEMENT} ({ref}).")]


def _at_looks(data: ReportData) -> bool:
    """Whether the calls are a sequential design's looks'."""
    seq = data.sequential
    return seq is not None and seq.design is not None and any(calls.sequential(c) for _, cs in calls.declared(data)
                                                              for c in cs)


def delta_label(c: Comparison) -> str:
    """A row label of the per-unit Δ figure: the comparison and, below it, its call and deciding p (a
    look's call: the look's test)."""
    if call(c) == NOT_TESTABLE:
        return f"{c.label} ({c.metric})\nnot testable: {c.delta.untestable}"
    if calls.sequential(c):
        return f"{c.label} ({c.metric})\n{call_text(c)}"  # the look's units, |t| and boundary
    if c.equivalent and not c.significant:  # the test that made the call: TOST's
        return f"{c.label} ({c.metric})\nTOST Holm p {pval(c.p_tost_holm)}: {call_text(c)}"
    return f"{c.label} ({c.metric})\nHolm p {pval(c.p_holm)}: {call_text(c)}"


def _delta_figure(data: ReportData, page: Page) -> None:
    """The figure of per-unit Δ of every called comparison (of avg@n only when none is declared)."""
    sw = data.sweep
    comps = [c for _, members in calls.declared(data) for c in members if sw.spec is not None or c.metric == "avg@n"]
    if not comps:
        return
    units = calls.unit_word(sw)
    page.figure(plot_deltas([{"label": delta_label(c), "deltas": [100 * x for x in c.delta.deltas],
                              "mean": 100 * c.delta.mean, "lo": 100 * c.delta.lo, "hi": 100 * c.delta.hi}
                             for c in comps],
                            f"Per-unit Δ of the {'declared' if sw.spec else 'stated'} comparisons ({units})"),
                "per_unit_delta", "per-unit Δ of each comparison", css="lead")


def lead(data: ReportData, page: Page) -> None:
    """The first screen (module docstring), then the fold: what follows is the details."""
    sw, doc = data.sweep, page.doc
    doc.heading(2, "The question")
    doc.para(calls.question(data) + " [^1]")
    doc.heading(2, "The answer")
    rows = calls.call_rows(data)
    if rows:
        families = {r.family for r in rows}
        doc.bullets([(f"{r.family}: " if len(families) > 1 else "") + r.sentence for r in rows])
        how = ("Each call is made at a look of the sequential design, with the look's units and the boundary |t| "
               "crossed (or not yet: interim) [^2]" if _at_looks(data) else
               "Each call is Holm-adjusted within its declared family [^2]")
        doc.para(f"{how}; a comparison that is not testable gets none [^3].")
    else:
        doc.para("No call.")
    if data.verdict.missing:
        doc.para("**Not computed** (no final evaluations of both arms on the principal benchmark): "
                 + ", ".join(data.verdict.missing) + ".")
    doc.para("**Design.** " + " ".join(calls.design(data)))
    if rows:
        _delta_figure(data, page)
    missing = calls.missing_lines(sw)
    if missing:
        doc.para("**Incomplete** (not scored; their logged steps are drawn): " + "; ".join(missing)
                 + f" (run by run: {REPORT_TABLES}/incomplete.csv).")
    doc.notes(method_notes(page.out, _at_looks(data)))
    doc.fold()
