"""The report's sections after the answer, the design and the convergence tests, in reading order:
final scores (with the robust aggregates and score distributions), the exploratory comparisons,
entropy and κ_eff against pass@1, the final entropy/κ/κ_eff, training trajectories, and the list of
runs. Each renders its part of the `rbctl.report.data.ReportData` onto the page.
"""

from __future__ import annotations

import pandas as pd

from rbctl.report.analyses import entropy as ent
from rbctl.report.analyses.comparisons import EXPLORATORY, STATED
from rbctl.report.analyses.scores import BOOTSTRAP_ONE_UNIT, T_OVER_UNITS
from rbctl.report.data import ReportData
from rbctl.report.load import source_noun
from rbctl.report.render.calls import missing_lines
from rbctl.report.render.figures import plot_association, plot_pass_at_k, plot_profiles, plot_trajectory
from rbctl.report.render.page import Page
from rbctl.report.render.tables import (delta, finite, num, pct, plural, points_list, pval, slug, unequal_cells,
                                        with_ci)
from rbctl.report.series import KAPPA_EFF_WINDOW
from rbctl.report.robust import MIN_IQM_UNITS
from rbctl.report.stats import MIN_HIERARCHICAL_UNITS, NOT_TESTABLE
from rbctl.store.rundir import EVAL_DIR, REPORT_TABLES, STEP_PREFIX


# --- final scores -----------------------------------------------------------------------------------


def score_interval_caption(bases) -> str:
    """What the final scores' 95% intervals are, from the rows' ``interval`` column: the t-interval
    over units (clipped to [0, 100]) where every row has it, else each kind named."""
    bases = set(bases)
    t = "a 95% t-interval over units (n − 1 df), clipped to the metric's range [0, 100]"
    boot = "a 95% bootstrap interval over the problems of the arm's one unit (no interval over units)"
    if bases <= {T_OVER_UNITS}:
        return t
    if bases == {BOOTSTRAP_ONE_UNIT}:
        return boot
    return f"a 95% interval per row as its `interval` column names it: {t}, or {boot}"


def final_scores(data: ReportData, page: Page) -> None:
    f, doc = data.final_scores, page.doc
    doc.heading(2, "Final scores")
    if f is None:
        if source_noun(list(data.sweep.runs)) == "sweep file":
            doc.para(f"No final evaluations found (`rbctl eval RUN` writes its evaluation under RUN/{EVAL_DIR}/{STEP_PREFIX}N/).")
        else:  # runs trained elsewhere: what applies to them is said with what they do not log
            doc.para("No final evaluations found: the runs logged no held-out score at their last step (see the notes "
                     "on what the runs do not log).")
        return
    for note in data.sweep.notes:
        doc.para(f"Note: {note}")
    numbers = f.rows
    maj = [f"maj@{int(k)} " + with_ci(v, lo, hi) if finite(k) else "–"
           for k, v, lo, hi in zip(numbers["maj_k"], numbers["maj"], numbers["maj_lo"], numbers["maj_hi"])]
    shown = pd.DataFrame({
        "arm": numbers["arm"], "benchmark": numbers["benchmark"], "units": numbers["seeds"],
        "problems × n": [f"{p} × {n}" for p, n in zip(numbers["problems"], numbers["n"])],
        "avg@n % [95% CI]": [with_ci(*x) for x in zip(numbers["avg"], numbers["avg_lo"], numbers["avg_hi"])],
        "pass@k (k = n) % [95% CI]": [with_ci(*x) for x in zip(numbers["pass_k"], numbers["pass_k_lo"], numbers["pass_k_hi"])],
        "maj@k % [95% CI]": maj, "interval": numbers["interval"]})
    doc.para(f"Each run's score is its mean over the problems; shown: the mean over units with "
             f"{score_interval_caption(numbers['interval'])}. avg@n is pass@1 from n samples; pass@k is unbiased at "
             "k = n; maj@k (largest k ≤ n the evaluation logged) is each run's summary value, over all the "
             "problems it evaluated; its interval is the t-interval over units (none with one unit). maj@k is the "
             "majority vote over a problem's **first** k samples (equivalent answers vote together, a tie goes to the "
             "answer seen first), so maj@1 is the first sample's accuracy, not avg@n, the mean over all n.")
    page.table(numbers, shown, "final_scores")
    robust = f.iqm
    doc.para("Interquartile mean (IQM: the mean of the middle 50% of runs × benchmarks; rliable, Agarwal et al. "
             "2021) per arm, with a 95% stratified bootstrap interval (runs resampled within each benchmark; with "
             f"one benchmark a plain bootstrap over runs), shown from {MIN_IQM_UNITS} runs on: with fewer it covers less "
             "than 0.93 (n/a).")
    page.table(robust, pd.DataFrame({"arm": robust["arm"], "metric": robust["metric"], "units": robust["units"],
                                     "benchmarks": robust["benchmarks"],
                                     "IQM % [95% bootstrap CI]": [with_ci(*x) for x in zip(robust["iqm"], robust["iqm_lo"], robust["iqm_hi"])],
                                     "mean %": [pct(v) for v in robust["mean"]]}), "iqm")
    if f.profiles:
        page.data_file(pd.concat([p.assign(arm=arm) for arm, p in f.profiles.items()])[["arm", "tau", "value", "lo", "hi"]],
                       "score_distributions.csv")
        page.figure(plot_profiles(f.profiles, page.styles, f.profile_metric, f.profile_benchmark), "score_distributions",
                    f"fraction of runs whose final {f.profile_metric} exceeds τ")
    curves = f.pass_at_k
    page.data_file(curves, "pass_at_k.csv")
    for bench in data.sweep.benchmarks:
        c = curves[curves["benchmark"] == bench]
        page.figure(plot_pass_at_k({a: g for a, g in c.groupby("arm", sort=True)}, page.styles, page.groups, bench),
                    f"pass_at_k_{slug(bench)}", f"pass@k on {bench}")


