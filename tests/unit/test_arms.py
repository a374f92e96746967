"""Tests of the comparison arms (docs/method.md, "Other arms") against hand-computed values from
each primary source's formula: maxrl and passk estimators, the policy-loss registry (clip,
clip_cov, kl_cov, gspo), the high-entropy token mask, the unlikeliness reward, DAPO's filter."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch.testing import assert_close

from rbctl.algo import ESTIMATORS, POLICY_LOSSES, compute_advantages, compute_policy_loss
from rbctl.algo.advantages import passk_advantages
from rbctl.algo.arms import dynamic_sampling_keep, high_entropy_mask, unlikeliness_rewards
from rbctl.algo.losses import BatchNorm, aggregation_weights
from rbctl.errors import UserError

EPS = 1e-6  # Pass@k Training's code: σ + 1e-6


def t(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


# --- maxrl ---------------------------------------------------------------------------------------


def test_maxrl_hand_values() -> None:
    # the authors' (r − μ̂)/(μ̂ + 1e-6) (tests/unit/test_maxrl_upstream.py checks it against their code)
    # [1,0,0,0]: μ̂ = 1/4 -> (1 − 1/4)/(1/4 + ε) = 3/(1 + 4ε), (0 − 1/4)/(1/4 + ε) = −1/(1 + 4ε)
    assert_close(compute_advantages(t([[1, 0, 0, 0]]), "maxrl"), t([[3.0, -1.0, -1.0, -1.0]]) / (1 + 4 * EPS))
    # [1,2,3,6]: μ̂ = 3 -> [−2, −1, 0, 3]/(3 + ε)
    assert_close(compute_advantages(t([[1, 2, 3, 6]]), "maxrl"), t([[-2.0, -1.0, 0.0, 3.0]]) / (3 + EPS))
    # μ̂ = 0 -> 0/ε = 0; all correct -> r − μ̂ = 0
    assert torch.equal(compute_advantages(t([[0, 0, 0, 0], [1, 1, 1, 1]]), "maxrl"), torch.zeros(2, 4))


@pytest.mark.parametrize("g", [4, 8])
def test_maxrl_is_the_budget_with_b_equal_g_up_to_the_authors_epsilon_on_every_binary_pattern(g: int) -> None:
    # docs/method.md: with B = G, c = 0, r̃_i − mean(r̃) = (r_i − μ̂)/μ̂; MaxRL's code divides by μ̂ + 1e-6
    # instead, so maxrl = budget · μ̂/(μ̂ + 1e-6) (1 for the all-wrong row, whose advantages are 0 either way).
    rows = t(list(itertools.product([0.0, 1.0], repeat=g)))
    maxrl = compute_advantages(rows, "maxrl")
    mu = rows.mean(dim=1, keepdim=True)
    for base in ("dr_grpo", "grpo"):  # grpo + budget = dr_grpo + budget (no per-group std)
        assert_close(maxrl, compute_advantages(rows, base, budget=float(g)) * mu / (mu + EPS))
    # the ε is visible: at K = 1 the budget's G − 1 becomes (G − 1)/(1 + Gε), (G − 1)·G·ε lower
    # (1.2e-5 at G = 4, 5.6e-5 at G = 8; float32's spacing at 7 is 4.8e-7)
    k1 = rows.sum(dim=1) == 1
    gap = (compute_advantages(rows, "dr_grpo", budget=float(g))[k1].max() - maxrl[k1].max()).item()
    assert gap == pytest.approx((g - 1) * g * EPS, rel=0.05)


def test_maxrl_refuses_budget_and_negative_rewards() -> None:
    assert not ESTIMATORS["maxrl"].composes_with_budget
    with pytest.raises(UserError, match="does not compose with the budget"):
        compute_advantages(t([[1, 0]]), "maxrl", budget=1.0)
    with pytest.raises(UserError, match="rewards >= 0"):
        compute_advantages(t([[1, -1]]), "maxrl")


# --- passk ---------------------------------------------------------------------------------------


def test_passk_hand_values_g4_k2() -> None:
    # K = 1 (N_neg = 3): R̄ = 1 − C(3,2)/C(4,2) = 1 − 3/6 = 1/2, σ = 1/2;
    #   Â_pos = (1/2)/(1/2 + ε), Â_neg = (1/2 − C(2,1)/C(3,1))/(1/2 + ε) = (1/2 − 2/3)/(1/2 + ε)
    s = 0.5 + EPS
    a = compute_advantages(t([[1, 0, 0, 0]]), "passk", k=2)
    assert_close(a, t([[0.5 / s] + [(0.5 - 2 / 3) / s] * 3]))
    # K = 2 (N_neg = 2): R̄ = 1 − C(2,2)/C(4,2) = 5/6, σ = sqrt(5/36) = √5/6;
    #   Â_pos = (1/6)/(σ + ε), Â_neg = (1/6 − C(1,1)/C(3,1))/(σ + ε) = (1/6 − 1/3)/(σ + ε)
    s = math.sqrt(5) / 6 + EPS
    a = compute_advantages(t([[0, 1, 0, 1]]), "passk", k=2)
    assert_close(a, t([[-(1 / 6) / s, (1 / 6) / s, -(1 / 6) / s, (1 / 6) / s]]))
    # K = 3 (N_neg = 1 < k): every pair holds a correct sample, R̄ = 1: all 0; K = 0 and K = 4: 0
    a = compute_advantages(t([[1, 1, 0, 1], [0, 0, 0, 0], [1, 1, 1, 1]]), "passk", k=2)
    assert torch.equal(a, torch.zeros(3, 4))


def test_passk_with_k1_is_grpo_with_the_population_std() -> None:
    # k = 1: R̄ = K/G = p, σ = sqrt(p(1 − p)); Â_pos = (1 − p)/(σ + ε), Â_neg = −p/(σ + ε).
    # [1,0,0,0]: p = 1/4, σ = sqrt(3/16)
    s = math.sqrt(3 / 16) + EPS
    assert_close(compute_advantages(t([[1, 0, 0, 0]]), "passk", k=1), t([[0.75 / s, -0.25 / s, -0.25 / s, -0.25 / s]]))


@pytest.mark.parametrize("g", [4, 6])
def test_passk_analytic_advantage_equals_enumeration_over_k_subsets(g: int) -> None:
    # The paper's derivation: a response's advantage is the mean, over the k-subsets holding it, of
    # the subset's group-normalised pass@k reward (max(r_S) − R̄)/(σ + ε), R̄ and σ (population)
    # over all k-subsets.
    for k in range(1, g + 1):
        for n_correct in range(g + 1):
            r = [1] * n_correct + [0] * (g - n_correct)
            subsets = list(itertools.combinations(range(g), k))
            best = {s: max(r[i] for i in s) for s in subsets}
            r_bar = sum(best.values()) / len(subsets)
            sigma = math.sqrt(sum((b - r_bar) ** 2 for b in best.values()) / len(subsets)) + EPS
            expected = [sum((best[s] - r_bar) / sigma for s in subsets if i in s) / sum(i in s for s in subsets)
                        for i in range(g)]
            a_pos, a_neg = passk_advantages(g, n_correct, k)
            got = [a_pos if x else a_neg for x in r]
            assert got == pytest.approx(expected, rel=1e-9, abs=1e-9), (g, k, n_correct)


def test_passk_parameters_and_refusals() -> None:
    r = t([[1, 0, 0, 0]])
    with pytest.raises(UserError, match="needs k"):
        compute_advantages(r, "passk")
    for bad in (0, 5, 2.0):
        with pytest.raises(UserError, match="1 <= k <= G"):
            compute_advantages(r, "passk", k=bad)
    with pytest.raises(UserError, match="binary rewards"):
        compute_advantages(t([[0.5, 0, 0, 0]]), "passk", k=2)
    with pytest.raises(UserError, match="does not compose with the budget"):
        compute_advantages(r, "passk", budget=1.0, k=2)
    with pytest.raises(UserError, match="has no parameter k"):
        compute_advantages(r, "grpo", k=2)  # existing estimators take no parameters
    assert_close(compute_advantages(r, "grpo", 1.0, 0.0), t([[0.75, -0.25, -0.25, -0.25]]))  # old positional call


# --- policy losses -------------------------------------------------------------------------------

# Two sequences, T = 3; the second has 2 valid tokens. A = +1 for the first, −1 for the second.
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])
ADV = t([1.0, -1.0])
# log π (current): valid mean = (−0.5 − 2 − 4 − 1 − 5)/5 = −2.5; the pad entry (9) is ignored.
LOGP = t([[-0.5, -2.0, -4.0], [-1.0, -5.0, 9.0]])
# Token advantages' valid mean = (3·1 + 2·(−1))/5 = 0.2, so centred A = 0.8 (row 0), −1.2 (row 1);
# centred log π = [2, 0.5, −1.5], [1.5, −2.5]; Cov = 0.8·[2, 0.5, −1.5] = [1.6, 0.4, −1.2],
# −1.2·[1.5, −2.5] = [−1.8, 3.0].  Cov ∈ (1, 5): tokens (0,0) = 1.6 and (1,1) = 3.0.


def test_registry_has_the_four_losses_and_gspo_forces_sequence_aggregation() -> None:
    assert list(POLICY_LOSSES)[:4] == ["clip", "clip_cov", "kl_cov", "gspo"]  # the shipped four, the default first
    assert POLICY_LOSSES["gspo"].loss_agg == "seq-mean-token-mean"
    assert all(POLICY_LOSSES[n].loss_agg is None for n in ("clip", "clip_cov", "kl_cov"))
    with pytest.raises(UserError, match="unknown policy loss"):
        compute_policy_loss("dpo", LOGP, LOGP, ADV, MASK)
    with pytest.raises(UserError, match="missing clip_low, clip_high, clip_ratio_c"):
        compute_policy_loss("clip", LOGP, LOGP, ADV, MASK)
    with pytest.raises(UserError, match="unknown parameter"):
        compute_policy_loss("kl_cov", LOGP, LOGP, ADV, MASK, clip_low=0.2)


def test_clip_takes_sequence_and_token_advantages_alike_hand_values() -> None:
    # ρ = e^0.3 ≈ 1.3499, e^−0.3 ≈ 0.7408, 1 in both rows; clip range [0.8, 1.28]; loss −min(ρA, clip(ρ)A).
    # Row 0, A = +1: −min(1.3499, 1.28) = −1.28 (clip binds high); −min(0.7408, 0.8) = −0.7408 (a
    # ratio below 1 − ε_low with A > 0 is not clipped); −1. Row 1, A = −1: −min(−1.3499, −1.28) = 1.3499;
    # −min(−0.7408, −0.8) = 0.8 (clip binds low); 1 (the padding entry: whatever the formula gives).
    old = LOGP - t([[0.3, -0.3, 0.0], [0.3, -0.3, 0.0]])
    e = math.exp
    expected = t([[-1.28, -e(-0.3), -1.0], [e(0.3), 0.8, 1.0]])
    for adv in (ADV, ADV.unsqueeze(1).expand(2, 3)):  # [N] per sequence, or [N, T] per token
        out = compute_policy_loss("clip", LOGP, old, adv, MASK, clip_low=0.2, clip_high=0.28, clip_ratio_c=3.0)
        assert_close(out.loss_mat, expected)
        assert out.token_stats["clipped_high"].tolist() == [[True, False, False], [False, False, False]]
        assert out.token_stats["clipped_low"].tolist() == [[False, False, False], [False, True, False]]
    # token advantages may differ along a sequence: A = (+1, −1, +1) on row 0 at ρ = (1.3499, 0.7408, 1)
    out = compute_policy_loss("clip", LOGP, old, t([[1.0, -1.0, 1.0], [-1.0, -1.0, -1.0]]), MASK, clip_low=0.2,
                              clip_high=0.28, clip_ratio_c=3.0)
    assert_close(out.loss_mat[0], t([-1.28, 0.8, -1.0]))


def test_clip_cov_hand_values_and_zero_gradient_on_picked_tokens() -> None:
    # ρ = 1 everywhere (no PPO clip binds); ratio = 1: n = max(⌊1·5⌋, 1) = 5 ≥ 2 candidates,
    # so both (0,0) and (1,1) are picked.
    logp = LOGP.clone().requires_grad_(True)
    out = compute_policy_loss("clip_cov", logp, LOGP, ADV, MASK, clip_low=0.2, clip_high=0.2,
                              ratio=1.0, lb=1.0, ub=5.0)
    picked = torch.tensor([[True, False, False], [False, True, False]])
    assert torch.equal(out.token_stats["cov_clipped"], picked)
    # loss −A·ρ = −A, zeroed at the picked tokens
    assert_close(out.loss_mat * MASK, t([[0.0, -1.0, -1.0], [1.0, 0.0, 0.0]]))
    (out.loss_mat * MASK).sum().backward()
    # ∂(−A·ρ)/∂log π = −A·ρ = −A; 0 at picked tokens (and padding)
    assert torch.equal(logp.grad, t([[0.0, -1.0, -1.0], [1.0, 0.0, 0.0]]))
    # ub = 2 leaves only (0,0) = 1.6; lb = 1.6 excludes it (strict bounds, as verl)
    out = compute_policy_loss("clip_cov", LOGP, LOGP, ADV, MASK, clip_low=0.2, clip_high=0.2, ratio=1.0,
                              lb=1.0, ub=2.0)
    assert out.token_stats["cov_clipped"].nonzero().tolist() == [[0, 0]]
    out = compute_policy_loss("clip_cov", LOGP, LOGP, ADV, MASK, clip_low=0.2, clip_high=0.2, ratio=1.0,
                              lb=1.6, ub=5.0)
    assert out.token_stats["cov_clipped"].nonzero().tolist() == [[1, 1]]


def test_clip_cov_skips_tokens_the_ppo_clip_already_binds() -> None:
    # Same log π (so the same Cov) but ρ = 1.5 at (0,0) with A = +1 > 0: the clip binds there
    # (loss max(−1.5, −1.2) = −1.2), so only (1,1) is a candidate.
    old = LOGP.clone()
    old[0, 0] = LOGP[0, 0] - math.log(1.5)
    out = compute_policy_loss("clip_cov", LOGP, old, ADV, MASK, clip_low=0.2, clip_high=0.2, ratio=1.0,
                              lb=1.0, ub=5.0)
    assert out.token_stats["cov_clipped"].nonzero().tolist() == [[1, 1]]
    assert out.token_stats["clipped_high"][0, 0]
    assert out.loss_mat[0, 0].item() == pytest.approx(-1.2)


def test_clip_cov_random_pick_is_verls_randperm_over_row_major_candidates() -> None:
    # ratio = 0.2: n = max(⌊0.2·5⌋, 1) = 1 of the candidates [(0,0), (1,1)] (row-major):
    # the one at torch.randperm(2)[0] of the same generator state.
    for seed in range(6):
        first = torch.randperm(2, generator=torch.Generator().manual_seed(seed))[0].item()
        out = compute_policy_loss("clip_cov", LOGP, LOGP, ADV, MASK, clip_low=0.2, clip_high=0.2,
                                  ratio=0.2, lb=1.0, ub=5.0, generator=torch.Generator().manual_seed(seed))
        assert out.token_stats["cov_clipped"].nonzero().tolist() == [[[0, 0], [1, 1]][first]]


def test_kl_cov_hand_values() -> None:
    # log π − log π_old = d; ρ = e^d. Cov (above) = [1.6, 0.4, −1.2 | −1.8, 3.0].
    d = t([[0.1, -0.2, 0.3], [0.05, -0.1, 0.0]])
    old = LOGP - d
    # ratio = 0.4: n = max(1, ⌊5·0.4⌋) = 2 largest Cov: (1,1) = 3.0 and (0,0) = 1.6
    out = compute_policy_loss("kl_cov", LOGP, old, ADV, MASK, ratio=0.4, coef=0.5)
    assert torch.equal(out.token_stats["kl_penalised"], torch.tensor([[True, False, False], [False, True, False]]))
    e = math.exp
    # penalised: −A·e^d + 0.5·|d|; elsewhere −A·e^d (no PPO clip even at ρ = e^0.3 ≈ 1.35)
    expected = t([[-e(0.1) + 0.05, -e(-0.2), -e(0.3)], [e(0.05), e(-0.1) + 0.05, 0.0]])
    assert_close(out.loss_mat * MASK, expected)
    # ratio = 1e-4: n = max(1, ⌊0.0005⌋) = 1: only (1,1)
    out = compute_policy_loss("kl_cov", LOGP, old, ADV, MASK, ratio=1e-4, coef=1.0)
    assert out.token_stats["kl_penalised"].nonzero().tolist() == [[1, 1]]


def test_gspo_hand_values_and_sequence_gradient() -> None:
    # Sequence log-ratios: row 0 mean(0.3, −0.1, 0.1) = 0.1, s_0 = e^0.1 ≈ 1.10517;
    # row 1 mean(−0.4, 0.0) = −0.2, s_1 = e^−0.2 ≈ 0.81873 (the pad entry's 5.0 is ignored).
    d = t([[0.3, -0.1, 0.1], [-0.4, 0.0, 5.0]])
    s0, s1 = math.exp(0.1), math.exp(-0.2)
    # ε = 0.1: row 0 (A = 1) s_0 > 1.1 -> max(−s_0, −1.1) = −1.1, clipped high;
    #          row 1 (A = −1) s_1 < 0.9 -> max(s_1, 0.9) = 0.9, clipped low
    out = compute_policy_loss("gspo", LOGP, LOGP - d, ADV, MASK, clip_low=0.1, clip_high=0.1)
    assert_close(out.loss_mat * MASK, t([[-1.1] * 3, [0.9, 0.9, 0.0]]))
    assert out.token_stats["clipped_high"][0].all() and out.token_stats["clipped_low"][1].all()
    # ε = 0.2: nothing clipped: −A·s on every token of the sequence
    logp = LOGP.clone().requires_grad_(True)
    out = compute_policy_loss("gspo", logp, LOGP - d, ADV, MASK, clip_low=0.2, clip_high=0.2)
    assert_close(out.loss_mat * MASK, t([[-s0] * 3, [s1, s1, 0.0]]))
    # Aggregated with the forced seq-mean-token-mean: loss = mean_i(−A_i s_i), so
    # ∂/∂log π_{i,t} = −A_i·s_i/(N·|y_i|): row 0 −s_0/6, row 1 +s_1/4.
    w = aggregation_weights(MASK, POLICY_LOSSES["gspo"].loss_agg, BatchNorm(2, 5, 3))
    (w * out.loss_mat).sum().backward()
    assert_close(logp.grad, t([[-s0 / 6] * 3, [s1 / 4, s1 / 4, 0.0]]))


def test_gspo_clamps_the_log_ratio_at_10() -> None:
    d = t([[20.0, 20.0, 20.0], [0.0, 0.0, 0.0]])
    out = compute_policy_loss("gspo", LOGP, LOGP - d, t([-1.0, 1.0]), MASK, clip_low=0.2, clip_high=0.2)
    # A = −1 < 0: max(s, clip(s)) = s = e^10 (not e^20)
    assert_close(out.loss_mat[0], torch.full((3,), math.exp(10.0)))


# --- high-entropy token mask ---------------------------------------------------------------------

# 10 valid tokens with entropies 0.1 … 1.0; the two padded entries hold large junk.
ENT = t([[0.1, 0.2, 0.3, 0.4, 0.5, 0.6], [0.7, 0.8, 0.9, 1.0, 5.0, 9.0]])
EMASK = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])


def test_high_entropy_mask_hand_values() -> None:
    # ρ = 0.2: τ = quantile(valid, 0.8): position 0.8·9 = 7.2 -> 0.8 + 0.2·(0.9 − 0.8) = 0.82: keeps 0.9, 1.0
    keep = high_entropy_mask(ENT, EMASK, rho=0.2)
    assert keep.nonzero().tolist() == [[1, 2], [1, 3]]
    # ρ = 0.5: position 4.5 -> 0.55: keeps 0.6 … 1.0 (5 tokens)
    assert high_entropy_mask(ENT, EMASK, rho=0.5).nonzero().tolist() == [[0, 5], [1, 0], [1, 1], [1, 2], [1, 3]]
    # ρ = 1: τ = min: every valid token, never padding
    assert torch.equal(high_entropy_mask(ENT, EMASK, rho=1.0), EMASK.bool())


def test_high_entropy_mask_ties_empty_and_bad_rho() -> None:
    flat = torch.full((2, 3), 0.3)
    assert high_entropy_mask(flat, torch.ones(2, 3), rho=0.2).all()  # ties at τ are all kept
    assert not high_entropy_mask(ENT, torch.zeros_like(EMASK), rho=0.2).any()
    for bad in (0.0, 1.5):
        with pytest.raises(UserError, match=r"\(0, 1\]"):
            high_entropy_mask(ENT, EMASK, rho=bad)


# --- unlikeliness reward -------------------------------------------------------------------------


def test_unlikeliness_reward_hand_values() -> None:
    # r = [1, 1, 0, 1]; seq log-probs [−1, −3, −6, −2]. Ascending ranks over all G = 4 samples:
    # −6 (idx 2) -> 0, −3 (idx 1) -> 1, −2 (idx 3) -> 2, −1 (idx 0) -> 3.
    # β = 0.5: factors 1 − 0.5·rank/4 = [1 − 3/8, 1 − 1/8, 1, 1 − 2/8] -> r = [0.625, 0.875, 0, 0.75]
    r = unlikeliness_rewards(t([[1, 1, 0, 1]]), t([[-1.0, -3.0, -6.0, -2.0]]), beta=0.5)
    assert_close(r, t([[0.625, 0.875, 0.0, 0.75]]))
    # β = 0: unchanged; the result composes with the budget (non-negative rewards)
    assert torch.equal(unlikeliness_rewards(t([[1, 0]]), t([[0.0, 1.0]]), beta=0.0), t([[1, 0]]))
    # r̃ = [0.625, 0.875, 0, 0.75]/2.25; dr_grpo + budget B = 1 centres it: r̃ − 1/4
    assert_close(compute_advantages(r, "dr_grpo", budget=1.0), r / 2.25 - 0.25)


def test_unlikeliness_reward_bad_inputs() -> None:
    with pytest.raises(UserError, match=r"\[P, G\]"):
        unlikeliness_rewards(t([[1, 0]]), t([[0.0, 1.0, 2.0]]), beta=0.5)
    with pytest.raises(UserError, match=r"\[0, 1\]"):
        unlikeliness_rewards(t([[1, 0]]), t([[0.0, 1.0]]), beta=1.5)


# --- DAPO dynamic sampling -----------------------------------------------------------------------


def test_dynamic_sampling_keeps_groups_with_0_lt_k_lt_g() -> None:
    correct = torch.tensor([[1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1], [1, 1, 0, 1]], dtype=torch.bool)
    assert dynamic_sampling_keep(correct).tolist() == [True, False, False, True]
    assert dynamic_sampling_keep(correct.float()).tolist() == [True, False, False, True]
    with pytest.raises(UserError, match=r"\[P, G\]"):
        dynamic_sampling_keep(torch.tensor([1, 0]))
