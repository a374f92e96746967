"""The crossing step of two arms' mean curves, with a bootstrap-over-units interval.

A claim such as "the budget's coverage turns into pass@1" asks not only whether an arm ends above
its reference but from when on: the first evaluation step from which the arm's mean curve (over
units: seeds, or (warm start, seed) pairs) stays strictly above the reference's to the last
evaluation. Units are paired (the arm's and the reference's run of one unit share the warm start
and the seed), so the mean curves' difference is the mean of the per-unit differences, and the
bootstrap resamples units, each unit bringing both its curves.

    crossing(t) = the smallest t_k with  mean_u(a_u(t_j) − r_u(t_j)) > 0  for every j ≥ k
                  (none when the last evaluation is not above)

A tie is not above: at step 0 both arms are the warm start, so a crossing is never step 0 unless the
curves differ there. The interval is the percentile interval of the crossing step over bootstrap
resamples of the units; a resample whose mean curve ends at or below the reference's has no crossing
and counts as +inf (beyond the last step), so an interval whose upper end is inf says that at this
level the arm may not cross within the horizon. With few units (u^u ≤ `EXACT_LIMIT` resamples) every
resample is enumerated (the exact bootstrap distribution, no random draws); above that, `n_boot`
draws from a seeded generator.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

EXACT_LIMIT = 50_000  # u^u resamples: all of them for u ≤ 6 units (6^6 = 46,656)


@dataclass(frozen=True)
class Crossing:
    """The crossing step of the mean curves and its bootstrap interval (steps; inf = no crossing)."""

    step: float  # first step from which the arm's mean curve stays above the reference's; inf if none
    lo: float  # percentile interval over resampled units (inf: no crossing at this end)
    hi: float
    crossed: float  # share of resamples with a crossing within the horizon
    units: int
    resamples: int
    exact: bool  # every resample enumerated (True) or n_boot random draws
    level: float


def first_step_staying_above(steps, diff) -> float:
    """The first step from which every later value of ``diff`` (arm − reference, one per step, steps
    ascending) is > 0; inf when the last value is not."""
    above = np.asarray(diff, dtype=float) > 0
    if not above.size or not above[-1]:
        return math.inf
    below = np.flatnonzero(~above)
    return float(steps[below[-1] + 1] if below.size else steps[0])


def crossing_step(steps, arm, ref, level: float = 0.95, n_boot: int = 10_000, seed: int = 0) -> Crossing:
    """The crossing step (module docstring) of paired curves ``arm``, ``ref`` ``[units, steps]`` (row u of
    both is unit u, column j is evaluation step ``steps[j]``, steps strictly ascending), with its
    percentile interval at ``level`` over resampled units."""
    steps = np.asarray(steps, dtype=float)
    a, r = np.asarray(arm, dtype=float), np.asarray(ref, dtype=float)
    if a.shape != r.shape or a.ndim != 2 or a.shape[1] != steps.size:
        raise ValueError(f"arm {a.shape} and ref {r.shape} must both be [units, steps] with {steps.size} steps")
    if not np.all(np.diff(steps) > 0):
        raise ValueError("steps must be strictly ascending")
    if not (np.isfinite(a).all() and np.isfinite(r).all()):
        raise ValueError("curves must be finite (a unit missing an evaluation cannot be paired)")
    d = a - r  # [units, steps]
    u = d.shape[0]
    if u < 2:
        raise ValueError(f"a bootstrap over units needs at least 2 units, got {u}")
    exact = u ** u <= EXACT_LIMIT
    if exact:
        draws = np.array(list(itertools.product(range(u), repeat=u)))  # [u^u, u]
    else:
        draws = np.random.default_rng(seed).integers(0, u, size=(n_boot, u))
    means = d[draws].mean(axis=1)  # [resamples, steps]
    boot = np.array([first_step_staying_above(steps, m) for m in means])
    # an order statistic, not an interpolation: crossing steps are evaluation steps (or inf)
    lo, hi = np.quantile(boot, [(1 - level) / 2, (1 + level) / 2], method="inverted_cdf")
    return Crossing(first_step_staying_above(steps, d.mean(axis=0)), float(lo), float(hi),
                    float(np.isfinite(boot).mean()), u, len(boot), exact, level)
