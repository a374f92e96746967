"""Operating characteristics of the sequential designs by simulation (rbctl.report.sequential_sim), at
the shipped designs' shape: 3 comparisons (the main job's triangle), looks at 6/12/18/24 units,
α = 0.05, MDE 5 points at a planning SD of 7 (power 0.8 at 24 units by the fixed design's rule,
`units_for_power(7, 5, m=3)`), paired t statistics over units. Fixed seeds, 4000 trials each."""

import math
import re

import numpy as np
import pytest
from scipy import stats as sps

from rbctl.config.sweep import FamilySpec
from rbctl.report.power import units_for_power
from rbctl.report.sequential import efficacy_bounds, t_bound
from rbctl.report.sequential_looks import EQUIVALENT, HIGHER, LOWER, Design, interim_note, keys
from rbctl.report.sequential_sim import CODES, Simulated, decide_trials, design_lines, simulate

TRIANGLE = (("grpo_budget", "grpo"), ("grpo_entropy", "grpo_budget"), ("grpo_entropy", "grpo"))
LOOKS = (6, 12, 18, 24)
ALPHA, MDE, SD, POWER = 0.05, 5.0, 7.0, 0.8
TRIALS = 4000
DESIGNS = [Design(LOOKS, s, f) for s in ("obrien_fleming", "pocock") for f in (False, True)]
EARLY = Design(LOOKS, "pocock", False)  # decides earliest where every comparison has the effect


def family(margin=None):
    return FamilySpec("principal", TRIANGLE, "avg@n", None, ALPHA, margin, MDE, SD, POWER)


def run(design, fam, effect, seed):
    ks = keys([fam])
    effects = effect if isinstance(effect, dict) else {k: effect for k in ks}
    return simulate(design, [fam], effects, {k: SD for k in ks}, trials=TRIALS, seed=seed)


def test_the_fixed_design_has_the_stated_power_at_24_units():
    assert units_for_power(SD, MDE, m=3, power=POWER, alpha=ALPHA) == 24


@pytest.mark.parametrize("design", DESIGNS, ids=lambda d: f"{d.spending}-futility{d.futility}")
@pytest.mark.parametrize("margin", [None, 5.0])
def test_no_more_false_differences_than_alpha_at_delta_zero(design, margin):
    sim = run(design, family(margin), 0.0, seed=11)
    assert sim.share(HIGHER, LOWER) <= ALPHA + 0.01


@pytest.mark.parametrize("design", DESIGNS, ids=lambda d: f"{d.spending}-futility{d.futility}")
def test_a_rejection_passes_on_alpha_without_false_differences_in_the_rest(design):
    # Holm's graph: once the real effect is rejected the two true nulls are tested at α/2, then α
    fam = family()
    sim = run(design, fam, dict(zip(keys([fam]), (2 * MDE, 0.0, 0.0))), seed=17)
    assert sim.rate(0, HIGHER) > 0.95 and sim.share(HIGHER, LOWER, comparisons=[1, 2]) <= ALPHA + 0.01


def _triangle_from_arms(means: dict, seed: int) -> np.ndarray:
    """Δ[trial, comparison, unit] of the main job's three comparisons computed from arm-level runs that
    share each unit's seed effect (so the comparisons are correlated, as in a real sweep): each run
    unit effect + arm mean + noise of SD 7/√2, so that sd(Δ) = 7."""
    rng = np.random.default_rng(seed)
    unit = rng.normal(0.0, 5.0, size=(TRIALS, 1, LOOKS[-1]))
    runs = {a: unit[:, 0] + means[a] + rng.normal(0.0, SD / math.sqrt(2), size=(TRIALS, LOOKS[-1])) for a in means}
    return np.stack([runs[a] - runs[r] for a, r in TRIANGLE], axis=1)


@pytest.mark.parametrize("design", DESIGNS, ids=lambda d: f"{d.spending}-futility{d.futility}")
def test_alpha_holds_for_the_correlated_comparisons_of_one_sweep(design):
    equal = decide_trials(design, family(), _triangle_from_arms({"grpo": 0, "grpo_budget": 0, "grpo_entropy": 0}, 18))[0]
    assert np.isin(equal, [CODES.index(HIGHER), CODES.index(LOWER)]).any(axis=1).mean() <= ALPHA + 0.01
    # budget 10 above the other two: entropy − grpo (the third) is a true null among two real effects
    partial = decide_trials(design, family(), _triangle_from_arms({"grpo": 0, "grpo_budget": 10, "grpo_entropy": 0}, 19))[0]
    assert np.isin(partial[:, 2], [CODES.index(HIGHER), CODES.index(LOWER)]).mean() <= ALPHA + 0.01


@pytest.mark.parametrize("design", DESIGNS, ids=lambda d: f"{d.spending}-futility{d.futility}")
@pytest.mark.parametrize("signs", [(1, 1, 1), (1, -1, 1)])
def test_no_more_false_equivalences_than_alpha_at_the_margin(design, signs):
    fam = family(margin=5.0)
    sim = run(design, fam, {k: 5.0 * s for k, s in zip(keys([fam]), signs)}, seed=12)
    assert sim.share(EQUIVALENT) <= ALPHA + 0.01


def test_pocock_keeps_the_power_and_saves_units_when_every_comparison_has_the_planned_effect():
    sim = run(EARLY, family(), MDE, seed=13)
    powers = [sim.rate(c, HIGHER) for c in range(3)]
    assert min(powers) >= POWER - 0.03, powers
    assert sim.units.mean() <= 0.8 * LOOKS[-1], sim.units.mean()
    # O'Brien–Fleming keeps more power but decides later: its mean units are above 80% of the design's
    obf = run(Design(LOOKS, "obrien_fleming"), family(), MDE, seed=13)
    assert min(obf.rate(c, HIGHER) for c in range(3)) > max(powers) and obf.units.mean() > 0.8 * LOOKS[-1]