# --- exploratory comparisons ------------------------------------------------------------------------

DETAIL = ("Δ in points with its 95% t-interval over units (n − 1 df), clipped to [−100, +100]; a comparison with fewer "
          "than 3 units or the same Δ in every unit is not testable (no p, outside the Holm family). The hierarchical "
          f"bootstrap is shown from {MIN_HIERARCHICAL_UNITS} units on: with fewer it covers less than 0.93 (docs/method.md).")


def exploratory(data: ReportData, page: Page) -> None:
    numbers, spec, doc = data.comparisons.rows, data.sweep.spec, page.doc
    fam = EXPLORATORY if spec is not None else STATED
    part = numbers[numbers["family"] == fam] if len(numbers) else numbers
    if spec is not None:
        page.numbers(numbers, "comparisons")  # every comparison, its family in a column
        doc.heading(2, "Exploratory comparisons")
        doc.para("Every stated pair (each baseline + budget vs the baseline, each other arm vs its baseline + budget "
                     "and vs its baseline) on every benchmark, avg@n and pass@n, that is in no declared family. "
                     "**Exploratory**: the interval and an unadjusted p, no multiplicity adjustment and no call "
                     f"(docs/method.md, \"Comparing arms\"). {DETAIL}")
    else:
        doc.heading(2, "Comparisons in detail")
        doc.para(f"The stated pairs of the answer with every unit's Δ and a hierarchical bootstrap (units, then "
                     f"problems within units) beside the t-interval. {DETAIL}")
    if not len(part):
        doc.para("None.")
        return
    untestable = part["not_testable"].fillna("").astype(str)
    shown = pd.DataFrame({
        "comparison": part["arm"] + " − " + part["ref"], "benchmark": part["benchmark"], "metric": part["metric"],
        "units": part["seeds"],
        "Δ points [95% t-CI, unadj.]": [delta(*x) for x in zip(part["delta"], part["delta_lo"], part["delta_hi"])],
        "per-unit Δ": [points_list(float(v) for v in str(s).split(",")) if str(s) not in ("", "nan") else ""
                       for s in part["per_seed_delta"]],
        "hier. bootstrap [95%]": [delta(d, lo, hi) for d, lo, hi in zip(part["delta"], part["hb_lo"], part["hb_hi"])],
        "p (unadj.)": [pval(p, NOT_TESTABLE if u else "–") for p, u in zip(part["p"], untestable)],
        **({} if spec is not None else {"Holm p": [pval(p, NOT_TESTABLE if u else "–")
                                                   for p, u in zip(part["p_holm"], untestable)],
                                        "call": list(part["call"])}),
        "P(improvement)": [num(p, 2) for p in part["p_improve"]],
        "flag": ["; ".join(x for x in ("same config" if s else (f"not testable: {u}" if u else ""),
                                         f"unequal compute: {c}" if c else "") if x)
                 for s, u, c in zip(part["same_config"], untestable, unequal_cells(part))]})
    page.table(part, shown, "exploratory" if spec is not None else "comparisons")
    budget = part[part["kind"] == "budget_vs_base"]
    for prefix, name in (("avg@n", "budget_vs_base_avg"), ("pass@", "budget_vs_base_pass_k")):
        sub = budget[budget["metric"].str.startswith(prefix)]
        if len(sub):
            wide = pd.DataFrame({"baseline": sub["baseline"], "comparison": sub["arm"] + " − " + sub["ref"],
                                 "benchmark": sub["benchmark"], "metric": sub["metric"],
                                 "base": [pct(v) for v in sub["ref_score"]], "budget": [pct(v) for v in sub["arm_score"]],
                                 "Δ [95% t-CI]": [delta(*x) for x in zip(sub["delta"], sub["delta_lo"], sub["delta_hi"])],
                                 "units": sub["seeds"]})
            doc.heading(3, f"Budget vs base, {prefix.rstrip('@')}")
            page.table(sub, wide, name)


