"""The report's sections on premature convergence: the plateau test of the GRPO arm against a
reachable ceiling, and escape times (docs/method.md, "Premature convergence"). Each takes the
`rbctl.report.build.Report` and appends to its document.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from rbctl.config.sweep import Escape
from rbctl.report import diagnostics as diag
from rbctl.report.compare import stated_pairs
from rbctl.report.escape import escape_rows, fmt_step, logrank_rows, survival_summary
from rbctl.report.figures import plot_survival
from rbctl.report.load import Ceiling, Run, ceiling_file, warm_start_pass_at_g
from rbctl.report.tables import num, pct, plural, pval, write_csv, yes_no

PLATEAU_ARM = ("grpo", "base")


def eval_benchmark(rep) -> str | None:
    """The benchmark of the periodic evaluation (the first logged), else the first final one."""
    return next((b for b in dict.fromkeys(e.get("benchmark") for r in rep.runs for e in r.evals) if b),
                rep.benchmarks[0] if rep.benchmarks else None)


# --- plateau ----------------------------------------------------------------------------------------


def reachable_ceiling(by_arm: dict[str, list[Run]], dirs: list[Path], bench: str | None) -> Ceiling:
    """The plateau test's ceiling, in order: the ceiling file (of the runs' sweep directory or of one
    of ``dirs``); the best arm's final held-out pass@1 among ``by_arm`` (the mean over its units of
    pass@1 at their last evaluation on ``bench``: the number the stalled and below-ceiling criteria
    read for the tested arm); unknown."""
    found = ceiling_file([r for runs in by_arm.values() for r in runs], dirs)
    if found is not None:
        return found
    finals = {}
    for arm in sorted(by_arm):
        v = diag.plateau_of_arm(by_arm[arm], bench, None) if bench else None
        if v is not None and v.per_seed and any("final" in d for d in v.per_seed.values()):
            finals[arm] = (float(np.mean([d["final"] for d in v.per_seed.values() if "final" in d])) / 100,
                           sum("final" in d for d in v.per_seed.values()))
    if finals:
        best = max(finals, key=lambda a: finals[a][0])
        return Ceiling(finals[best][0], f"the best arm's final pass@1 in this report: {best}, mean over "
                                        f"{plural(finals[best][1], 'unit')}")
    return Ceiling(None, "unknown")


def plateau(rep) -> None:
    rep.doc.heading(2, "Plateau test (premature convergence)")
    bench = eval_benchmark(rep)
    arm = next((a for a in rep.arms if rep.info[a] == PLATEAU_ARM), None)
    if arm is None or bench is None:
        rep.doc.para("No GRPO base arm (baseline grpo, variant base) with held-out evaluations.")
        return
    old = warm_start_pass_at_g(rep.by_arm[arm], bench)
    v = diag.plateau_of_arm(rep.by_arm[arm], bench, rep.ceiling.value)
    v_old = diag.plateau_of_arm(rep.by_arm[arm], bench, old.value)
    ceiling = "unknown" if rep.ceiling.value is None else f"{pct(rep.ceiling.value)}% ({rep.ceiling.source})"
    rep.doc.para(f"Arm `{arm}` on {bench}, {plural(v.seeds, 'unit')}: the plateau "
                 f"**{'held' if v.held else 'did not hold'}**. Ceiling: {ceiling}. Criteria (docs/method.md): held-out "
                 "pass@1 changes < 2 points over the last quarter, ≥ 15 points below a reachable ceiling, final "
                 "entropy < 1/3 of the warm start's; each over units (means), then per unit. The last row applies the "
                 "old ceiling, the warm start's pass@G, which arms can exceed: it is shown for comparison only.")
    table = diag.plateau_table(arm, v, v_old, old.source)
    shown = table.assign(held=[yes_no(h) for h in table["held"]])[["criterion", "held", "detail"]]
    rep.table(table, shown, "plateau")
    units = diag.plateau_units(v, rep.ceiling.value)
    if len(units):
        shown = pd.DataFrame({
            "unit": units["unit"], "steps ¾T, T": [f"{num(a, 0)}, {num(b, 0)}" for a, b in zip(units["t_ref"], units["t"])],
            "|Δ pass@1| (points)": [num(x, 2) for x in units["change"]], "stalled": [yes_no(h) for h in units["stalled"]],
            "final pass@1": [num(x, 1) for x in units["final"]], "below ceiling (points)": [num(x, 1) for x in units["gap"]],
            "≥ 15 below": [yes_no(h) for h in units["below_ceiling"]],
            "entropy final / warm": [num(x, 2) for x in units["entropy_ratio"]],
            "collapsed": [yes_no(h) for h in units["entropy_collapsed"]]})
        rep.table(units, shown, "plateau_units")


# --- escape time ------------------------------------------------------------------------------------


def escape_setting(rep) -> tuple[Escape | None, str]:
    """The sweep file's ``escape``; else the default setting when runs log its metric; else off."""
    if rep.escape is not None:
        return rep.escape, "the sweep file's `escape` setting"
    default = Escape()
    if any(default.metric in e for r in rep.runs for e in r.evals):
        return default, "the default setting (the sweep file sets no `escape`)"
    return None, ""


