"""The four calls of a declared family (rbctl.report.analyses.comparisons; docs/method.md, "Comparing
arms"): higher, lower, equivalent within ±δ (TOST, Holm-adjusted), inconclusive with its direction and
detectable effect; and the sweep file's declared families (rbctl.config.sweep)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pydantic import ValidationError
from scipy import stats as sps
from statsmodels.stats.weightstats import ttost_paired

from rbctl.config.sweep import Comparisons, SweepConfig
from rbctl.report.analyses.comparisons import (EQUIVALENT, HIGHER, INCONCLUSIVE, LOWER, Comparison, apply_family,
                                               call, call_text, verdicts)
from rbctl.report.power import mde_paired
from rbctl.report.stats import paired_delta, tost_paired


def _comp(arm: list[float], ref: list[float], name: str = "x") -> Comparison:
    d = paired_delta(dict(enumerate(arm)), dict(enumerate(ref)))
    return Comparison("principal", "declared", "grpo", name, "grpo", "builtin", "avg@n", 8,
                      float(np.mean(arm)), float(np.mean(ref)), d)


REF = [0.50, 0.60, 0.70, 0.55, 0.65, 0.58]
# Δ per unit of each member (fractions), chosen so that each call comes out at α = 0.05, margin 0.05:
UP = [0.10, 0.12, 0.11, 0.09, 0.13, 0.10]       # mean +0.108, sd 0.015: t 17.7 -> higher
DOWN = [-0.08, -0.10, -0.09, -0.07, -0.11, -0.09]  # mean −0.090, sd 0.014 -> lower
FLAT = [0.004, -0.006, 0.002, -0.003, 0.005, -0.001]  # mean 0.0002, sd 0.0043: within ±0.05 by far -> equivalent
NOISY = [0.20, -0.25, 0.15, -0.10, 0.30, -0.22]  # mean +0.013, sd 0.23 -> inconclusive


def _family(margin: float | None) -> list[Comparison]:
    members = [_comp([r + d for r, d in zip(REF, dl)], REF, name) for dl, name in
               ((UP, "up"), (DOWN, "down"), (FLAT, "flat"), (NOISY, "noisy"))]
    return apply_family(members, 0.05, margin)


def test_tost_matches_statsmodels_ttost_paired():
    rng = np.random.default_rng(3)
    for n, shift, margin in ((3, 0.01, 0.05), (6, -0.02, 0.05), (12, 0.0, 0.03), (24, 0.04, 0.05)):
        ref = rng.uniform(0.3, 0.8, n)
        arm = ref + shift + rng.normal(0, 0.02, n)
        d = paired_delta(dict(enumerate(arm)), dict(enumerate(ref)))
        expected = ttost_paired(arm, ref, -margin, margin)[0]
        assert tost_paired(d, margin) == pytest.approx(expected, abs=1e-10)


def test_tost_hand_worked():
    # Δ = (0.01, 0.03, 0.02): mean 0.02, sd 0.01, se 0.01/√3 = 0.005774, df 2; margin 0.05:
    # t_low = (0.02 + 0.05)/se = 12.124 -> p_low = P(T2 > 12.124); t_up = (0.02 − 0.05)/se = −5.196 ->
    # p_up = P(T2 < −5.196) = 0.01755 (the larger): TOST p = 0.01755.
    d = paired_delta({0: 0.51, 1: 0.53, 2: 0.52}, {0: 0.50, 1: 0.50, 2: 0.50})
    se = 0.01 / math.sqrt(3)
    assert tost_paired(d, 0.05) == pytest.approx(sps.t.cdf(-0.03 / se, 2), abs=1e-12)
    assert tost_paired(d, 0.05) == pytest.approx(0.017549, abs=1e-6)
    assert math.isnan(tost_paired(d, 0.0))  # no margin, no test
    assert math.isnan(tost_paired(paired_delta({0: 0.5, 1: 0.6}, {0: 0.4, 1: 0.5}), 0.05))  # not testable


def test_each_of_the_four_calls_comes_out_of_one_family():
    up, down, flat, noisy = _family(0.05)
    assert [call(c) for c in (up, down, flat, noisy)] == [HIGHER, LOWER, EQUIVALENT, INCONCLUSIVE]
    assert call_text(flat) == "equivalent within ±5"
    # Holm over the 4 TOST p-values alike: flat's is the smallest, times 4
    tost = [tost_paired(c.delta, 0.05) for c in (up, down, flat, noisy)]
    assert flat.p_tost_holm == pytest.approx(min(1.0, 4 * min(tost)), rel=1e-12)
    assert up.p_holm <= 0.05 and down.p_holm <= 0.05 and noisy.p_holm > 0.05 and noisy.p_tost_holm > 0.05


def test_a_family_without_a_margin_never_calls_equivalent():
    up, down, flat, noisy = _family(None)
    assert [call(c) for c in (up, down, flat, noisy)] == [HIGHER, LOWER, INCONCLUSIVE, INCONCLUSIVE]
    assert all(math.isnan(c.margin) and math.isnan(c.p_tost) for c in (up, down, flat, noisy))
    assert verdicts([flat.delta]) == [INCONCLUSIVE] and verdicts([flat.delta], margin=0.05) == [EQUIVALENT]


def test_an_inconclusive_row_prints_its_direction_and_detectable_effect():
    *_, noisy = _family(None)
    # detectable: the |Δ| the t-test at α/m = 0.05/4 detects with power 0.8, 6 units, measured sd(Δ)
    det = mde_paired(float(np.std(NOISY, ddof=1)), 6, 0.05 / 4, 0.8)
    assert noisy.detectable == pytest.approx(det, rel=1e-9)
    assert det > 0.3  # 6 noisy units can see only very large effects
    assert call_text(noisy) == f"inconclusive (Δ > 0; detectable ≥ {100 * det:.1f} points)"
    neg = apply_family([_comp([r - d for r, d in zip(REF, NOISY)], REF)], 0.05)[0]
    assert call_text(neg).startswith("inconclusive (Δ < 0; detectable ≥ ")


def test_significant_and_within_the_margin_is_called_by_its_direction():
    small = [0.010, 0.012, 0.011, 0.009, 0.013, 0.010]  # +1.1 points, tight: different from 0 and within ±5
    c = apply_family([_comp([r + d for r, d in zip(REF, small)], REF)], 0.05, 0.05)[0]
    assert c.significant and c.equivalent and call(c) == HIGHER
    assert call_text(c) == "higher (within ±5)"


def _sweep(**comparisons) -> dict:
    return {"base": "fixpoint.yaml", "arms": {"a": {}, "b": {"algo.budget": 1.0}, "c": {"algo.entropy.mode": "static"}},
            "comparisons": {"principal": [["b", "a"]], "mde": 5.0, "planning_sd": 7.0, **comparisons}}


def test_families_are_declared_in_data_with_the_principal_values_as_defaults():
    cfg = SweepConfig.model_validate(_sweep(margin=5.0, families={"entropy": {"pairs": [["c", "b"]], "alpha": 0.1}}))
    principal, entropy = cfg.comparisons.families_declared()
    assert (principal.name, principal.pairs, principal.margin) == ("principal", (("b", "a"),), 5.0)
    assert (entropy.name, entropy.pairs, entropy.alpha, entropy.metric) == ("entropy", (("c", "b"),), 0.1, "avg@n")
    assert entropy.margin is None  # a margin is stated per family, never inherited
    assert entropy.mde == 5.0 and entropy.planning_sd == 7.0 and entropy.power == 0.8


@pytest.mark.parametrize("families, message", [
    ({"x": {"pairs": [["b", "a"]]}}, "comparisons.families.x.pairs.0': [b, a] on avg@n is already in family 'principal'"),
    ({"x": {"pairs": [["z", "a"]]}}, "comparisons.families.x.pairs.0': unknown arm 'z'"),
    ({"principal": {"pairs": [["c", "a"]]}}, "family name 'principal' is reserved"),
    ({"x": {"pairs": [["c", "a"]], "metric": "pass@99"}}, "comparisons.families.x.metric': pass@99 needs k <= eval.n"),
])
def test_a_comparison_belongs_to_one_family_and_families_name_real_arms(families, message):
    with pytest.raises(ValidationError, match=message.replace("[", r"\[").replace("]", r"\]")):
        SweepConfig.model_validate(_sweep(families=families))


def test_the_same_pair_on_another_metric_is_another_comparison():
    cfg = SweepConfig.model_validate(_sweep(families={"pass": {"pairs": [["b", "a"]], "metric": "pass@8"}}))
    assert [f.metric for f in cfg.comparisons.families_declared()] == ["avg@n", "pass@8"]
    assert Comparisons.model_validate({"principal": [["b", "a"]], "mde": 1, "planning_sd": 1}).margin is None


def test_a_document_prints_beside_each_call_the_p_that_decided_it():
    """studies/reward_budgeting/docs/maze_results.md's principal tables: TOST's Holm p beside "equivalent", the superiority Holm p
    beside the other calls, "not testable" where no test ran."""
    from studies.reward_budgeting.documents.maze_results import _deciding
    up, down, flat, noisy = _family(0.05)
    assert call(flat) == EQUIVALENT and _deciding(flat).startswith("TOST Holm p ")
    assert _deciding(flat) != f"Holm p {flat.p_holm:.3f}"
    assert _deciding(up) == "Holm p < 0.001" and _deciding(down) == "Holm p < 0.001"
    assert call(noisy) == INCONCLUSIVE and _deciding(noisy).startswith("Holm p ")
    two = _comp([0.6, 0.7], [0.5, 0.6])
    assert _deciding(two) == "not testable"
