"""Per-step curves of runs: the ``[steps, units]`` frames behind trajectory figures and their bands,
and each run's final values (entropy, κ_eff, held-out pass@1)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from rbctl.report.load import Run
from rbctl.report.stats import t_interval_rows, tail_mean
from rbctl.report.stats import finite

KAPPA_EFF_WINDOW = 5  # logged κ_eff values per centred rolling mean: one batch's κ_eff is noisy
FINAL_FRACTION = 0.25  # "final" entropy / κ_eff = mean over the last quarter of a run's logged values


def eval_value(record: dict, key: str):
    """``key`` of a periodic-evaluation line; ``avg@n`` also reads older lines' ``avg@<n>``."""
    if key in record or key != "avg@n":
        return record.get(key)
    return next((v for k, v in record.items() if k.startswith("avg@")), None)


def run_series(run: Run, key: str, benchmark: str | None = None) -> pd.Series:
    """One run's finite values by step: the metrics log's ``key``, or (``benchmark`` given) ``key``
    of that benchmark's periodic-evaluation lines (a step-0 line included; ``avg@n`` = held-out pass@1)."""
    if benchmark is None:
        points = {m["step"]: m.get(key) for m in run.metrics if "step" in m}
    else:
        points = {e["step"]: eval_value(e, key) for e in run.evals if e.get("benchmark") == benchmark and "step" in e}
    return pd.Series({int(k): float(v) for k, v in points.items() if finite(v)}, dtype=float).sort_index()


def unit_frame(runs: list[Run], key: str, window: int = 1, benchmark: str | None = None) -> pd.DataFrame:
    """``[steps, units]`` of one metric of one arm's runs (``benchmark`` given: ``key`` of that
    benchmark's periodic evaluation).

    Null and non-finite values are dropped; ``window`` > 1 smooths each run (centred rolling mean)
    before averaging.
    """
    cols = {}
    for r in runs:
        s = run_series(r, key, benchmark)
        if window > 1:
            s = s.rolling(window, center=True, min_periods=1).mean()
        if len(s):
            cols[r.unit] = s
    return pd.DataFrame(cols).sort_index()


def band(frame: pd.DataFrame, level: float = 0.95) -> pd.DataFrame:
    """Per step: mean over the units that logged it, its t-interval over those units (NaN where only
    one did), and how many did (column ``seeds``, the units)."""
    mean, lo, hi = t_interval_rows(frame.to_numpy(dtype=float), level)
    return pd.DataFrame({"mean": mean, "lo": lo, "hi": hi, "seeds": frame.count(axis=1).to_numpy()},
                        index=frame.index)


def arm_bands(by_arm: dict[str, list[Run]], key: str, window: int = 1, benchmark: str | None = None,
              arms: list[str] | None = None) -> dict[str, pd.DataFrame]:
    """Per arm (sorted; ``arms``, else every arm of ``by_arm``) that logged ``key``: the `band` of its
    `unit_frame`. Arms without it are left out."""
    frames = {arm: unit_frame(by_arm.get(arm, []), key, window, benchmark) for arm in sorted(arms or by_arm)}
    return {arm: band(frame) for arm, frame in frames.items() if not frame.empty}


def final_metric(run: Run, key: str, fraction: float = FINAL_FRACTION) -> float:
    """A run's mean over the last ``fraction`` of its finite logged ``key`` values (NaN if none)."""
    return tail_mean([m.get(key) for m in run.metrics if finite(m.get(key))], fraction)


def final_heldout(run: Run, benchmark: str) -> float:
    """A run's held-out pass@1: avg@n of its final evaluation on ``benchmark``, else of its last
    periodic-evaluation line for it (NaN if neither)."""
    s = run.finals.get(benchmark)
    if s and s.get("per_problem"):
        pp = s["per_problem"]
        return float(np.mean([int(p["correct"]) / int(p.get("n", s.get("n"))) for p in pp]))
    series = run_series(run, "avg@n", benchmark)
    return float(series.iloc[-1]) if len(series) else math.nan


def at_step(runs: list[Run], step: int, benchmark: str, key: str = "avg@n") -> dict:
    """{unit: periodic-evaluation ``key`` at ``step``} over the runs that logged it."""
    out = {}
    for r in runs:
        s = run_series(r, key, benchmark)
        if step in s.index:
            out[r.unit] = float(s.loc[step])
    return out


def eval_steps_of(runs: list[Run], benchmark: str, key: str = "avg@n") -> list[int]:
    """The periodic-evaluation steps any of the runs logged ``key`` at on ``benchmark``."""
    return sorted({int(s) for r in runs for s in run_series(r, key, benchmark).index})
