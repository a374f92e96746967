"""Statistics of a report, with the seed as the unit of replication (docs/method.md, "Comparing arms").

Pure functions of numpy arrays (numpy and scipy only): no files, no pandas, no plotting.
Conventions: values are fractions; arrays of final scores are ``[seeds, problems]``; "level" is the
two-sided coverage (0.95).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from scipy import stats as sps


def finite(v) -> bool:
    """A real, finite number (not None, not bool, not NaN)."""
    try:
        return not isinstance(v, bool) and v is not None and math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


def t_interval(values, level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): mean ± t_{(1+level)/2, n−1} · sd / sqrt(n), sd unbiased; NaN bounds for n < 2."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if len(v) == 0:
        return math.nan, math.nan, math.nan
    m = float(v.mean())
    if len(v) < 2:
        return m, math.nan, math.nan
    half = float(sps.t.ppf((1 + level) / 2, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v)))
    return m, m - half, m + half


def t_interval_rows(matrix, level: float = 0.95) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`t_interval` of every row of ``matrix[rows, seeds]`` over its finite entries (vectorised)."""
    x = np.asarray(matrix, dtype=float)
    ok = np.isfinite(x)
    n = ok.sum(axis=1)
    s = np.where(ok, x, 0.0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = s / n
        dev = np.where(ok, x - mean[:, None], 0.0)
        sd = np.sqrt((dev ** 2).sum(axis=1) / (n - 1))
        half = sps.t.ppf((1 + level) / 2, np.maximum(n - 1, 1)) * sd / np.sqrt(n)
    half = np.where(n >= 2, half, np.nan)
    return mean, mean - half, mean + half


NOT_TESTABLE = "not testable"  # the call, and the p-value cell, of a comparison without a test (`PairedDelta`)
MIN_UNITS = 3  # a paired t-test needs at least this many units (docs/method.md, "Comparing arms")
SCORE_BOUNDS = (0.0, 1.0)  # a score (pass@k, avg@n, maj@k) is a fraction
DELTA_BOUNDS = (-1.0, 1.0)  # a difference of two scores
# The fewest units a hierarchical bootstrap interval is shown with (`hierarchical_bootstrap_delta`): its 95%
# percentile interval covered the true mean Δ in 0.86 of trials at 3 units, 0.90 at 5 and 0.94 at 8 where each
# unit's problem-level noise is half its between-unit spread, but where the units differ and problems add little (RL
# seeds: the usual case) it is the bootstrap of a mean over units, which covers 0.91 at 12 units, 0.927 at 20 and 0.933
# from 24 on (20,000 trials; tests/unit/test_interval_coverage.py). Below it the t-interval stands alone.
MIN_HIERARCHICAL_UNITS = 24
ZERO_SD = 1e-12  # sd(Δ) at or below this (times max(1, max |Δ|)) is 0: float noise of equal Δs, not spread


@dataclass(frozen=True)
class PairedDelta:
    """Δ_u = metric(arm, u) − metric(baseline, u) over the units both have, and its t-interval. A unit
    is what pairs two runs: a seed, or a (warm start, seed) pair.

    The comparison is **not testable** (``untestable`` says why; ``p`` is NaN, so no verdict and no
    Holm family) with fewer than `MIN_UNITS` units or when every unit gave the same Δ (sd(Δ) = 0:
    the t statistic is infinite, and a p of 0 would claim certainty from two equal numbers)."""

    units: tuple  # the common units, sorted
    deltas: tuple[float, ...]  # Δ_u, in the order of ``units``
    mean: float
    lo: float  # t-interval, n − 1 df, unadjusted for multiplicity, clipped to the bounds; NaN for n < 2 or sd 0
    hi: float
    p: float  # two-sided one-sample t-test of mean Δ = 0; NaN when not testable
    sd: float = math.nan  # sd(Δ), unbiased; NaN for n < 2
    untestable: str = ""  # why there is no test ("" when there is one)

    @property
    def n(self) -> int:
        return len(self.units)

    @property
    def testable(self) -> bool:
        return not self.untestable


def paired_delta(arm: dict, base: dict, level: float = 0.95,
                 bounds: tuple[float, float] | None = None) -> PairedDelta:
    """Per-unit paired Δ of two arms' scores ``{unit: score}`` over their common units; ``bounds``
    (e.g. (−1, 1) for a difference of fractions) clips the t-interval to Δ's range.

    A non-finite score is a ValueError naming its unit: it would otherwise make sd(Δ) NaN and the
    test meaningless."""
    units = tuple(sorted(set(arm) & set(base)))
    for side in (arm, base):
        bad = [u for u in units if not math.isfinite(side[u])]
        if bad:
            raise ValueError(f"score of unit {bad[0]} is {side[bad[0]]}")
    d = np.array([arm[u] - base[u] for u in units], dtype=float)
    mean, lo, hi = t_interval(d, level)
    n = len(d)
    sd = float(d.std(ddof=1)) if n >= 2 else math.nan
    flat = n >= 2 and sd <= ZERO_SD * max(1.0, float(np.abs(d).max()))  # every Δ the same, up to rounding
    why = ("no common unit" if not n else f"{n} unit{'s' * (n != 1)} (a test needs {MIN_UNITS})" if n < MIN_UNITS
           else "sd(Δ) = 0: every unit gave the same Δ" if flat else "")
    p = math.nan if why else float(2 * sps.t.sf(abs(mean) / (sd / math.sqrt(n)), n - 1))
    if flat:
        lo = hi = math.nan  # a zero-width interval from equal Δs would claim certainty
    if bounds is not None and math.isfinite(lo):
        lo, hi = clip_interval(lo, hi, bounds)
    return PairedDelta(units, tuple(float(x) for x in d), mean, lo, hi, p, sd, why)


def tost_paired(d: PairedDelta, margin: float) -> float:
    """The p-value of Schuirmann's two one-sided tests (TOST) that the mean Δ lies within
    (−``margin``, +``margin``), from a `PairedDelta` (Δ and margin in the same unit):

        t_low = (Δ̄ + margin) / se,  p_low = P(T > t_low);   t_up = (Δ̄ − margin) / se,  p_up = P(T < t_up)
        p = max(p_low, p_up),   se = sd(Δ) / √n,  T ~ t(n − 1)

    (statsmodels' `ttost_paired(arm, ref, −margin, margin)`). Rejecting at α says "equivalent within
    ±margin" at level α: the (1 − 2α) t-interval lies inside the margin. NaN when the comparison is not
    testable (`PairedDelta.testable`) or the margin is not a positive number."""
    if not d.testable or not (margin > 0) or not math.isfinite(d.sd):
        return math.nan
    se, df = d.sd / math.sqrt(d.n), d.n - 1
    p_low = float(sps.t.sf((d.mean + margin) / se, df))
    p_up = float(sps.t.cdf((d.mean - margin) / se, df))
    return max(p_low, p_up)


def noninferiority_paired(d: PairedDelta, margin: float, better: str = "higher") -> float:
    """The one-sided p-value that the mean Δ is not worse than the ``margin`` (a non-inferiority test):
    where higher is better, H0: Δ ≤ −margin against Δ > −margin, t = (Δ̄ + margin)/se, p = P(T > t);
    where lower is better, H0: Δ ≥ +margin, t = (margin − Δ̄)/se, p = P(T > t); se = sd(Δ)/√n,
    T ~ t(n − 1) (one of TOST's two tests). NaN when the comparison is not testable or the margin is
    not a positive number."""
    if not d.testable or not (margin > 0) or not math.isfinite(d.sd):
        return math.nan
    se = d.sd / math.sqrt(d.n)
    t = (d.mean + margin) / se if better == "higher" else (margin - d.mean) / se
    return float(sps.t.sf(t, d.n - 1))


def clip_interval(lo: float, hi: float, bounds: tuple[float, float]) -> tuple[float, float]:
    """(lo, hi) clipped to the metric's range ``bounds``: a t-interval of a bounded metric can run past
    it (pass@k 75.4 [45.6, 105.2]); NaN stays NaN."""
    b0, b1 = bounds
    return (float(min(max(lo, b0), b1)) if math.isfinite(lo) else lo,
            float(max(min(hi, b1), b0)) if math.isfinite(hi) else hi)


def bounded_t_interval(values, bounds: tuple[float, float] = SCORE_BOUNDS,
                       level: float = 0.95) -> tuple[float, float, float]:
    """`t_interval` with its bounds clipped to the metric's range (a score in [0, 1])."""
    m, lo, hi = t_interval(values, level)
    return (m, *clip_interval(lo, hi, bounds))


def hierarchical_bootstrap_delta(a, b, n_boot: int = 2000, level: float = 0.95,
                                 seed: int = 0) -> tuple[float, float]:
    """Percentile interval of mean Δ for paired ``a``, ``b`` ``[seeds, problems]`` (row s of both is
    seed s): resample seeds with replacement, then problems with replacement within each resampled
    seed (the same problem draw for both arms of that seed). Shown beside the t-interval from
    `MIN_HIERARCHICAL_UNITS` seeds on; with fewer it is narrower than the t-interval and covers less
    than 0.93 (the caller withholds it)."""
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    n_seeds, n_problems = d.shape
    rng = np.random.default_rng(seed)
    means = np.empty(n_boot)
    chunk = max(1, 2_000_000 // (n_seeds * n_problems))  # bounded memory for the index arrays
    for start in range(0, n_boot, chunk):
        m = min(chunk, n_boot - start)
        s = rng.integers(0, n_seeds, size=(m, n_seeds))
        p = rng.integers(0, n_problems, size=(m, n_seeds, n_problems))
        means[start:start + m] = d[s[:, :, None], p].mean(axis=(1, 2))
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def holm(pvalues, alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Holm–Bonferroni over a family: (adjusted p-values, rejected). NaN p-values (untestable
    comparisons) are not counted in the family and are never rejected."""
    p = np.asarray(pvalues, dtype=float)
    adj = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    m = len(ok)
    if m:
        order = ok[np.argsort(p[ok], kind="stable")]
        running = 0.0
        for rank, i in enumerate(order):
            running = max(running, min(1.0, (m - rank) * p[i]))
            adj[i] = running
    reject = np.where(np.isfinite(adj), adj <= alpha, False)
    return adj, reject.astype(bool)


class Correlation(NamedTuple):
    r: float
    lo: float  # Fisher-z interval
    hi: float
    p: float  # two-sided t-test of r = 0 on ``df``
    units: int  # independent units: n values, or n − k after centring within k groups
    df: int  # degrees of freedom of the t-test


def pearson_ci(x, y, groups: int = 0, level: float = 0.95) -> Correlation:
    """Pearson's r of paired finite values, its two-sided p (t = r·√(ν/(1 − r²)) on ν df) and the
    Fisher-z interval atanh(r) ± q/√(ν − 1).

    ``groups = 0``: a plain correlation of n independent points, ν = n − 2 (the interval's SE is the
    usual 1/√(n − 3)). ``groups = k``: the values were centred within k groups (each run minus its
    arm's mean): the within-group correlation of Bakdash & Marusich 2017, "rmcorr", whose model spends
    k intercepts and one slope, ν = N − k − 1, SE 1/√(N − k − 2) (R rmcorr 0.8.1 and pingouin's
    `rm_corr`: `r.con(r, df + 2)`, `compute_esci(nx=dof + 2)`); units = N − k.
    NaN r below ν = 1 or when a variable is constant; NaN interval below ν = 2 or at |r| = 1."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    units = len(x) - groups
    nu = len(x) - max(groups, 1) - 1
    if nu < 1 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return Correlation(math.nan, math.nan, math.nan, math.nan, max(units, 0), max(nu, 0))
    r = float(np.clip(np.corrcoef(x, y)[0, 1], -1.0, 1.0))
    if abs(r) >= 1.0 - 1e-12:
        return Correlation(r, math.nan, math.nan, 0.0, units, nu)
    p = float(2 * sps.t.sf(abs(r) * math.sqrt(nu / (1 - r * r)), nu))
    if nu < 2:
        return Correlation(r, math.nan, math.nan, p, units, nu)
    half = float(sps.norm.ppf((1 + level) / 2)) / math.sqrt(nu - 1)
    return Correlation(r, math.tanh(math.atanh(r) - half), math.tanh(math.atanh(r) + half), p, units, nu)


def tail_mean(values, fraction: float = 0.25) -> float:
    """Mean of the last ``ceil(fraction · len)`` finite values (at least one); NaN if there are none."""
    v = np.asarray([x for x in values if x is not None], dtype=float)
    v = v[np.isfinite(v)]
    if len(v) == 0:
        return math.nan
    return float(v[-max(1, math.ceil(fraction * len(v))):].mean())


@dataclass(frozen=True)
class VarianceComponents:
    """One-way random-effects ANOVA of values grouped by a factor (Δ by warm start)."""

    groups: int  # W
    n: int  # N values
    between: float  # σ²_between = max(0, (MSB − MSW) / n0)
    within: float  # σ²_within = MSW
    f: float  # MSB / MSW on (W − 1, N − W) df
    p: float

    @property
    def share_between(self) -> float:
        """σ²_between / (σ²_between + σ²_within): the intraclass correlation; NaN ("not defined") when
        both are 0 (every value equal)."""
        total = self.between + self.within
        return self.between / total if total > 0 else math.nan

    @property
    def testable(self) -> bool:
        """Whether the F test exists: NaN F when every value is equal (0/0, as scipy's f_oneway)."""
        return math.isfinite(self.p)


def variance_components(groups: dict) -> VarianceComponents:
    """Between- and within-group variance of ``groups[g] = values`` by the ANOVA (moment) estimator:
    MSB = Σ_g n_g (ȳ_g − ȳ)² / (W − 1), MSW = Σ_g Σ_i (y_gi − ȳ_g)² / (N − W),
    n0 = (N − Σ_g n_g² / N) / (W − 1) (the mean group size, corrected for unequal sizes),
    σ²_between = max(0, (MSB − MSW) / n0), σ²_within = MSW (Searle, Casella & McCulloch 1992, §3.5).
    F = MSB / MSW as `scipy.stats.f_oneway`: NaN F and p when every value is equal (MSB = MSW = 0),
    F = inf and p = 0 when only the groups' means differ (MSW = 0). Mean squares below float noise
    of the values' scale count as 0. Needs W ≥ 2 groups and N > W values (NaN otherwise)."""
    vals = {g: np.asarray(v, dtype=float) for g, v in groups.items() if len(v)}
    w, n = len(vals), sum(len(v) for v in vals.values())
    if w < 2 or n <= w:
        return VarianceComponents(w, n, math.nan, math.nan, math.nan, math.nan)
    pooled = np.concatenate(list(vals.values()))
    grand = pooled.mean()
    tiny = (ZERO_SD * max(1.0, float(np.abs(pooled).max()))) ** 2
    msb = sum(len(v) * (v.mean() - grand) ** 2 for v in vals.values()) / (w - 1)
    msw = sum(((v - v.mean()) ** 2).sum() for v in vals.values()) / (n - w)
    msb, msw = (0.0 if x <= tiny else float(x) for x in (msb, msw))
    n0 = (n - sum(len(v) ** 2 for v in vals.values()) / n) / (w - 1)
    if msw > 0:
        f = msb / msw
        p = float(sps.f.sf(f, w - 1, n - w))
    else:
        f, p = (math.inf, 0.0) if msb > 0 else (math.nan, math.nan)
    return VarianceComponents(w, n, float(max(0.0, (msb - msw) / n0)), float(msw), float(f), p)