@pytest.mark.parametrize("futility", [False, True])
def test_obrien_fleming_keeps_the_stated_power_for_a_single_effect_and_pocock_does_not(futility):
    # the stated power is the fixed design's at α/m: one comparison with the effect, the others none
    fam = family()
    one = dict(zip(keys([fam]), (MDE, 0.0, 0.0)))
    assert run(Design(LOOKS, "obrien_fleming", futility), fam, one, seed=20).rate(0, HIGHER) >= POWER - 0.03
    assert run(Design(LOOKS, "pocock", futility), fam, one, seed=20).rate(0, HIGHER) < POWER - 0.05


def test_futility_saves_units_when_there_is_no_effect():
    off = run(Design(LOOKS, "obrien_fleming"), family(), 0.0, seed=14)
    on = run(Design(LOOKS, "obrien_fleming", True), family(), 0.0, seed=14)
    assert off.units.mean() > 0.95 * LOOKS[-1] and on.units.mean() < 0.75 * LOOKS[-1]


def _full_alpha_holm_after_every_unit(delta: np.ndarray, first: int = 3, labels: bool = False) -> np.ndarray:
    """Trials in which a reader who reads the report after every unit and stops at its first call sees
    a 'higher' or 'lower': today's report (Holm over the 3 paired t-tests at full α whatever the units),
    or, with ``labels``, the report that prints `interim_note` instead of a call before the design's units."""
    trials, m, units = delta.shape
    called = np.zeros(trials, dtype=bool)
    for n in range(first, units + 1):
        if labels and interim_note(n, units) is not None:
            continue
        x = delta[:, :, :n]
        t = x.mean(axis=2) / (x.std(axis=2, ddof=1) / math.sqrt(n))
        p = np.sort(2 * sps.t.sf(np.abs(t), n - 1), axis=1)
        holm = np.maximum.accumulate(p * (m - np.arange(m)), axis=1)  # Holm's step-down adjusted p
        called |= holm[:, 0] <= ALPHA
    return called


def test_reading_full_alpha_calls_after_every_unit_inflates_and_the_labels_prevent_it():
    rng = np.random.default_rng(15)
    delta = rng.normal(0.0, SD, size=(TRIALS, 3, LOOKS[-1]))
    peeking = _full_alpha_holm_after_every_unit(delta).mean()
    labelled = _full_alpha_holm_after_every_unit(delta, labels=True).mean()
    sequential = run(EARLY, family(), 0.0, seed=15).share(HIGHER, LOWER)
    assert peeking > 3 * ALPHA, peeking  # Armitage et al. 1969: repeated looks at full α
    assert labelled <= ALPHA + 0.01 and sequential <= ALPHA + 0.01


def test_t_boundaries_at_the_nominal_level_hold_alpha_at_few_units_and_z_boundaries_do_not():
    # one comparison, Pocock-type at two-sided 0.05, looks at 3/6/9/12 units: the z-boundary (2.36)
    # applied to a t statistic on 2 df rejects a true null far more often than α
    looks = (3, 6, 9, 12)
    z = efficacy_bounds([n / 12 for n in looks], 0.025, "pocock")
    rng = np.random.default_rng(16)
    x = rng.normal(0.0, 1.0, size=(TRIALS * 5, 12))
    crossed_t, crossed_z = np.zeros(len(x), dtype=bool), np.zeros(len(x), dtype=bool)
    for n, c in zip(looks, z):
        t = x[:, :n].mean(axis=1) / (x[:, :n].std(axis=1, ddof=1) / math.sqrt(n))
        crossed_t |= np.abs(t) >= t_bound(c, n)
        crossed_z |= np.abs(t) >= c
    assert crossed_t.mean() <= 0.05 + 0.01 and crossed_z.mean() > 0.1


def test_runs_count_each_arm_to_its_last_comparison():
    sim = Simulated((("f", "a", "b"), ("f", "c", "b")), np.zeros((2, 2), dtype=int),
                    np.array([[6, 12], [24, 6]]))
    # d is in no comparison: it runs with the sweep, to its last decision (12 in trial 1, 24 in trial 2)
    # trial 1: a 6, b max(6, 12) = 12, c 12, d 12 -> 42; trial 2: 24 + 24 + 6 + 24 = 78
    assert list(sim.runs(["a", "b", "c", "d"], 24)) == [42, 78]
    assert list(Simulated((), np.zeros((2, 0), dtype=int), np.zeros((2, 0), dtype=int)).runs(["a"], 24)) == [24, 24]


def test_design_lines_print_boundaries_and_expected_runs():
    lines = design_lines(EARLY, [family(margin=5.0)], ["grpo", "grpo_budget", "grpo_entropy"], trials=500)
    text = "\n".join(lines)
    assert "looks at 6, 12, 18, 24 units; Pocock-type" in text
    assert "fixed design 72 (24 units × 3 arms)" in text
    assert len(re.findall(r"\d+\.\d runs \(\d+%\)", text)) == 2 and "TOST at α/3" in text
    b = t_bound(efficacy_bounds([0.25], 0.05 / 6, "pocock", final=False)[0], 6)
    assert f"{b:.2f}" in lines[3]  # look 1's boundary at α/3 on the paired |t|
