"""Escape time: per run, the first periodic evaluation at which it leaves the plateau's shortcut (the
sweep file's ``escape`` setting, e.g. the share of samples that walk reaching 0.5), censored at its
last evaluation when it never does; Kaplan–Meier curves per arm, the median, the restricted mean
survival time, and log-rank tests (docs/method.md, "Premature convergence", escape time); and the
report's escape-time analysis (`escape_times`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from rbctl.config.sweep import Escape
from rbctl.report.load import Run, source_noun, unit_label
from rbctl.report.series import run_series
from rbctl.report.survival import kaplan_meier, logrank, rmst


def escape_time(steps, values, threshold: float, direction: str = "above", hold: int = 0) -> tuple[float, int]:
    """(time, event): the first step (in order, the warm start's step 0 included) whose value is ≥
    ``threshold`` (``direction`` "above") or ≤ it ("below") and stays so at the next ``hold`` points,
    event 1; else the last step, event 0 (censored). A crossing with fewer than ``hold`` points left
    before the run ends is not confirmed, so it is censored, not an event: the hold is the escape's
    definition, and a crossing at the last evaluation would otherwise count as one."""
    pairs = sorted(zip(steps, values))
    if not pairs:
        raise ValueError("no evaluation")
    across = [(v >= threshold) if direction == "above" else (v <= threshold) for _, v in pairs]
    for i, (s, _) in enumerate(pairs[:len(pairs) - hold]):
        if all(across[i:i + 1 + hold]):
            return float(s), 1
    return float(pairs[-1][0]), 0


def signal_series(run: Run, spec: Escape, benchmark: str | None) -> pd.Series:
    """The run's escape signal: its periodic evaluation's ``spec.metric`` on ``benchmark``, or with
    ``spec.signal`` "train" the training batch's value at every logged step."""
    if spec.signal == "train":
        return run_series(run, spec.metric)
    return run_series(run, spec.metric, benchmark)


def escape_rows(runs: list[Run], spec: Escape, benchmark: str) -> pd.DataFrame:
    """One row per run that logged ``spec.metric`` (`signal_series`): arm, unit, warm start, time,
    event, last step of the signal."""
    rows = []
    for r in runs:
        s = signal_series(r, spec, benchmark)
        if len(s):
            t, e = escape_time(s.index, s.values, spec.threshold, spec.direction, spec.hold)
            rows.append({"arm": r.arm, "unit": unit_label(r.unit), "warm_start": r.warm_start or "", "run": r.name,
                         "time": t, "event": e, "last_step": float(s.index.max())})
    return pd.DataFrame(rows, columns=["arm", "unit", "warm_start", "run", "time", "event", "last_step"])


def survival_summary(rows: pd.DataFrame, level: float = 0.95) -> tuple[pd.DataFrame, dict[str, pd.DataFrame], float]:
    """Per arm: runs, escapes, the Kaplan–Meier median escape step (inf: fewer than half escaped) and
    the RMST up to τ with its interval; the KM curves (step, survival, censored) for the figure; and
    τ = the last evaluation step every run reached (the smallest last step), so no run is censored
    before τ by a shorter follow-up."""
    tau = float(rows["last_step"].min())
    table, curves = [], {}
    for arm, g in rows.groupby("arm", sort=True):
        km = kaplan_meier(g["time"], g["event"])
        area, lo, hi = rmst(km, tau, level)
        table.append({"arm": arm, "runs": len(g), "escaped": int(g["event"].sum()), "median": km.median,
                      "rmst": area, "rmst_lo": lo, "rmst_hi": hi, "tau": tau})
        steps = sorted(set(g["time"]) | {0.0})
        cens = g[g["event"] == 0].groupby("time").size()
        curves[arm] = pd.DataFrame({"step": steps, "survival": [km.at(s) for s in steps],
                                    "censored": [int(cens.get(s, 0)) for s in steps]})
    return pd.DataFrame(table), curves, tau


def logrank_rows(rows: pd.DataFrame, pairs: list[tuple[str, str]]) -> pd.DataFrame:
    """The log-rank test of each (arm, reference) pair that has runs on both sides, stratified by warm
    start when the runs carry one (runs compared only within their warm start); p unadjusted."""
    out = []
    for arm, ref in pairs:
        a, b = rows[rows["arm"] == arm], rows[rows["arm"] == ref]
        if len(a) and len(b):
            strata = "warm_start" in rows and (rows["warm_start"].astype(str) != "").any()
            chi2, p = logrank(a["time"], a["event"], b["time"], b["event"],
                              *((a["warm_start"], b["warm_start"]) if strata else (None, None)))
            out.append({"arm": arm, "ref": ref, "runs_arm": len(a), "runs_ref": len(b), "chi2": chi2, "p": p,
                        "stratified": bool(strata)})
    return pd.DataFrame(out, columns=["arm", "ref", "runs_arm", "runs_ref", "chi2", "p", "stratified"])


def escape_setting(setting: Escape | None, runs: list[Run]) -> tuple[Escape | None, str]:
    """The sweep file's ``escape`` (``setting``); else the default setting when runs log its metric;
    else off. With where it comes from."""
    noun = source_noun(runs) or "runs manifest"
    if setting is not None:
        return setting, f"the {noun}'s `escape` setting"
    default = Escape()
    if any(default.metric in e for r in runs for e in r.evals):
        return default, f"the default setting (the {noun} sets no `escape`)"
    return None, ""


@dataclass(frozen=True)
class EscapeTimes:
    """The escape-time analysis: the setting and where it comes from, the benchmark, one row per run
    (`rows`: data/escape_times.csv), and, when any run logged the metric, the per-arm survival table
    (tables/escape.csv), the Kaplan–Meier curves, τ of the RMST, and the log-rank tests of ``pairs``."""

    setting: Escape
    source: str
    benchmark: str | None
    rows: pd.DataFrame
    table: pd.DataFrame
    curves: dict[str, pd.DataFrame]
    tau: float
    pairs_are_principal: bool  # the log-rank pairs are the principal comparisons (else the stated pairs)
    logrank: pd.DataFrame


def escape_times(setting: Escape | None, runs: list[Run], benchmark: str | None,
                 pairs: list[tuple[str, str]], pairs_are_principal: bool) -> EscapeTimes | None:
    """The report's escape-time analysis (None when it is off: `escape_setting`); ``benchmark`` is the
    periodic evaluation's, used when the setting names none; ``pairs`` are (arm, reference) pairs for
    the log-rank tests."""
    spec, source = escape_setting(setting, runs)
    if spec is None:
        return None
    bench = spec.benchmark or benchmark
    rows = escape_rows(runs, spec, bench) if bench or spec.signal == "train" else pd.DataFrame()
    if not len(rows):
        return EscapeTimes(spec, source, bench, rows, pd.DataFrame(), {}, math.nan, pairs_are_principal, pd.DataFrame())
    table, curves, tau = survival_summary(rows)
    return EscapeTimes(spec, source, bench, rows, table, curves, tau, pairs_are_principal, logrank_rows(rows, pairs))