def escape(rep) -> None:
    spec, source = escape_setting(rep)
    if spec is None:
        return
    rep.doc.heading(2, "Escape time")
    bench = spec.benchmark or eval_benchmark(rep)
    rows = escape_rows(rep.runs, spec, bench) if bench else pd.DataFrame()
    sign = "≥" if spec.direction == "above" else "≤"
    if not len(rows):
        rep.doc.para(f"No run logged `{spec.metric}` on {bench} in its periodic evaluation.")
        return
    write_csv(rows, rep.data / "escape_times.csv")
    table, curves, tau = survival_summary(rows)
    rep.doc.para(f"A run escapes at the first periodic evaluation (step 0 = the warm start included) where "
                 f"`{spec.metric}` {sign} {spec.threshold:g} on {bench} ({source}); a run that never does is "
                 f"censored at its last evaluation. Kaplan–Meier estimate per arm; median = first step with S ≤ 0.5 "
                 f"(S from exact counts, so an S of exactly 0.5 counts); "
                 f"RMST = mean escape step restricted to τ = {tau:g} (the last step every run reached; never escaping "
                 "counts as τ), 95% normal interval (Greenwood-type variance).")
    shown = pd.DataFrame({"arm": table["arm"], "runs": table["runs"], "escaped": table["escaped"],
                          "median escape step": [fmt_step(m) for m in table["median"]],
                          f"RMST to step {tau:g} [95% CI]": [f"{num(a, 1)} [{num(lo, 1)}, {num(hi, 1)}]" for a, lo, hi in
                                                            zip(table["rmst"], table["rmst_lo"], table["rmst_hi"])]})
    rep.table(table, shown, "escape")
    rep.figure(plot_survival(curves, rep.styles, f"Escape time: runs with {spec.metric} still below {spec.threshold:g}"
                             if spec.direction == "above" else f"Escape time: runs with {spec.metric} still above "
                             f"{spec.threshold:g}"), "escape_km", "Kaplan–Meier curves of escape time")
    pairs = list(rep.spec.principal) if rep.spec is not None else [(a, r) for _, _, a, r in stated_pairs(rep.info)]
    lr = logrank_rows(rows, pairs)
    if len(lr):
        rep.doc.para("Log-rank test per " + ("principal comparison" if rep.spec is not None else "stated pair")
                     + " (χ² on 1 df, unadjusted; it treats runs as independent, ignoring the pairing by unit).")
        shown = pd.DataFrame({"comparison": lr["arm"] + " − " + lr["ref"], "runs": [f"{a} / {b}" for a, b in
                                                                                   zip(lr["runs_arm"], lr["runs_ref"])],
                              "χ²": [num(x, 2) for x in lr["chi2"]], "p": [pval(p) for p in lr["p"]]})
        rep.table(lr, shown, "escape_logrank")
