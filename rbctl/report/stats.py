"""Statistics of a report, with the seed as the unit of replication (docs/method.md, "Comparing arms").

Pure functions of numpy arrays (numpy and scipy only): no files, no pandas, no plotting.
Conventions: values are fractions; arrays of final scores are ``[seeds, problems]``; "level" is the
two-sided coverage (0.95).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps


def pass_at_k_matrix(n: np.ndarray, c: np.ndarray, k: int) -> np.ndarray:
    """Unbiased pass@k per cell of ``n`` samples with ``c`` correct (Chen et al. 2021; the product form
    1 − Π_{j=n−c+1}^{n} (1 − k/j), exactly 1 when n − c < k). Requires 1 ≤ k ≤ min(n)."""
    n, c = np.asarray(n, dtype=int), np.asarray(c, dtype=int)
    if k < 1 or k > n.min():
        raise ValueError(f"pass@{k} needs 1 <= k <= n (n = {int(n.min())})")
    out = np.ones(n.shape, dtype=float)
    flat_n, flat_c, flat_o = n.ravel(), c.ravel(), out.ravel()
    for i, (ni, ci) in enumerate(zip(flat_n, flat_c)):
        if ni - ci >= k:
            j = np.arange(ni - ci + 1, ni + 1, dtype=float)
            flat_o[i] = 1.0 - float(np.prod(1.0 - k / j))
    return flat_o.reshape(n.shape)


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


def bootstrap_mean_ci(values, n_boot: int = 2000, level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of a 1-D sample (used over problems for one seed)."""
    v = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    means = v[rng.integers(0, len(v), size=(n_boot, len(v)))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


@dataclass(frozen=True)
class PairedDelta:
    """Δ_s = metric(arm, s) − metric(baseline, s) over the seeds both have, and its t-interval."""

    seeds: tuple[int, ...]
    deltas: tuple[float, ...]  # Δ_s, in the order of ``seeds``
    mean: float
    lo: float  # t-interval, n − 1 df, unadjusted for multiplicity; NaN for n < 2
    hi: float
    p: float  # two-sided one-sample t-test of mean Δ = 0; NaN for n < 2

    @property
    def n(self) -> int:
        return len(self.seeds)


def paired_delta(arm: dict[int, float], base: dict[int, float], level: float = 0.95) -> PairedDelta:
    """Per-seed paired Δ of two arms' per-seed scores ``{seed: score}`` over their common seeds."""
    seeds = tuple(sorted(set(arm) & set(base)))
    d = np.array([arm[s] - base[s] for s in seeds], dtype=float)
    mean, lo, hi = t_interval(d, level)
    p = math.nan
    if len(d) >= 2:
        sd = d.std(ddof=1)
        if sd > 0:
            p = float(2 * sps.t.sf(abs(d.mean()) / (sd / math.sqrt(len(d))), len(d) - 1))
        else:  # every seed gave the same Δ: certain if it is not 0
            p = 1.0 if d.mean() == 0 else 0.0
    return PairedDelta(seeds, tuple(float(x) for x in d), mean, lo, hi, p)


def hierarchical_bootstrap_delta(a, b, n_boot: int = 2000, level: float = 0.95,
                                 seed: int = 0) -> tuple[float, float]:
    """Percentile interval of mean Δ for paired ``a``, ``b`` ``[seeds, problems]`` (row s of both is
    seed s): resample seeds with replacement, then problems with replacement within each resampled
    seed (the same problem draw for both arms of that seed). Shown beside the t-interval; with few
    seeds it is narrower than the t-interval."""
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


def spearman_ci(x, y, level: float = 0.95) -> tuple[float, float, float, int]:
    """Spearman's ρ of paired finite values with a Fisher-z interval: z = atanh(ρ) ± q · 1.03/sqrt(n − 3)
    (the Fieller–Hartley–Pearson standard error for Spearman's ρ). Returns (ρ, low, high, n); NaN
    where n < 3 (ρ) or n < 5 (interval), or when either variable is constant. At |ρ| = 1 the Fisher
    transform is infinite and gives no interval: NaN (a perfect rank order of 5 runs is not certainty)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    n = len(x)
    if n < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan, math.nan, math.nan, n
    rho = float(sps.spearmanr(x, y).statistic)
    if n < 5 or abs(rho) >= 1.0 - 1e-12:  # scipy returns ±(1 − 1 ulp) for a perfect order
        return rho, math.nan, math.nan, n
    z = math.atanh(rho)
    half = float(sps.norm.ppf((1 + level) / 2)) * 1.03 / math.sqrt(n - 3)
    return rho, math.tanh(z - half), math.tanh(z + half), n


def tail_mean(values, fraction: float = 0.25) -> float:
    """Mean of the last ``ceil(fraction · len)`` finite values (at least one); NaN if there are none."""
    v = np.asarray([x for x in values if x is not None], dtype=float)
    v = v[np.isfinite(v)]
    if len(v) == 0:
        return math.nan
    return float(v[-max(1, math.ceil(fraction * len(v))):].mean())