# --- entropy and κ_eff vs pass@1 --------------------------------------------------------------------


KAPPA_EFF_WHAT = ("κ_eff is measured after all of a step's optimizer updates, so it is cumulative over the step's "
                  "optimizer updates (mini-batches × epochs at the learning rate)")


def associations(data: ReportData, page: Page) -> None:
    e, doc = data.entropy, page.doc
    if e.benchmark is None:
        return
    bench, points, refused, corr = e.benchmark, e.points, e.refused, e.correlations
    page.data_file(points, "run_finals.csv")
    doc.heading(2, "Is entropy the cause? Entropy and κ_eff vs pass@1")
    doc.para(f"Final entropy and final κ_eff (each run's mean over its last quarter of logged values; {KAPPA_EFF_WHAT}) "
                 f"against held-out pass@1 (avg@n of the final evaluation on {bench}), at two levels that must not be "
                 "pooled: **between arms** (one point per arm: its means; n = arms units, t on n − 2 df) and **within "
                 "arms** (each run minus its arm's means, pooled: N runs − k arm means independent units; the "
                 "repeated-measures correlation, rmcorr, t on N − k − 1 df). Pearson r, Fisher-z 95% interval "
                 "atanh(r) ± 1.96/√(df − 1), two-sided p; unadjusted; withheld on fewer than "
                 f"{ent.MIN_CORRELATION_DF} df (3 arms give 1 df: no interval, and any r).")
    if e.kappa_eff_note:
        doc.para(e.kappa_eff_note)
    shown = pd.DataFrame({"x": corr["x"].map(dict(ent.ASSOCIATED)), "level": corr["level"], "points": corr["points"],
                          "units": corr["units"],
                          "df": corr["df"],
                          "r [95% CI]": ["not compared (see the note)" if no else f"withheld ({few})" if few else
                                         f"{num(r, 2)} [{num(lo, 2)}, {num(hi, 2)}]"
                                         for r, lo, hi, no, few in zip(corr["r"], corr["r_lo"], corr["r_hi"],
                                                                       corr["refused"], _withheld(corr))],
                          "p": [pval(p) for p in corr["p"]]})
    page.table(corr, shown, "entropy_cause")
    for key, label in ent.ASSOCIATED:
        if points[key].notna().any():
            between, within = ent.split_levels(points, key)
            notes = []
            for level in ("between arms", "within arms"):
                r = corr[(corr["x"] == key) & (corr["level"] == level)].iloc[0]
                few = r["withheld"] if isinstance(r.get("withheld"), str) else ""
                notes.append("not compared between arms (different updates per step)" if r["refused"] else
                             f"no r {level} ({few})" if few else
                             f"r = {num(r['r'], 2)} over {int(r['points'])} arms" if level == "between arms" else
                             f"r = {num(r['r'], 2)} over {int(r['points'])} runs ({int(r['units'])} independent "
                             "after centring on arm means)")
            if key in refused:
                between = between.iloc[:0]
            page.figure(plot_association(between, within, page.styles, "x", label, f"pass@1 on {bench}", tuple(notes)),
                       f"scatter_{key}", f"{label} vs held-out pass@1")


