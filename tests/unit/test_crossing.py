"""The crossing step of two arms' mean curves (rbctl.report.analyses.crossing), on hand-worked curves."""

from __future__ import annotations

import math

import pytest

from rbctl.report.analyses.crossing import crossing_step, first_step_staying_above

STEPS = [0, 100, 200, 300]


def test_first_step_staying_above() -> None:
    assert first_step_staying_above(STEPS, [0, -3, 1, 3]) == 200
    assert first_step_staying_above(STEPS, [0, 1, -1, 2]) == 300   # above at 100, back below at 200
    assert first_step_staying_above(STEPS, [1, 1, 1, 1]) == 0      # above from the first evaluation
    assert first_step_staying_above(STEPS, [0, 1, 2, 0]) == math.inf  # a tie at the end is not above
    assert first_step_staying_above(STEPS, [0, 1, 2, -1]) == math.inf


def test_paired_curves_that_agree_cross_at_one_step() -> None:
    # arm seed 0: 10, 8, 12, 15 − ref 10, 11, 11, 12 = 0, −3, +1, +3; seed 1: 10, 9, 13, 14 − 10, 12, 12, 11 = the same.
    # mean curves 10, 8.5, 12.5, 14.5 vs 10, 11.5, 11.5, 11.5: above from step 200; every resample too.
    c = crossing_step(STEPS, [[10, 8, 12, 15], [10, 9, 13, 14]], [[10, 11, 11, 12], [10, 12, 12, 11]])
    assert (c.step, c.lo, c.hi, c.crossed, c.units, c.resamples, c.exact) == (200, 200, 200, 1.0, 2, 4, True)


def test_the_interval_is_the_exact_bootstrap_over_units() -> None:
    # Δ seed 0: 0, −3, +1, +3; seed 1: 0, +1, −1, +3. Mean Δ: 0, −1, 0, +3 -> crossing 300 (0 at 200 is no lead).
    # The 2^2 = 4 resamples of the units: (0, 0) -> seed 0's curve, crossing 200; (0, 1) and (1, 0) -> the mean,
    # 300; (1, 1) -> seed 1's, 300. So 200 with probability 1/4, 300 with 3/4: the 2.5% point is 200, the 97.5% 300.
    zero = [[0] * 4, [0] * 4]
    c = crossing_step(STEPS, [[0, -3, 1, 3], [0, 1, -1, 3]], zero)
    assert (c.step, c.lo, c.hi, c.crossed, c.resamples) == (300, 200, 300, 1.0, 4)
    # at level 0.4 the interval is the 30% and 70% points: both 300 (F(200) = 1/4 < 0.3)
    c = crossing_step(STEPS, [[0, -3, 1, 3], [0, 1, -1, 3]], zero, level=0.4)
    assert (c.lo, c.hi) == (300, 300)


def test_a_resample_that_never_crosses_is_inf() -> None:
    # Δ seed 0: 0, +2, +2, +2; seed 1: 0, −1, −1, −1. Mean 0, +.5, +.5, +.5 -> 100. Resamples: (0, 0), (0, 1),
    # (1, 0) -> 100; (1, 1) -> never above: inf. 3 of 4 cross; the upper end (F(100) = 3/4 < 0.975) is inf.
    c = crossing_step(STEPS, [[0, 2, 2, 2], [0, -1, -1, -1]], [[0] * 4, [0] * 4])
    assert (c.step, c.lo, c.hi, c.crossed) == (100, 100, math.inf, 0.75)


def test_many_units_draw_resamples_from_a_seeded_generator() -> None:
    # 7 units: 7^7 = 823,543 resamples > EXACT_LIMIT, so n_boot draws; identical units give one answer
    arm = [[0, -1, 1, 1]] * 7
    c = crossing_step(STEPS, arm, [[0] * 4] * 7, n_boot=500)
    assert (c.step, c.lo, c.hi, c.crossed, c.resamples, c.exact) == (200, 200, 200, 1.0, 500, False)


def test_bad_curves_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 2 units"):
        crossing_step(STEPS, [[0, 1, 1, 1]], [[0, 0, 0, 0]])
    with pytest.raises(ValueError, match="must both be"):
        crossing_step(STEPS, [[0, 1, 1], [0, 1, 1]], [[0, 0, 0], [0, 0, 0]])
    with pytest.raises(ValueError, match="ascending"):
        crossing_step([0, 200, 100, 300], [[0, 1, 1, 1]] * 2, [[0] * 4] * 2)
    with pytest.raises(ValueError, match="finite"):
        crossing_step(STEPS, [[0, 1, float("nan"), 1]] * 2, [[0] * 4] * 2)
