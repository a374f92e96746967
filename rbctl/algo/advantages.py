"""Advantage estimators and reward budgeting (pure functions, no I/O).

This module holds the estimators' functions; a user of another framework needs only
`compute_advantages` (rbctl.algo.dispatch: by name, through rbctl.algo.registry) or `budget_rewards`
on a `[P, G]` tensor of rewards — P prompts, G rollouts each.
Every formula here is the one in docs/method.md; the docstrings restate it.

    >>> import torch
    >>> from rbctl.algo import compute_advantages
    >>> r = torch.tensor([[1., 0., 0., 0.]])
    >>> compute_advantages(r, "grpo", budget=1.0)      # K=1 correct of G=4: gap B/K = 1
    tensor([[ 0.7500, -0.2500, -0.2500, -0.2500]])
"""

from __future__ import annotations

import math

import torch

from rbctl.errors import UserError

# docs/method.md: GRPO divides by (std + 1e-6); the same epsilon guards batch whitening and MaxRL's mean.
STD_EPS = 1e-6


def check_rewards(rewards: torch.Tensor) -> None:
    if rewards.dim() != 2:
        raise UserError(f"rewards must be a [P, G] tensor, got shape {tuple(rewards.shape)}")
    if rewards.shape[1] < 2:
        raise UserError(f"group size G must be at least 2 to centre rewards, got G={rewards.shape[1]}")
    if not torch.isfinite(rewards).all():
        raise UserError("rewards contain NaN or inf")


def _group_centre(r: torch.Tensor) -> torch.Tensor:
    """r_i − mean(r) within each group.  [P, G] -> [P, G]

    A group of equal rewards gets exact zeros: in float32, r − mean(r) leaves ~1e-8 residues that
    GRPO's division by (std + 1e-6) would blow up to O(1) advantages for non-binary rewards."""
    centred = r - r.mean(dim=1, keepdim=True)
    equal = (r == r[:, :1]).all(dim=1, keepdim=True)
    return torch.where(equal, torch.zeros_like(centred), centred)