def _withheld(corr: pd.DataFrame) -> list[str]:
    """Why each correlation is withheld ("" where it is shown; a table without the column: none)."""
    col = corr["withheld"] if "withheld" in corr else pd.Series([""] * len(corr), index=corr.index)
    return [w if isinstance(w, str) else "" for w in col]


def descriptives(data: ReportData, page: Page) -> None:
    e, doc = data.entropy, page.doc
    numbers = e.descriptives
    shown = pd.DataFrame({"arm": numbers["arm"], "units": numbers["seeds"]})
    for key, label in ent.DESCRIPTIVE:
        if key == "kappa_eff" and e.kappa_eff_note:
            continue  # its numbers stay in the CSV; side by side they would compare arms
        shown[f"final {label} [95% CI]"] = [f"{num(m)} [{num(lo)}, {num(hi)}]" for m, lo, hi in
                                            zip(numbers[f"{key}_final"], numbers[f"{key}_final_lo"], numbers[f"{key}_final_hi"])]
    doc.heading(2, "Final entropy, κ and κ_eff")
    doc.para("Each run's mean over the last quarter of its logged values; mean over units with a 95% t-interval "
                 f"over units (descriptive). {KAPPA_EFF_WHAT}.")
    if e.kappa_eff_note:
        doc.para(e.kappa_eff_note + f" The final κ_eff column is left out of this table ({REPORT_TABLES}/final_entropy_kappa.csv "
                     "keeps each arm's numbers).")
    page.table(numbers, shown, "final_entropy_kappa")


# --- trajectories and runs --------------------------------------------------------------------------


def trajectories(data: ReportData, page: Page) -> None:
    doc, note = page.doc, data.entropy.kappa_eff_note
    doc.heading(2, "Training trajectories")
    doc.para("Mean over the units that logged the step; band: 95% t-interval over those units, clipped to the "
             f"metric's range. κ_eff (cumulative over the step's optimizer updates): centred rolling mean over "
             f"{KAPPA_EFF_WINDOW} logged values per run. Dotted "
             "line: the plateau test's ceiling on held-out curves, the escape threshold on the escape metric's.")
    escape = data.escape.setting if data.escape is not None else None
    if note:
        doc.para(note + " Its trajectories are not drawn side by side.")
    ceiling, frames = data.plateau.ceiling, []
    for c in data.trajectories.curves:
        frames += [b.rename_axis("step").reset_index().assign(arm=arm, metric=c.key) for arm, b in c.bands.items()]
        hline = None
        if c.metric == "avg@n" and ceiling.value is not None:
            hline = (ceiling.value, f"ceiling {pct(ceiling.value)}%")
        elif escape is not None and c.metric == escape.metric:
            hline = (escape.threshold, f"escape threshold {escape.threshold:g}")
        page.figure(plot_trajectory(c.bands, page.styles, page.groups, c.title, c.ylabel, hline, c.limits),
                    "traj_" + "_".join(slug(x) for x in c.name), c.title)
    if frames:
        page.data_file(pd.concat(frames)[["arm", "metric", "step", "mean", "lo", "hi", "seeds"]], "trajectories.csv")


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
