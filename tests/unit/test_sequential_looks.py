"""Interim calls of a sequential design (rbctl.report.sequential_looks): hand-worked looks, the
graphical Holm step, look records that a resume reads back, the next look's units, and the
vectorised simulator deciding as `decide_look` does."""

import json
import math

import numpy as np
import pytest
from scipy import stats as sps

from rbctl.config.sweep import FamilySpec
from rbctl.report.sequential import efficacy_bounds, t_bound
from rbctl.report.sequential_looks import (CONTINUE, EQUIVALENT, FUTILE, HIGHER, INCONCLUSIVE, LOWER, Design,
                                           LookRecord, arm_units, bounds_at, decide_look, interim_note, needed_arms, next_units,
                                           status, unit_order)
from rbctl.report.sequential_sim import CODES, decide_trials

TRIANGLE = (("budget", "grpo"), ("entropy", "budget"), ("entropy", "grpo"))


def family(margin=None, pairs=TRIANGLE, name="principal", alpha=0.05):
    return FamilySpec(name, pairs, "avg@n", None, alpha, margin, 5.0, 7.0, 0.8)


def key(pair, name="principal"):
    return (name, *pair)


def with_t(n: int, mean: float, t: float) -> list[float]:
    """n values with mean ``mean`` whose one-sample t statistic is exactly ``t``: mean ± s·(±1)."""
    sd = mean * math.sqrt(n) / t
    base = np.array([1.0, -1.0] * (n // 2) + ([0.0] if n % 2 else []))
    base = base / base.std(ddof=1)
    return list(mean + sd * base)


def test_a_look_by_hand():
    # look 2 of 6/12/18/24, O'Brien–Fleming: at α/3 (two-sided, each side 0.05/6) the z-boundary at
    # t = 1/2 is 3.5527 (rbctl.report.sequential), as a t-boundary on 11 df: t_{11}^{-1}(Φ(3.5527)) = 5.034
    d, fam = Design((6, 12, 18, 24)), family()
    b = bounds_at(d, fam, [6, 12])
    assert b.z == pytest.approx(efficacy_bounds([0.25, 0.5], 0.05 / 6, "obrien_fleming", final=False)[1])
    assert b.t == pytest.approx(sps.t.isf(sps.norm.sf(b.z), 11)) and b.t == pytest.approx(5.034, abs=0.001)
    history = [decide_look(d, [fam], [], {key(p): with_t(6, 1.0, 1.0) for p in TRIANGLE})]
    assert [c.decision for c in history[0].comparisons] == [CONTINUE] * 3
    rec = decide_look(d, [fam], history, {key(TRIANGLE[0]): with_t(12, 9.0, 6.0),
                                          key(TRIANGLE[1]): with_t(12, -3.0, -4.8),
                                          key(TRIANGLE[2]): with_t(12, 1.0, 1.0)})
    first, second, third = rec.comparisons
    # 6.0 ≥ 5.034 rejects at α/3; then the level is α/2, whose look-2 boundary (4.555) lets −4.8 reject
    assert first.decision == HIGHER and first.bounds.level == pytest.approx(0.05 / 3)
    assert second.decision == LOWER and second.bounds.level == pytest.approx(0.05 / 2)
    assert abs(second.t) < b.t and abs(second.t) >= second.bounds.t
    assert third.decision == CONTINUE and third.bounds.level == pytest.approx(0.05)  # both rejected: α/1
    assert rec.look == 2 and rec.units == 12 and first.n == 12 and first.mean == pytest.approx(9.0)
    assert "5.03" in first.crossed and second.crossed.startswith("superiority at α = 0.025")


def test_holm_level_carries_over_to_later_looks():
    d, fam = Design((6, 12, 18, 24), "pocock"), family()
    h1 = decide_look(d, [fam], [], {key(TRIANGLE[0]): with_t(6, 9.0, 40.0),
                                    key(TRIANGLE[1]): with_t(6, 1.0, 1.0), key(TRIANGLE[2]): with_t(6, 1.0, 1.0)})
    assert [c.decision for c in h1.comparisons] == [HIGHER, CONTINUE, CONTINUE]
    h2 = decide_look(d, [fam], [h1], {key(p): with_t(12, 1.0, 1.0) for p in TRIANGLE[1:]})
    assert [c.key for c in h2.comparisons] == [key(p) for p in TRIANGLE[1:]]  # the decided one is not tested again
    assert all(c.bounds.level == pytest.approx(0.05 / 2) for c in h2.comparisons)
    assert h2.comparisons[0].bounds.t == pytest.approx(t_bound(efficacy_bounds([0.25, 0.5], 0.0125, "pocock",
                                                                               final=False)[1], 12))


def test_equivalence_needs_both_one_sided_tests_at_the_look():
    d, fam = Design((6, 12), "pocock"), family(margin=5.0, pairs=TRIANGLE[:1])
    e = bounds_at(d, fam, [6, 12]).equivalence_t  # final look: one-sided α = 0.05 by Pocock spending
    se = (5.0 - 0.5) / e  # Δ̄ = 0.5 sits on δ − e·se: equivalent with a slightly smaller se, not with a larger
    inside, outside = with_t(12, 0.5, 0.5 / (se - 0.01)), with_t(12, 0.5, 0.5 / (se + 0.01))
    h1 = decide_look(d, [fam], [], {key(TRIANGLE[0]): with_t(6, 1.0, 0.5)})
    yes = decide_look(d, [fam], [h1], {key(TRIANGLE[0]): inside}).comparisons[0]
    no = decide_look(d, [fam], [h1], {key(TRIANGLE[0]): outside}).comparisons[0]
    assert yes.decision == EQUIVALENT and yes.equivalent and "equivalence at α = 0.05" in yes.crossed
    assert no.decision == INCONCLUSIVE and not no.equivalent  # the last look: no call is inconclusive


def test_futility_stops_only_outside_the_margin():
    d = Design((6, 12, 18, 24), "obrien_fleming", futility=True)
    b = bounds_at(d, family(), [6, 12])
    assert 0 < b.futility_t < b.t
    small = with_t(12, 0.5, 0.1)  # |t| = 0.1 < the futility bound
    no_margin = decide_look(d, [family(pairs=TRIANGLE[:1])], [], {key(TRIANGLE[0]): with_t(6, 1, 1)})
    rec = decide_look(d, [family(pairs=TRIANGLE[:1])], [no_margin], {key(TRIANGLE[0]): small})
    assert rec.comparisons[0].decision == FUTILE and rec.comparisons[0].crossed.startswith("futility")
    fam = family(margin=5.0, pairs=TRIANGLE[:1])  # |Δ̄| = 0.5 < δ: an equivalence is still in reach
    h = decide_look(d, [fam], [], {key(TRIANGLE[0]): with_t(6, 1, 1)})
    assert decide_look(d, [fam], [h], {key(TRIANGLE[0]): small}).comparisons[0].decision == CONTINUE


def test_records_round_trip_and_a_resume_decides_the_same_next_look():
    d, fam = Design((6, 12, 18, 24), "pocock", futility=True), family(margin=5.0)
    rng = np.random.default_rng(3)
    data = {key(p): rng.normal(mu, 7.0, 24) for p, mu in zip(TRIANGLE, (12.0, 0.0, 12.0))}
    history = []
    for n in d.looks:
        if not next_units(d, [fam], history, list(range(24))):
            break
        history.append(decide_look(d, [fam], history, {k: v[:n] for k, v in data.items()}, time="2026-01-01T00:00:00Z"))
    stored = [json.loads(json.dumps(r.to_json(), allow_nan=False)) for r in history]  # strict JSON
    assert [LookRecord.from_json(r) for r in stored] == history
    again = [LookRecord.from_json(r) for r in stored[:1]]
    assert decide_look(d, [fam], again, {k: v[:12] for k, v in data.items()}, time=history[1].time) == history[1]
    assert len(history) >= 2 and {c.decision for r in history for c in r.comparisons} - {CONTINUE}
    for i, rec in enumerate(history):  # a comparison decided at a look is in no later look's record
        decided_before = {c.key for r in history[:i] for c in r.comparisons if c.decision != CONTINUE}
        assert not decided_before & {c.key for c in rec.comparisons}


def test_next_units_and_needed_arms():
    d, fam = Design((6, 12, 18, 24)), family()
    order = list(range(100, 124))
    assert next_units(d, [fam], [], order) == order[:6]
    h1 = decide_look(d, [fam], [], {key(TRIANGLE[0]): with_t(6, 9.0, 40.0), key(TRIANGLE[1]): with_t(6, 1, 1),
                                    key(TRIANGLE[2]): with_t(6, 1, 1)})
    assert next_units(d, [fam], [h1], order) == order[6:12]
    assert needed_arms([fam], [h1]) == {"budget", "entropy", "grpo"}
    h2 = decide_look(d, [fam], [h1], {key(p): with_t(12, 9.0, 40.0) for p in TRIANGLE[1:]})
    assert needed_arms([fam], [h1, h2]) == set() and next_units(d, [fam], [h1, h2], order) == []
    arms = ["grpo", "budget", "entropy", "other"]  # budget − grpo decided at 6, the rest at 12; other in none
    assert arm_units(d, [fam], [h1], arms) == {"grpo": 24, "budget": 24, "entropy": 24, "other": 24}
    # other runs with the sweep, which stopped at 12
    assert arm_units(d, [fam], [h1, h2], arms) == {"grpo": 12, "budget": 12, "entropy": 12, "other": 12}
    with pytest.raises(ValueError, match="has 6 units; a look needs more than its previous look's 6"):
        decide_look(d, [fam], [h1], {key(p): with_t(6, 1, 1) for p in TRIANGLE[1:]})
    with pytest.raises(ValueError, match="all have been taken"):
        decide_look(Design((6,)), [fam], [h1], {})
    with pytest.raises(ValueError, match="no Δ for entropy − budget"):
        decide_look(d, [fam], [h1], {key(TRIANGLE[2]): with_t(12, 1, 1)})
    with pytest.raises(ValueError, match="at least 3 finite"):
        decide_look(d, [fam], [], {key(p): [1.0, 2.0] for p in TRIANGLE})


def test_unit_order_and_interim_note():
    assert unit_order([0, 1], ["w1", "w2"]) == [("w1", 0), ("w2", 0), ("w1", 1), ("w2", 1)]
    assert unit_order([3, 4]) == [(None, 3), (None, 4)]
    assert interim_note(6, 24) == "interim (6 of 24 units): not a call" and interim_note(24, 24) is None


@pytest.mark.parametrize("design,margin", [(Design((6, 12, 18, 24), "obrien_fleming", True), None),
                                           (Design((6, 12, 18, 24), "pocock", True), 5.0),
                                           (Design((4, 9, 15), "pocock", False), 3.0)])
def test_the_vectorised_simulator_decides_as_decide_look(design, margin):
    fam = family(margin=margin)
    rng = np.random.default_rng(7)
    mu = np.array([6.0, 0.0, 2.5])[None, :, None]
    delta = rng.normal(mu, 7.0, size=(60, 3, design.units))
    codes, units = decide_trials(design, fam, delta)
    for trial in range(len(delta)):
        history = []
        for n in design.looks:
            if not needed_arms([fam], history):
                break
            history.append(decide_look(design, [fam], history, {key(p): delta[trial, i, :n] for i, p in enumerate(TRIANGLE)}))
        st = status([fam], history)
        assert [CODES[c] for c in codes[trial]] == [st[key(p)].decision for p in TRIANGLE], trial
        assert list(units[trial]) == [st[key(p)].n for p in TRIANGLE], trial
    assert len(set(codes.ravel())) >= 2  # the trials exercise more than one decision
