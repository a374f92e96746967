"""Null simulations of the study rules that test runs against each other (rbctl.report.study.association):
with no association (no trend), the rate at which the association and trend rules reject at α = 0.05 stays
≤ α + 0.02 at every shipped shape (arms × units) when one arm's noise is ×1, ×2, ×3 or ×5 the others' and
when warm starts carry their own association or slope; the rules before this one over-rejected there (the
first assertions reproduce it). Each simulation is vectorised with numpy (2,000 trials, a fixed seed) and its
statistic is checked against the library's on the first trials."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.stats as sps

from rbctl.report.analyses.trend import trend
from rbctl.report.stats import paired_delta
from rbctl.report.study.association import _over_warm_starts, association

ALPHA, TRIALS = 0.05, 2000
# arms × units of the shipped designs and the audit's: main job 3 × 24, fixpoint 12 × 12 (4 warm starts × 3 seeds),
# maze 9 × 5, and 8 × 3, 4 × 3, 2 × 6
SHAPES = [(8, 3), (3, 24), (12, 12), (9, 5), (4, 3), (2, 6)]
NOISE = [1, 2, 3, 5]


def draw(rng, arms: int, units: int, noisy: float, trials: int = TRIALS, arm_sd: float = 2.0) -> np.ndarray:
    """[trials, arms, units]: an arm effect (sd ``arm_sd``), a unit effect shared by every arm's run of that unit
    (sd 1) and each run's noise (sd 1; arm 0's × ``noisy``)."""
    scale = np.ones(arms)
    scale[0] = noisy
    return (rng.normal(0, arm_sd, (trials, arms, 1)) + rng.normal(0, 1, (trials, 1, units))
            + rng.normal(0, 1, (trials, arms, units)) * scale[None, :, None])


def double_centred(v: np.ndarray) -> np.ndarray:
    """Residual of arm + unit, balanced: centred by arm, then by unit."""
    v = v - v.mean(axis=2, keepdims=True)
    return v - v.mean(axis=1, keepdims=True)


def t_pvalues(s: np.ndarray) -> np.ndarray:
    """Two-sided one-sample t-test of each row of ``s`` (blocks) against 0, n − 1 df."""
    n = s.shape[1]
    t = s.mean(1) / (s.std(1, ddof=1) / np.sqrt(n))
    return 2 * sps.t.sf(np.abs(t), n - 1)


def unit_level(ex: np.ndarray, ey: np.ndarray, draws: int = 999) -> np.ndarray:
    """The shipped test over units: Σxy of the residuals against every ordering of y's units (all of them up to
    7 units, else ``draws`` random ones per trial, p = (1 + as extreme) / (draws + 1))."""
    g = np.einsum("tau,tav->tuv", ex, ey)  # g[t, u, v] = Σ_a ex[a, u] ey[a, v]
    n = g.shape[1]
    obs = np.abs(np.trace(g, axis1=1, axis2=2))[:, None] - 1e-9
    if n <= 7:
        perms = np.array(list(itertools.permutations(range(n))))
        return np.mean(np.abs(g[:, np.arange(n), perms].sum(-1)) >= obs, axis=1)
    perms = np.random.default_rng(n).permuted(np.tile(np.arange(n), (draws, 1)), axis=1)
    count = np.concatenate([np.sum(np.abs(g[i:i + 100][:, np.arange(n), perms].sum(-1)) >= obs[i:i + 100], axis=1)
                            for i in range(0, len(g), 100)])  # 100 trials at a time: [100, draws, units] in memory
    return (1 + count) / (draws + 1)


def pooled(ex: np.ndarray, ey: np.ndarray, df: int) -> np.ndarray:
    """The rule before: Pearson's t of the residuals on N − rank − 1 df."""
    r = (ex * ey).sum((1, 2)) / np.sqrt((ex * ex).sum((1, 2)) * (ey * ey).sum((1, 2)))
    return 2 * sps.t.sf(np.abs(r) * np.sqrt(df / (1 - r * r)), df)


