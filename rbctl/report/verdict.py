"""The report's opening sections: the answer (the principal comparisons' verdicts and the figure of
their per-unit Δ), the power of the design, and the warm start as a level (docs/method.md,
"Comparing arms"). Each takes the `rbctl.report.build.Report` and appends to its document.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from rbctl.report.compare import PRINCIPAL, STATED, Comparison, verdict
from rbctl.report.figures import plot_deltas
from rbctl.report.load import unit_label
from rbctl.report.power import mde_paired, power_paired, units_for_power
from rbctl.report.robust import prob_improvement, stratified_bootstrap
from rbctl.report.tables import delta, num, plural, points_list
from rbctl.report.warmstart import warm_start_level


def headline(rep) -> list[Comparison]:
    """The comparisons whose verdicts the report calls: the principal family, or, without one, the
    stated pairs (today's one family)."""
    fam = PRINCIPAL if rep.spec is not None else STATED
    return [c for c in rep.comparisons if c.family == fam]


def p_improvement(rep, c: Comparison) -> tuple[float, float, float]:
    """P(arm > ref) over the comparison's common units with its paired bootstrap interval."""
    a, b = rep.scores[c.arm, c.benchmark], rep.scores[c.ref, c.benchmark]
    kind = "avg" if c.metric == "avg@n" else "pass"
    pa, pb = a.per_unit(kind, c.k), b.per_unit(kind, c.k)
    x = np.array([[pa[u]] for u in c.delta.units])
    y = np.array([[pb[u]] for u in c.delta.units])
    if not len(x):
        return math.nan, math.nan, math.nan
    lo, hi = stratified_bootstrap(prob_improvement, [x, y], paired=True, n_boot=rep.n_boot)
    return prob_improvement(x, y), lo, hi


def comparison_rows(rep, comps: list[Comparison]) -> pd.DataFrame:
    """The numbers of each comparison (one row each; fractions): what comparisons.csv holds."""
    rows = []
    for c in comps:
        d = c.delta
        pi, pi_lo, pi_hi = p_improvement(rep, c)
        rows.append({"family": c.family, "kind": c.kind, "baseline": c.baseline, "arm": c.arm, "ref": c.ref,
                     "benchmark": c.benchmark, "metric": c.metric, "k": c.k, "arm_score": c.arm_score,
                     "ref_score": c.ref_score, "delta": d.mean, "delta_lo": d.lo, "delta_hi": d.hi, "sd": d.sd,
                     "p": d.p, "p_holm": c.p_holm, "significant": c.significant, "same_config": c.same_config,
                     "verdict": verdict(c), "seeds": d.n, "seed_list": ",".join(unit_label(u) for u in d.units),
                     "per_seed_delta": ",".join(f"{x:.4f}" for x in d.deltas), "hb_lo": c.hb_lo, "hb_hi": c.hb_hi,
                     "p_improve": pi, "p_improve_lo": pi_lo, "p_improve_hi": pi_hi})
    return pd.DataFrame(rows)


def _pi(v, lo, hi) -> str:
    return "–" if not math.isfinite(v) else f"{v:.2f} [{num(lo, 2)}, {num(hi, 2)}]"


def answer(rep) -> None:
    """The principal comparisons as a verdict table, and the figure of their per-unit Δ."""
    comps = headline(rep)
    rep.doc.heading(2, "Answer: the principal comparisons")
    units = "(warm start, seed) pairs" if rep.warm_starts else "seeds"
    if rep.spec is not None:
        s = rep.spec
        m = sum(not c.same_config for c in comps)
        rep.doc.para(f"The {plural(len(s.principal), 'comparison')} the sweep file states before running, on "
                     f"{s.metric} ({comps[0].benchmark if comps else s.benchmark or 'the first benchmark'}). Δ = arm − "
                     f"reference in points, paired by unit ({units}); 95% t-interval over units, unadjusted; "
                     f"Holm–Bonferroni over {'this comparison' if m == 1 else f'these {m} comparisons'} at α = {s.alpha}; P(improvement) = P(a run of the arm "
                     "beats a run of the reference) with a 95% paired bootstrap interval. Every other comparison in "
                     "this report is exploratory.")
    else:
        rep.doc.para(f"The sweep file states no principal comparisons (`comparisons:`), so the report's verdicts "
                     f"are over every stated pair (each baseline + budget vs the baseline; each other arm vs its "
                     f"baseline + budget and vs its baseline), avg@n and pass@n, as one Holm–Bonferroni family of "
                     f"{sum(not c.same_config for c in comps)} at α = 0.05. Δ in points, paired by unit ({units}); "
                     "95% t-interval over units, unadjusted.")
    if rep.spec is not None:
        missing = [f"{a} − {r}" for a, r in rep.spec.principal if not any((c.arm, c.ref) == (a, r) for c in comps)]
        if missing:
            rep.doc.para("**Not computed** (no final evaluations of both arms on the principal benchmark): "
                         + ", ".join(missing) + ".")
    if not comps:
        rep.doc.para("No principal comparison has final evaluations on both sides.")
    else:
        rows = rep.numbers[rep.numbers["family"] == comps[0].family]
        shown = pd.DataFrame({
            "comparison": rows["arm"] + " − " + rows["ref"], "benchmark": rows["benchmark"], "metric": rows["metric"],
            "units": rows["seeds"], "Δ points [95% CI]": [delta(*x) for x in zip(rows["delta"], rows["delta_lo"],
                                                                                rows["delta_hi"])],
            "Holm p": [num(p, 3) for p in rows["p_holm"]],
            "P(improvement) [95% CI]": [_pi(*x) for x in zip(rows["p_improve"], rows["p_improve_lo"],
                                                            rows["p_improve_hi"])],
            "verdict": rows["verdict"]})
        rep.table(rows, shown, "verdicts")
        flagged = [c.label for c in comps if c.same_config]
        if flagged:
            rep.doc.para("**Refused** (both arms ran the same training config; kept out of the Holm family): "
                         + ", ".join(flagged) + ".")
        drawn = [c for c in comps if rep.spec is not None or c.metric == "avg@n"]
        rep.figure(plot_deltas([{"label": f"{c.label} ({c.metric})\nHolm p {num(c.p_holm, 3)}: {verdict(c)}",
                                 "deltas": [100 * x for x in c.delta.deltas],
                                 "mean": 100 * c.delta.mean, "lo": 100 * c.delta.lo, "hi": 100 * c.delta.hi}
                                for c in drawn], f"Per-unit Δ of the {'principal' if rep.spec else 'stated'} "
                                                 f"comparisons ({units})"),
                   "per_unit_delta", "per-unit Δ of each comparison")
    if rep.issues:
        rep.doc.para("Incomplete: " + "; ".join(f"{i.name} ({i.status})" for i in rep.issues) + " (see Runs).")


def power(rep) -> None:
    """The design's power: per principal comparison, the units, the planning and measured SD of Δ,
    the MDE at the stated power and the power at the stated MDE (paired two-sided t at α/m)."""
    if rep.spec is None:
        return
    s = rep.spec
    comps = [c for c in headline(rep) if not c.same_config]
    m = max(1, len(comps))
    level = s.alpha / m
    rep.doc.heading(2, "Power of the design")
    rows = []
    for c in comps:
        n, measured = c.delta.n, 100 * c.delta.sd
        rows.append({"comparison": c.label, "units": n, "planning_sd": s.planning_sd, "measured_sd": measured,
                     "mde_planning": mde_paired(s.planning_sd, n, level, s.power),
                     "mde_measured": mde_paired(measured, n, level, s.power) if math.isfinite(measured) else math.nan,
                     "power_planning": power_paired(s.mde, s.planning_sd, n, level),
                     "power_measured": power_paired(s.mde, measured, n, level) if math.isfinite(measured) else math.nan,
                     "units_needed_planning": units_for_power(s.planning_sd, s.mde, m, s.power, s.alpha),
                     "units_needed_measured": units_for_power(measured, s.mde, m, s.power, s.alpha)
                     if math.isfinite(measured) and measured > 0 else math.nan})
    numbers = pd.DataFrame(rows)
    unit = "(warm start, seed) pair" if rep.warm_starts else "seed"
    rep.doc.para(f"Paired two-sided t-test over units (a unit is a {unit}) at the conservative level α/m = "
                 f"{s.alpha}/{m} = {level:.4g} (Holm's first step over the m = {m} principal comparisons), noncentral "
                 f"t. Stated design: MDE {s.mde:g} points at power {s.power:g}, planning SD of Δ {s.planning_sd:g} "
                 "points. Measured SD: sd(Δ) over this report's units. Units needed: the smallest n reaching the "
                 "stated power at the stated MDE.")
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


def warm_starts(rep) -> None:
    """Per principal comparison: the verdict per warm start, the test over warm starts beside the
    pooled one, and how much of Δ's variance lies between warm starts."""
    if not rep.warm_starts:
        return
    comps = [c for c in headline(rep) if not c.same_config and (rep.spec is not None or c.metric == "avg@n")]
    rep.doc.heading(2, "Warm starts")
    rep.doc.para(f"{plural(len(rep.warm_starts), 'warm start')}: {', '.join(rep.warm_starts)}. Per warm start: Δ over "
                 "its seeds, t-interval and p unadjusted (exploratory). **Over warm starts**: each warm start's mean "
                 "Δ is one unit, t over the W warm starts (W − 1 df): the test that generalises to another warm start. "
                 "**Pooled**: the (warm start, seed) units of the answer, Holm-adjusted: inference for these warm "
                 "starts. Variance of Δ split by a one-way random-effects ANOVA (σ² in points²).")
    rows = []
    for c in comps:
        lvl = warm_start_level(c.delta)
        for ws, d in sorted(lvl.per_warm_start.items()):
            rows.append({"comparison": c.label, "metric": c.metric, "level": f"warm start {ws}", "units": d.n,
                         "delta": d.mean, "lo": d.lo, "hi": d.hi, "p": d.p, "per_unit": points_list(d.deltas)})
        o = lvl.over_warm_starts
        rows.append({"comparison": c.label, "metric": c.metric, "level": "over warm starts (unit = warm start)",
                     "units": o.n, "delta": o.mean, "lo": o.lo, "hi": o.hi, "p": o.p, "per_unit": points_list(o.deltas)})
        rows.append({"comparison": c.label, "metric": c.metric, "level": "pooled (unit = warm start × seed), Holm",
                     "units": c.delta.n, "delta": c.delta.mean, "lo": c.delta.lo, "hi": c.delta.hi, "p": c.p_holm,
                     "per_unit": ""})
        v = lvl.components
        rows.append({"comparison": c.label, "metric": c.metric, "level": "variance of Δ", "units": v.n,
                     "delta": math.nan, "lo": math.nan, "hi": math.nan, "p": v.p,
                     "per_unit": f"σ² between {num(1e4 * v.between, 2)}, within {num(1e4 * v.within, 2)}: "
                                 f"{num(100 * v.share_between, 0)}% between warm starts (F = {num(v.f, 2)})"})
    numbers = pd.DataFrame(rows)
    if not rows:
        rep.doc.para("No comparison to split by warm start.")
        return
    shown = pd.DataFrame({"comparison": numbers["comparison"], "metric": numbers["metric"], "level": numbers["level"],
                          "units": numbers["units"],
                          "Δ points [95% CI]": [delta(*x) for x in zip(numbers["delta"], numbers["lo"], numbers["hi"])],
                          "p": [num(p, 3) for p in numbers["p"]], "per-unit Δ / variance": numbers["per_unit"]})
    rep.table(numbers, shown, "warm_starts")
