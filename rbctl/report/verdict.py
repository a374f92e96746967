"""The report's opening sections: the answer (the principal comparisons' verdicts and the figure of
their per-unit Δ), the power of the design, and the warm start as a level (docs/method.md,
"Comparing arms"). Each takes the `rbctl.report.build.Report` and appends to its document.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from rbctl.report.compare import ALPHA, PRINCIPAL, STATED, Comparison, in_family, untestable_note, verdict
from rbctl.report.figures import plot_deltas
from rbctl.report.load import unit_label
from rbctl.report.power import mde_paired, power_paired, units_for_power
from rbctl.report.robust import prob_improvement, stratified_bootstrap
from rbctl.report.stats import MIN_UNITS, holm
from rbctl.report.tables import NOT_TESTABLE, delta, num, plural, points_list, pval
from rbctl.report.warmstart import warm_start_level

PI_PAIRED = "P(improvement) [95% paired-bootstrap CI]"  # rbctl's interval: units resampled, pairs kept together
PI_INDEP = "rliable 95% CI (independent bootstrap)"  # rliable's: each arm's runs resampled on their own
DELTA_T = "Δ points [95% t-CI]"
INTERVALS = ("95% t-interval over units (n − 1 df), unadjusted, clipped to Δ's range [−100, +100]; no interval "
             "where every unit gave the same Δ")
P_IMPROVEMENT = ("P(improvement) = P(a run of the arm beats a run of the reference; rliable's unpaired form) with two "
                 "95% intervals: a **paired** bootstrap (units resampled, each unit's two runs kept together; rbctl's) "
                 "and rliable's independent stratified bootstrap (each arm's runs resampled on their own)")
UNTESTABLE = (f"A comparison with fewer than {MIN_UNITS} units, or with the same Δ in every unit (sd(Δ) = 0), is not "
              "testable: no p-value, no verdict, and it is not counted in the Holm family.")


def headline(rep) -> list[Comparison]:
    """The comparisons whose verdicts the report calls: the principal family, or, without one, the
    stated pairs (today's one family)."""
    fam = PRINCIPAL if rep.spec is not None else STATED
    return [c for c in rep.comparisons if c.family == fam]


def p_improvement(rep, c: Comparison) -> dict[str, float]:
    """P(arm > ref) over the comparison's common units, with its paired bootstrap interval (units
    resampled, each unit's two runs together) and rliable's independent stratified bootstrap one."""
    a, b = rep.scores[c.arm, c.benchmark], rep.scores[c.ref, c.benchmark]
    kind = "avg" if c.metric == "avg@n" else "pass"
    pa, pb = a.per_unit(kind, c.k), b.per_unit(kind, c.k)
    x = np.array([[pa[u]] for u in c.delta.units])
    y = np.array([[pb[u]] for u in c.delta.units])
    out = dict.fromkeys(("p_improve", "p_improve_paired_lo", "p_improve_paired_hi", "p_improve_indep_lo",
                         "p_improve_indep_hi"), math.nan)
    if len(x):
        out["p_improve"] = prob_improvement(x, y)
        out["p_improve_paired_lo"], out["p_improve_paired_hi"] = stratified_bootstrap(
            prob_improvement, [x, y], paired=True, n_boot=rep.n_boot)
        out["p_improve_indep_lo"], out["p_improve_indep_hi"] = stratified_bootstrap(
            prob_improvement, [x, y], paired=False, n_boot=rep.n_boot)
    return out


def comparison_rows(rep, comps: list[Comparison]) -> pd.DataFrame:
    """The numbers of each comparison (one row each; fractions): what comparisons.csv holds."""
    rows = []
    for c in comps:
        d = c.delta
        rows.append({"family": c.family, "kind": c.kind, "baseline": c.baseline, "arm": c.arm, "ref": c.ref,
                     "benchmark": c.benchmark, "metric": c.metric, "k": c.k, "arm_score": c.arm_score,
                     "ref_score": c.ref_score, "delta": d.mean, "delta_lo": d.lo, "delta_hi": d.hi, "sd": d.sd,
                     "p": d.p, "p_holm": c.p_holm, "significant": c.significant, "same_config": c.same_config,
                     "not_testable": d.untestable, "verdict": verdict(c), "seeds": d.n,
                     "seed_list": ",".join(unit_label(u) for u in d.units),
                     "per_seed_delta": ",".join(f"{x:.4f}" for x in d.deltas), "hb_lo": c.hb_lo, "hb_hi": c.hb_hi,
                     **p_improvement(rep, c)})
    return pd.DataFrame(rows)


def pi_cell(v, lo, hi) -> str:
    """``0.83 [0.61, 0.97]``; "–" without a value."""
    return "–" if not math.isfinite(v) else f"{v:.2f} [{num(lo, 2)}, {num(hi, 2)}]"


def interval_cell(lo, hi) -> str:
    return "–" if not (math.isfinite(lo) and math.isfinite(hi)) else f"[{lo:.2f}, {hi:.2f}]"


def holm_p_cell(p, untestable: str) -> str:
    """A Holm-adjusted p, or "not testable" for a comparison outside the family for that reason."""
    return pval(p, NOT_TESTABLE if untestable else "–")


def verdict_table(rows: pd.DataFrame) -> pd.DataFrame:
    """The answer's table (tables/verdicts.md, the README's headline) from comparison rows."""
    untestable = rows["not_testable"].fillna("").astype(str)
    return pd.DataFrame({
        "comparison": rows["arm"] + " − " + rows["ref"], "benchmark": rows["benchmark"], "metric": rows["metric"],
        "units": rows["seeds"], DELTA_T: [delta(*x) for x in zip(rows["delta"], rows["delta_lo"], rows["delta_hi"])],
        "Holm p": [holm_p_cell(p, u) for p, u in zip(rows["p_holm"], untestable)],
        PI_PAIRED: [pi_cell(*x) for x in zip(rows["p_improve"], rows["p_improve_paired_lo"], rows["p_improve_paired_hi"])],
        PI_INDEP: [interval_cell(*x) for x in zip(rows["p_improve_indep_lo"], rows["p_improve_indep_hi"])],
        "verdict": rows["verdict"]})


def _delta_label(c: Comparison) -> str:
    call = verdict(c)
    if call == NOT_TESTABLE:
        return f"{c.label} ({c.metric})\nnot testable: {c.delta.untestable}"
    return f"{c.label} ({c.metric})\nHolm p {pval(c.p_holm)}: {call}"


def answer(rep) -> None:
    """The principal comparisons as a verdict table, and the figure of their per-unit Δ."""
    comps = headline(rep)
    rep.doc.heading(2, "Answer: the principal comparisons")
    units = "(warm start, seed) pairs" if rep.warm_starts else "seeds"
    m = sum(in_family(c) for c in comps)
    alpha = rep.spec.alpha if rep.spec is not None else ALPHA
    family = ("no comparison is testable, so no Holm–Bonferroni family is formed and no verdict is called" if not m else
              f"Holm–Bonferroni over {'this comparison' if m == 1 else f'these {m} comparisons'} at α = {alpha:g}")
    if rep.spec is not None:
        s = rep.spec
        rep.doc.para(f"The {plural(len(s.principal), 'comparison')} the sweep file states before running, on "
                     f"{s.metric} ({comps[0].benchmark if comps else s.benchmark or 'the first benchmark'}). Δ = arm − "
                     f"reference in points, paired by unit ({units}); {INTERVALS}; {family}; {P_IMPROVEMENT}. "
                     f"{UNTESTABLE} Every other comparison in this report is exploratory.")
    elif comps:
        rep.doc.para(f"The sweep file states no principal comparisons (`comparisons:`), so the report's verdicts "
                     f"are over every stated pair (each baseline + budget vs the baseline; each other arm vs its "
                     f"baseline + budget and vs its baseline), avg@n and pass@n, as one family: {family}. Δ in points, "
                     f"paired by unit ({units}); {INTERVALS}; {P_IMPROVEMENT}. {UNTESTABLE}")
    else:
        rep.doc.para("No principal comparisons are stated (no sweep file's `comparisons:`) and the runs hold no stated "
                     "pair of arms to compare: no verdict is called, and everything below is exploratory.")
    if rep.spec is not None:
        missing = [f"{a} − {r}" for a, r in rep.spec.principal if not any((c.arm, c.ref) == (a, r) for c in comps)]
        if missing:
            rep.doc.para("**Not computed** (no final evaluations of both arms on the principal benchmark): "
                         + ", ".join(missing) + ".")
    if not comps:
        if rep.spec is not None:
            rep.doc.para("No principal comparison has final evaluations on both sides.")
    else:
        rows = rep.numbers[rep.numbers["family"] == comps[0].family]
        rep.table(rows, verdict_table(rows), "verdicts")
        note = untestable_note(comps)
        if note:
            rep.doc.para(note)
        flagged = [c.label for c in comps if c.same_config]
        if flagged:
            rep.doc.para("**Refused** (both arms ran the same training config; kept out of the Holm family): "
                         + ", ".join(flagged) + ".")
        drawn = [c for c in comps if rep.spec is not None or c.metric == "avg@n"]
        rep.figure(plot_deltas([{"label": _delta_label(c), "deltas": [100 * x for x in c.delta.deltas],
                                 "mean": 100 * c.delta.mean, "lo": 100 * c.delta.lo, "hi": 100 * c.delta.hi}
                                for c in drawn], f"Per-unit Δ of the {'principal' if rep.spec else 'stated'} "
                                                 f"comparisons ({units})"),
                   "per_unit_delta", "per-unit Δ of each comparison")
    if rep.issues:
        rep.doc.para("Incomplete: " + "; ".join(f"{i.name} ({i.status})" for i in rep.issues) + " (see Runs).")


def power(rep) -> None:
    """The design's power: per principal comparison, the units, the planning and measured SD of Δ,
    the MDE at the stated power and the power at the stated MDE (paired two-sided t at α/m, m the
    principal comparisons that are tested: Holm's family)."""
    if rep.spec is None:
        return
    s = rep.spec
    comps = [c for c in headline(rep) if not c.same_config]
    tested = [c for c in comps if c.delta.testable]
    m = max(1, len(tested))
    level = s.alpha / m
    rep.doc.heading(2, "Power of the design")
    rows = []
    for c in comps:
        n, measured = c.delta.n, 100 * c.delta.sd
        rows.append({"comparison": c.label, "units": n, "tested": c.delta.testable, "not_testable": c.delta.untestable,
                     "planning_sd": s.planning_sd, "measured_sd": measured,
                     "mde_planning": mde_paired(s.planning_sd, n, level, s.power),
                     "mde_measured": mde_paired(measured, n, level, s.power) if math.isfinite(measured) else math.nan,
                     "power_planning": power_paired(s.mde, s.planning_sd, n, level),
                     "power_measured": power_paired(s.mde, measured, n, level) if math.isfinite(measured) else math.nan,
                     "units_needed_planning": units_for_power(s.planning_sd, s.mde, m, s.power, s.alpha),
                     "units_needed_measured": units_for_power(measured, s.mde, m, s.power, s.alpha)
                     if math.isfinite(measured) and measured > 0 else math.nan})
    numbers = pd.DataFrame(rows)
    unit = "(warm start, seed) pair" if rep.warm_starts else "seed"
    counted = (f"Holm's first step over the m = {len(tested)} principal "
               f"{'comparison that is' if len(tested) == 1 else 'comparisons that are'} tested" if tested else
               "no principal comparison is tested, so m = 1")
    rep.doc.para(f"Paired two-sided t-test over units (a unit is a {unit}) at the conservative level α/m = "
                 f"{s.alpha}/{m} = {level:.4g} ({counted}), noncentral "
                 f"t. Stated design: MDE {s.mde:g} points at power {s.power:g}, planning SD of Δ {s.planning_sd:g} "
                 "points. Measured SD: sd(Δ) over this report's units. Units needed: the smallest n reaching the "
                 "stated power at the stated MDE.")
    untested = [f"{c.label} ({c.delta.untestable})" for c in comps if not c.delta.testable]
    if untested:
        rep.doc.para("Not tested, so not counted in m (as in the Holm family): " + "; ".join(untested) + ".")
    if not rows:
        rep.doc.para("No principal comparison to measure.")
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
    rep.table(numbers, shown, "power")


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


def warm_starts(rep) -> None:
    """Per principal comparison: the verdict per warm start, the test over warm starts beside the
    pooled one, and how much of Δ's variance lies between warm starts. The tests over warm starts
    of the section's comparisons are one Holm family (at the principal α)."""
    if not rep.warm_starts:
        return
    comps = [c for c in headline(rep) if not c.same_config and (rep.spec is not None or c.metric == "avg@n")]
    alpha = rep.spec.alpha if rep.spec is not None else ALPHA
    rep.doc.heading(2, "Warm starts")
    levels = [warm_start_level(c.delta) for c in comps]
    over_holm, _ = holm([lvl.over_warm_starts.p for lvl in levels], alpha)
    m = sum(lvl.over_warm_starts.testable for lvl in levels)
    family = (f"Holm-adjusted over the {plural(m, 'comparison')} of this table tested at that level (their own "
              f"family, α = {alpha:g})" if m else "not testable for any comparison here, so no Holm family")
    rep.doc.para(f"{plural(len(rep.warm_starts), 'warm start')}: {', '.join(rep.warm_starts)}. Per warm start: Δ over "
                 "its seeds, t-interval and p unadjusted (exploratory). **Over warm starts**: each warm start's mean "
                 "Δ is one unit, t over the W warm starts (W − 1 df): the test that generalises to another warm start; "
                 f"{family}. **Pooled**: the (warm start, seed) units of the answer, Holm p of the answer's family: "
                 "inference for these warm starts. Intervals clipped to [−100, +100]. Variance of Δ split by a one-way "
                 "random-effects ANOVA (σ² in points²). " + UNTESTABLE)
    untested = [f"{c.label} ({lvl.over_warm_starts.untestable})" for c, lvl in zip(comps, levels)
                if not lvl.over_warm_starts.testable]
    if untested:
        rep.doc.para("Not testable over warm starts (kept out of that family): " + "; ".join(untested) + ".")
    rows = []
    for c, lvl, over_p in zip(comps, levels, over_holm):
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
    numbers = pd.DataFrame(rows)
    if not rows:
        rep.doc.para("No comparison to split by warm start.")
        return
    untestable = numbers["not_testable"].astype(str)
    shown = pd.DataFrame({"comparison": numbers["comparison"], "metric": numbers["metric"], "level": numbers["level"],
                          "units": numbers["units"],
                          DELTA_T: [delta(*x) for x in zip(numbers["delta"], numbers["lo"], numbers["hi"])],
                          "p (unadj.)": [pval(p, NOT_TESTABLE if u else "–") for p, u in zip(numbers["p"], untestable)],
                          "Holm p": [holm_p_cell(p, u) if lvl in (OVER, POOLED) else "–"
                                     for p, u, lvl in zip(numbers["p_holm"], untestable, numbers["level"])],
                          "per-unit Δ / variance": numbers["per_unit"]})
    rep.table(numbers, shown, "warm_starts")