@pytest.mark.parametrize("arms, units", SHAPES)
def test_the_association_holds_alpha_when_one_arm_is_noisier(arms: int, units: int) -> None:
    rng = np.random.default_rng(1000 * arms + units)
    arm_of, unit_of = np.repeat(np.arange(arms), units), np.tile(np.arange(units), arms)
    for noisy in NOISE:
        x, y = draw(rng, arms, units, noisy), draw(rng, arms, units, noisy)
        ex, ey = double_centred(x), double_centred(y)
        rate = np.mean(unit_level(ex, ey) <= ALPHA)
        assert rate <= ALPHA + 0.02, (arms, units, noisy, rate)
        within = np.mean(unit_level(x - x.mean(2, keepdims=True), y - y.mean(2, keepdims=True)) <= ALPHA)
        assert within <= ALPHA + 0.02, (arms, units, noisy, within)
        if noisy == 5 and arms > 2:  # the rule before (N − rank − 1 df) rejected far too often here
            assert np.mean(pooled(ex, ey, arms * units - arms - units) <= ALPHA) > ALPHA + 0.05
        for t in range(2):  # the vectorised statistic is the library's (exactly, where every ordering is compared)
            c = association(x[t].ravel(), y[t].ravel(), arm_of, "arm_and_unit", [("", u) for u in unit_of])
            mine = unit_level(ex[t:t + 1], ey[t:t + 1], draws=9999)[0]
            assert c.p == (pytest.approx(mine, rel=1e-9) if units <= 7 else pytest.approx(mine, abs=0.02))
            assert c.r == pytest.approx(float(np.corrcoef(ex[t].ravel(), ey[t].ravel())[0, 1]))
            assert (c.units, c.orderings) == (units, min(math.factorial(units), 9999))


def test_the_arm_means_hold_alpha_only_where_the_arms_means_are_equally_noisy() -> None:
    # no arm effects and arm 0's noise × 5: its mean is the one far point in both x and y (12 arms × 12 units); with
    # arm effects (sd 2, as the draws above) the same noise leaves the arm means' test near α
    rng = np.random.default_rng(5)

    def rate(arm_sd: float) -> float:
        mx, my = (draw(rng, 12, 12, 5, arm_sd=arm_sd).mean(2) for _ in range(2))
        mx, my = mx - mx.mean(1, keepdims=True), my - my.mean(1, keepdims=True)
        r = (mx * my).sum(1) / np.sqrt((mx * mx).sum(1) * (my * my).sum(1))
        return float(np.mean(2 * sps.t.sf(np.abs(r) * np.sqrt(10 / (1 - r * r)), 10) <= ALPHA))

    assert rate(0.0) > 0.25 and rate(2.0) <= ALPHA + 0.02
    c = association(np.arange(6.0), [1, 3, 2, 5, 4, 6], [0, 0, 1, 1, 2, 2], "arm_means")  # means (.5, 2.5, 4.5), (2, 3.5, 5)
    assert (c.r, c.df) == (pytest.approx(1.0), 1)


def clustered(rng, arms: int, ws: int, seeds: int, tau: float, noisy: float = 1.0):
    """x as `draw`; y with no association on average but a slope on x of its own in each warm start (sd ``tau``):
    [trials, arms, ws · seeds] with units ordered (warm start, seed)."""
    units = ws * seeds
    x = draw(rng, arms, units, noisy)
    slope = np.repeat(rng.normal(0, tau, (TRIALS, ws)), seeds, axis=1)[:, None, :]
    return x, draw(rng, arms, units, noisy) + slope * (x - x.mean(axis=2, keepdims=True))


def warm_start_level(x: np.ndarray, y: np.ndarray, ws: int, seeds: int) -> np.ndarray:
    """The shipped test over warm starts: per warm start Σ x·y of the residuals of its own arm + seed fit."""
    t, a, _ = x.shape
    ex, ey = (double_centred(v.reshape(t, a, ws, seeds).transpose(0, 2, 1, 3).reshape(t * ws, a, seeds))
              for v in (x, y))
    return t_pvalues((ex * ey).sum((1, 2)).reshape(t, ws))


@pytest.mark.parametrize("arms, ws, seeds", [(12, 4, 3), (3, 4, 6), (2, 3, 2)])
def test_the_association_over_warm_starts_holds_alpha_where_each_warm_start_has_its_own(arms, ws, seeds) -> None:
    rng = np.random.default_rng(7 * arms + ws)
    units = [(f"ws{w}", s) for w in range(ws) for s in range(seeds)]
    arm_of, unit_of = np.repeat(np.arange(arms), ws * seeds), units * arms
    for tau, noisy in ((0.5, 1), (1.0, 1), (1.0, 3)):
        x, y = clustered(rng, arms, ws, seeds, tau, noisy)
        rate = np.mean(warm_start_level(x, y, ws, seeds) <= ALPHA)
        assert rate <= ALPHA + 0.02, (arms, ws, seeds, tau, noisy, rate)
        if tau == 1.0 and noisy == 1 and ws * seeds >= 12:  # over (warm start, seed) units it rejects far too often
            assert np.mean(unit_level(double_centred(x), double_centred(y)) <= ALPHA) > ALPHA + 0.05
        for t in range(3):
            c = association(x[t].ravel(), y[t].ravel(), arm_of, "arm_and_unit", unit_of, "warm_start")
            assert c.p == pytest.approx(warm_start_level(x[t:t + 1], y[t:t + 1], ws, seeds)[0], rel=1e-9)
            assert (c.df, c.units) == (ws - 1, ws)


