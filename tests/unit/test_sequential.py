"""Group-sequential boundaries (rbctl.report.sequential) against published values and an independent
computation (scipy's multivariate normal)."""

import math

import numpy as np
import pytest
from scipy import stats as sps

from rbctl.report.sequential import (NEVER, crossing_probabilities, efficacy_bounds, futility_bounds, obrien_fleming,
                                     pocock, t_bound)

QUARTERS = [0.25, 0.5, 0.75, 1.0]
FIFTHS = [0.2, 0.4, 0.6, 0.8, 1.0]


def test_spending_functions_by_hand():
    # sfLDOF: 2 − 2Φ(z_{0.9875}/√0.5) = 2 − 2Φ(2.2414/0.70711 = 3.1698) = 0.0015253
    assert obrien_fleming(0.5, 0.025) == pytest.approx(2 * sps.norm.sf(2.2414027 / math.sqrt(0.5)), rel=1e-5)
    assert float(obrien_fleming(0.5, 0.025)) == pytest.approx(0.0015253, abs=1e-7)
    # sfLDPocock: 0.025 · ln(1 + (e − 1)/2) = 0.025 · ln(1.85914) = 0.025 · 0.62011 = 0.015503
    assert float(pocock(0.5, 0.025)) == pytest.approx(0.015503, abs=1e-6)
    for f in (obrien_fleming, pocock):
        assert float(f(0.0, 0.025)) == 0.0 and float(f(1.0, 0.025)) == pytest.approx(0.025, rel=1e-12)


def test_obrien_fleming_type_matches_gsdesign_sfldof():
    # gsDesign(k = 4, test.type = 2, sfu = sfLDOF, alpha = 0.025)$upper$bound: 4.333, 2.963, 2.359, 2.014
    assert efficacy_bounds(QUARTERS, 0.025, "obrien_fleming") == pytest.approx([4.333, 2.963, 2.359, 2.014], abs=0.005)


def test_five_looks_match_demets_and_lan_1994():
    # DeMets and Lan 1994, "Interim analysis: the alpha spending function approach" (Statistics in
    # Medicine 13:1341-1352): boundaries for five equally spaced analyses, two-sided α = 0.05
    assert efficacy_bounds(FIFTHS, 0.025, "obrien_fleming") == pytest.approx(
        [4.877, 3.357, 2.680, 2.290, 2.031], abs=0.005)
    assert efficacy_bounds(FIFTHS, 0.025, "pocock") == pytest.approx([2.438, 2.427, 2.410, 2.397, 2.386], abs=0.005)


@pytest.mark.parametrize("looks,expected", [(2, 0.083), (4, 0.126), (10, 0.193), (20, 0.248)])
def test_repeated_tests_at_nominal_level_match_armitage_1969(looks, expected):
    # Armitage, McPherson and Rowe 1969: two-sided tests at 1.96 after each of K equal groups reject a
    # true null with probability 0.083 (K = 2), 0.126 (4), 0.193 (10), 0.248 (20); gsDesign's own test
    # (test.Deming.gsProb) checks the one-sided halves 0.042, 0.063, 0.097, 0.124
    fr = np.arange(1, looks + 1) / looks
    c = [sps.norm.isf(0.025)] * looks
    p = crossing_probabilities(fr, c, [-x for x in c], 0.0)
    assert p["upper"].sum() + p["lower"].sum() == pytest.approx(expected, abs=0.0006)


def _mvn_continue(fractions, lo, hi):
    """P(lo_k < Z_k < hi_k at every look), Z with cov √(t_j/t_k): scipy's multivariate normal CDF."""
    t = np.asarray(fractions)
    cov = np.sqrt(np.minimum.outer(t, t) / np.maximum.outer(t, t))
    mvn = sps.multivariate_normal(mean=np.zeros(len(t)), cov=cov, abseps=1e-6, releps=1e-5)
    return float(mvn.cdf(np.asarray(hi), lower_limit=np.asarray(lo)))


