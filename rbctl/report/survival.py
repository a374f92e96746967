"""Time-to-event statistics for escape times (docs/method.md, "Premature convergence", escape time):
the Kaplan–Meier estimate, its median, the restricted mean survival time with its interval, and the
log-rank test, in numpy/scipy.

Inputs are per run: ``times`` (the escape step, or the last evaluated step when the run never
escaped) and ``events`` (1 = escaped at that time, 0 = censored there). "Survival" S(t) is the
probability that a run has not escaped by step t.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from scipy import stats as sps


@dataclass(frozen=True)
class KaplanMeier:
    """S(t) as a step function: ``survival[j]`` holds on [times[j], times[j+1]); S = 1 before times[0]."""

    times: np.ndarray  # distinct event times, ascending
    at_risk: np.ndarray  # n_j: runs with time >= times[j]
    events: np.ndarray  # d_j: escapes at times[j]
    survival: np.ndarray  # S(times[j]) = Π_{i ≤ j} (1 − d_i / n_i), the nearest float of ``exact``
    n: int
    exact: tuple[Fraction, ...] = ()  # the same products in exact rational arithmetic (integer counts)

    def at(self, t: float) -> float:
        """S(t), right-continuous."""
        j = int(np.searchsorted(self.times, t, side="right")) - 1
        return 1.0 if j < 0 else float(self.survival[j])

    def quantile_time(self, q: float) -> float:
        """The first time at which S(t) ≤ 1 − q (lifelines' rule), compared on the exact products so that
        an S of exactly 1 − q (S(40) = 0.8 · 0.75 · 5/6 = 1/2) is not one step late by float rounding
        (0.5000000000000001); inf when S never gets there."""
        target = Fraction(1) - Fraction(q).limit_denominator(10 ** 9)
        levels = self.exact or tuple(Fraction(float(v)) for v in self.survival)
        hit = next((j for j, v in enumerate(levels) if v <= target), None)
        return math.inf if hit is None else float(self.times[hit])

    @property
    def median(self) -> float:
        """The first time at which S(t) ≤ 0.5; inf when S never gets there (fewer than half escaped)."""
        return self.quantile_time(0.5)


def _check(times, events) -> tuple[np.ndarray, np.ndarray]:
    t, e = np.asarray(times, dtype=float), np.asarray(events, dtype=int)
    if t.shape != e.shape or t.ndim != 1 or not len(t):
        raise ValueError(f"need one time and one event flag per run, got shapes {t.shape} and {e.shape}")
    if not np.isfinite(t).all() or not np.isin(e, (0, 1)).all():
        raise ValueError("times must be finite and events 0 or 1")
    return t, e


def kaplan_meier(times, events) -> KaplanMeier:
    """The Kaplan–Meier estimate (Kaplan & Meier 1958): S(t) = Π_{t_j ≤ t} (1 − d_j / n_j) over the
    distinct event times t_j, with n_j the runs still at risk (time ≥ t_j; a run censored at t_j
    counts as at risk there) and d_j the escapes at t_j."""
    t, e = _check(times, events)
    distinct = np.unique(t[e == 1])
    n = [int((t >= s).sum()) for s in distinct]
    d = [int(((t == s) & (e == 1)).sum()) for s in distinct]
    exact, s = [], Fraction(1)
    for nj, dj in zip(n, d):
        s *= Fraction(nj - dj, nj)
        exact.append(s)
    return KaplanMeier(distinct, np.array(n, dtype=float), np.array(d, dtype=float),
                       np.array([float(v) for v in exact], dtype=float), len(t), tuple(exact))


def rmst(km: KaplanMeier, tau: float, level: float = 0.95) -> tuple[float, float, float]:
    """Restricted mean survival time up to ``tau``: ∫_0^tau S(u) du (the mean step by which a run
    escapes, escapes after tau counted as tau), with a normal interval from the Greenwood-type
    variance (Klein & Moeschberger 2003, §4.5):

        Var = Σ_{t_j ≤ tau} A_j² d_j / (n_j (n_j − d_j)),   A_j = ∫_{t_j}^{tau} S(u) du

    (a term with n_j = d_j has A_j = 0 and is left out). The interval is clipped to [0, tau].
    Returns (rmst, low, high)."""
    edges = np.concatenate([[0.0], km.times[km.times < tau], [tau]])
    heights = np.array([km.at(s) for s in edges[:-1]])
    widths = np.diff(edges)
    area = float((heights * widths).sum())
    var = 0.0
    for j, s in enumerate(km.times):
        if s > tau or km.at_risk[j] == km.events[j]:
            continue
        a = float((heights * widths)[edges[:-1] >= s].sum())
        var += a * a * km.events[j] / (km.at_risk[j] * (km.at_risk[j] - km.events[j]))
    half = float(sps.norm.ppf((1 + level) / 2)) * math.sqrt(var)
    return area, max(0.0, area - half), min(float(tau), area + half)


def logrank(times_a, events_a, times_b, events_b, strata_a=None, strata_b=None) -> tuple[float, float]:
    """The log-rank test of equal escape-time distributions (Mantel 1966; ties handled with the
    hypergeometric variance): over the distinct event times t_j of the pooled runs,

        O − E = Σ_j (d_aj − d_j n_aj / n_j),
        V = Σ_j d_j (n_aj / n_j)(1 − n_aj / n_j)(n_j − d_j) / (n_j − 1),

    χ² = (O − E)² / V on 1 df. With ``strata_a``/``strata_b`` (a label per run, e.g. its warm start)
    the test is **stratified**: O − E and V are summed over strata, each computed on its own risk sets,
    so runs are compared only with runs of the same stratum (Kalbfleisch & Prentice 2002, §7.2).
    Returns (χ², p); NaN when no run escaped (V = 0)."""
    ta, ea = _check(times_a, events_a)
    tb, eb = _check(times_b, events_b)
    t, e = np.concatenate([ta, tb]), np.concatenate([ea, eb])
    in_a = np.concatenate([np.ones(len(ta), bool), np.zeros(len(tb), bool)])
    if strata_a is None or strata_b is None:
        strata = np.zeros(len(t), dtype=int)
    else:
        strata = np.asarray([str(x) for x in (*strata_a, *strata_b)])
    o_minus_e = var = 0.0
    for stratum in np.unique(strata):
        keep = strata == stratum
        st, se, sa = t[keep], e[keep], in_a[keep]
        for s in np.unique(st[se == 1]):
            risk = st >= s
            n, na = risk.sum(), (risk & sa).sum()
            d, da = ((st == s) & (se == 1)).sum(), ((st == s) & (se == 1) & sa).sum()
            o_minus_e += da - d * na / n
            if n > 1:
                var += d * (na / n) * (1 - na / n) * (n - d) / (n - 1)
    if var <= 0:
        return math.nan, math.nan
    chi2 = o_minus_e ** 2 / var
    return float(chi2), float(sps.chi2.sf(chi2, 1))