def deltas(rng, arms: int, units: int, noisy: float, ws_slope: np.ndarray | None = None) -> np.ndarray:
    """[trials, units, arms − 1]: member j is arm j − arm 0 at level x_j = j (no trend: every Δ 0 on average; a unit
    effect shared by its runs), arm 1's noise × ``noisy``; ``ws_slope`` [trials, units] adds a slope of Δ on x
    specific to each unit's warm start."""
    scale = np.ones(arms)
    scale[1] = noisy
    runs = rng.normal(0, 1, (TRIALS, units, 1)) + rng.normal(0, 1, (TRIALS, units, arms)) * scale
    d = runs[:, :, 1:] - runs[:, :, :1]
    if ws_slope is not None:
        d = d + ws_slope[:, :, None] * (np.arange(1, arms) - np.arange(1, arms).mean())
    return d


def slope_pvalues(d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = np.arange(1, d.shape[2] + 1, dtype=float)
    b = ((x - x.mean()) * (d - d.mean(2, keepdims=True))).sum(2) / ((x - x.mean()) ** 2).sum()
    return b, t_pvalues(b)


@pytest.mark.parametrize("arms, units", [s for s in SHAPES if s[0] >= 3])
def test_the_trend_holds_alpha_when_one_arm_is_noisier(arms: int, units: int) -> None:
    rng = np.random.default_rng(arms + 100 * units)
    for noisy in NOISE:
        b, p = slope_pvalues(deltas(rng, arms, units, noisy))
        assert np.mean(p <= ALPHA) <= ALPHA + 0.02, (arms, units, noisy)
    d = deltas(rng, arms, units, 5)
    per_unit = {("", u): list(d[0, u]) for u in range(units)}
    assert trend(range(1, arms), per_unit).test.p == pytest.approx(slope_pvalues(d[:1])[1][0], rel=1e-9)


@pytest.mark.parametrize("ws, seeds", [(4, 3), (4, 6)])
def test_the_trend_over_warm_starts_holds_alpha_with_slopes_specific_to_each(ws: int, seeds: int) -> None:
    rng = np.random.default_rng(ws * 10 + seeds)
    arms = 4  # three members, levels 1, 2, 3
    for tau in (0.5, 1.0):  # the warm-start slope's sd, × the runs' own noise
        slope = np.repeat(rng.normal(0, tau, (TRIALS, ws)), seeds, axis=1)
        d = deltas(rng, arms, ws * seeds, 1, slope)
        b, p_units = slope_pvalues(d)
        means = b.reshape(TRIALS, ws, seeds).mean(2)
        rate = np.mean(t_pvalues(means) <= ALPHA)
        assert rate <= ALPHA + 0.02, (ws, seeds, tau, rate)
        # the (warm start, seed) pairs as units: the audit's 0.10 (τ ½) to 0.31 (4 × 6, τ 1)
        assert np.mean(p_units <= ALPHA) > ALPHA + 0.04
        slopes = {(f"ws{u // seeds}", u % seeds): float(b[0, u]) for u in range(ws * seeds)}
        assert _over_warm_starts(slopes).p == pytest.approx(t_pvalues(means[:1])[0], rel=1e-9)
        assert _over_warm_starts(slopes).n == ws


def test_a_trend_over_warm_starts_is_the_t_test_of_their_mean_slopes_by_hand() -> None:
    # slopes per (warm start, seed): ws0 (.1, .3), ws1 (−.2, 0), ws2 (.4, .2): means .2, −.1, .3, a t-test on 2 df
    slopes = {("ws0", 0): 0.1, ("ws0", 1): 0.3, ("ws1", 0): -0.2, ("ws1", 1): 0.0, ("ws2", 0): 0.4, ("ws2", 1): 0.2}
    d = _over_warm_starts(slopes)
    assert d.mean == pytest.approx(0.4 / 3) and d.n == 3
    assert d.p == pytest.approx(float(sps.ttest_1samp([0.2, -0.1, 0.3], 0.0).pvalue))
    assert d.p == pytest.approx(paired_delta({0: 0.2, 1: -0.1, 2: 0.3}, {0: 0, 1: 0, 2: 0}).p)