def _group_std_scale(centred: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """Divide by (unbiased group std + 1e-6). A group of equal rewards has centred == 0, so 0, never NaN."""
    return centred / (r.std(dim=1, keepdim=True) + STD_EPS)


def _loo_centre(r: torch.Tensor) -> torch.Tensor:
    """r_i − mean_{j≠i} r_j = G/(G−1) · (r_i − mean(r))."""
    g = r.shape[1]
    return _group_centre(r) * (g / (g - 1))


def _batch_whiten(x: torch.Tensor) -> torch.Tensor:
    """x / (std(x) + 1e-6) with one unbiased std over the whole batch.

    x is group-centred, so its batch mean is 0 and subtracting it (as whitening does) would only
    add float residues to groups whose advantages are exactly 0."""
    if x.numel() < 2:
        return x
    return x / (x.std() + STD_EPS)


# --- estimators: rewards [P, G] -> advantages [P, G] -------------------------------------------


def grpo(r: torch.Tensor, budgeted: bool = False) -> torch.Tensor:
    """GRPO: A_i = (r_i − mean(r)) / (std(r) + 1e-6).

    Budgeted: A_i = r̃_i − mean(r̃) — no per-group std scaling, which would cancel the budget
    exactly for binary rewards (docs/method.md, "Reward budgeting")."""
    centred = _group_centre(r)
    return centred if budgeted else _group_std_scale(centred, r)


def dr_grpo(r: torch.Tensor, budgeted: bool = False) -> torch.Tensor:
    """Dr.GRPO: A_i = r_i − mean(r) (no std scaling, so budgeting only changes the rewards)."""
    return _group_centre(r)


def rloo(r: torch.Tensor, budgeted: bool = False) -> torch.Tensor:
    """RLOO: A_i = r_i − mean_{j≠i}(r_j) = G/(G−1)·(r_i − mean(r))."""
    return _loo_centre(r)


def reinforce_pp(r: torch.Tensor, budgeted: bool = False) -> torch.Tensor:
    """REINFORCE++ (group baseline): A = r_i − mean(r), then whitened with one mean/std over the batch.

    The batch whitening is a single scalar rescaling of the whole batch, not a per-group std,
    so it is kept under budgeting (docs/method.md)."""
    return _batch_whiten(_group_centre(r))


def maxrl(r: torch.Tensor, budgeted: bool = False) -> torch.Tensor:
    """MaxRL (Tajwar et al. 2026, arXiv 2602.02710): A_i = (r_i − μ̂)/(μ̂ + 1e-6), μ̂ = mean(r).

    The authors' `compute_maxrl_outcome_advantage` (tajwarfahim/maxrl, verl/trainer/ppo/core_algos.py
    @ c0698eb; tests/unit/test_maxrl_upstream.py checks this function against a transcription of it):
    the 1e-6 keeps an all-wrong group (μ̂ = 0) at 0 and scales the rest by μ̂/(μ̂ + 1e-6), a relative
    1e-6/μ̂ (≤ 1.3e-4 at G = 128). The paper's estimator (1/K)·Σ_{i correct} S_i − (1/G)·Σ_i S_i
    (K correct of G) is (1/G)·Σ_i A_i S_i with A = (r − μ̂)/μ̂, so this is `dr_grpo` + budget with
    B = G times μ̂/(μ̂ + 1e-6) (docs/method.md, "Finite-G objective"). Rewards must be ≥ 0 (μ̂ is a
    success rate). It does not compose with the budget: (r̃ − mean r̃)/mean r̃ cancels any B."""
    if (r < 0).any():
        raise UserError(f"maxrl needs rewards >= 0 (mean reward is a success rate); got {r.min().item():g}")
    return _group_centre(r) / (r.mean(dim=1, keepdim=True) + STD_EPS)


def passk_advantages(n: int, n_correct: int, k: int) -> tuple[float, float]:
    """(Â_pos, Â_neg) of Pass@k Training's analytic derivation for one binary group (float64).

    Chen et al. 2025, arXiv 2508.10751, eqs. 11–15; the authors' code/passk_adv.py `calc_adv`:
        R̄ = 1 − C(N_neg, k)/C(N, k),   σ = sqrt(R̄(1 − R̄)),
        Â_pos = (1 − R̄)/(σ + 1e-6),   Â_neg = (1 − R̄ − C(N_neg − 1, k − 1)/C(N − 1, k − 1))/(σ + 1e-6).
    C(a, b) = 0 for b > a (math.comb), so a group where every k-subset holds a correct sample
    (N_neg < k) or none does (N_pos = 0) gets 0 for both."""
    n_neg = n - n_correct
    r_bar = 1.0 - math.comb(n_neg, k) / math.comb(n, k)
    sigma = math.sqrt(r_bar * (1.0 - r_bar)) + STD_EPS
    p_all_neg_given_neg = math.comb(n_neg - 1, k - 1) / math.comb(n - 1, k - 1) if n_neg >= 1 else 0.0
    return (1.0 - r_bar) / sigma, (1.0 - r_bar - p_all_neg_given_neg) / sigma


def passk(r: torch.Tensor, budgeted: bool = False, *, k: int) -> torch.Tensor:
    """Pass@k Training's analytic advantages (arXiv 2508.10751): Â_pos for r = 1, Â_neg for r = 0.

    Binary rewards only (the derivation counts correct samples), 1 ≤ k ≤ G. k = 1 is GRPO with the
    population std. Does not compose with the budget: it is defined on 0/1 rewards, which r̃ is not."""
    g = r.shape[1]
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= g:
        raise UserError(f"passk needs an integer k with 1 <= k <= G={g}, got k={k!r}")
    if not ((r == 0) | (r == 1)).all():
        raise UserError("passk needs binary rewards (0 or 1): its advantages are derived from correct counts")
    correct = r == 1
    table = torch.tensor([passk_advantages(g, c, k) for c in range(g + 1)], dtype=torch.float64)  # [G+1, 2]
    a_pos, a_neg = table[correct.sum(dim=1)].to(r.dtype).unbind(dim=1)  # [P] each
    return torch.where(correct, a_pos.unsqueeze(1), a_neg.unsqueeze(1))


# --- reward budgeting ----------------------------------------------------------------------------


def budget_rewards(rewards: torch.Tensor, budget: float, shift: float = 0.0) -> torch.Tensor:
    """Split a fixed budget B among each prompt's rollouts in proportion to the shifted reward.

        r̃_i = B · (r_i + c) / Σ_j (r_j + c)   when Σ_j (r_j + c) > 0
        r̃_i = 0                                 when Σ_j (r_j + c) = 0

    rewards: [P, G]; budget B > 0; shift c ≥ 0 with every r_i + c ≥ 0 (a reward below −c is an
    error, never a silent clamp). Each row of the result sums to B when it earned anything.
    """
    check_rewards(rewards)
    if not budget > 0:
        raise UserError(f"budget must be > 0, got {budget}")
    if shift < 0:
        raise UserError(f"shift must be >= 0, got {shift}")
    shifted = rewards + shift
    if (shifted < 0).any():
        worst = rewards.min().item()
        raise UserError(
            f"reward {worst:g} is below -shift (shift={shift:g}); raise algo.shift so every r + c >= 0"
        )
    total = shifted.sum(dim=1, keepdim=True)
    earned = total > 0
    safe_total = torch.where(earned, total, torch.ones_like(total))
    return torch.where(earned, budget * shifted / safe_total, torch.zeros_like(shifted))