@pytest.mark.parametrize("spending", ["obrien_fleming", "pocock"])
@pytest.mark.parametrize("fractions", [QUARTERS, [6 / 24, 12 / 24, 18 / 24, 1.0], [0.3, 0.55, 1.0]])
def test_boundaries_spend_alpha_by_an_independent_integration(spending, fractions):
    alpha = 0.05 / 3 / 2  # the main job's level per side: α/m, m = 3
    c = np.array(efficacy_bounds(fractions, alpha, spending))
    spent = (obrien_fleming if spending == "obrien_fleming" else pocock)(fractions, alpha)
    for k in range(1, len(fractions) + 1):  # P(stopped by look k) = 2 × the α spent by then, look by look
        stopped = 1 - _mvn_continue(fractions[:k], -c[:k], c[:k])
        assert stopped == pytest.approx(2 * spent[k - 1], rel=2e-3, abs=1e-7), k
    one = np.array(efficacy_bounds(fractions, alpha, spending, two_sided=False))
    assert 1 - _mvn_continue(fractions, np.full(len(one), -40.0), one) == pytest.approx(alpha, rel=2e-3)


def test_crossing_probabilities_return_the_spending_look_by_look():
    c = efficacy_bounds(QUARTERS, 0.025, "pocock")
    p = crossing_probabilities(QUARTERS, c, [-x for x in c], 0.0)
    assert np.cumsum(p["upper"]) == pytest.approx(pocock(QUARTERS, 0.025), abs=1e-8)
    assert p["lower"] == pytest.approx(p["upper"], abs=1e-10)


def test_a_look_that_spends_nothing_has_no_boundary():
    # O'Brien–Fleming at t = 0.01 spends 2 − 2Φ(2.2414/0.1) ≈ 1e-111: no path can cross there
    c = efficacy_bounds([0.01, 1.0], 0.025, "obrien_fleming")
    assert c[0] == NEVER and c[1] == pytest.approx(sps.norm.isf(0.025), abs=1e-6)


def test_a_design_ending_early_spends_all_alpha_at_its_last_look():
    c = efficacy_bounds([0.5, 0.9], 0.025, "obrien_fleming")
    p = crossing_probabilities([0.5, 0.9], c, [-x for x in c], 0.0)
    assert p["upper"].sum() == pytest.approx(0.025, abs=1e-8)
    assert efficacy_bounds([0.5, 0.9], 0.025, "obrien_fleming", final=False)[1] > c[1]


def test_futility_is_non_binding_and_spends_beta_under_the_alternative():
    theta = 5 / 7 * math.sqrt(24)  # the main job's MDE / planning SD at 24 units
    alpha = 0.05 / 3 / 2
    fr = [6 / 24, 12 / 24, 18 / 24, 1.0]
    c = efficacy_bounds(fr, alpha, "obrien_fleming")
    a = futility_bounds(fr, alpha, "obrien_fleming", theta)
    assert all(0 <= x < y for x, y in zip(a[:-1], c[:-1])) and a[-1] == 0
    # non-binding: obeying the futility stops can only lower the type I error below 2α
    p0 = crossing_probabilities(fr, c, [-x for x in c], 0.0, inner=a)
    assert p0["upper"].sum() + p0["lower"].sum() < 2 * alpha
    # under θ the futility stops spend β = 1 − power by the O'Brien–Fleming shape, look by look
    power = crossing_probabilities(fr, c, [-x for x in c], theta)
    beta = 1 - power["upper"].sum() - power["lower"].sum()
    p1 = crossing_probabilities(fr, c, [-x for x in c], theta, inner=a)
    assert np.cumsum(p1["inner"][:-1]) == pytest.approx(obrien_fleming(fr[:-1], beta), abs=1e-7)


def test_t_bound_keeps_the_nominal_level():
    assert t_bound(sps.norm.isf(0.025), 6) == pytest.approx(sps.t.isf(0.025, 5))  # 2.5706
    assert t_bound(sps.norm.isf(0.025), 6) == pytest.approx(2.5706, abs=1e-4)
    assert t_bound(2.0, 100_000) == pytest.approx(2.0, abs=1e-3)
    assert t_bound(NEVER, 6) == NEVER and t_bound(0.0, 6) == 0.0


def test_bad_fractions_and_spending_are_refused():
    with pytest.raises(ValueError, match="increase"):
        efficacy_bounds([0.5, 0.5, 1.0], 0.025, "pocock")
    with pytest.raises(ValueError, match="spending"):
        efficacy_bounds([0.5, 1.0], 0.025, "linear")
