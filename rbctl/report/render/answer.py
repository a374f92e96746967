"""The report's sections on the calls in detail: the principal (or stated) family's table, each further
declared family, the power of the design, and the warm start as a level (docs/method.md, "Comparing
arms"). Each renders its analysis of the `rbctl.report.data.ReportData` onto the page; the first
screen's answer is `rbctl.report.render.lead`'s.
"""

from __future__ import annotations

import math

import pandas as pd

from rbctl.config.sweep import PRINCIPAL_FAMILY
from rbctl.report.analyses.comparisons import untestable_note
from rbctl.report.data import ReportData, SweepData
from rbctl.report.declaration import declaration_sentence
from rbctl.report.load import source_noun
from rbctl.report.render.calls import source_word
from rbctl.report.render.page import Page
from rbctl.report.sequential_calls import SPENDING_WORDS
from rbctl.report.stats import NOT_TESTABLE
from rbctl.report.render.tables import call_cell, delta, num, plural, points_list, pval, unequal_cells

PI_PAIRED = "P(improvement) [95% paired-bootstrap CI]"  # rbctl's interval: units resampled, pairs kept together
PI_INDEP = "rliable 95% CI (independent bootstrap)"  # rliable's: each arm's runs resampled on their own
DELTA_T = "Δ points [95% t-CI]"


def pi_cell(v, lo, hi) -> str:
    """``0.83 [0.61, 0.97]``; the estimate alone where its interval is withheld; "–" without a value."""
    if not math.isfinite(v):
        return "–"
    return f"{v:.2f} [{num(lo, 2)}, {num(hi, 2)}]" if math.isfinite(lo) and math.isfinite(hi) else f"{v:.2f}"


def interval_cell(lo, hi) -> str:
    return "–" if not (math.isfinite(lo) and math.isfinite(hi)) else f"[{lo:.2f}, {hi:.2f}]"


def holm_p_cell(p, untestable: str) -> str:
    """A Holm-adjusted p, or "not testable" for a comparison outside the family for that reason."""
    return pval(p, NOT_TESTABLE if untestable else "–")


TOST_P = "equivalence: margin, TOST Holm p"
# The p column where a sequential design's look made (or withheld) a call: the look's |t| against its
# boundary stands in that row, never the fixed-design Holm p, which decided nothing there; where a
# comparison is interim without a design, nothing decided it ("no test: interim").
LOOK_P = "Holm p, or the look's |t| against its boundary"
INTERIM_P = "Holm p (no test where interim)"
TOST_LOOK = "equivalence: margin, TOST Holm p or what stands in for it"


def verdict_table(rows: pd.DataFrame) -> pd.DataFrame:
    """The table of a family's calls (tables/verdicts.md, the README's headline) from comparison rows;
    a column of the equivalence test only where the family states a margin. A row called at a
    sequential design's look shows the look's test (``look_test``) in the p columns, not a p."""
    untestable = rows["not_testable"].fillna("").astype(str)
    looks = rows["look_test"].fillna("").astype(str) if "look_test" in rows else pd.Series("", index=rows.index)
    out = pd.DataFrame({
        "comparison": rows["arm"] + " − " + rows["ref"], "benchmark": rows["benchmark"], "metric": rows["metric"],
        "units": rows["seeds"], DELTA_T: [delta(*x) for x in zip(rows["delta"], rows["delta_lo"], rows["delta_hi"])],
        _p_header(looks): [
            look or holm_p_cell(p, u) for p, u, look in zip(rows["p_holm"], untestable, looks)],
        PI_PAIRED: [pi_cell(*x) for x in zip(rows["p_improve"], rows["p_improve_paired_lo"], rows["p_improve_paired_hi"])],
        PI_INDEP: [interval_cell(*x) for x in zip(rows["p_improve_indep_lo"], rows["p_improve_indep_hi"])]})
    if len(rows) and rows["margin"].notna().any():
        out[TOST_P if (looks == "").all() else TOST_LOOK] = [
            "–" if not math.isfinite(m) else f"±{100 * m:g}: " + _tost_cell(p, u, look)
            for m, p, u, look in zip(rows["margin"], rows["p_tost_holm"], untestable, looks)]
    out["verdict"] = [call_cell(c, u) for c, u in zip(rows["call"], unequal_cells(rows))]
    return out


def _tost_cell(p, untestable: str, look: str) -> str:
    """The equivalence test's cell after the margin: its Holm p, or under a sequential design the
    look's TOST boundary (the call's cell names it when crossed), or no test where interim."""
    if look.startswith("look"):
        return "TOST's boundary at each look"
    return "no test (interim)" if look else holm_p_cell(p, untestable)


