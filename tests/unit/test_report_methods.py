"""The report's power calculation, rliable aggregates, survival statistics, warm-start level and the
sweep file's report settings, against hand-computed, textbook and reference-tool values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from rbctl.config.base import validate
from rbctl.config.sweep import SweepConfig
from rbctl.errors import UserError
from rbctl.report.analyses.escape_time import escape_time
from rbctl.report.power import mde_paired, power_paired, units_for_power
from rbctl.report.robust import iqm, prob_improvement, score_distribution, stratified_bootstrap
from rbctl.report.stats import paired_delta
from rbctl.report.survival import kaplan_meier, logrank, rmst
from rbctl.report.analyses.warm_starts import warm_start_level

# --- power ----------------------------------------------------------------------------------------


def test_units_for_power_matches_gpower():
    # G*Power 3.1, "t tests – Means: Difference from constant (one sample case)", a priori, two tails,
    # effect size d_z = 0.5, α = 0.05, power 0.80: total sample size 34, actual power 0.8077775.
    assert units_for_power(sd=1.0, mde=0.5, m=1, power=0.8) == 34
    assert power_paired(0.5, 1.0, 34, 0.05) == pytest.approx(0.8077775, abs=1e-6)
    assert power_paired(0.5, 1.0, 33, 0.05) < 0.8  # 34 is the smallest
    # d_z = 0.8: G*Power gives 15 (actual power 0.8213) — the same in points: sd 5, mde 4
    assert units_for_power(sd=5.0, mde=4.0) == 15
    assert power_paired(4.0, 5.0, 15, 0.05) == pytest.approx(0.8213, abs=1e-4)


def test_power_uses_alpha_over_m_and_mde_inverts_power():
    # m = 3 principal comparisons: each at α/3; more units are needed than for one
    n1, n3 = units_for_power(5.5, 5.0, 1), units_for_power(5.5, 5.0, 3)
    assert n3 > n1
    assert power_paired(5.0, 5.5, n3, 0.05 / 3) >= 0.8 > power_paired(5.0, 5.5, n3 - 1, 0.05 / 3)
    mde = mde_paired(5.5, 10, 0.05 / 3, 0.8)
    assert power_paired(mde, 5.5, 10, 0.05 / 3) == pytest.approx(0.8, abs=1e-9)
    # no power below the test level: the power at Δ = 0 is α itself (both tails)
    assert power_paired(0.0, 5.5, 10, 0.05) == pytest.approx(0.05)
    assert math.isnan(mde_paired(5.5, 1, 0.05, 0.8)) and math.isnan(power_paired(1.0, 0.0, 10, 0.05))
    with pytest.raises(ValueError, match="sd > 0"):
        units_for_power(0.0, 5.0)


def test_power_is_finite_at_few_units_and_large_effects():
    # 3 units (df 2) at α/3: scipy's nct.cdf(−t*, 2, 8) is NaN; the far tail, P(T < −t*) with
    # T ~ t'(2, 8), is below 1e-9 and the power is the near tail alone
    crit = sps.t.ppf(1 - 0.05 / 3 / 2, 2)
    delta = 8 * 5.0 / math.sqrt(3)  # ncp = δ√n/σ = 8
    assert power_paired(delta, 5.0, 3, 0.05 / 3) == pytest.approx(sps.nct.sf(crit, 2, 8), abs=1e-9)
    mde = mde_paired(5.0, 3, 0.05 / 3, 0.8)
    assert math.isfinite(mde) and power_paired(mde, 5.0, 3, 0.05 / 3) == pytest.approx(0.8, abs=1e-9)


# --- rliable aggregates ---------------------------------------------------------------------------

X = np.array([[0.61, 0.5], [0.55, 0.7], [0.70, 0.7], [0.48, 0.2], [0.66, 0.9]])  # [runs, tasks]
Y = np.array([[0.58, 0.5], [0.55, 0.6], [0.52, 0.7], [0.50, 0.1], [0.60, 0.3]])


def test_prob_improvement_is_the_mann_whitney_form_averaged_over_tasks():
    # task 0: .61 beats 5 of Y's, .55 beats .52, .50 and ties .55 (2.5), .70 beats 5, .48 none,
    # .66 beats 5: 17.5/25 = .70. Task 1: .5 beats .1, .3, ties .5 (2.5); .7 beats 4, ties .7 (4.5)
    # twice; .2 beats .1 (1); .9 beats 5: 17.5/25 = .70. Mean .70 (rliable 1.2.0 gives 0.7 too).
    assert prob_improvement(X[:, :1], Y[:, :1]) == pytest.approx(0.70)
    assert prob_improvement(X, Y) == pytest.approx(0.70)
    assert prob_improvement(Y, X) == pytest.approx(0.30)  # P(X > Y) + P(Y > X) = 1 with ties halved
    assert prob_improvement(X, X) == pytest.approx(0.5)


def test_iqm_is_the_25_percent_trimmed_mean_over_runs_and_tasks():
    # 10 pooled scores, ⌊10/4⌋ = 2 cut from each end: sorted .2 .48 | .5 .55 .61 .66 .7 .7 | .7 .9
    assert iqm(X) == pytest.approx((0.5 + 0.55 + 0.61 + 0.66 + 0.7 + 0.7) / 6)
    assert iqm(X) == pytest.approx(sps.trim_mean(X, 0.25, axis=None))  # rliable's aggregate_iqm
    assert iqm(np.arange(7.0)[:, None]) == pytest.approx(3.0)  # ⌊7/4⌋ = 1 cut: mean of 1..5
    assert list(iqm(np.stack([X, Y]))) == pytest.approx([iqm(X), iqm(Y)])  # resamples stacked


def test_a_nan_score_makes_iqm_p_improvement_and_their_intervals_nan():
    # before: the sort put NaN last and the trim dropped it (IQM 0.4 from .1, .3, .5); comparisons with
    # NaN are False, so P(improvement) counted it as a loss. rliable (scipy's trim_mean, mannwhitneyu)
    # gives NaN; so does scipy here
    nan = math.nan
    scores = np.array([[0.1], [nan], [0.3], [0.5]])
    assert math.isnan(sps.trim_mean(scores, 0.25, axis=None)) and math.isnan(iqm(scores))
    assert math.isnan(sps.mannwhitneyu([0.1, nan, 0.3], [0.2, 0.4, 0.3]).statistic)
    assert math.isnan(prob_improvement(scores[:3], np.array([[0.2], [0.4], [0.3]])))
    assert math.isnan(prob_improvement(np.array([[0.2], [0.4]]), scores[:2]))
    # a NaN in one task: that task is NaN, so the mean over tasks is too
    assert math.isnan(prob_improvement(np.array([[0.5, 0.1], [0.6, nan]]), np.array([[0.4, 0.2], [0.3, 0.3]])))
    assert list(iqm(np.stack([X, np.where(X > 0.65, nan, X)]))) == pytest.approx([iqm(X), nan], nan_ok=True)
    for lo, hi in (stratified_bootstrap(iqm, [scores], n_boot=50),
                   stratified_bootstrap(prob_improvement, [scores, scores[::-1]], paired=True, n_boot=50),
                   stratified_bootstrap(prob_improvement, [scores, np.ones((2, 1))], n_boot=50)):
        assert math.isnan(lo) and math.isnan(hi)
    lo, hi = stratified_bootstrap(lambda s: score_distribution(s, [0.2, 0.4]), [scores], n_boot=50)
    assert lo.shape == (2,) and np.isnan(lo).all() and np.isnan(hi).all()
    assert np.isnan(score_distribution(scores, [0.2])).all()


def test_p_improvement_interval_paired_and_rliables_independent_bootstrap():
    # two arms with the same runs unit by unit: a paired resample draws the same units for both, two equal
    # multisets, so P(X > Y) = 1/2 exactly in every resample; rliable's independent bootstrap draws each
    # arm's runs on its own, and its interval spreads around 1/2
    x = np.array([[0.1], [0.4], [0.7], [1.0]])
    assert stratified_bootstrap(prob_improvement, [x, x.copy()], paired=True, n_boot=300) == pytest.approx((0.5, 0.5))
    lo, hi = stratified_bootstrap(prob_improvement, [x, x.copy()], paired=False, n_boot=300)
    assert lo < 0.5 < hi and 0 <= lo and hi <= 1


def test_score_distribution_and_stratified_bootstrap():
    assert list(score_distribution(X[:, :1], [0.5, 0.6, 0.7])) == pytest.approx([0.8, 0.6, 0.0])  # strictly above
    # a constant sample: every resample gives the same statistic
    assert stratified_bootstrap(iqm, [np.full((5, 2), 0.3)], n_boot=50) == pytest.approx((0.3, 0.3))
    # paired: each unit's two runs stay together, so Δ = +.1 in every unit gives P(X > Y) in [.5, 1]
    # for any resample and exactly 1 when no two resampled units differ by less than .1
    x = np.array([[0.1], [0.4], [0.7]])
    lo, hi = stratified_bootstrap(prob_improvement, [x + 0.1, x], paired=True, n_boot=400)
    assert 0.5 <= lo <= hi == pytest.approx(1.0)
    # strata: a task's resample draws only its own column's runs (column 1 is constant, so the IQM of
    # each resample of column 1 alone is 10)
    strat = np.column_stack([np.arange(6.0), np.full(6, 10.0)])
    lo, hi = stratified_bootstrap(lambda s: s[..., 1].mean(axis=-1), [strat], n_boot=100)
    assert (lo, hi) == pytest.approx((10.0, 10.0))
    lo, hi = stratified_bootstrap(lambda s: score_distribution(s, [0.5, 2.5]), [np.arange(6.0)[:, None]], n_boot=200)
    assert lo.shape == (2,) and (lo <= hi).all() and hi[0] <= 1.0


# --- survival -------------------------------------------------------------------------------------

# Freireich et al. (1963) remission times (weeks), 6-MP vs placebo (0 = censored), the textbook example
# of Kleinbaum & Klein, "Survival Analysis" (3rd ed., ch. 2): log-rank χ² = 16.79, p = 4.17e-5;
# 6-MP: S(6) = .857, S(7) = .807, S(10) = .753, S(13) = .690, S(16) = .627, S(22) = .538, S(23) = .448,
# median 23; placebo median 8. (lifelines 0.30.3 gives the same KM, χ² 16.7929 and RMST(23) 17.9092.)
MP_T = [6, 6, 6, 6, 7, 9, 10, 10, 11, 13, 16, 17, 19, 20, 22, 23, 25, 32, 32, 34, 35]
MP_E = [1, 1, 1, 0, 1, 0, 1, 0, 0, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0]
PL_T = [1, 1, 2, 2, 3, 4, 4, 5, 5, 8, 8, 8, 8, 11, 11, 12, 12, 15, 17, 22, 23]


def test_kaplan_meier_and_log_rank_on_the_leukemia_data():
    km = kaplan_meier(MP_T, MP_E)
    assert list(km.times) == [6, 7, 10, 13, 16, 22, 23]
    assert list(km.survival) == pytest.approx([0.857, 0.807, 0.753, 0.690, 0.627, 0.538, 0.448], abs=5e-4)
    assert km.median == 23 and kaplan_meier(PL_T, [1] * 21).median == 8
    assert km.at(5.9) == 1.0 and km.at(6) == pytest.approx(18 / 21) and km.at(100) == km.survival[-1]
    chi2, p = logrank(MP_T, MP_E, PL_T, [1] * 21)
    assert chi2 == pytest.approx(16.79, abs=0.005) and p == pytest.approx(4.17e-5, rel=2e-3)
    assert kaplan_meier([5, 5], [0, 0]).median == math.inf  # nobody escaped: not reached


def test_kaplan_meier_median_when_survival_is_exactly_one_half():
    # S(0) = 8/10, S(20) = 8/10 · 6/8, S(40) = 3/5 · 5/6 = 1/2 exactly; as a float product it is
    # 0.5000000000000001, and a median read off it was 60 (one evaluation late). lifelines' rule, the
    # first t with S(t) ≤ 0.5, gives 40.
    times = [0, 0, 20, 20, 40, 40, 60, 60, 80, 100]
    events = [1, 1, 1, 1, 1, 0, 1, 0, 1, 0]
    km = kaplan_meier(times, events)
    assert np.cumprod([0.8, 0.75, 5 / 6])[-1] > 0.5  # the float product that misled
    assert km.median == 40 and km.at(40) == 0.5 and km.at(39) == pytest.approx(0.6)
    assert km.quantile_time(0.25) == 20  # S(20) = 0.6 ≤ 0.75
    assert km.quantile_time(0.625) == 60  # S(60) = 1/2 · 3/4 = 3/8 = 1 − 0.625 exactly
    assert math.isnan(logrank([5, 5], [0, 0], [5], [0])[0])


def test_rmst_and_its_variance_hand_computed():
    # times 1, 2, 3 with events 1, 1, 0: S = 1 on [0, 1), 2/3 on [1, 2), 1/3 on [2, 3]; τ = 3:
    # RMST = 1 + 2/3 + 1/3 = 2; A_1 = ∫_1^3 S = 1, A_2 = ∫_2^3 S = 1/3;
    # Var = 1²·1/(3·2) + (1/3)²·1/(2·1) = 1/6 + 1/18 = 2/9
    area, lo, hi = rmst(kaplan_meier([1, 2, 3], [1, 1, 0]), 3)
    half = 1.959963984540054 * math.sqrt(2 / 9)
    assert (area, lo, hi) == pytest.approx((2.0, 2 - half, 2 + half))
    km = kaplan_meier(MP_T, MP_E)
    # ∫_0^23 S: 6·1 + 1·.857 + 3·.807 + 3·.753 + 3·.690 + 6·.627 + 1·.538 (the step values, exactly)
    s = km.survival
    assert rmst(km, 23)[0] == pytest.approx(6 + s[0] + 3 * s[1] + 3 * s[2] + 3 * s[3] + 6 * s[4] + s[5])
    assert rmst(km, 23)[0] == pytest.approx(17.9092, abs=1e-4)
    assert rmst(kaplan_meier([4, 4], [0, 0]), 4) == (4.0, 4.0, 4.0)  # nobody escaped: τ, no spread


def test_escape_time_first_crossing_or_censored_at_the_last_evaluation():
    assert escape_time([0, 40, 80, 120], [0.16, 0.3, 0.55, 0.9], 0.5) == (80.0, 1)
    assert escape_time([0, 40, 80], [0.16, 0.2, 0.49], 0.5) == (80.0, 0)
    assert escape_time([80, 0, 40], [0.6, 0.1, 0.5], 0.5) == (40.0, 1)  # in step order; ≥ threshold
    assert escape_time([0, 40], [0.9, 0.4], 0.5, "below") == (40.0, 1)


# --- warm starts ----------------------------------------------------------------------------------


def test_warm_start_level_per_warm_start_over_warm_starts_and_variance():
    # Δ per (warm start, seed): a: .02, .04 (mean .03); b: .10, .12 (mean .11); c: .05, .07 (mean .06)
    arm = {("a", 0): 0.52, ("a", 1): 0.54, ("b", 0): 0.60, ("b", 1): 0.62, ("c", 0): 0.55, ("c", 1): 0.57}
    d = paired_delta(arm, dict.fromkeys(arm, 0.50))
    lvl = warm_start_level(d)
    assert lvl.per_warm_start["a"].mean == pytest.approx(0.03) and lvl.per_warm_start["b"].units == (0, 1)
    assert not lvl.per_warm_start["a"].testable  # two seeds: an interval, no test
    over = lvl.over_warm_starts
    assert over.n == 3 and over.mean == pytest.approx(0.2 / 3) and over.deltas == pytest.approx((0.03, 0.11, 0.06))
    # t over 3 warm starts: sd² = (.0367² + .0433² + .0067²)/2 = .0098/6, se = sd/√3; on 2 df p = 1 − t/√(2 + t²)
    t = (0.2 / 3) / math.sqrt(0.0098 / 6 / 3)
    assert over.p == pytest.approx(1 - t / math.sqrt(2 + t * t))
    # MSB = 2·.0098/3/2 = .0098/3, MSW = 6·.0001/3 = .0002, n0 = 2: σ²_b = (.0098/3 − .0006/3)/2 = .0092/6
    v = lvl.components
    assert (v.between, v.within, v.f) == pytest.approx((0.0092 / 6, 0.0002, 49 / 3)) and v.share_between == pytest.approx(23 / 26)
    # two warm starts: the test over warm starts has 2 units, so none (before: a t on 1 df)
    two = warm_start_level(paired_delta({k: v for k, v in arm.items() if k[0] != "c"}, dict.fromkeys(arm, 0.5)))
    assert math.isnan(two.over_warm_starts.p) and two.over_warm_starts.untestable.startswith("2 units")


# --- the sweep file's report settings -------------------------------------------------------------

BASE = {"base": "b.yaml", "arms": {"grpo": {}, "grpo_budget": {"algo.budget": 1.0}, "ent": {}}}
DESIGN = {"principal": [["grpo_budget", "grpo"], ["ent", "grpo_budget"]], "mde": 5.0, "planning_sd": 5.5}


def test_comparisons_section_validates_and_names_the_key():
    cfg = validate(SweepConfig, {**BASE, "comparisons": DESIGN, "escape": {"threshold": 0.4}}, "s.yaml")
    assert cfg.comparisons.principal == [("grpo_budget", "grpo"), ("ent", "grpo_budget")]
    assert (cfg.comparisons.metric, cfg.comparisons.power, cfg.comparisons.alpha) == ("avg@n", 0.8, 0.05)
    assert cfg.escape.metric == "label/strategy/walk" and cfg.escape.direction == "above"
    assert validate(SweepConfig, BASE, "s.yaml").comparisons is None  # today's behaviour
    bad = [({"principal": [["grpo_budget", "grpx"]]}, r"comparisons.principal.0': unknown arm 'grpx'"),
           ({"principal": [["grpo", "grpo"]]}, r"comparisons.principal': pair 0 compares arm 'grpo' with itself"),
           ({"principal": [["ent", "grpo"], ["ent", "grpo"]]}, r"listed twice"),
           ({"metric": "pass@16"}, r"comparisons.metric': pass@16 needs k <= eval.n = 8"),
           ({"metric": "avg"}, r"comparisons.metric': must be avg@n or pass@k"),
           ({"mde": 0}, r"comparisons.mde'"), ({"power": 1.0}, r"comparisons.power'"),
           ({"benchmark": "aime24"}, r"comparisons.benchmark': 'aime24' is not one of eval.benchmarks")]
    for change, message in bad:
        with pytest.raises(UserError, match=message):
            validate(SweepConfig, {**BASE, "comparisons": {**DESIGN, **change}}, "s.yaml")
    with pytest.raises(UserError, match="escape.direction"):
        validate(SweepConfig, {**BASE, "escape": {"direction": "up"}}, "s.yaml")


def test_a_lasting_escape_must_hold_at_the_next_points():
    steps, walk = [0, 20, 40, 60, 80, 100], [0.1, 0.6, 0.4, 0.55, 0.7, 0.8]
    assert escape_time(steps, walk, 0.5) == (20.0, 1)  # the first crossing, which does not last
    assert escape_time(steps, walk, 0.5, hold=2) == (60.0, 1)  # 60, 80, 100 all ≥ 0.5
    # a crossing at the last evaluation has no 2 points after it: not confirmed, censored at the last step
    assert escape_time(steps, [0.1, 0.2, 0.3, 0.4, 0.45, 0.6], 0.5, hold=2) == (100.0, 0)
    assert escape_time(steps, [0.1, 0.2, 0.3, 0.6, 0.6, 0.6], 0.5, hold=2) == (60.0, 1)  # 60 held at 80 and 100
    assert escape_time(steps, [0.1, 0.6, 0.1, 0.6, 0.1, 0.2], 0.5, hold=1) == (100.0, 0)  # never lasts: censored


def _logrank_reference(groups):
    """A plain stratified log-rank: groups = [(time, event, in_a, stratum)], O − E and V summed over strata."""
    oe = v = 0.0
    for st in {g[3] for g in groups}:
        runs = [g for g in groups if g[3] == st]
        for t in sorted({g[0] for g in runs if g[1]}):
            at_risk = [g for g in runs if g[0] >= t]
            n, na = len(at_risk), sum(g[2] for g in at_risk)
            d = sum(1 for g in runs if g[0] == t and g[1])
            da = sum(1 for g in runs if g[0] == t and g[1] and g[2])
            oe += da - d * na / n
            v += d * (na / n) * (1 - na / n) * (n - d) / (n - 1) if n > 1 else 0.0
    return oe * oe / v


def test_log_rank_stratified_by_warm_start_matches_a_plain_reference():
    # warm start w1 escapes early for both arms, w2 late; arm a has more runs from w1, so the pooled
    # test sees a difference that is the warm starts', which the stratified test removes
    ta, ea, sa = [10, 12, 14, 16, 18, 20, 80], [1] * 7, ["w1"] * 6 + ["w2"]
    tb, eb, sb = [11, 82, 85, 90, 95, 100, 100], [1, 1, 1, 1, 1, 0, 0], ["w1"] + ["w2"] * 6
    chi2, p = logrank(ta, ea, tb, eb, sa, sb)
    ref = _logrank_reference([(t, e, True, s) for t, e, s in zip(ta, ea, sa)] +
                             [(t, e, False, s) for t, e, s in zip(tb, eb, sb)])
    assert chi2 == pytest.approx(ref, rel=1e-12) and p == pytest.approx(sps.chi2.sf(ref, 1), rel=1e-12)
    pooled, p_pooled = logrank(ta, ea, tb, eb)
    # pooled: χ² 8.86, p 0.003, the warm starts' difference taken for the arms'; stratified: χ² 0.07, p 0.79
    assert pooled == pytest.approx(8.856, abs=1e-3) and p_pooled < 0.01 and chi2 == pytest.approx(0.0724, abs=1e-4)


def test_tost_power_matches_a_simulation_and_sizes_the_units():
    from rbctl.report.power import power_tost, units_for_tost

    rng = np.random.default_rng(0)
    for n, sd, margin in ((12, 7.0, 5.0), (8, 3.0, 5.0)):
        d = rng.normal(0.0, sd, (20_000, n))  # true Δ = 0
        se = d.std(axis=1, ddof=1) / math.sqrt(n)
        crit = sps.t.ppf(0.95, n - 1)
        simulated = np.mean(((d.mean(axis=1) + margin) / se > crit) & ((d.mean(axis=1) - margin) / se < -crit))
        assert power_tost(margin, sd, n, 0.05) == pytest.approx(simulated, abs=0.01)
    # 12 (warm start, seed) units at the planning SD 7 call a true 0 equivalent within ±5 only half the time,
    # and in a family of 4 (α/4) one time in seven (a simulation of 40,000: 0.503 and 0.139)
    assert power_tost(5.0, 7.0, 12, 0.05) == pytest.approx(0.504, abs=0.002)
    assert power_tost(5.0, 7.0, 12, 0.0125) == pytest.approx(0.140, abs=0.002)
    n = units_for_tost(7.0, 5.0, m=4)  # a family of 4 at α/4
    assert power_tost(5.0, 7.0, n, 0.05 / 4) >= 0.8 > power_tost(5.0, 7.0, n - 1, 0.05 / 4) and n == 27
    assert math.isnan(power_tost(5.0, 7.0, 12, 0.05, delta=6.0))  # a true Δ outside the margin: no power to speak of
