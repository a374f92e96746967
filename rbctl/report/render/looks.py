"""The report's section on its design's looks (docs/method.md, "Sequential designs"): per declared
comparison the look that decided it, the boundary crossed, the units used; the runs against the fixed
design's; and, while a comparison is undecided, the units to train next. Without a sequential
design, a paragraph on the comparisons read from fewer units than the design's (no call).
"""

from __future__ import annotations

import math

import pandas as pd

from rbctl.report.data import ReportData
from rbctl.report.render.page import Page
from rbctl.report.sequential_calls import Interim, unit_text
from rbctl.report.sequential_looks import CONTINUE, Design, bounds_at

SPENDING = {"obrien_fleming": "O'Brien–Fleming-type", "pocock": "Pocock-type"}
INTERIM_WHY = ("a call needs every unit of its design: read at full α after every few units and stopped at the first "
               "difference, a report finds a false one several times as often as α (docs/method.md, \"Sequential "
               "designs\")")


def _have(data: ReportData) -> dict[str, set]:
    """Each arm's units with a final evaluation."""
    return {arm: {r.unit for r in runs if r.finals} for arm, runs in data.sweep.by_arm.items()}


def _num(v: float, digits: int = 2) -> str:
    return f"{v:.{digits}f}" if isinstance(v, (int, float)) and math.isfinite(v) else "–"


def call_rows(seq: Interim) -> pd.DataFrame:
    """One row per declared comparison: its decision, the look that made it (or its last look), the units
    used there, Δ̄ and sd(Δ) in points, t, the boundary and the level it was tested at, and the units
    its decision saved against the fixed design (the runs saved are the sweep's: arms are shared)."""
    rows, looks = [], len(seq.design.looks)
    for (fam, arm, ref), s in seq.status().items():
        e = s.entry if s.entry is not None else next(
            (c for r in reversed(seq.history) for c in r.comparisons if c.key == (fam, arm, ref)), None)
        rows.append({"family": fam, "comparison": f"{arm} − {ref}",
                     "decision": s.decision if s.decision != CONTINUE else "not decided",
                     "look": f"{s.look} of {looks}" if s.look else (f"{len(seq.history)} of {looks}" if e else "–"),
                     "units": e.n if e else 0, "Δ points": _num(e.mean, 1) if e else "–",
                     "sd(Δ)": _num(e.sd, 1) if e else "–", "|t|": _num(abs(e.t)) if e else "–",
                     "boundary |t|": _num(e.bounds.t) if e else "–", "α": f"{e.bounds.level:.4g}" if e else "–",
                     "boundary crossed": (e.crossed or "none") if e else "no look yet",
                     f"units saved (of {seq.design.units})": seq.design.units - e.n if s.look and e else 0})
    return pd.DataFrame(rows)


def boundary_rows(design: Design, fam) -> pd.DataFrame:
    """A family's boundaries on the paired |t| (the z they come from) at each look, by the hypotheses
    not yet rejected (Holm); TOST's and futility's where the family and design have them."""
    m, rows = len(fam.pairs), []
    for j, n in enumerate(design.looks):
        row = {"family": fam.name, "look": j + 1, "units": n}
        for r in range(m):
            b = bounds_at(design, fam, design.looks[:j + 1], r, r)
            row[f"|t| at α/{m - r}"] = "never" if not math.isfinite(b.t) else f"{b.t:.2f} ({b.z:.2f})"
        b = bounds_at(design, fam, design.looks[:j + 1])
        if fam.margin is not None:
            row[f"TOST at α/{m}"] = "never" if not math.isfinite(b.equivalence_t) else f"{b.equivalence_t:.2f}"
        if design.futility:
            row["futility |t| <"] = _num(b.futility_t) if b.futility_t is not None else "–"
        rows.append(row)
    return pd.DataFrame(rows)