def _p_header(looks: pd.Series) -> str:
    if looks.str.startswith("look").any():
        return LOOK_P
    return INTERIM_P if (looks != "").any() else "Holm p"


def answer(data: ReportData, page: Page) -> None:
    """The declared (or stated) family in full: the calls table with P(improvement) and equivalence,
    what is not testable or refused, and what the runs do not log."""
    v, sw = data.verdict, data.sweep
    comps = list(v.comparisons)
    doc = page.doc
    doc.heading(2, "Calls in detail: the principal comparisons")
    units = "(warm start, seed) pairs" if sw.warm_starts else "seeds"
    m = v.tested
    these = 'this comparison' if m == 1 else f'these {m} comparisons'
    family = ("no comparison is testable, so no Holm–Bonferroni family is formed and no verdict is called [^2]" if not m
              else f"Holm–Bonferroni over {these} at α = {v.alpha:g} [^2]")
    if m and at_looks(data, comps):
        family = f"{looks_words(data.sequential.design, f'graphical Holm over {these} at α = {v.alpha:g}')} [^2]"
    source = source_word(sw)
    if sw.spec is not None:
        s = sw.spec
        doc.para(f"The {plural(len(s.principal), 'comparison')} {source} declares, on "
                 f"{s.metric} ({comps[0].benchmark if comps else s.benchmark or 'the first benchmark'}). Δ in points, "
                 f"paired by unit ({units}) [^1]; {family}; P(improvement) [^4]. Every other comparison in this "
                 "report is in a declared family below or exploratory (no call).")
        doc.para(_declared(sw, PRINCIPAL_FAMILY))
    elif comps:
        noun = source_noun(list(sw.runs)) if any(r.sweep_dir for r in sw.runs) else "none"
        why = {"none": "These runs come from no sweep file, so no comparison was declared before running",
               None: "These runs were read from a folder without a runs manifest, so no comparison was declared "
                     "before running"}.get(noun, f"The {noun} declares no principal comparisons (`comparisons:`)")
        doc.para(f"{why}, so the report's verdicts "
                 f"are over every stated pair (each baseline + budget vs the baseline; each other arm vs its "
                 f"baseline + budget and vs its baseline), avg@n and pass@n, as one family: {family}. Δ in points, "
                 f"paired by unit ({units}) [^1]; P(improvement) [^4].")
    else:
        doc.para("No principal comparisons are declared (`comparisons:`) and the runs hold no stated pair of arms to "
                 "compare: no verdict is called, and everything below is exploratory.")
    if not comps:
        if sw.spec is not None:
            doc.para("No principal comparison has final evaluations on both sides.")
    else:
        page.table(v.rows, verdict_table(v.rows), "verdicts")
        note = untestable_note(comps)
        if note:
            doc.para(note)
        if v.refused:
            doc.para("**Refused** (both arms ran the same training config; kept out of the Holm family): "
                     + ", ".join(v.refused) + ".")
    if sw.remarks:
        doc.para("What the runs do not log, or do unlike each other (each analysis below uses what they do log):")
        doc.bullets(list(sw.remarks))


def at_looks(data: ReportData, comps) -> bool:
    """Whether a sequential design's looks make the calls of ``comps`` (some member has a look's call)."""
    seq = data.sequential
    return seq is not None and seq.design is not None and any(
        c.sequential is not None and not c.same_config for c in comps)


def looks_words(design, holm: str) -> str:
    """How a family under a sequential design is called, in words (``holm``: its multiplicity)."""
    return (f"called at the looks of the sequential design (at {', '.join(map(str, design.looks))} units, "
            f"{SPENDING_WORDS[design.spending]} α-spending; {holm}): a decided comparison's call is that of the look "
            "that decided it, made on that look's units by the boundary its |t| crossed, and the p column shows that "
            "test, not a fixed-design p over the units at hand; an undecided one is interim, not a call "
            "(\"Sequential design\" below)")


def _declared(sw: SweepData, family: str) -> str:
    """When the family was declared, from the sweep directories' records (`rbctl.report.declaration`)."""
    return declaration_sentence([r.sweep_dir for r in sw.runs if r.sweep_dir], family)


