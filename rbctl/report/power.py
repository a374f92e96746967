"""Power of the paired two-sided t-test over units (docs/method.md, "Comparing arms", power).

A principal comparison is a one-sample t-test of the per-unit Δ (n units, n − 1 df). With true mean
δ and per-unit SD σ the statistic is noncentral t with ncp = δ·√n / σ, so at two-sided level α

    power(δ) = P(T > t*) + P(T < −t*),   T ~ t'(n − 1, δ√n/σ),   t* = t_{1 − α/2, n − 1}

(both tails, as G*Power; R's power.t.test drops the far tail, a difference below 1e-4 here). The m
principal comparisons are Holm-adjusted; their first step tests at α/m, so every function here
takes the conservative per-comparison level α/m. δ and σ are in the same unit (points, say).
"""

from __future__ import annotations

import math

from scipy import integrate, optimize
from scipy import stats as sps

MAX_UNITS = 100_000  # units_for_power gives up beyond this (an effect far below the noise)


def power_paired(delta: float, sd: float, n: int, alpha: float) -> float:
    """Power of the two-sided paired t-test at level ``alpha`` with ``n`` units, true mean Δ ``delta``
    and per-unit SD ``sd``. NaN for n < 2 or sd not positive."""
    if n < 2 or not sd > 0:
        return math.nan
    df, ncp = n - 1, abs(delta) * math.sqrt(n) / sd
    crit = sps.t.ppf(1 - alpha / 2, df)
    # The far tail P(T < −t*) is written as P(T' > t*) with T' ~ t'(df, −ncp) (T' = −T): scipy 1.17's
    # nct.cdf(−t*, df, ncp) returns NaN for some large ncp at few df (df 2, ncp 8), which made
    # mde_paired fail at 3 units; the sf form is finite there and equal wherever both are.
    return float(sps.nct.sf(crit, df, ncp) + sps.nct.sf(crit, df, -ncp))


def mde_paired(sd: float, n: int, alpha: float, power: float) -> float:
    """The smallest |Δ| detected with probability ``power`` (`power_paired` solved for δ); NaN for
    n < 2, sd not positive, or power not in (alpha, 1)."""
    if n < 2 or not sd > 0 or not alpha < power < 1:
        return math.nan
    hi = sd
    while power_paired(hi, sd, n, alpha) < power:  # power rises to 1 as δ grows: bracket, then solve
        hi *= 2
    return float(optimize.brentq(lambda d: power_paired(d, sd, n, alpha) - power, 0.0, hi, xtol=1e-10 * sd))


def units_for_power(sd: float, mde: float, m: int = 1, power: float = 0.8, alpha: float = 0.05) -> int:
    """The smallest number of units n ≥ 2 at which the paired two-sided t-test at level α/m detects
    Δ = ``mde`` with probability at least ``power`` (per-unit SD ``sd``, same unit as ``mde``).

    For m = 1, α = 0.05, power 0.8 and mde/sd = 0.5 (Cohen's d_z = 0.5) it is 34, G*Power's "t tests,
    means: difference from constant (one sample case)" answer."""
    if not (sd > 0 and mde > 0 and m >= 1 and 0 < power < 1 and 0 < alpha < 1):
        raise ValueError(f"need sd > 0, mde > 0, m >= 1, 0 < power < 1, 0 < alpha < 1 "
                         f"(got sd={sd}, mde={mde}, m={m}, power={power}, alpha={alpha})")
    level = alpha / m
    z = sps.norm.ppf(1 - level / 2) + sps.norm.ppf(power)
    n = max(2, math.floor((z * sd / mde) ** 2))  # the normal approximation is a lower bound: count up
    while power_paired(mde, sd, n, level) < power:
        n += 1
        if n > MAX_UNITS:
            raise ValueError(f"more than {MAX_UNITS} units needed for mde={mde} at sd={sd}")
    while n > 2 and power_paired(mde, sd, n - 1, level) >= power:
        n -= 1
    return n


def power_tost(margin: float, sd: float, n: int, alpha: float, delta: float = 0.0) -> float:
    """Power of the paired TOST at level ``alpha`` (both one-sided tests at α) to call Δ equivalent
    within ±``margin`` when the true mean is ``delta`` (|delta| < margin), per-unit SD ``sd``, ``n``
    units. TOST rejects when Δ̄ − t*·S/√n > −margin and Δ̄ + t*·S/√n < margin (t* = t_{1−α, n−1}, S the
    sample SD). Δ̄ ~ N(δ, σ²/n) is independent of S, S² ~ σ² χ²_{n−1}/(n − 1), so exactly

        power = E_S[ max(0, Φ((margin − δ − t*S/√n)·√n/σ) − Φ((−margin − δ + t*S/√n)·√n/σ)) ]

    integrated over the χ distribution of S (Phillips 1990; what TOSTER's power_t_TOST computes with
    Owen's Q). NaN for n < 2, sd not positive, or a margin not above |delta|."""
    if n < 2 or not sd > 0 or not margin > abs(delta):
        return math.nan
    df, root = n - 1, math.sqrt(n)
    crit = sps.t.ppf(1 - alpha, df)

    def given(q: float) -> float:  # q = S/σ, the sample SD in units of σ
        half = crit * q / root  # t*·S/√n in units of σ
        hi, lo = (margin - delta) / sd - half, (-margin - delta) / sd + half
        return max(0.0, sps.norm.cdf(hi * root) - sps.norm.cdf(lo * root))

    # S/σ = √(χ²/df): integrate over χ² with its density; above q_max the window is empty (power 0)
    q_max = margin * root / (crit * sd)
    upper = min(df * q_max ** 2, sps.chi2.ppf(1 - 1e-12, df))
    value, _ = integrate.quad(lambda x: given(math.sqrt(x / df)) * sps.chi2.pdf(x, df), 0.0, upper, limit=200)
    return float(min(1.0, max(0.0, value)))


def units_for_tost(sd: float, margin: float, m: int = 1, power: float = 0.8, alpha: float = 0.05,
                   delta: float = 0.0) -> int:
    """The smallest number of units n ≥ 2 at which TOST at level α/m (Holm's first step over a family of
    m) calls a true Δ = ``delta`` equivalent within ±``margin`` with probability at least ``power``."""
    if not (sd > 0 and margin > abs(delta) and m >= 1 and 0 < power < 1 and 0 < alpha < 1):
        raise ValueError(f"need sd > 0, margin > |delta|, m >= 1, 0 < power < 1, 0 < alpha < 1 "
                         f"(got sd={sd}, margin={margin}, delta={delta}, m={m}, power={power}, alpha={alpha})")
    n = 2
    while power_tost(margin, sd, n, alpha / m, delta) < power:
        n += 1
        if n > MAX_UNITS:
            raise ValueError(f"more than {MAX_UNITS} units needed for TOST at margin={margin}, sd={sd}")
    return n