def look_rows(seq: Interim) -> pd.DataFrame:
    recorded = len(seq.source.recorded)
    return pd.DataFrame([{"look": r.look, "units": r.units,
                          "taken": f"by rbctl ablate, {r.time}" if i < recorded else "by this report, from the runs",
                          "decided": ", ".join(f"{c.arm} − {c.reference} {c.decision}" for c in r.comparisons
                                               if c.decision != CONTINUE) or "none"}
                         for i, r in enumerate(seq.history)])


def next_lines(data: ReportData) -> list[str]:
    """What to run next under the design, one line per arm (the terminal's and the section's): [] when
    every comparison is decided, or without a sequential design."""
    seq = data.sequential
    if seq is None or seq.design is None:
        return []
    k, todo = seq.next_units(_have(data))
    if not k:
        return []
    n = seq.design.looks[k - 1]
    out = [f"next: look {k} of {len(seq.design.looks)} at {n} units needs"]
    out += [f"  {arm}: {unit_text(units)}" if units else f"  {arm}: nothing more (it has every unit of look {k})"
            for arm, units in todo.items()]
    return out


def decided_lines(data: ReportData) -> list[str]:
    """Each declared comparison's standing under the sequential design, one line each ([] without one)."""
    seq = data.sequential
    if seq is None or seq.design is None:
        return []
    out = []
    for c in data.comparisons.comparisons:
        if c.sequential is not None and c.family != "exploratory":
            out.append(f"{c.family}: {c.label}: {c.sequential.text}")
    return out


def looks(data: ReportData, page: Page) -> None:
    """The section (module docstring)."""
    seq, doc = data.sequential, page.doc
    if seq is None:
        return
    if seq.design is None:
        if seq.interim:
            doc.heading(2, "Interim: not a call")
            doc.para(f"{', '.join(seq.interim)}: fewer units than the design's {seq.units}, so each is shown with its "
                     f"estimate and interval and called \"interim (k of {seq.units} units): not a call\", never higher, "
                     f"lower or equivalent: {INTERIM_WHY}. A sequential design (`design:` in the sweep file or runs "
                     "manifest) allows valid calls at planned looks.")
        return
    d = seq.design
    doc.heading(2, "Sequential design")
    recorded = len(seq.source.recorded)
    doc.para(f"Looks at {', '.join(map(str, d.looks))} units ({SPENDING[d.spending]} Lan–DeMets α-spending, futility "
             f"{'stop, non-binding' if d.futility else 'off'}); each declared family's calls by graphical Holm. "
             f"{len(seq.history)} of {len(d.looks)} looks taken"
             + (f" ({recorded} recorded by `rbctl ablate` in the sweep's state, the rest taken here from the runs)"
                if recorded else " (taken here from the runs, in the design's unit order)")
             + ". A decided comparison's call is its look's: the units of that look, the boundary it crossed; the "
               "table of calls above prints it so. The boundaries on |t| (z) by look, at each Holm level:")
    for fam in seq.families:
        page.table(boundary_rows(d, fam), boundary_rows(d, fam), f"sequential_boundaries_{fam.name}")
    page.table(call_rows(seq), call_rows(seq), "sequential_calls")
    if seq.history:
        page.table(look_rows(seq), look_rows(seq), "sequential_looks")
    used, fixed = seq.runs()
    ran = sum(len(u) for u in _have(data).values())
    if seq.decided():
        doc.para(f"Every comparison is decided: the design runs {used} runs of the fixed design's {fixed} "
                 f"({fixed - used} saved, {(fixed - used) / fixed:.0%}); {ran} have a final evaluation here.")
    else:
        lines = next_lines(data)
        doc.para(f"Not every comparison is decided: {ran} runs have a final evaluation, of at most {used} (the fixed "
                 f"design's {fixed}). " + (lines[0].replace("next:", "The next") + ":" if lines else ""))
        if lines:
            doc.bullets([x.strip() for x in lines[1:]])