def families(data: ReportData, page: Page) -> None:
    """Each further family the sweep file declares (``comparisons.families``): its members' calls,
    Holm-adjusted within the family, as the answer's table."""
    compared, spec = data.comparisons, data.sweep.spec
    if spec is None:
        return
    for name in compared.further_families:
        fam = spec.families[name]
        comps = compared.family(name)
        rows = compared.rows[compared.rows["family"] == name]
        tested = sum(1 for c in comps if not c.same_config and c.delta.testable)
        page.doc.heading(2, f"Declared family: {name}")
        margin = f"equivalence margin ±{fam.margin:g} points" if fam.margin is not None else "no equivalence margin"
        alpha = fam.alpha if fam.alpha is not None else spec.alpha
        how = (f"Holm–Bonferroni over the {tested} tested at α = {alpha:g}, {margin}; called as the answer's "
               "comparisons are")
        if at_looks(data, comps):
            how = f"{margin}; " + looks_words(data.sequential.design, f"graphical Holm over the {tested} tested at α = {alpha:g}")
        page.doc.para(f"Declared in {source_word(data.sweep)} (`comparisons.families.{name}`): "
                      f"{plural(len(fam.pairs), 'comparison')} on {fam.metric or spec.metric}, {how}.")
        page.doc.para(_declared(data.sweep, name))
        page.table(rows, verdict_table(rows), f"family_{name}")
        note = untestable_note(comps)
        if note:
            page.doc.para(note)


def power(data: ReportData, page: Page) -> None:
    """The design's power: per principal comparison, the units, the planning and measured SD of Δ,
    the MDE at the stated power and the power at the stated MDE (paired two-sided t at α/m, m the
    principal comparisons that are tested: Holm's family)."""
    p = data.power
    if p is None:
        return
    s, tested, m, level, numbers = p.spec, p.tested, p.m, p.level, p.rows
    doc = page.doc
    doc.heading(2, "Power of the design")
    unit = "(warm start, seed) pair" if data.sweep.warm_starts else "seed"
    counted = (f"Holm's first step over the m = {len(tested)} principal "
               f"{'comparison that is' if len(tested) == 1 else 'comparisons that are'} tested" if tested else
               "no principal comparison is tested, so m = 1")
    doc.para(f"Paired two-sided t-test over units (a unit is a {unit}) at the conservative level α/m = "
             f"{s.alpha}/{m} = {level:.4g} ({counted}), noncentral "
             f"t. Stated design: MDE {s.mde:g} points at power {s.power:g}, planning SD of Δ {s.planning_sd:g} "
             "points. Measured SD: sd(Δ) over this report's units. Units needed: the smallest n reaching the "
             "stated power at the stated MDE" + (f"; with the stated equivalence margin ±{s.margin:g}, also the power "
                                                 "of TOST at α/m to call a true Δ = 0 equivalent, and the units it "
                                                 "needs (rbctl.report.power.power_tost)" if s.margin is not None else "")
             + ".")
    untested = [f"{c.label} ({c.delta.untestable})" for c in p.comparisons if not c.delta.testable]
    if untested:
        doc.para("Not tested, so not counted in m (as in the Holm family): " + "; ".join(untested) + ".")
    if not len(numbers):
        doc.para("No principal comparison to measure.")
        return
    shown = pd.DataFrame({
        "comparison": numbers["comparison"], "units": numbers["units"],
        "SD planning / measured (points)": [f"{a:.2f} / {num(b, 2)}" for a, b in
                                            zip(numbers["planning_sd"], numbers["measured_sd"])],
        f"MDE at power {s.power:g}: planning / measured": [f"{num(a, 2)} / {num(b, 2)}" for a, b in
                                                          zip(numbers["mde_planning"], numbers["mde_measured"])],
        f"power at MDE {s.mde:g}: planning / measured": [f"{num(a, 2)} / {num(b, 2)}" for a, b in
                                                        zip(numbers["power_planning"], numbers["power_measured"])],
        "units needed: planning / measured": [f"{a} / {'–' if not math.isfinite(b) else int(b)}" for a, b in
                                              zip(numbers["units_needed_planning"], numbers["units_needed_measured"])]})
    if s.margin is not None:  # equivalence needs more units than a difference: say how many
        shown[f"power of TOST at ±{s.margin:g} if Δ = 0: planning / measured"] = [
            f"{num(a, 2)} / {num(b, 2)}" for a, b in zip(numbers["power_tost_planning"], numbers["power_tost_measured"])]
        shown["units needed for TOST: planning / measured"] = [
            f"{a} / {'–' if not math.isfinite(b) else int(b)}" for a, b in
            zip(numbers["units_tost_planning"], numbers["units_tost_measured"])]
    page.table(numbers, shown, "power")


OVER, POOLED, VARIANCE = "over warm starts (unit = warm start)", "pooled (unit = warm start × seed), Holm", "variance of Δ"


