"""The final scores: per arm and benchmark avg@n, pass@k and maj@k with their intervals, the robust
aggregates (IQM) and the score distributions, and pass@k curves (docs/method.md, "Comparing arms")."""

from __future__ import annotations

import pandas as pd

from rbctl.report.analyses.scores import BOOTSTRAP_ONE_UNIT, T_OVER_UNITS
from rbctl.report.data import ReportData
from rbctl.report.load import source_noun
from rbctl.report.render.figures import plot_pass_at_k, plot_profiles
from rbctl.report.render.page import Page
from rbctl.report.render.tables import finite, pct, slug, with_ci
from rbctl.report.robust import MIN_IQM_UNITS
from rbctl.report.sections.base import section
from rbctl.store.rundir import EVAL_DIR, STEP_PREFIX


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


@section("final_scores", "Final scores", order=80)
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
