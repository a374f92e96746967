"""Group-sequential boundaries: Lan–DeMets α-spending and the recursive numerical integration
(docs/method.md, "Sequential designs").

A comparison is analysed at K looks with n_1 < … < n_K units; its information fraction at look k is
t_k = n_k / N (N the design's units: the per-unit SD of Δ is the same at every look, so information
is proportional to units). Under Δ = 0 the standardised statistics Z_k behave as W(t_k)/√t_k for a
Brownian motion W with drift θ (E Z_k = θ√t_k), so cov(Z_j, Z_k) = √(t_j/t_k).

A spending function f(t; α) says how much of a side's α may be spent by fraction t:
- O'Brien–Fleming-type (`obrien_fleming`, gsDesign's sfLDOF): f(t) = 2 − 2Φ(z_{1−α/2}/√t);
- Pocock-type (`pocock`, gsDesign's sfLDPocock): f(t) = α·ln(1 + (e − 1)t).
Lan and DeMets 1983, "Discrete sequential boundaries for clinical trials". The boundary c_k at look k
is the value at which the probability of first crossing at look k is f(t_k) − f(t_{k−1}), computed by
the recursion of Armitage, McPherson and Rowe 1969 ("Repeated significance tests on accumulating
data") as Jennison and Turnbull 2000 (*Group Sequential Methods*, ch. 19) lay it out: the sub-density
of W(t_k) over the paths still running is carried look to look on a Simpson grid, and each crossing
probability is an exact normal tail integrated over it.

The z-boundaries assume a known SD. rbctl applies them to paired t statistics with n_k − 1 df by
their **nominal level**: a z-boundary c at a look with n units becomes the t-boundary with the same
one-sided tail, t_{n−1}^{-1}(Φ(c)) (`t_bound`; the approach Jennison and Turnbull 2000, ch. 3, take for
normal data of unknown variance). It is close, not exact: at 6/12/18/24 units a single two-sided
test at 0.05 rejected a true null in 5.2% (O'Brien–Fleming-type) and 5.4% (Pocock-type) of 400,000
simulated sequences; docs/method.md gives the figures, tests/unit/test_sequential_sim.py asserts α
within 0.01 at the shipped shape.

Numbers only (numpy and scipy): no files, no configs.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Callable, Sequence

import numpy as np
from scipy import optimize
from scipy import stats as sps

NEVER = math.inf  # a boundary that spends nothing (no path can cross it)
_TINY = 1e-15  # an α increment below this is spent by no boundary (NEVER)
_SD_SPAN = 9.0  # the grid covers W's mean ± this many SDs where a region is open on a side


def obrien_fleming(t, alpha: float):
    """O'Brien–Fleming-type spending (gsDesign's sfLDOF): 2 − 2Φ(z_{1−α/2}/√t), the α one side may
    have spent by fraction t (0 at t = 0, α at t = 1)."""
    t = np.clip(np.asarray(t, dtype=float), 0.0, 1.0)
    z = sps.norm.isf(alpha / 2)
    with np.errstate(divide="ignore"):
        return np.where(t > 0, 2 * sps.norm.sf(z / np.sqrt(t)), 0.0)


def pocock(t, alpha: float):
    """Pocock-type spending (gsDesign's sfLDPocock): α·ln(1 + (e − 1)t)."""
    t = np.clip(np.asarray(t, dtype=float), 0.0, 1.0)
    return alpha * np.log1p((math.e - 1) * t)


SPENDING: dict[str, Callable] = {"obrien_fleming": obrien_fleming, "pocock": pocock}


def increments(spending: str, fractions: Sequence[float], alpha: float, final: bool = True) -> np.ndarray:
    """The α each look spends: f(t_k) − f(t_{k−1}); with ``final`` the last look spends what is left
    of α (a design that ends before t = 1, units missing, still spends all of it)."""
    cum = np.asarray(SPENDING[spending](fractions, alpha), dtype=float)
    if final:
        cum[-1] = alpha
    return np.diff(np.concatenate([[0.0], cum]))


class _Paths:
    """The sub-density of W(t) over the paths that have not stopped, on a grid: points ``w`` and
    masses ``h`` (Simpson weight × density), so that ∫ g(w) φ(w) dw ≈ Σ h·φ(w)."""

    def __init__(self, w: np.ndarray, h: np.ndarray, t: float):
        self.w, self.h, self.t = w, h, t

    @classmethod
    def start(cls) -> "_Paths":
        return cls(np.zeros(1), np.ones(1), 0.0)  # W(0) = 0 with probability 1

    def _step(self, t: float, theta: float) -> tuple[np.ndarray, float]:
        span = t - self.t
        return self.w + theta * span, math.sqrt(span)

    def above(self, t: float, theta: float, u: float) -> float:
        """P(W(t) ≥ u and no stop before), drift θ."""
        if u == math.inf:
            return 0.0
        mean, sd = self._step(t, theta)
        return float(self.h @ sps.norm.sf((u - mean) / sd))

    def below(self, t: float, theta: float, u: float) -> float:
        """P(W(t) ≤ u and no stop before), drift θ."""
        if u == -math.inf:
            return 0.0
        mean, sd = self._step(t, theta)
        return float(self.h @ sps.norm.cdf((u - mean) / sd))

    def advance(self, t: float, theta: float, region: Sequence[tuple[float, float]], step: float) -> "_Paths":
        """The sub-density at t of the paths that are inside ``region`` (intervals of W(t)) there."""
        mean_all, sd = self._step(t, theta)
        centre, spread = theta * t, _SD_SPAN * math.sqrt(t)
        ws, hs = [], []
        for lo, hi in region:
            lo, hi = max(lo, centre - spread), min(hi, centre + spread)
            if hi <= lo:
                continue
            n = 2 * max(2, math.ceil((hi - lo) / (2 * step))) + 1  # odd: Simpson's rule
            w = np.linspace(lo, hi, n)
            simpson = np.ones(n)
            simpson[1:-1:2], simpson[2:-1:2] = 4.0, 2.0
            simpson *= (hi - lo) / (n - 1) / 3
            dens = sps.norm.pdf((w[:, None] - mean_all[None, :]) / sd) @ self.h / sd
            ws.append(w)
            hs.append(simpson * dens)
        if not ws:
            return _Paths(np.zeros(1), np.zeros(1), t)
        return _Paths(np.concatenate(ws), np.concatenate(hs), t)


def _grid_step(fractions: Sequence[float]) -> float:
    """The grid spacing on W's scale: a 30th of the narrowest step's SD (Simpson's error is then far
    below the 1e-6 the boundaries are quoted to), and no finer than 1e-3."""
    gaps = np.diff(np.concatenate([[0.0], fractions]))
    return max(1e-3, math.sqrt(float(gaps.min())) / 30)


def _solve(crossing: Callable[[float], float], target: float) -> float:
    """The z at which a decreasing crossing probability equals ``target`` (NEVER when target ~ 0)."""
    if target <= _TINY:
        return NEVER
    hi = 8.0
    while crossing(hi) > target:
        hi *= 2
    if crossing(0.0) <= target:
        return 0.0
    return float(optimize.brentq(lambda z: crossing(z) - target, 0.0, hi, xtol=1e-9))


@lru_cache(maxsize=4096)
def _efficacy(fractions: tuple[float, ...], alpha: float, spending: str, two_sided: bool, final: bool) -> tuple[float, ...]:
    inc = increments(spending, fractions, alpha, final)
    step, paths, out = _grid_step(fractions), _Paths.start(), []
    for t, spend in zip(fractions, inc):
        root = math.sqrt(t)
        c = _solve(lambda z: paths.above(t, 0.0, z * root), spend)
        out.append(c)
        lo = -c * root if two_sided else -math.inf
        paths = paths.advance(t, 0.0, [(lo, c * root)], step)
    return tuple(out)


def efficacy_bounds(fractions: Sequence[float], alpha: float, spending: str, two_sided: bool = True,
                    final: bool = True) -> tuple[float, ...]:
    """z-boundaries c_1..c_K at information ``fractions`` (increasing, in (0, 1]) that spend each side's
    ``alpha`` by ``spending``. Two-sided: reject at look k when |Z_k| ≥ c_k, each side spending α
    (gsDesign's test.type = 2 with alpha = α); one-sided: when Z_k ≥ c_k, no lower boundary. With
    ``final`` the last look spends what is left (see `increments`). NEVER where a look spends ~0."""
    fr = tuple(round(float(f), 12) for f in fractions)
    if not fr or any(b <= a for a, b in zip((0.0,) + fr, fr)) or fr[-1] > 1.0:
        raise ValueError(f"information fractions must increase within (0, 1], got {list(fractions)}")
    if spending not in SPENDING:
        raise ValueError(f"unknown spending '{spending}' (one of {', '.join(SPENDING)})")
    return _efficacy(fr, float(alpha), spending, two_sided, final)


def crossing_probabilities(fractions: Sequence[float], upper: Sequence[float], lower: Sequence[float],
                           theta: float, inner: Sequence[float] | None = None) -> dict[str, np.ndarray]:
    """Per look, the probabilities of stopping there for the first time: ``upper`` (Z_k ≥ upper_k),
    ``lower`` (Z_k ≤ lower_k) and ``inner`` (|Z_k| < inner_k, a futility region; none where None),
    with E Z_k = θ√t_k. The last look's inner region is left out (a design ends there anyway)."""
    step, paths = _grid_step(fractions), _Paths.start()
    k = len(fractions)
    out = {name: np.zeros(k) for name in ("upper", "lower", "inner")}
    for i, t in enumerate(fractions):
        root = math.sqrt(t)
        b, a = upper[i] * root, lower[i] * root
        out["upper"][i] = paths.above(t, theta, b)
        out["lower"][i] = paths.below(t, theta, a)
        f = (inner[i] if inner is not None and i < k - 1 else 0.0) * root
        if f > 0:
            out["inner"][i] = max(0.0, paths.above(t, theta, -f) - paths.above(t, theta, f))
        region = [(a, -f), (f, b)] if f > 0 else [(a, b)]
        paths = paths.advance(t, theta, region, step)
    return out


@lru_cache(maxsize=1024)
def _futility(fractions: tuple[float, ...], alpha: float, spending: str, theta: float) -> tuple[float, ...]:
    eff = _efficacy(fractions, alpha, spending, True, True)
    power = crossing_probabilities(fractions, eff, [-c for c in eff], theta)
    beta = float(max(0.0, 1.0 - power["upper"].sum() - power["lower"].sum()))
    inc = increments(spending, fractions, beta, final=True) if beta > _TINY else np.zeros(len(fractions))
    step, paths, out = _grid_step(fractions), _Paths.start(), []
    for i, t in enumerate(fractions[:-1]):
        root, c = math.sqrt(t), eff[i]
        inside = lambda f: paths.above(t, theta, -f * root) - paths.above(t, theta, f * root)  # noqa: E731
        a = 0.0 if inc[i] <= _TINY else min(c, _solve_up(inside, inc[i], c))
        out.append(a)
        region = [(-c * root, -a * root), (a * root, c * root)] if a > 0 else [(-c * root, c * root)]
        paths = paths.advance(t, theta, region, step)
    return tuple(out) + (0.0,)


def _solve_up(inside: Callable[[float], float], target: float, cap: float) -> float:
    """The a in [0, cap] at which an increasing probability P(|Z| < a, still running) equals target."""
    if cap == math.inf:
        cap = 40.0
    if inside(cap) <= target:
        return cap
    return float(optimize.brentq(lambda a: inside(a) - target, 0.0, cap, xtol=1e-9))


def futility_bounds(fractions: Sequence[float], alpha: float, spending: str, theta: float) -> tuple[float, ...]:
    """Non-binding futility for the two-sided test of `efficacy_bounds` (each side at ``alpha``): stop
    at look k < K when |Z_k| < a_k. The a_k spend β = 1 − (the design's power at drift ``theta``) by
    the same spending shape, under θ: P_θ(first stop for futility at look k) = g(t_k; β) − g(t_{k−1}; β)
    with the efficacy boundaries in place (gsDesign's test.type = 4 with the inner region of a
    two-sided test). The efficacy boundaries ignore them, so stopping for futility, or not, never
    raises the type I error. The last look's is 0 (the design ends there)."""
    fr = tuple(round(float(f), 12) for f in fractions)
    efficacy_bounds(fr, alpha, spending)  # validates
    return _futility(fr, float(alpha), spending, float(abs(theta)))


def t_bound(z: float, n: int) -> float:
    """The paired-t boundary at ``n`` units with the z-boundary's nominal one-sided level:
    t_{1−p, n−1} with p = 1 − Φ(z); NEVER stays NEVER, 0 stays 0."""
    if z == math.inf:
        return math.inf
    if z <= 0:
        return 0.0
    return float(sps.t.isf(sps.norm.sf(z), n - 1))
