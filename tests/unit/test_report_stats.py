"""Tests of the report's pure statistics (rbctl.report.stats, and the verdicts and plateau check of rbctl.report.analyses) on
hand-computed values and simulated reports (no files, no figures)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from rbctl.report.analyses.comparisons import verdicts
from rbctl.config.sweep import PlateauCriteria
from rbctl.report.analyses.plateau import plateau_check, setting_by_rule
from rbctl.report.stats import (
    hierarchical_bootstrap_delta,
    holm,
    paired_delta,
    pearson_ci,
    t_interval,
    tail_mean,
    variance_components,
)

T1 = 12.7062047361747  # t_{0.975, 1} = tan(0.475·π)


def test_t_interval_hand_computed():
    # values 1, 2, 3: mean 2, sd 1, se 1/√3, t_{0.975, 2} = 4.302652729911275
    m, lo, hi = t_interval([1.0, 2.0, 3.0])
    half = 4.302652729911275 / math.sqrt(3)
    assert (m, lo, hi) == pytest.approx((2.0, 2.0 - half, 2.0 + half))
    m, lo, hi = t_interval([0.5])
    assert m == 0.5 and math.isnan(lo) and math.isnan(hi)  # one seed: no interval


def test_paired_delta_pairs_by_seed_and_tests():
    arm = {0: 0.60, 1: 0.70, 2: 0.50}
    base = {0: 0.50, 1: 0.55, 3: 0.40}  # seed 2 and seed 3 have no partner
    d = paired_delta(arm, base)
    assert d.units == (0, 1) and d.deltas == pytest.approx((0.10, 0.15)) and d.n == 2
    assert d.sd == pytest.approx(0.05 / math.sqrt(2))
    assert d.mean == pytest.approx(0.125)
    assert (d.lo, d.hi) == pytest.approx((0.125 - T1 * 0.025, 0.125 + T1 * 0.025))  # the interval stays
    # before: p = 1 − (2/π)·atan(5) = 0.126 on 1 df; two units are not a test
    assert math.isnan(d.p) and not d.testable and "2 units (a test needs 3)" == d.untestable
    # Δ = .10, .15, .20: mean .15, sd .05, t = .15/(.05/√3) = 3√3 on 2 df, where p = 1 − t/√(2 + t²)
    d = paired_delta({0: 0.6, 1: 0.7, 2: 0.5}, {0: 0.5, 1: 0.55, 2: 0.3})
    t = 3 * math.sqrt(3)
    assert d.testable and d.p == pytest.approx(1 - t / math.sqrt(2 + t * t))
    assert math.isnan(paired_delta({0: 0.3}, {0: 0.2}).p)
    # clipped to Δ's range: .9 − .1 and .1 − .9 in two units: mean 0 ± T1 · .8 runs far past ±1
    d = paired_delta({0: 0.9, 1: 0.1}, {0: 0.1, 1: 0.9}, bounds=(-1.0, 1.0))
    assert (d.lo, d.hi) == (-1.0, 1.0) and paired_delta({0: 0.9, 1: 0.1}, {0: 0.1, 1: 0.9}).hi > 10


def test_a_zero_variance_delta_is_not_testable_and_leaves_the_holm_family():
    # every unit Δ = .25 (as floats: .6 − .35 is 0.24999999999999997): sd(Δ) is 0 up to rounding. Before:
    # t infinite (or 1e16), p = 0, "higher", and it took a place in the Holm family
    same = paired_delta({0: 0.5, 1: 0.6, 2: 0.7}, {0: 0.25, 1: 0.35, 2: 0.45})
    assert math.isnan(same.p) and math.isnan(same.lo) and math.isnan(same.hi) and same.mean == pytest.approx(0.25)
    assert same.untestable == "sd(Δ) = 0: every unit gave the same Δ"
    zero = paired_delta({0: 0.3, 1: 0.4, 2: 0.5}, {0: 0.3, 1: 0.4, 2: 0.5})  # Δ = 0 everywhere: before p = 1
    assert math.isnan(zero.p) and not zero.testable
    weak = paired_delta({0: 0.5, 1: 0.6, 2: 0.7}, {0: 0.45, 1: 0.535, 2: 0.665})  # p ≈ .029
    # the family is {weak} alone (m = 1): weak passes; with the zero-variance one counted, 2·.029 > .05 failed it
    assert verdicts([weak, same, zero]) == ["higher", "not testable", "not testable"]
    adj, _ = holm([weak.p, same.p])
    assert adj[0] == pytest.approx(weak.p) and math.isnan(adj[1])


def test_a_nan_score_is_an_error_never_p_zero():
    # before: sd(Δ) = NaN failed `sd > 0`, and the "same Δ in every seed" branch returned p = 0
    with pytest.raises(ValueError, match="unit 1"):
        paired_delta({0: 0.5, 1: math.nan, 2: 0.6}, {0: 0.4, 1: 0.4, 2: 0.4})


def test_holm_hand_computed():
    adj, reject = holm([0.01, 0.04, 0.03, np.nan, 0.005])
    # sorted: .005·4 = .02, .01·3 = .03, .03·2 = .06, .04·1 = .04 -> running max .06
    assert adj[[4, 0, 2, 1]] == pytest.approx([0.02, 0.03, 0.06, 0.06])
    assert math.isnan(adj[3])
    assert list(reject) == [True, False, False, False, True]


def test_verdicts_apply_holm_over_the_family():
    strong = paired_delta({0: 0.5, 1: 0.6, 2: 0.7}, {0: 0.4, 1: 0.5, 2: 0.61})  # p ≈ 0.0012
    weak = paired_delta({0: 0.5, 1: 0.6, 2: 0.7}, {0: 0.45, 1: 0.535, 2: 0.665})  # Δ .05 .065 .035: t = 5.77
    assert strong.p < 0.005 and 0.025 < weak.p < 0.05
    assert verdicts([weak]) == ["higher"]  # alone it passes 0.05 ...
    assert verdicts([weak, weak]) == ["inconclusive"] * 2  # ... two such comparisons: 2p > 0.05 (Holm)
    assert verdicts([strong, weak]) == ["higher", "higher"]  # step-down: 2·0.0012 ≤ 0.05, then 1·0.029 ≤ 0.05
    assert verdicts([paired_delta({0: 0.1}, {0: 0.3})]) == ["not testable"]
    assert verdicts([paired_delta({0: 0.1, 1: 0.2}, {0: 0.3, 1: 0.35})]) == ["not testable"]  # 2 units
    low = paired_delta({0: 0.4, 1: 0.5, 2: 0.6}, {0: 0.5, 1: 0.6, 2: 0.71})
    assert verdicts([low]) == ["lower"]


def test_hierarchical_bootstrap_degenerate_and_seed_spread():
    a = np.full((3, 5), 0.7)
    b = np.full((3, 5), 0.5)
    assert hierarchical_bootstrap_delta(a, b, n_boot=50) == pytest.approx((0.2, 0.2))
    # Seeds differ (Δ = 0 in seed 0, 0.2 in seed 1) with no problem noise: every resample is a mix of
    # the two seeds, so the interval lies in [0, 0.2] and spans most of it.
    a = np.array([[0.5] * 4, [0.7] * 4])
    b = np.full((2, 4), 0.5)
    lo, hi = hierarchical_bootstrap_delta(a, b, n_boot=500)
    assert (lo, hi) == pytest.approx((0.0, 0.2))


def test_pearson_ci_between_and_within_groups():
    x = np.array([1.0, 2, 3, 4, 5, 6])
    y = np.array([2.0, 1, 4, 3, 6, 5])
    # Σ(x−x̄)(y−ȳ) = 14.5, Σ(x−x̄)² = Σ(y−ȳ)² = 17.5: r = 14.5/17.5; plain: n − 2 = 4 df, SE 1/√(n − 3)
    r, lo, hi, p, units, df = pearson_ci(x, y)
    assert r == pytest.approx(29 / 35) and units == 6 and df == 4
    assert p == pytest.approx(2 * sps.t.sf(r * math.sqrt(4 / (1 - r * r)), 4))
    z, half = math.atanh(r), 1.959963984540054 / math.sqrt(3)
    assert (lo, hi) == pytest.approx((math.tanh(z - half), math.tanh(z + half)))
    # centred within 2 groups (rmcorr): 2 intercepts and a slope spent, N − k − 1 = 3 df, SE 1/√(N − k − 2) = 1/√2
    # (before: 2 df and SE 1/√1)
    c = pearson_ci(x, y, groups=2)
    assert c.r == r and c.units == 4 and c.df == 3
    assert c.p == pytest.approx(2 * sps.t.sf(r * math.sqrt(3 / (1 - r * r)), 3))
    assert c.lo == pytest.approx(math.tanh(z - 1.959963984540054 / math.sqrt(2)))
    assert math.isnan(pearson_ci([1, 2, 3], [1, 2, 4], groups=2).r)  # 3 values, 2 groups: no df left
    assert tail_mean([1, 2, 3, 4, None, 8], 0.25) == pytest.approx(6.0)  # last ceil(5/4) = 2 values


# Bland & Altman (1995), pH and PaCO2 of 8 subjects, 47 observations: the example of R's rmcorr and
# pingouin's rm_corr. rmcorr 0.8.1 (README): r = −0.5067697, 38 df, p = 0.0008471081, 95% CI
# −0.7067146, −0.2318631 (pingouin: −0.50677, 38, 0.000847, [−0.71, −0.23]).
BLAND_ALTMAN = {  # subject: [(pH, PaCO2), ...]
    1: [(6.68, 3.97), (6.53, 4.12), (6.43, 4.09), (6.33, 3.97)],
    2: [(6.85, 5.27), (7.06, 5.37), (7.13, 5.41), (7.17, 5.44)],
    3: [(7.4, 5.67), (7.42, 3.64), (7.41, 4.32), (7.37, 4.73), (7.34, 4.96), (7.35, 5.04), (7.28, 5.22), (7.3, 4.82),
        (7.34, 5.07)],
    4: [(7.36, 5.67), (7.33, 5.1), (7.29, 5.53), (7.3, 4.75), (7.35, 5.51)],
    5: [(7.35, 4.28), (7.3, 4.44), (7.3, 4.32), (7.37, 3.23), (7.27, 4.46), (7.28, 4.72), (7.32, 4.75), (7.32, 4.99)],
    6: [(7.38, 4.78), (7.3, 4.73), (7.29, 5.12), (7.33, 4.93), (7.31, 5.03), (7.33, 4.93)],
    7: [(6.86, 6.85), (6.94, 6.44), (6.92, 6.52)],
    8: [(7.19, 5.28), (7.29, 4.56), (7.21, 4.34), (7.25, 4.32), (7.2, 4.41), (7.19, 3.69), (6.77, 6.09), (6.82, 5.58)],
}


def test_within_group_correlation_matches_rmcorr():
    xs, ys = [], []
    for pairs in BLAND_ALTMAN.values():
        x, y = np.array(pairs).T
        xs += list(x - x.mean())
        ys += list(y - y.mean())
    c = pearson_ci(xs, ys, groups=len(BLAND_ALTMAN))
    assert len(xs) == 47 and c.df == 38 and c.units == 39
    assert c.r == pytest.approx(-0.5067697, abs=1e-7)
    assert c.p == pytest.approx(0.0008471081, rel=1e-6)  # before: 37 df
    assert (c.lo, c.hi) == pytest.approx((-0.7067146, -0.2318631), abs=1e-7)  # before: SE 1/√36


def test_variance_components_hand_computed():
    # A: 1, 2, 3 (mean 2), B: 4, 5, 6 (mean 5), grand mean 3.5: MSB = 3·(1.5² + 1.5²)/1 = 13.5,
    # MSW = (1 + 0 + 1 + 1 + 0 + 1)/4 = 1, n0 = (6 − 18/6)/1 = 3: σ²_b = (13.5 − 1)/3 = 25/6
    v = variance_components({"A": [1, 2, 3], "B": [4, 5, 6]})
    assert (v.between, v.within, v.f) == pytest.approx((25 / 6, 1.0, 13.5))
    assert v.share_between == pytest.approx((25 / 6) / (25 / 6 + 1))
    assert v.p == pytest.approx(sps.f.sf(13.5, 1, 4))
    # unequal sizes: A: 0, 2 (mean 1), B: 1, 1, 4 (mean 2), grand mean 1.6: MSB = 2·0.36 + 3·0.16 = 1.2
    # is below MSW = (2 + 6)/3 = 8/3, so σ²_b = max(0, …) = 0
    v = variance_components({"A": [0, 2], "B": [1, 1, 4]})
    assert v.between == 0.0 and v.within == pytest.approx(8 / 3) and v.share_between == 0.0
    assert math.isnan(variance_components({"A": [1, 2]}).between)  # one group


def test_variance_components_of_equal_values_has_no_f_test_as_scipy():
    # every Δ equal: MSB = MSW = 0, F = 0/0. scipy's f_oneway gives NaN, NaN (before: F = inf, p = 0)
    v = variance_components({0: [0, 0], 1: [0, 0]})
    ref = sps.f_oneway([0.0, 0.0], [0.0, 0.0])
    assert math.isnan(ref.statistic) and math.isnan(ref.pvalue)
    assert math.isnan(v.f) and math.isnan(v.p) and math.isnan(v.share_between) and not v.testable
    # equal up to float rounding (.6 − .35 vs .25) is still equal
    assert math.isnan(variance_components({0: [0.6 - 0.35, 0.25], 1: [0.25, 0.25]}).f)
    # only the means differ (MSW = 0): scipy gives F = inf, p = 0, and so does this; the share is 1
    v = variance_components({0: [1, 1], 1: [0, 0]})
    assert sps.f_oneway([1.0, 1.0], [0.0, 0.0]).statistic == math.inf
    assert (v.f, v.p, v.share_between, v.testable) == (math.inf, 0.0, 1.0, True)


# --- simulated reports: seed-dominated noise ---------------------------------------------------

SEEDS, PROBLEMS, N_SAMPLES, SEED_SD = 5, 200, 8, 0.05


def simulate(delta: float, sims: int, arms: int = 2, rng_seed: int = 0) -> np.ndarray:
    """Per-seed final scores ``[sims, arms, seeds]``: P problems of difficulty q ~ Beta(2, 2) (shared by
    arms), each (arm, seed) shifted by N(0, SEED_SD²) (5 points seed sd), arms 1… shifted by ``delta``,
    n samples per problem ~ Binomial(n, clip(q + shift)). The problem noise of a seed's mean is about
    1 point, so the seed dominates."""
    rng = np.random.default_rng(rng_seed)
    q = rng.beta(2, 2, size=(sims, 1, 1, PROBLEMS))
    b = rng.normal(0, SEED_SD, size=(sims, arms, SEEDS, 1))
    shift = np.array([0.0] + [delta] * (arms - 1))[None, :, None, None]
    return rng.binomial(N_SAMPLES, np.clip(q + b + shift, 0, 1)).mean(axis=-1) / N_SAMPLES


def _delta(x: np.ndarray, arm: int):
    return paired_delta(dict(enumerate(x[arm])), dict(enumerate(x[0])))


@pytest.mark.slow
def test_false_positive_rate_at_most_6_percent():
    sims = simulate(0.0, 4000, arms=4, rng_seed=1)
    single = np.mean([verdicts([_delta(x, 1)])[0] != "inconclusive" for x in sims])
    family = np.mean([any(v != "inconclusive" for v in verdicts([_delta(x, a) for a in (1, 2, 3)])) for x in sims])
    print(f"false-positive rate: one comparison {single:.4f}, family of 3 (Holm) {family:.4f}")
    assert single <= 0.06 and family <= 0.06
    assert single == pytest.approx(0.05175, abs=1e-9) and family == pytest.approx(0.04775, abs=1e-9)


def test_power_for_a_5_point_delta_with_5_seeds():
    sims = simulate(0.05, 2000, rng_seed=0)
    power = np.mean([verdicts([_delta(x, 1)])[0] == "higher" for x in sims])
    # Analytic: per-seed Δ sd ≈ √(2 · (0.05² + q̄(1−q̄)/(n·P))) with E[q(1−q)] = 0.2 for Beta(2, 2).
    sd = math.sqrt(2 * (SEED_SD ** 2 + 0.2 / (N_SAMPLES * PROBLEMS)))
    ncp, crit = 0.05 / sd * math.sqrt(SEEDS), sps.t.ppf(0.975, SEEDS - 1)
    analytic = sps.nct.sf(crit, SEEDS - 1, ncp)
    print(f"power (Δ = 5 points, seed sd 5 points per arm, {SEEDS} seeds): {power:.4f}; noncentral t: {analytic:.4f}")
    assert power == pytest.approx(0.235, abs=0.015)
    assert power == pytest.approx(analytic, abs=0.03)


# --- plateau_check on hand-made trajectories ---------------------------------------------------

STEPS = [0, 25, 50, 75, 100]
ENT_STEPS = list(range(1, 101))


def _entropy(start: float, end: float) -> tuple[list, list]:
    """Entropy falling linearly from ``start`` at step 1 to ``end`` at step 76, flat afterwards."""
    return ENT_STEPS, [start + (end - start) * min(s - 1, 75) / 75 for s in ENT_STEPS]


def test_plateau_held():
    heldout = {0: (STEPS, [0.30, 0.45, 0.50, 0.51, 0.52]), 1: (STEPS, [0.30, 0.44, 0.49, 0.50, 0.50])}
    entropy = {0: _entropy(0.6, 0.1), 1: _entropy(0.6, 0.12)}
    v = plateau_check(heldout, entropy, ceiling=0.80)
    assert v.held and v.seeds == 2
    # ¾T = 75: |0.52 − 0.51| = 1 point, |0.50 − 0.50| = 0 -> mean 0.5 points
    assert v.stalled.held and v.stalled.value == pytest.approx(0.5)
    # final pass@1 (52 + 50)/2 = 51 -> 80 − 51 = 29 points below
    assert v.below_ceiling.held and v.below_ceiling.value == pytest.approx(29.0)
    # last quarter (25 values, all flat) 0.1 and 0.12 -> 0.11 < 0.6/3
    assert v.entropy_collapsed.held and v.entropy_collapsed.value == pytest.approx(0.11)
    assert v.entropy_collapsed.threshold == pytest.approx(0.2)
    assert v.per_seed[0]["t_ref"] == 75 and v.per_seed[1]["entropy_warm"] == pytest.approx(0.6)


def test_plateau_each_criterion_failing():
    flat = {0: (STEPS, [0.30, 0.45, 0.50, 0.51, 0.52])}
    collapsed = {0: _entropy(0.6, 0.1)}
    rising = {0: (STEPS, [0.30, 0.40, 0.45, 0.50, 0.55])}  # +5 points over the last quarter
    v = plateau_check(rising, collapsed, 0.8)
    assert not v.held and not v.stalled.held and v.stalled.value == pytest.approx(5.0)
    assert v.below_ceiling.held and v.entropy_collapsed.held
    v = plateau_check(flat, collapsed, 0.60)  # 8 points below the ceiling only
    assert not v.held and not v.below_ceiling.held and v.below_ceiling.value == pytest.approx(8.0)
    v = plateau_check(flat, {0: _entropy(0.6, 0.3)}, 0.8)  # 0.3 ≥ 0.6/3
    assert not v.held and not v.entropy_collapsed.held and v.entropy_collapsed.value == pytest.approx(0.3)
    v = plateau_check(flat, collapsed, None)  # no ceiling: not evaluated, so no plateau is claimed
    assert v.below_ceiling.held is None and "not evaluated" in v.below_ceiling.detail and not v.held
    assert v.stalled.held and v.entropy_collapsed.held


def test_plateau_three_quarter_point_is_the_nearest_evaluation():
    # T = 90, ¾T = 67.5: nearest evaluation step is 70 (not 60)
    v = plateau_check({0: ([0, 30, 60, 70, 90], [0.1, 0.2, 0.3, 0.40, 0.43])}, {}, None)
    assert v.per_seed[0]["t_ref"] == 70 and v.stalled.value == pytest.approx(3.0) and not v.stalled.held
    assert v.entropy_collapsed.held is None


def test_stalled_needs_two_evaluations_in_the_last_quarter():
    # one evaluation (T = 100 alone): a change of 0 by construction is no stall that was measured
    v = plateau_check({0: ([100], [0.30])}, {}, 0.8)
    assert v.stalled.held is None and not v.held and v.seeds == 1
    assert v.stalled.detail == ("not evaluated: 1 of 1 unit have fewer than 2 held-out evaluations in the last quarter of "
                                "their steps")
    # evaluations at 0 and 100: the last quarter [75, 100] holds one; at 0, 80, 100 it holds two (t* = 80)
    assert plateau_check({0: ([0, 100], [0.1, 0.3])}, {}, 0.8).stalled.held is None
    v = plateau_check({0: ([0, 80, 100], [0.1, 0.295, 0.30]), 1: ([0, 100], [0.1, 0.3])}, {}, 0.8)
    assert v.stalled.held is None and v.stalled.detail.startswith("not evaluated: 1 of 2 units have fewer than 2")
    v = plateau_check({0: ([0, 80, 100], [0.1, 0.295, 0.30])}, {}, 0.8)
    assert v.stalled.held and v.stalled.value == pytest.approx(0.5) and v.per_seed[0]["t_ref"] == 80


def test_a_run_that_ended_at_or_below_its_start_diverged_and_is_no_plateau():
    # the SmolLM2 lr2e3 case: 8.6% at step 0, 0% from step 50 on: "stalled" (change 0), far below the
    # ceiling, entropy collapsed, and yet not premature convergence: it never improved on its warm start
    gone = {0: (STEPS, [0.086, 0.0, 0.0, 0.0, 0.0]), 1: (STEPS, [0.090, 0.01, 0.0, 0.0, 0.0])}
    collapsed = {0: _entropy(0.9, 0.01), 1: _entropy(0.9, 0.02)}
    v = plateau_check(gone, collapsed, 0.886)
    assert all(c.held for c in v.criteria) and not v.held and v.diverged
    # final (0 + 0)/2 = 0 points, step 0 (8.6 + 9.0)/2 = 8.8 points: −8.8
    assert v.improved.held is False and v.improved.value == pytest.approx(-8.8)
    assert v.improved.detail == "final pass@1 0.0 − step 0's 8.8 = -8.8 points over 2 units (≤ 0: diverged)"
    # with the guard off (`report.plateau.improved_on_start: false`) the three criteria alone decide
    off = plateau_check(gone, collapsed, 0.886, PlateauCriteria(improved_on_start=False))
    assert off.held and off.diverged  # it still diverged: the guard, not the measurement, is off
    # ending exactly at the start is "at or below": diverged
    assert plateau_check({0: (STEPS, [0.3, 0.2, 0.3, 0.3, 0.3])}, {}, 0.8).improved.held is False
    # no evaluation at step 0: the guard is not evaluated, so under it no plateau is claimed
    late = plateau_check({0: ([25, 50, 75, 100], [0.45, 0.50, 0.51, 0.52])}, {0: _entropy(0.6, 0.1)}, 0.8)
    assert late.improved.held is None and not late.held and not late.diverged
    assert all(c.held for c in late.criteria)


def test_setting_by_rule_never_keeps_a_diverged_setting():
    collapsed = {0: _entropy(0.9, 0.01)}
    gone = plateau_check({0: (STEPS, [0.086, 0.0, 0.0, 0.0, 0.0])}, collapsed, 0.886)  # 3 criteria, change 0
    drifting = plateau_check({0: (STEPS, [0.086, 0.6, 0.64, 0.55, 0.68])}, collapsed, 0.886)  # 2 criteria, change 13
    assert setting_by_rule({"lr2e3": gone, "lr5e4": drifting}) == "lr5e4"
    assert setting_by_rule({"lr2e3": gone, "lr5e4": drifting}, PlateauCriteria(improved_on_start=False)) == "lr2e3"
    assert setting_by_rule({"lr2e3": gone}) is None  # every setting diverged: none is kept


def test_arm_variants_name_what_is_added_to_the_estimator():
    from rbctl.config.sweep import arm_variant

    assert arm_variant({"budget": None, "entropy": {"mode": "none"}, "policy_loss": "clip"}) == "base"
    assert arm_variant({"budget": 1.0}) == "budget"
    assert arm_variant({"entropy": {"mode": "static"}}) == "entropy_static"
    assert arm_variant({"policy_loss": "clip_cov", "budget": 1.0}) == "budget+clip_cov"
    assert arm_variant({"entropy_mask": {"rho": 0.2}}) == "entropy_mask"
    assert arm_variant({"unlikeliness": {"beta": 0.25}, "entropy_mask": None}) == "unlikeliness"  # null is off
    assert arm_variant({}, {"dynamic_sampling": True}) == "dynamic_sampling"


def test_every_arm_is_compared_with_its_baseline_and_standalone_estimators_with_grpo():
    from rbctl.report.analyses.comparisons import stated_pairs

    info = {"grpo": ("grpo", "base"), "grpo_budget": ("grpo", "budget"), "ent": ("grpo", "entropy_static"),
            "cov": ("grpo", "clip_cov"), "maxrl": ("maxrl", "base"), "dr": ("dr_grpo", "base")}
    pairs = set(stated_pairs(info))
    assert pairs == {
        ("budget_vs_base", "grpo", "grpo_budget", "grpo"),
        ("entropy_vs_budget", "grpo", "ent", "grpo_budget"), ("entropy_vs_base", "grpo", "ent", "grpo"),
        ("arm_vs_budget", "grpo", "cov", "grpo_budget"), ("arm_vs_base", "grpo", "cov", "grpo"),
        ("arm_vs_grpo", "maxrl", "maxrl", "grpo"), ("arm_vs_grpo_budget", "maxrl", "maxrl", "grpo_budget"),
        ("arm_vs_grpo", "dr_grpo", "dr", "grpo"), ("arm_vs_grpo_budget", "dr_grpo", "dr", "grpo_budget"),
    }


def test_p_values_are_never_printed_as_zero():
    from rbctl.report.analyses.comparisons import Comparison
    from rbctl.report.render.lead import delta_label as _delta_label
    from rbctl.report.render.tables import latex_table, pval

    assert pval(0.0) == "< 0.001" and pval(4e-7) == "< 0.001" and pval(0.00099) == "< 0.001"
    assert pval(0.001) == "0.001" and pval(0.0449) == "0.045" and pval(1.0) == "1.000"
    assert pval(math.nan) == "–" and pval(None, "not testable") == "not testable"
    # the answer figure's label (before: "Holm p 0.000: higher")
    d = paired_delta({0: 0.5, 1: 0.6, 2: 0.72}, {0: 0.4, 1: 0.5, 2: 0.6})
    c = Comparison("principal", "principal", "grpo", "a", "b", "x", "avg@n", 8, 0.6, 0.5, d, p_holm=1e-6,
                   significant=True)
    assert _delta_label(c) == "a − b (avg@n)\nHolm p < 0.001: higher"
    same = paired_delta({0: 0.5, 1: 0.6, 2: 0.7}, {0: 0.25, 1: 0.35, 2: 0.45})
    c = Comparison("principal", "principal", "grpo", "a", "b", "x", "avg@n", 8, 0.6, 0.35, same)
    assert _delta_label(c) == "a − b (avg@n)\nnot testable: sd(Δ) = 0: every unit gave the same Δ"
    import pandas as pd

    assert "$<$ 0.001" in latex_table(pd.DataFrame({"p": [pval(0.0)]}))


def test_p_improvement_intervals_are_withheld_below_five_units_and_contain_the_estimate_from_there():
    import numpy as np

    from rbctl.report.analyses.comparisons import MIN_BOOTSTRAP_UNITS, improvement_intervals

    # 3 units: x > y in (0.5 > 0.4), (0.6 > 0.4, 0.55), (0.7 > 0.4, 0.55): 5 of 9 pairs
    three = improvement_intervals(np.array([[0.5], [0.6], [0.7]]), np.array([[0.4], [0.55], [0.8]]), n_boot=500)
    assert three["p_improve"] == pytest.approx(5 / 9)
    assert all(math.isnan(three[k]) for k in three if k != "p_improve")  # 10 distinct resamples: no interval
    x = np.array([[0.5], [0.6], [0.7], [0.3], [0.9]])
    y = np.array([[0.4], [0.55], [0.8], [0.35], [0.6]])
    five = improvement_intervals(x, y, n_boot=500)
    assert MIN_BOOTSTRAP_UNITS == 5
    # of the 25 pairs x wins 0.5: 2 (0.4, 0.35); 0.6: 3 and ties 0.6 (½); 0.7: 4; 0.3: 0; 0.9: 5 = 14.5
    assert five["p_improve"] == pytest.approx(14.5 / 25)
    for name in ("paired", "indep"):
        lo, hi = five[f"p_improve_{name}_lo"], five[f"p_improve_{name}_hi"]
        assert 0 <= lo <= 14.5 / 25 <= hi <= 1 and hi - lo > 0.1
