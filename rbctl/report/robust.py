"""Aggregates over runs that rliable recommends (Agarwal et al. 2021, "Deep RL at the edge of the
statistical precipice"), as its `rliable.metrics` / `rliable.library` define them, in numpy
(docs/method.md, "Comparing arms"): the interquartile mean, the probability of improvement, score
distributions (performance profiles) and the stratified bootstrap.

Score arrays are ``[runs, tasks]`` (a task is a benchmark here; one column when there is one). A NaN
score makes the statistic and its interval NaN, never a number from the other runs (rliable's IQM and
probability of improvement do the same through scipy; its score distributions would count a NaN as
below every τ).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np


def iqm(scores) -> float | np.ndarray:
    """Interquartile mean over all runs and tasks: the mean after cutting g = ⌊N/4⌋ of the N pooled
    scores from each end (rliable's `aggregate_iqm`, `scipy.stats.trim_mean(x, 0.25, axis=None)`).
    ``scores`` is ``[runs, tasks]``, or ``[B, runs, tasks]`` for B resamples at once."""
    s = np.asarray(scores, dtype=float)
    flat = np.sort(s.reshape(*s.shape[:-2], -1), axis=-1)  # a NaN sorts last, where the trim would drop it
    g = int(0.25 * flat.shape[-1])
    out = np.where(np.isnan(flat).any(axis=-1), np.nan, flat[..., g:flat.shape[-1] - g].mean(axis=-1))
    return float(out) if out.ndim == 0 else out


# The fewest runs an IQM's bootstrap interval is shown with (`iqm_interval`): rliable's percentile interval of the
# IQM over n runs covered the population IQM in 0.76 of trials at 3 runs, 0.89 at 5, 0.91–0.92 at 6–7 and 0.93–0.94
# from 8 on (normal and Beta(2, 5) scores, 2,000–4,000 trials; tests/unit/test_interval_coverage.py).
MIN_IQM_UNITS = 8


def iqm_interval(scores, n_boot: int = 2000, seed: int = 0) -> tuple[float, float]:
    """The IQM's stratified bootstrap interval (`stratified_bootstrap`) of ``scores`` ``[runs, tasks]``,
    NaN (withheld) with fewer than `MIN_IQM_UNITS` runs: there it covers less than 0.93."""
    x = np.atleast_2d(np.asarray(scores, dtype=float))
    if x.shape[0] < MIN_IQM_UNITS:
        return float("nan"), float("nan")
    return stratified_bootstrap(iqm, [x], n_boot=n_boot, seed=seed)


def prob_improvement(x, y) -> float | np.ndarray:
    """P(X > Y): per task, the mean over every pair (run i of X, run j of Y) of 1[x_i > y_j] +
    ½·1[x_i = y_j] (the Mann–Whitney U / (n·m)), averaged over tasks (rliable's
    `probability_of_improvement`). ``x`` is ``[n, T]``, ``y`` is ``[m, T]`` (or both with a leading
    resample axis B).

    This is the unpaired form even when X and Y share units: it estimates how often a run of X beats
    a run of Y, the quantity rliable reports. Its interval is rliable's when the runs are resampled
    independently (`stratified_bootstrap(..., paired=False)`, `StratifiedIndependentBootstrap`);
    rbctl also offers a **paired** bootstrap (``paired=True``: units resampled, each unit's two runs
    kept together), which is not rliable's and is labelled as such wherever it is shown. A task
    with a NaN score gives NaN (rliable's `mannwhitneyu` call propagates it)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape[-1] != y.shape[-1]:
        raise ValueError(f"x and y have {x.shape[-1]} and {y.shape[-1]} tasks")
    a, b = x[..., :, None, :], y[..., None, :, :]
    per_task = (a > b).mean(axis=(-3, -2)) + 0.5 * (a == b).mean(axis=(-3, -2))
    per_task = np.where(np.isnan(x).any(axis=-2) | np.isnan(y).any(axis=-2), np.nan, per_task)
    out = per_task.mean(axis=-1)
    return float(out) if out.ndim == 0 else out


def score_distribution(scores, taus) -> np.ndarray:
    """For each τ, the fraction of (run, task) scores above τ (rliable's `score_distributions`): a
    performance profile. ``scores`` ``[runs, tasks]`` gives ``[len(taus)]``; ``[B, runs, tasks]``
    gives ``[B, len(taus)]``. A NaN score gives NaN fractions (rliable's `np.mean(scores > tau)`
    would count it as not above any τ)."""
    s = np.asarray(scores, dtype=float)
    flat = s.reshape(*s.shape[:-2], -1)
    out = (flat[..., None, :] > np.asarray(taus, dtype=float)[:, None]).mean(axis=-1)
    return np.where(np.isnan(flat).any(axis=-1)[..., None], np.nan, out)


def stratified_bootstrap(stat: Callable[..., float | np.ndarray], arrays: Sequence, *, paired: bool = False,
                         n_boot: int = 2000, level: float = 0.95, seed: int = 0):
    """Percentile interval of ``stat(*arrays)`` under rliable's stratified bootstrap: within each task
    (column, the stratum) resample the runs (rows) with replacement; with one task it is a plain
    bootstrap over runs. Each array is ``[runs, tasks]``, resampled on its own (rliable's
    `StratifiedIndependentBootstrap`), or with ``paired`` with one shared draw of row indices, so
    that row i of every array stays together (all arrays then have the same rows: the units).
    ``stat`` takes the resamples stacked, ``[n_boot, runs, tasks]`` each, and returns one value (or
    a vector) per resample, as `iqm`, `prob_improvement` and `score_distribution` do.

    Returns (low, high): floats for a scalar statistic, arrays for a vector one; NaN when an input
    holds a NaN (the statistic of the data itself is NaN, so no resample of it is a number)."""
    arrays = [np.atleast_2d(np.asarray(a, dtype=float)) for a in arrays]
    if paired and len({a.shape for a in arrays}) != 1:
        raise ValueError(f"paired arrays need one shape, got {[a.shape for a in arrays]}")
    if any(np.isnan(a).any() for a in arrays):
        nan = np.full(np.shape(stat(*[a[None] for a in arrays]))[1:], np.nan)
        return (float(nan), float(nan)) if nan.ndim == 0 else (nan, nan.copy())
    rng = np.random.default_rng(seed)
    shared = rng.integers(0, arrays[0].shape[0], size=(n_boot, *arrays[0].shape)) if paired else None
    samples = []
    for a in arrays:
        idx = shared if paired else rng.integers(0, a.shape[0], size=(n_boot, *a.shape))
        samples.append(np.take_along_axis(np.broadcast_to(a, idx.shape), idx, axis=1))
    lo, hi = np.quantile(np.asarray(stat(*samples), dtype=float), [(1 - level) / 2, (1 + level) / 2], axis=0)
    return (float(lo), float(hi)) if np.ndim(lo) == 0 else (lo, hi)
