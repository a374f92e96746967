"""The report's sections after the answer, the design and the convergence tests, in reading order:
final scores (with the robust aggregates and score distributions), the exploratory comparisons,
entropy and κ_eff against pass@1, the final entropy/κ/κ_eff, training trajectories, and the list of
runs. Each takes the `rbctl.report.build.Report` and appends to its document.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from rbctl.config.sweep import Escape
from rbctl.grading.metrics import bootstrap_ci
from rbctl.report import diagnostics as diag
from rbctl.report.compare import EXPLORATORY, STATED
from rbctl.report.convergence import escape_setting
from rbctl.report.figures import plot_association, plot_pass_at_k, plot_profiles, plot_trajectory
from rbctl.report.load import unit_label
from rbctl.report.robust import iqm, score_distribution, stratified_bootstrap
from rbctl.report.series import KAPPA_EFF_WINDOW, band, unit_frame
from rbctl.report.stats import bounded_t_interval
from rbctl.report.tables import NOT_TESTABLE, delta, finite, num, pct, plural, points_list, pval, slug, with_ci, write_csv
from rbctl.store.rundir import EVAL_DIR, REPORT_TABLES, STEP_PREFIX

# (metrics key, file slug, title, y label, rolling window, range of the metric). No response-length
# panel: the built-in tasks' length follows the prompt mix, identical across arms.
TRAJECTORIES = (
    ("reward/mean", "reward", "Training reward (reward/mean)", "reward per rollout", 1, (0.0, 1.0)),
    ("entropy", "entropy", "Token entropy (pre-update policy)", "entropy (nats/token)", 1, (0.0, None)),
    ("kappa", "kappa", "Nominal sharpness κ", "κ (advantage gap per unit reward gap)", 1, (0.0, None)),
    ("kappa_eff", "kappa_eff", f"Measured sharpness κ_eff, cumulative over the step's optimizer updates (rolling mean "
     f"of {KAPPA_EFF_WINDOW})", "κ_eff (log-ratio gap per unit reward gap)", KAPPA_EFF_WINDOW, (None, None)),
    ("clip/frac_low", "clip_frac_low", "Tokens clipped below (clip/frac_low)", "fraction of tokens", 1, (0.0, 1.0)),
    ("clip/frac_high", "clip_frac_high", "Tokens clipped above (clip/frac_high)", "fraction of tokens", 1, (0.0, 1.0)),
)
PROFILE_STEP = 0.005  # τ grid of the score distributions, in fractions


# --- final scores -----------------------------------------------------------------------------------


T_OVER_UNITS, BOOTSTRAP_ONE_UNIT = "t over units", "bootstrap over problems (1 unit)"


def _interval(per_unit: list[float], single_problem_values=None) -> tuple[float, float, float, str]:
    """(mean, lo, hi, basis): t-interval over units clipped to the score's range [0, 1]; with one unit
    a bootstrap over its problems (inside [0, 1] by construction)."""
    if len(per_unit) >= 2 or single_problem_values is None:
        return (*bounded_t_interval(per_unit), T_OVER_UNITS)
    return (float(per_unit[0]), *bootstrap_ci(single_problem_values), BOOTSTRAP_ONE_UNIT)


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


def _score_row(rep, sc) -> dict:
    row = {"arm": sc.arm, "baseline": rep.info[sc.arm][0], "variant": rep.info[sc.arm][1], "benchmark": sc.benchmark,
           "seeds": len(sc.units), "seed_list": ",".join(unit_label(u) for u in sc.units), "problems": len(sc.ids),
           "n": sc.kmax, "k": sc.kmax, "eval_steps": ",".join(map(str, sorted(set(sc.steps))))}
    for name, values in (("avg", sc.accuracy), ("pass_k", sc.pass_at(sc.kmax))):
        per_unit = list(values.mean(axis=1))
        m, lo, hi, basis = _interval(per_unit, values[0] if len(per_unit) == 1 else None)
        row.update({name: m, f"{name}_lo": lo, f"{name}_hi": hi, f"{name}_per_seed": ",".join(f"{v:.4f}" for v in per_unit)})
    row["interval"] = basis
    m, lo, hi = bounded_t_interval([sc.maj[u] for u in sc.units]) if sc.maj else (math.nan,) * 3
    row.update({"maj_k": sc.maj_k, "maj": m, "maj_lo": lo, "maj_hi": hi})
    return row


def _robust(rep) -> pd.DataFrame:
    """Per arm and metric: the IQM over runs × benchmarks (rliable), its stratified bootstrap interval
    (strata = benchmarks), over the units the arm has on every benchmark."""
    rows = []
    for arm in rep.arms:
        benches = [b for b in rep.benchmarks if (arm, b) in rep.scores]
        if not benches:
            continue
        units = sorted(set.intersection(*(set(rep.scores[arm, b].units) for b in benches)))
        for metric in ("avg", "pass"):
            per = [rep.scores[arm, b].per_unit(metric) for b in benches]
            x = np.array([[p[u] for p in per] for u in units])  # [units, benchmarks]
            lo, hi = stratified_bootstrap(iqm, [x], n_boot=rep.n_boot) if len(units) else (math.nan, math.nan)
            rows.append({"arm": arm, "metric": "avg@n" if metric == "avg" else "pass@n", "benchmarks": ",".join(benches),
                         "units": len(units), "iqm": iqm(x) if len(units) else math.nan, "iqm_lo": lo, "iqm_hi": hi,
                         "mean": float(x.mean()) if len(units) else math.nan})
    return pd.DataFrame(rows)


def final_scores(rep) -> None:
    rep.doc.heading(2, "Final scores")
    if not rep.scores:
        rep.doc.para(f"No final evaluations found (`rbctl eval RUN` writes its evaluation under RUN/{EVAL_DIR}/{STEP_PREFIX}N/).")
        return
    for note in rep.notes:
        rep.doc.para(f"Note: {note}")
    numbers = pd.DataFrame([_score_row(rep, sc) for _, sc in sorted(rep.scores.items(), key=lambda kv: (kv[0][1], kv[0][0]))])
    maj = [f"maj@{int(k)} " + with_ci(v, lo, hi) if finite(k) else "–"
           for k, v, lo, hi in zip(numbers["maj_k"], numbers["maj"], numbers["maj_lo"], numbers["maj_hi"])]
    shown = pd.DataFrame({
        "arm": numbers["arm"], "benchmark": numbers["benchmark"], "units": numbers["seeds"],
        "problems × n": [f"{p} × {n}" for p, n in zip(numbers["problems"], numbers["n"])],
        "avg@n % [95% CI]": [with_ci(*x) for x in zip(numbers["avg"], numbers["avg_lo"], numbers["avg_hi"])],
        "pass@k (k = n) % [95% CI]": [with_ci(*x) for x in zip(numbers["pass_k"], numbers["pass_k_lo"], numbers["pass_k_hi"])],
        "maj@k % [95% CI]": maj, "interval": numbers["interval"]})
    rep.doc.para(f"Each run's score is its mean over the problems; shown: the mean over units with "
                 f"{score_interval_caption(numbers['interval'])}. avg@n is pass@1 from n samples; pass@k is unbiased at "
                 "k = n; maj@k (largest k ≤ n the evaluation logged) is each run's summary value, over all the "
                 "problems it evaluated; its interval is the t-interval over units (none with one unit).")
    rep.table(numbers, shown, "final_scores")
    robust = _robust(rep)
    rep.doc.para("Interquartile mean (IQM: the mean of the middle 50% of runs × benchmarks; rliable, Agarwal et al. "
                 "2021) per arm, with a 95% stratified bootstrap interval (runs resampled within each benchmark; with "
                 "one benchmark a plain bootstrap over runs).")
    rep.table(robust, pd.DataFrame({"arm": robust["arm"], "metric": robust["metric"], "units": robust["units"],
                                    "benchmarks": robust["benchmarks"],
                                    "IQM % [95% bootstrap CI]": [with_ci(*x) for x in zip(robust["iqm"], robust["iqm_lo"], robust["iqm_hi"])],
                                    "mean %": [pct(v) for v in robust["mean"]]}), "iqm")
    _profiles(rep)
    curve_rows = []
    for (arm, bench), sc in sorted(rep.scores.items()):
        for k in range(1, sc.kmax + 1):
            v, lo, hi = bounded_t_interval(list(sc.pass_at(k).mean(axis=1)))
            curve_rows.append({"arm": arm, "benchmark": bench, "k": k, "value": v, "lo": lo, "hi": hi, "seeds": len(sc.units)})
    curves = pd.DataFrame(curve_rows)
    write_csv(curves, rep.data / "pass_at_k.csv")
    for bench in rep.benchmarks:
        c = curves[curves["benchmark"] == bench]
        rep.figure(plot_pass_at_k({a: g for a, g in c.groupby("arm", sort=True)}, rep.styles, rep.groups, bench),
                   f"pass_at_k_{slug(bench)}", f"pass@k on {bench}")


def _profiles(rep) -> None:
    """Score distributions of the principal metric (avg@n without one) on its benchmark."""
    metric = rep.spec.metric if rep.spec is not None else "avg@n"
    bench = (rep.spec.benchmark if rep.spec is not None else None) or rep.benchmarks[0]
    taus = np.round(np.arange(0.0, 1.0 + PROFILE_STEP / 2, PROFILE_STEP), 6)
    profiles, rows = {}, []
    for (arm, b), sc in sorted(rep.scores.items()):
        if b != bench:
            continue
        k = None if metric == "avg@n" else int(metric.split("@")[1])
        if k is not None and k > sc.kmax:
            continue
        x = np.array(list(sc.per_unit("avg" if k is None else "pass", k).values()))[:, None]
        lo, hi = stratified_bootstrap(lambda s: score_distribution(s, taus), [x], n_boot=rep.n_boot)
        profiles[arm] = pd.DataFrame({"tau": taus, "value": score_distribution(x, taus), "lo": lo, "hi": hi})
        rows.append(profiles[arm].assign(arm=arm))
    if profiles:
        write_csv(pd.concat(rows)[["arm", "tau", "value", "lo", "hi"]], rep.data / "score_distributions.csv")
        rep.figure(plot_profiles(profiles, rep.styles, metric, bench), "score_distributions",
                   f"fraction of runs whose final {metric} exceeds τ")


# --- exploratory comparisons ------------------------------------------------------------------------

DETAIL = ("Δ in points with its 95% t-interval over units (n − 1 df), clipped to [−100, +100]; a comparison with fewer "
          "than 3 units or the same Δ in every unit is not testable (no p, outside the Holm family).")


def exploratory(rep) -> None:
    numbers = rep.numbers
    fam = EXPLORATORY if rep.spec is not None else STATED
    part = numbers[numbers["family"] == fam] if len(numbers) else numbers
    if rep.spec is not None:
        write_csv(numbers, rep.tables / "comparisons.csv")  # every comparison, its family in a column
        rep.doc.heading(2, "Exploratory comparisons")
        rep.doc.para("Every stated pair (each baseline + budget vs the baseline, each other arm vs its baseline + budget "
                     "and vs its baseline) on every benchmark, avg@n and pass@n, that is not a principal comparison. "
                     "**Exploratory**: p unadjusted, and Holm-adjusted over this exploratory family of its own; no "
                     f"verdict is called on them. {DETAIL}")
    else:
        rep.doc.heading(2, "Comparisons in detail")
        rep.doc.para(f"The stated pairs of the answer with every unit's Δ and a hierarchical bootstrap (units, then "
                     f"problems within units) beside the t-interval. {DETAIL}")
    if not len(part):
        rep.doc.para("None.")
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
        ("Holm p (exploratory family)" if rep.spec is not None else "Holm p"):
            [pval(p, NOT_TESTABLE if u else "–") for p, u in zip(part["p_holm"], untestable)],
        "P(improvement)": [num(p, 2) for p in part["p_improve"]],
        "flag": ["same config" if s else (f"not testable: {u}" if u else "")
                 for s, u in zip(part["same_config"], untestable)]})
    rep.table(part, shown, "exploratory" if rep.spec is not None else "comparisons")
    budget = part[part["kind"] == "budget_vs_base"]
    for prefix, name in (("avg@n", "budget_vs_base_avg"), ("pass@", "budget_vs_base_pass_k")):
        sub = budget[budget["metric"].str.startswith(prefix)]
        if len(sub):
            wide = pd.DataFrame({"baseline": sub["baseline"], "comparison": sub["arm"] + " − " + sub["ref"],
                                 "benchmark": sub["benchmark"], "metric": sub["metric"],
                                 "base": [pct(v) for v in sub["ref_score"]], "budget": [pct(v) for v in sub["arm_score"]],
                                 "Δ [95% t-CI]": [delta(*x) for x in zip(sub["delta"], sub["delta_lo"], sub["delta_hi"])],
                                 "units": sub["seeds"]})
            rep.doc.heading(3, f"Budget vs base, {prefix.rstrip('@')}")
            rep.table(sub, wide, name)


# --- entropy and κ_eff vs pass@1 --------------------------------------------------------------------


KAPPA_EFF_WHAT = ("κ_eff is measured after all of a step's optimizer updates, so it is cumulative over the step's "
                  "optimizer updates (mini-batches × epochs at the learning rate)")


def associations(rep) -> None:
    if not rep.benchmarks:
        return
    bench = rep.benchmarks[0]
    points = diag.run_points(rep.runs, bench)
    write_csv(points, rep.data / "run_finals.csv")
    refused = ("kappa_eff_final",) if rep.kappa_eff_note else ()
    corr = diag.associations(points, refused)
    rep.doc.heading(2, "Is entropy the cause? Entropy and κ_eff vs pass@1")
    rep.doc.para(f"Final entropy and final κ_eff (each run's mean over its last quarter of logged values; {KAPPA_EFF_WHAT}) "
                 f"against held-out pass@1 (avg@n of the final evaluation on {bench}), at two levels that must not be "
                 "pooled: **between arms** (one point per arm: its means; n = arms units, t on n − 2 df) and **within "
                 "arms** (each run minus its arm's means, pooled: N runs − k arm means independent units; the "
                 "repeated-measures correlation, rmcorr, t on N − k − 1 df). Pearson r, Fisher-z 95% interval "
                 "atanh(r) ± 1.96/√(df − 1), two-sided p; unadjusted.")
    if rep.kappa_eff_note:
        rep.doc.para(rep.kappa_eff_note)
    shown = pd.DataFrame({"x": corr["x"].map(dict(diag.ASSOCIATED)), "level": corr["level"], "units": corr["units"],
                          "df": corr["df"],
                          "r [95% CI]": ["not compared (see the note)" if no else f"{num(r, 2)} [{num(lo, 2)}, {num(hi, 2)}]"
                                         for r, lo, hi, no in zip(corr["r"], corr["r_lo"], corr["r_hi"], corr["refused"])],
                          "p": [pval(p) for p in corr["p"]]})
    rep.table(corr, shown, "entropy_cause")
    for key, label in diag.ASSOCIATED:
        if points[key].notna().any():
            between, within = diag.split_levels(points, key)
            notes = []
            for level in ("between arms", "within arms"):
                r = corr[(corr["x"] == key) & (corr["level"] == level)].iloc[0]
                notes.append("not compared between arms (different updates per step)" if r["refused"] else
                             f"r = {num(r['r'], 2)} over {int(r['units'])} units")
            if key in refused:
                between = between.iloc[:0]
            rep.figure(plot_association(between, within, rep.styles, "x", label, f"pass@1 on {bench}", tuple(notes)),
                       f"scatter_{key}", f"{label} vs held-out pass@1")


def descriptives(rep) -> None:
    numbers = diag.final_descriptives(rep.by_arm)
    shown = pd.DataFrame({"arm": numbers["arm"], "units": numbers["seeds"]})
    for key, label in diag.DESCRIPTIVE:
        if key == "kappa_eff" and rep.kappa_eff_note:
            continue  # its numbers stay in the CSV; side by side they would compare arms
        shown[f"final {label} [95% CI]"] = [f"{num(m)} [{num(lo)}, {num(hi)}]" for m, lo, hi in
                                            zip(numbers[f"{key}_final"], numbers[f"{key}_final_lo"], numbers[f"{key}_final_hi"])]
    rep.doc.heading(2, "Final entropy, κ and κ_eff")
    rep.doc.para("Each run's mean over the last quarter of its logged values; mean over units with a 95% t-interval "
                 f"over units (descriptive). {KAPPA_EFF_WHAT}.")
    if rep.kappa_eff_note:
        rep.doc.para(rep.kappa_eff_note + f" The final κ_eff column is left out of this table ({REPORT_TABLES}/final_entropy_kappa.csv "
                     "keeps each arm's numbers).")
    rep.table(numbers, shown, "final_entropy_kappa")


# --- trajectories and runs --------------------------------------------------------------------------


def shown_labels(keys: set[str], escape: Escape | None) -> list[str]:
    """The label shares to draw (``label/<name>/<value>`` keys): every value of a label, but of a
    two-valued label only one (the other is 1 − it): the escape metric when it is one of them, else
    the last in sorted order."""
    by_name: dict[str, list[str]] = {}
    for k in sorted(keys):
        by_name.setdefault(k.rsplit("/", 1)[0], []).append(k)
    out = []
    for values in by_name.values():
        if len(values) == 2:
            values = [escape.metric] if escape is not None and escape.metric in values else values[-1:]
        out += values
    return out


def trajectories(rep) -> None:
    rep.doc.heading(2, "Training trajectories")
    rep.doc.para("Mean over the units that logged the step; band: 95% t-interval over those units, clipped to the "
                 f"metric's range. κ_eff (cumulative over the step's optimizer updates): centred rolling mean over "
                 f"{KAPPA_EFF_WINDOW} logged values per run. Dotted "
                 "line: the plateau test's ceiling on held-out curves, the escape threshold on the escape metric's.")
    benches = list(dict.fromkeys(e["benchmark"] for r in rep.runs for e in r.evals if "benchmark" in e))
    escape = escape_setting(rep)[0]
    labels = shown_labels({k for r in rep.runs for e in r.evals for k in e if k.startswith("label/")}, escape)
    # (key in the data file, metric, benchmark of the periodic evaluation or None, slug, title, y label, window, range)
    specs = [(TRAJECTORIES[0][0], None, *TRAJECTORIES[0][1:])]
    for b in benches:
        specs.append(("avg@n", b, f"heldout_{slug(b)}", f"Held-out pass@1 on {b} (avg@n, periodic eval)",
                      "held-out pass@1", 1, (0.0, 1.0)))
        specs += [(k, b, f"{slug(k)}_{slug(b)}", f"Share of samples {k} on {b} (periodic eval)", "share of samples", 1,
                   (0.0, 1.0)) for k in labels]
    logged = {k for r in rep.runs for m in r.metrics for k, v in m.items() if finite(v) and v != 0}
    specs += [(t[0], None, *t[1:]) for t in TRAJECTORIES[1:] if (not t[0].startswith("clip/") or t[0] in logged)
              and not (t[0] == "kappa_eff" and rep.kappa_eff_note)]
    if rep.kappa_eff_note:
        rep.doc.para(rep.kappa_eff_note + " Its trajectories are not drawn side by side.")
    data = []
    ceiling = rep.ceiling
    for metric, bench, name, title, ylabel, window, limits in specs:
        key = metric if bench is None else ("heldout" if metric == "avg@n" else metric) + f":{bench}"
        bands = {}
        for arm in rep.arms:
            frame = unit_frame(rep.by_arm[arm], metric, window, benchmark=bench)
            if not frame.empty:
                bands[arm] = band(frame)
                data.append(bands[arm].rename_axis("step").reset_index().assign(arm=arm, metric=key))
        if bands:
            hline = None
            if metric == "avg@n" and ceiling is not None and ceiling.value is not None:
                hline = (ceiling.value, f"ceiling {pct(ceiling.value)}%")
            elif escape is not None and metric == escape.metric:
                hline = (escape.threshold, f"escape threshold {escape.threshold:g}")
            rep.figure(plot_trajectory(bands, rep.styles, rep.groups, title, ylabel, hline, limits), f"traj_{name}", title)
    if data:
        write_csv(pd.concat(data)[["arm", "metric", "step", "mean", "lo", "hi", "seeds"]], rep.data / "trajectories.csv")


def runs(rep) -> None:
    rows = []
    for r in rep.runs:
        notes = [n for n, bad in (("no periodic evaluation", not r.evals), ("no final evaluation", not r.finals)) if bad]
        if r.config_steps and r.last_step < r.config_steps:
            notes.append(f"stopped at step {r.last_step} of {r.config_steps}")
        if r.final_step is not None and r.final_step < r.last_step:
            notes.append(f"final evaluation at step {r.final_step}")
        rows.append({"run": r.name, "arm": r.arm, "warm_start": r.warm_start or "", "seed": r.seed,
                     "baseline": r.baseline, "variant": r.variant, "sweep": r.sweep or "", "status": r.status,
                     "last_step": r.last_step, "config_steps": r.config_steps,
                     "final_eval_step": "" if r.final_step is None else r.final_step,
                     "benchmarks": ",".join(sorted(r.finals)), "notes": "; ".join(notes), "path": str(r.path)})
    numbers = pd.DataFrame(rows)
    shown = numbers[["run", "baseline", "variant", "status", "last_step", "final_eval_step", "notes"]]
    shown.columns = ["run", "baseline", "variant", "status", "steps logged", "final eval step", "notes"]
    rep.doc.heading(2, "Runs")
    rep.doc.para(f"{plural(len(rep.runs), 'run')}, {plural(len(rep.arms), 'arm')}"
                 + (f", {plural(len(rep.warm_starts), 'warm start')}" if rep.warm_starts else "") + ".")
    rep.table(numbers, shown, "runs")
    if rep.issues:
        rep.doc.heading(3, "Failed, unfinished or missing runs")
        rep.doc.bullets([f"**{i.name}**: {i.status}" + (f" — {i.detail}" if i.detail else "") for i in rep.issues])
