"""Tests of rbctl.algo.advantages against hand-computed values, docs/method.md's closed forms and exact enumeration."""

from __future__ import annotations

import doctest
import itertools
import math

import pytest
import torch
from torch.testing import assert_close

import rbctl.algo.advantages
import rbctl.algo.sharpness
from rbctl.algo import (
    ESTIMATORS,
    advantage_gap,
    budget_rewards,
    compute_advantages,
    get_estimator,
    group_stats,
    kappa,
    kappa_eff,
    nanmean_or_none,
    sharpness_per_prompt,
)
from rbctl.errors import UserError

# The estimators that take no parameters and compose with the budget; maxrl and passk
# (tests/unit/test_arms.py) refuse a budget and passk needs k.
NAMES = [n for n, e in ESTIMATORS.items() if e.composes_with_budget and not e.params]
EPS = 1e-6  # docs/method.md: GRPO divides by (std + 1e-6)


def t(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


def binary_group(k: int, g: int) -> list[float]:
    """K correct rollouts (reward 1) first, then G − K wrong ones."""
    return [1.0] * k + [0.0] * (g - k)


def test_module_doctest_holds() -> None:
    assert doctest.testmod(rbctl.algo.advantages).failed == 0
    assert doctest.testmod(rbctl.algo.sharpness).failed == 0


def test_registry_pairs_each_estimator_with_methods_default_aggregation() -> None:
    # docs/method.md's table, column "default loss aggregation".
    table = {
        "grpo": "seq-mean-token-mean",
        "dr_grpo": "seq-mean-token-sum-norm",
        "rloo": "token-mean",
        "reinforce_pp": "token-mean",
        "maxrl": "seq-mean-token-sum-norm",
        "passk": "token-mean",
    }
    assert {n: ESTIMATORS[n].loss_agg for n in table} == table
    assert NAMES[:4] == ["grpo", "dr_grpo", "rloo", "reinforce_pp"]
    with pytest.raises(UserError, match="unknown estimator"):
        get_estimator("ppo")
    with pytest.raises(UserError, match="unknown estimator"):
        compute_advantages(t([[1, 0]]), "ppo")


# --- estimators without budget: hand values ------------------------------------------------------

# Binary group r = [1, 0, 0, 0]: mean 1/4, centred [3/4, −1/4, −1/4, −1/4];
# unbiased var = (9/16 + 3·1/16) / 3 = 1/4, so σ̂ = 1/2.
BIN = [[1.0, 0.0, 0.0, 0.0]]
# Non-binary group r = [1, 2, 3, 6]: mean 3, centred [−2, −1, 0, 3];
# unbiased var = (4 + 1 + 0 + 9) / 3 = 14/3, so σ̂ = sqrt(14/3) ≈ 2.160247.
NONBIN = [[1.0, 2.0, 3.0, 6.0]]


def test_grpo_hand_values() -> None:
    # binary: centred / (1/2 + 1e-6) ≈ [1.5, −0.5, −0.5, −0.5]
    assert_close(compute_advantages(t(BIN), "grpo"), t([[0.75, -0.25, -0.25, -0.25]]) / (0.5 + EPS))
    # non-binary: [−2, −1, 0, 3] / (sqrt(14/3) + 1e-6)
    s = math.sqrt(14 / 3) + EPS
    assert_close(compute_advantages(t(NONBIN), "grpo"), t([[-2 / s, -1 / s, 0.0, 3 / s]]))


def test_dr_grpo_hand_values() -> None:
    assert_close(compute_advantages(t(BIN), "dr_grpo"), t([[0.75, -0.25, -0.25, -0.25]]))
    assert_close(compute_advantages(t(NONBIN), "dr_grpo"), t([[-2.0, -1.0, 0.0, 3.0]]))


def test_rloo_hand_values_are_leave_one_out() -> None:
    # binary: 1 − mean(0,0,0) = 1; 0 − mean(1,0,0) = −1/3
    assert_close(compute_advantages(t(BIN), "rloo"), t([[1.0, -1 / 3, -1 / 3, -1 / 3]]))
    # non-binary: 1 − (2+3+6)/3 = −8/3; 2 − 10/3 = −4/3; 3 − 9/3 = 0; 6 − 6/3 = 4
    assert_close(compute_advantages(t(NONBIN), "rloo"), t([[-8 / 3, -4 / 3, 0.0, 4.0]]))


def test_reinforce_pp_whitens_over_the_whole_batch() -> None:
    # r = [[1, 0], [3, 1]] -> group-centred [[.5, −.5], [1, −1]], batch mean 0,
    # unbiased batch var = (.25 + .25 + 1 + 1) / 3 = 5/6 -> A = centred / (sqrt(5/6) + 1e-6).
    s = math.sqrt(5 / 6) + EPS
    assert_close(
        compute_advantages(t([[1, 0], [3, 1]]), "reinforce_pp"),
        t([[0.5 / s, -0.5 / s], [1 / s, -1 / s]]),
    )
    # One scalar for the batch, not a per-group std: per-group scaling would give both rows ±0.7071.
    a = compute_advantages(t([[1, 0], [3, 1]]), "reinforce_pp")
    assert a[1, 0] / a[0, 0] == pytest.approx(2.0)


# --- estimators with budget: hand values ---------------------------------------------------------


def test_budget_rewards_hand_values() -> None:
    # B = 1, c = 0: r / Σr. [1,2,3,6] / 12
    assert_close(budget_rewards(t(NONBIN), 1.0), t([[1 / 12, 2 / 12, 3 / 12, 6 / 12]]))
    # B = 2, c = 1: shifted [2,3,4,7], Σ = 16 -> 2·[2,3,4,7]/16
    assert_close(budget_rewards(t(NONBIN), 2.0, shift=1.0), t([[0.25, 0.375, 0.5, 0.875]]))
    # binary K = 2 of 4, B = 3: 3/2 each correct, 0 each wrong
    assert_close(budget_rewards(t([[1, 0, 1, 0]]), 3.0), t([[1.5, 0.0, 1.5, 0.0]]))


def test_budgeted_grpo_and_dr_grpo_centre_without_std_scaling() -> None:
    for name in ("grpo", "dr_grpo"):
        # binary B = 1: r̃ = [1,0,0,0], mean 1/4 -> [3/4, −1/4, −1/4, −1/4] (the module doctest)
        assert_close(compute_advantages(t(BIN), name, budget=1.0), t([[0.75, -0.25, -0.25, -0.25]]))
        # non-binary B = 1: r̃ = [1,2,3,6]/12, mean 3/12 -> [−2, −1, 0, 3] / 12
        assert_close(compute_advantages(t(NONBIN), name, budget=1.0), t([[-2 / 12, -1 / 12, 0.0, 3 / 12]]))
        # non-binary B = 2, c = 1: r̃ = [1/4, 3/8, 1/2, 7/8], mean 1/2 -> [−1/4, −1/8, 0, 3/8]
        assert_close(
            compute_advantages(t(NONBIN), name, budget=2.0, shift=1.0), t([[-0.25, -0.125, 0.0, 0.375]])
        )


def test_budgeted_rloo_hand_values() -> None:
    # binary B = 1: r̃ = [1,0,0,0]; leave-one-out: 1 − 0 = 1, 0 − 1/3 = −1/3
    assert_close(compute_advantages(t(BIN), "rloo", budget=1.0), t([[1.0, -1 / 3, -1 / 3, -1 / 3]]))
    # non-binary B = 1: r̃ = [1,2,3,6]/12 -> 4/3 · [−2, −1, 0, 3]/12 = [−2/9, −1/9, 0, 1/3]
    assert_close(compute_advantages(t(NONBIN), "rloo", budget=1.0), t([[-2 / 9, -1 / 9, 0.0, 1 / 3]]))


def test_budgeted_reinforce_pp_whitens_budgeted_rewards() -> None:
    # r = [[1, 0], [3, 1]], B = 1: r̃ = [[1, 0], [3/4, 1/4]] -> centred [[.5, −.5], [.25, −.25]];
    # unbiased batch var = (.25 + .25 + .0625 + .0625) / 3 = 5/24 -> A = centred / (sqrt(5/24) + 1e-6).
    s = math.sqrt(5 / 24) + EPS
    assert_close(
        compute_advantages(t([[1, 0], [3, 1]]), "reinforce_pp", budget=1.0),
        t([[0.5 / s, -0.5 / s], [0.25 / s, -0.25 / s]]),
    )


def test_budget_with_b_equal_g_is_the_maxrl_estimator() -> None:
    # docs/method.md: B = G, c = 0 gives (r − μ̂)/μ̂. r = [1,2,3,6], μ̂ = 3 -> [−2/3, −1/3, 0, 1]
    assert_close(compute_advantages(t(NONBIN), "dr_grpo", budget=4.0), t([[-2 / 3, -1 / 3, 0.0, 1.0]]))


def test_grpo_with_budget_differs_from_grpo() -> None:
    # K = 3 of 4: GRPO: mean 3/4, σ̂ = 1/2 -> [.5, .5, .5, −1.5] (gap 2);
    # budget B = 1: r̃ = 1/3 per correct, mean 1/4 -> [1/12, 1/12, 1/12, −1/4] (gap 1/3).
    r = t([[1, 1, 1, 0]])
    assert_close(compute_advantages(r, "grpo"), t([[0.5, 0.5, 0.5, -1.5]]) / (1 + 2 * EPS))
    assert_close(compute_advantages(r, "grpo", budget=1.0), t([[1 / 12, 1 / 12, 1 / 12, -0.25]]))


# --- budget invariants and input errors ----------------------------------------------------------


def test_budgeted_rewards_sum_to_b_per_earning_prompt_and_zero_otherwise() -> None:
    r = t([[1, 0, 0, 0], [0.2, 0.9, 0.4, 0.1], [0, 0, 0, 0], [1, 1, 1, 1], [5, 0, 0, 3]])
    for b in (0.5, 1.0, 7.0):
        sums = budget_rewards(r, b).sum(dim=1)
        assert_close(sums, torch.tensor([b, b, 0.0, b, b]))
    # with c > 0 even an all-zero group earns: r̃ = B·c/(G·c) = B/G each, sum B
    assert_close(budget_rewards(t([[0, 0, 0, 0]]), 2.0, shift=0.5), t([[0.5, 0.5, 0.5, 0.5]]))


def test_shift_changes_budgeted_rewards_as_the_formula_says() -> None:
    # r̃_i = B (r_i + c) / (K + G c). K = 1 of G = 4, B = 1, c = 1: [2, 1, 1, 1] / 5
    assert_close(budget_rewards(t(BIN), 1.0, shift=1.0), t([[0.4, 0.2, 0.2, 0.2]]))
    # c = 0 gives [1, 0, 0, 0]: the shift did change r̃
    assert_close(budget_rewards(t(BIN), 1.0, shift=0.0), t([[1.0, 0.0, 0.0, 0.0]]))


def test_reward_below_minus_shift_raises() -> None:
    r = t([[-0.5, 1.0]])
    with pytest.raises(UserError, match="below -shift"):
        budget_rewards(r, 1.0)
    with pytest.raises(UserError, match="below -shift"):
        compute_advantages(r, "grpo", budget=1.0, shift=0.4)
    # c = 0.5 makes it legal: shifted [0, 1.5] -> r̃ = [0, 1]
    assert_close(budget_rewards(r, 1.0, shift=0.5), t([[0.0, 1.0]]))


@pytest.mark.parametrize("budget", [0.0, -1.0, float("nan")])
def test_non_positive_budget_raises(budget: float) -> None:
    with pytest.raises(UserError, match="budget must be > 0"):
        compute_advantages(t(BIN), "grpo", budget=budget)


def test_negative_shift_raises() -> None:
    with pytest.raises(UserError, match="shift must be >= 0"):
        budget_rewards(t(BIN), 1.0, shift=-0.1)


@pytest.mark.parametrize("name", NAMES)
def test_bad_reward_shapes_and_values_raise(name: str) -> None:
    with pytest.raises(UserError, match="G must be at least 2"):
        compute_advantages(t([[1.0], [0.0]]), name)
    with pytest.raises(UserError, match="G must be at least 2"):
        compute_advantages(t([[1.0]]), name, budget=1.0)
    with pytest.raises(UserError, match=r"\[P, G\]"):
        compute_advantages(torch.tensor([1.0, 0.0]), name)
    with pytest.raises(UserError, match="NaN or inf"):
        compute_advantages(t([[1.0, float("nan")]]), name)


# --- equal-reward groups -------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("budget", [None, 1.0, 2.5])
def test_equal_reward_groups_give_exact_zeros(name: str, budget: float | None) -> None:
    # A batch of only equal groups, and equal groups beside a mixed binary group.
    for rows in ([[0, 0, 0, 0], [1, 1, 1, 1]], [[1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]]):
        a = compute_advantages(t(rows), name, budget=budget)
        assert not torch.isnan(a).any()
        assert torch.equal(a[-2:], torch.zeros(2, 4))


def test_equal_non_dyadic_reward_groups_give_exact_zeros() -> None:
    # docs/method.md: "A group whose rewards are all equal gets A = 0 everywhere, never NaN" —
    # for any reward value, not only 0 and 1 (partial credit, format rewards).
    for name, budget, value, g in itertools.product(NAMES, (None, 1.0), (0.9, 0.3, 10.7), (6, 8)):
        a = compute_advantages(torch.full((1, g), value), name, budget=budget)
        assert torch.equal(a, torch.zeros(1, g)), (name, budget, value, g, a)


# --- the binary advantage gap and κ --------------------------------------------------------------


@pytest.mark.parametrize("g", [2, 4, 8])
@pytest.mark.parametrize("name", ["grpo", "dr_grpo"])
def test_budget_advantage_gap_is_b_over_k(g: int, name: str) -> None:
    # docs/method.md: A_+ = B(1/K − 1/G), A_− = −B/G, so the gap is B/K for K = 1..G−1.
    b = 2.5
    for k in range(1, g):
        r = t([binary_group(k, g)])
        a = compute_advantages(r, name, budget=b)
        assert_close(a, t([[b * (1 / k - 1 / g)] * k + [-b / g] * (g - k)]))
        assert advantage_gap(r.bool(), a) == pytest.approx(b / k)


def kappa_batch(g: int) -> torch.Tensor:
    """Rows K = 0..G correct out of G."""
    return t([binary_group(k, g) for k in range(g + 1)])


def expected(values: list[float]) -> torch.Tensor:
    """[nan, *values, nan]: prompts with K = 0 and K = G are not mixed."""
    return torch.tensor([math.nan, *values, math.nan])


@pytest.mark.parametrize("g", [2, 4, 8])
def test_kappa_matches_method_closed_forms_for_binary_groups(g: int) -> None:
    r = kappa_batch(g)
    ks = range(1, g)
    # GRPO: 1/(σ̂ + 1e-6); unbiased binary variance σ̂² = K(G−K)/(G(G−1)).
    # e.g. G = 4, K = 1: σ̂² = 3/12 -> σ̂ = 1/2 -> κ = 1/0.500001 ≈ 1.999996
    grpo_k = [1 / (math.sqrt(k * (g - k) / (g * (g - 1))) + EPS) for k in ks]
    assert_close(kappa(r, compute_advantages(r, "grpo")), expected(grpo_k), equal_nan=True)
    assert_close(kappa(r, compute_advantages(r, "dr_grpo")), expected([1.0] * (g - 1)), equal_nan=True)
    assert_close(kappa(r, compute_advantages(r, "rloo")), expected([g / (g - 1)] * (g - 1)), equal_nan=True)
    b = 3.0
    budget_k = [b / k for k in ks]
    for name in ("grpo", "dr_grpo"):
        assert_close(kappa(r, compute_advantages(r, name, budget=b)), expected(budget_k), equal_nan=True)


def test_kappa_grpo_hand_value_and_nan_for_unmixed() -> None:
    r = t([[1, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]])
    k = kappa(r, compute_advantages(r, "grpo"))
    assert k[0].item() == pytest.approx(1 / 0.500001)  # σ̂ = 1/2 (see BIN above)
    assert torch.isnan(k[1:]).all()
    assert nanmean_or_none(k) == pytest.approx(1 / 0.500001)
    assert nanmean_or_none(k[1:]) is None


def test_kappa_eff_two_rollouts_hand_value() -> None:
    # G = 2: r = [1, 0], d = [0.3, −0.1] -> (0.3 − (−0.1)) / (1 − 0) = 0.4
    # r = [2, 0.5], d = [0.1, 0.4]  -> (0.1 − 0.4) / (2 − 0.5) = −0.2
    r = t([[1, 0], [2, 0.5], [1, 1]])
    d = t([[0.3, -0.1], [0.1, 0.4], [5.0, -5.0]])
    assert_close(kappa_eff(r, d), torch.tensor([0.4, -0.2, math.nan]), equal_nan=True)


def test_sharpness_ignores_rollouts_at_the_group_mean() -> None:
    # r = [1, .5, 0, .5], mean .5: above {1}, below {0}; the rollouts at the mean (v = 9) are in
    # neither: (0.2 − (−0.2)) / (1 − 0) = 0.4.
    # r = [3, 1, 1, 3], mean 2: above v (1 + 3)/2 = 2, below v (.5 − .5)/2 = 0 -> 2 / (3 − 1) = 1
    r = t([[1, 0.5, 0, 0.5], [3, 1, 1, 3]])
    v = t([[0.2, 9.0, -0.2, 9.0], [1.0, 0.5, -0.5, 3.0]])
    assert_close(sharpness_per_prompt(r, v), torch.tensor([0.4, 1.0]))


def test_group_stats_and_advantage_gap() -> None:
    c = torch.tensor([[1, 1], [0, 0], [1, 0], [0, 1]], dtype=torch.bool)
    s = group_stats(c)
    assert (s.frac_all_correct, s.frac_all_wrong, s.frac_mixed) == pytest.approx((0.25, 0.25, 0.5))
    # mixed rows: A = [2, −1] and [−3, 5] -> gaps 3 and 8, mean 5.5
    a = t([[9, 9], [9, 9], [2, -1], [-3, 5]])
    assert advantage_gap(c, a) == pytest.approx(5.5)
    assert advantage_gap(c[:2], a[:2]) is None


@pytest.mark.parametrize("n_correct, n_wrong, n_mixed", [(67, 933, 0), (1, 2, 0), (6, 4, 0), (66, 933, 1)])
def test_group_stats_fractions_are_never_negative(n_correct, n_wrong, n_mixed) -> None:
    # Counts for which float32 round-off makes 1 − frac_all_correct − frac_all_wrong negative
    # (−6e-8 for 67/1000 + 933/1000): the mixed fraction must be counted, not taken as a remainder.
    a = torch.tensor(n_correct / (n_correct + n_wrong + n_mixed), dtype=torch.float32).item()
    b = torch.tensor(n_wrong / (n_correct + n_wrong + n_mixed), dtype=torch.float32).item()
    if n_mixed == 0:
        assert (torch.tensor(1.0) - torch.tensor(a) - torch.tensor(b)).item() < 0  # the round-off is real
    rows = [[True] * 8] * n_correct + [[False] * 8] * n_wrong + [[True] * 7 + [False]] * n_mixed
    s = group_stats(torch.tensor(rows))
    total = n_correct + n_wrong + n_mixed
    assert s.frac_mixed == pytest.approx(n_mixed / total, rel=1e-6, abs=0.0)  # exactly 0.0 when none mixed
    assert s.frac_all_correct == pytest.approx(n_correct / total, rel=1e-6)
    assert s.frac_all_wrong == pytest.approx(n_wrong / total, rel=1e-6)
    assert min(s.frac_mixed, s.frac_all_correct, s.frac_all_wrong) >= 0.0


# --- the exact finite-G objective ----------------------------------------------------------------
#
# For rollouts of one prompt, A_i depends on y only through the outcomes c = (c_1..c_G), and
# E[S_i | c_i] = ∇ log P(c_i) = (c_i − p)/(p(1−p)) · ∇p (the score of the Bernoulli outcome).
# Hence E[Σ_i A_i S_i] = E[Σ_i A_i (c_i − p)] / (p(1−p)) · ∇p, and docs/method.md's claim
# E[Σ A_i S_i] = ∇J_G(p) is exactly  E[Σ_i A_i (c_i − p)] / (p(1−p)) = J_G'(p) = B(1 − (1−p)^{G−1})/p.
# (By hand: Σ_i A_i = 0, so Σ_i A_i (c_i − p) = Σ_i A_i c_i = K·B(1/K − 1/G) = B(1 − K/G) for K > 0,
#  and 0 for K = 0; E = B(1 − (1−p)^G − p) = B(1−p)(1 − (1−p)^{G−1}).)
# We enumerate all 2^G outcomes, get A from the real code, and take the exact expectation.


def j_g(p: float, g: int, b: float) -> float:
    return b * sum((1 - (1 - p) ** j) / j for j in range(1, g))


def j_g_prime(p: float, g: int, b: float) -> float:
    return b * (1 - (1 - p) ** (g - 1)) / p


@pytest.mark.parametrize("g", [2, 3, 4, 6])
@pytest.mark.parametrize("name", ["grpo", "dr_grpo"])
def test_budgeted_estimator_is_the_exact_gradient_of_j_g(g: int, name: str) -> None:
    outcomes = torch.tensor(list(itertools.product([0.0, 1.0], repeat=g)))  # [2^G, G]
    k = outcomes.sum(dim=1).double()
    for b in (1.0, 2.5):
        a = compute_advantages(outcomes, name, budget=b).double()
        for p in (0.1, 0.3, 0.5, 0.8):
            prob = p**k * (1 - p) ** (g - k)  # P(outcome vector)
            lhs = (prob * (a * (outcomes.double() - p)).sum(dim=1)).sum().item() / (p * (1 - p))
            assert lhs == pytest.approx(j_g_prime(p, g, b))
            # and J_G' is the derivative of J_G (central difference, error O(h²))
            h = 1e-5
            assert (j_g(p + h, g, b) - j_g(p - h, g, b)) / (2 * h) == pytest.approx(j_g_prime(p, g, b))


def test_unbudgeted_grpo_is_not_the_gradient_of_j_g() -> None:
    # Control: the enumeration distinguishes estimators. G = 4, p = 0.5, B = 1:
    # J_G'(p) = (1 − 1/8)/0.5 = 1.75; GRPO's weight is E[Σ A_i(c_i−p)]/(p(1−p)) ≠ 1.75.
    g, p = 4, 0.5
    outcomes = torch.tensor(list(itertools.product([0.0, 1.0], repeat=g)))
    a = compute_advantages(outcomes, "grpo").double()
    lhs = ((a * (outcomes.double() - p)).sum(dim=1).mean()).item() / (p * (1 - p))
    assert j_g_prime(p, g, 1.0) == pytest.approx(1.75)
    assert lhs != pytest.approx(1.75, rel=0.05)