def variance_text(v) -> str:
    """The variance row's cell: σ² between and within (points²), the share between, F."""
    if not math.isfinite(v.within):
        return "not testable: needs 2 warm starts and more units than warm starts"
    head = f"σ² between {num(1e4 * v.between, 2)}, within {num(1e4 * v.within, 2)}"
    if not math.isfinite(v.f):
        return f"{head} (every Δ equal): share between warm starts not defined; F not testable"
    f = "∞" if math.isinf(v.f) else num(v.f, 2)
    return f"{head}: {num(100 * v.share_between, 0)}% between warm starts (F = {f})"


def warm_start_rows(w) -> pd.DataFrame:
    """The numbers of the warm-start table (tables/warm_starts.csv) of a `WarmStarts` analysis: per
    comparison a row per warm start, over warm starts, pooled, and the variance of Δ."""
    rows = []
    for c, lvl, over_p in zip(w.comparisons, w.levels, w.over_holm):
        for ws, d in sorted(lvl.per_warm_start.items()):
            rows.append({"comparison": c.label, "metric": c.metric, "level": f"warm start {ws}", "units": d.n,
                         "delta": d.mean, "lo": d.lo, "hi": d.hi, "p": d.p, "p_holm": math.nan,
                         "not_testable": d.untestable, "per_unit": points_list(d.deltas)})
        o = lvl.over_warm_starts
        rows.append({"comparison": c.label, "metric": c.metric, "level": OVER, "units": o.n, "delta": o.mean,
                     "lo": o.lo, "hi": o.hi, "p": o.p, "p_holm": float(over_p), "not_testable": o.untestable,
                     "per_unit": points_list(o.deltas)})
        rows.append({"comparison": c.label, "metric": c.metric, "level": POOLED, "units": c.delta.n,
                     "delta": c.delta.mean, "lo": c.delta.lo, "hi": c.delta.hi, "p": c.delta.p, "p_holm": c.p_holm,
                     "not_testable": c.delta.untestable, "per_unit": ""})
        v = lvl.components
        rows.append({"comparison": c.label, "metric": c.metric, "level": VARIANCE, "units": v.n,
                     "delta": math.nan, "lo": math.nan, "hi": math.nan, "p": v.p, "p_holm": math.nan,
                     "not_testable": "" if v.testable else "F not defined", "per_unit": variance_text(v)})
    return pd.DataFrame(rows)


def warm_starts(data: ReportData, page: Page) -> None:
    """Per principal comparison: the verdict per warm start, the test over warm starts beside the
    pooled one, and how much of Δ's variance lies between warm starts. The tests over warm starts
    of the section's comparisons are one Holm family (at the principal α)."""
    w = data.warm_starts
    if w is None:
        return
    doc = page.doc
    doc.heading(2, "Warm starts")
    m = w.tested
    family = (f"Holm-adjusted over the {plural(m, 'comparison')} of this table tested at that level (their own "
              f"family, α = {w.alpha:g})" if m else "not testable for any comparison here, so no Holm family")
    doc.para(f"{plural(len(w.warm_starts), 'warm start')}: {', '.join(w.warm_starts)}. Per warm start: Δ over "
             "its seeds, t-interval and p unadjusted (exploratory). **Over warm starts**: each warm start's mean "
             "Δ is one unit, t over the W warm starts (W − 1 df): the test that generalises to another warm start; "
             f"{family}. **Pooled**: the (warm start, seed) units of the answer, Holm p of the answer's family: "
             "inference for these warm starts. Intervals clipped to [−100, +100]. Variance of Δ split by a one-way "
             "random-effects ANOVA (σ² in points²). Not testable as in [^3].")
    untested = [f"{c.label} ({lvl.over_warm_starts.untestable})" for c, lvl in zip(w.comparisons, w.levels)
                if not lvl.over_warm_starts.testable]
    if untested:
        doc.para("Not testable over warm starts (kept out of that family): " + "; ".join(untested) + ".")
    numbers = warm_start_rows(w)
    if not len(numbers):
        doc.para("No comparison to split by warm start.")
        return
    untestable = numbers["not_testable"].astype(str)
    shown = pd.DataFrame({"comparison": numbers["comparison"], "metric": numbers["metric"], "level": numbers["level"],
                          "units": numbers["units"],
                          DELTA_T: [delta(*x) for x in zip(numbers["delta"], numbers["lo"], numbers["hi"])],
                          "p (unadj.)": [pval(p, NOT_TESTABLE if u else "–") for p, u in zip(numbers["p"], untestable)],
                          "Holm p": [holm_p_cell(p, u) if lvl in (OVER, POOLED) else "–"
                                     for p, u, lvl in zip(numbers["p_holm"], untestable, numbers["level"])],
                          "per-unit Δ / variance": numbers["per_unit"]})
    page.table(numbers, shown, "warm_starts")
