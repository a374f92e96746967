"""The trend of a paired Δ over a setting (rbctl.report.analyses.trend), on hand-worked slopes."""

from __future__ import annotations

import math

import pytest

from rbctl.report.analyses.trend import trend, unit_slope

X = [3, 5, 7]  # log2 G for G = 8, 32, 128


def test_unit_slope() -> None:
    # x̄ = 5, Σ(x − x̄)² = 4 + 0 + 4 = 8
    assert unit_slope(X, [-4, -2, 0]) == 1.0   # (−2)(−2) + 0 + 2·2 = 8 -> 8/8
    assert unit_slope(X, [-6, -4, -4]) == 0.5  # Δ̄ = −14/3: (−2)(−4/3) + 0 + 2·(2/3) = 4 -> 4/8
    assert unit_slope(X, [-2, -1, 1]) == 0.75  # Δ̄ = −2/3: (−2)(−4/3) + 0 + 2·(5/3) = 6 -> 6/8


def test_a_growing_gap_is_called_positive() -> None:
    # slopes 1, .5, .75: mean .75, sd .25, t = .75/(.25/√3) = 3√3 on 2 df. For 2 df the t distribution's
    # two-sided p is 1 − t/√(t² + 2) = 1 − √(27/29) = 0.0351; t-interval .75 ± t(.975, 2)·.25/√3 = ± 4.303·.1443.
    t = trend(X, {0: [-4, -2, 0], 1: [-6, -4, -4], 2: [-2, -1, 1]})
    assert t.slopes == {0: 1.0, 1: 0.5, 2: 0.75}
    assert t.test.mean == pytest.approx(0.75)
    assert t.test.sd == pytest.approx(0.25)
    assert t.test.p == pytest.approx(1 - math.sqrt(27 / 29))
    assert (t.test.lo, t.test.hi) == pytest.approx((0.75 - 4.302653 * 0.25 / math.sqrt(3),
                                                    0.75 + 4.302653 * 0.25 / math.sqrt(3)))
    assert t.call == "positive"
    # the same slopes at α = 0.01: not rejected, so no trend is called either way
    assert trend(X, {0: [-4, -2, 0], 1: [-6, -4, -4], 2: [-2, -1, 1]}, alpha=0.01).call == "inconclusive"


def test_a_shrinking_gap_is_negative_and_a_mixed_one_inconclusive() -> None:
    assert trend(X, {0: [0, -2, -4], 1: [-4, -4, -6], 2: [1, -1, -2]}).call == "negative"  # slopes −1, −.5, −.75
    mixed = trend(X, {0: [-4, -2, 0], 1: [0, -2, -4], 2: [-1, -1, -1]})  # slopes 1, −1, 0: mean 0
    assert (mixed.test.mean, mixed.call) == (0.0, "inconclusive")


def test_two_units_are_not_testable_and_bad_input_is_refused() -> None:
    t = trend(X, {0: [-4, -2, 0], 1: [-6, -4, -4]})
    assert (t.call, t.test.testable) == ("inconclusive", False)
    with pytest.raises(ValueError, match="two distinct x"):
        trend([5, 5, 5], {0: [1, 2, 3]})
    with pytest.raises(ValueError, match="unit 1: 2 Δ values for 3 levels"):
        trend(X, {0: [1, 2, 3], 1: [1, 2]})
