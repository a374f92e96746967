"""Sharpness: how strongly a reward gap becomes an advantage gap (κ) or a log-probability gap (κ_eff).

Definitions in docs/method.md ("Sharpness: κ and κ_eff"). Pure functions on `[P, G]` tensors.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from rbctl.algo.advantages import check_rewards
from rbctl.algo.dispatch import compute_advantages


def reward_sides(rewards: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[P, G] -> (above, below): the rollouts whose reward is above / below their group's mean."""
    rewards = rewards.double()
    mean = rewards.mean(dim=1, keepdim=True)
    return rewards > mean, rewards < mean


def mixed_prompts(rewards: torch.Tensor) -> torch.Tensor:
    """[P, G] -> [P] bool: the prompts whose rewards are not all equal, where κ and κ_eff are defined."""
    above, below = reward_sides(rewards)
    return above.any(dim=1) & below.any(dim=1)


def sharpness_per_prompt(rewards: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """Per-prompt sharpness: how much of a reward gap becomes a gap in `values`.

        (mean v over rollouts with r above the group mean − mean v over those below)
        / (mean r above − mean r below)

    With values = advantages this is the nominal κ; with values = d_i = log π_new(y_i) −
    log π_old(y_i) (summed over response tokens) it is κ_eff (docs/method.md, "Sharpness").
    rewards, values: [P, G] -> [P]; NaN for prompts whose rewards are all equal (not mixed).
    """
    check_rewards(rewards)
    rewards = rewards.double()
    values = values.double()
    above, below = reward_sides(rewards)
    mixed = mixed_prompts(rewards)

    def masked_mean(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return (x * m).sum(dim=1) / m.sum(dim=1).clamp(min=1)

    value_gap = masked_mean(values, above) - masked_mean(values, below)
    reward_gap = masked_mean(rewards, above) - masked_mean(rewards, below)
    kappa = value_gap / torch.where(mixed, reward_gap, torch.ones_like(reward_gap))
    return torch.where(mixed, kappa, torch.full_like(kappa, float("nan"))).float()


def kappa(rewards: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """Nominal sharpness κ per prompt [P] (NaN where the group's rewards are all equal).

    Binary rewards: GRPO 1/(σ̂ + 1e-6), Dr.GRPO 1, RLOO G/(G−1), budget B/K."""
    return sharpness_per_prompt(rewards, advantages)


def kappa_eff(rewards: torch.Tensor, logratio_sums: torch.Tensor) -> torch.Tensor:
    """Measured sharpness κ_eff per prompt [P] from d_i = Σ_t (log π_new − log π_old) over response tokens."""
    return sharpness_per_prompt(rewards, logratio_sums)


def nanmean_or_none(x: torch.Tensor) -> float | None:
    """Mean over the finite entries (the mixed prompts), or None when there are none."""
    finite = x[torch.isfinite(x)]
    return None if finite.numel() == 0 else float(finite.mean())


@dataclass
class GroupStats:
    """Per-step group statistics: the fractions of prompts whose rollouts all agree."""

    frac_all_correct: float
    frac_all_wrong: float
    frac_mixed: float


def group_stats(correct: torch.Tensor) -> GroupStats:
    """correct: bool [P, G] -> fractions of prompts all correct / all wrong / mixed."""
    c = correct.bool()
    all_c = c.all(dim=1).float().mean().item()
    all_w = (~c).all(dim=1).float().mean().item()
    mixed = (c.any(dim=1) & (~c).any(dim=1)).float().mean().item()
    return GroupStats(all_c, all_w, mixed)


def advantage_gap(correct: torch.Tensor, advantages: torch.Tensor) -> float | None:
    """Mean over mixed prompts of (mean A of correct rollouts − mean A of wrong ones); None if none mixed."""
    c = correct.bool()
    mixed = c.any(dim=1) & (~c).any(dim=1)
    if not mixed.any():
        return None
    a = advantages.double()
    pos = (a * c).sum(1) / c.sum(1).clamp(min=1)
    neg = (a * ~c).sum(1) / (~c).sum(1).clamp(min=1)
    return float((pos - neg)[mixed].mean())


def kappa_by_k(g: int = 8, budget: float = 1.0) -> list[dict]:
    """κ per number of correct rollouts K (binary rewards, one group of G) for each estimator, ± budget
    (the study's claim that the advantage gap shrinks as more rollouts are right)."""
    rows = []
    for k in range(1, g):
        r = torch.tensor([[1.0] * k + [0.0] * (g - k)])
        row = {"K": k}
        for name in ("grpo", "dr_grpo", "rloo"):
            row[name] = float(kappa(r, compute_advantages(r, name)))
            row[f"{name} + budget"] = float(kappa(r, compute_advantages(r, name, budget=budget)))
        rows.append(row)
    return rows


def finite_g_check(g: int = 8, budget: float = 1.0, ps=(0.05, 0.2, 0.5, 0.8, 0.95)) -> tuple[float, float]:
    """Exact expectation over all 2^G outcomes of Σ_i A_i (c_i − p) / (p(1−p)) (the unclipped estimator's
    gradient weight on ∇p) against J_G'(p) = B(1 − (1−p)^{G−1})/p, for GRPO + budget and for GRPO:
    (largest relative error of GRPO + budget, smallest of GRPO)."""
    outcomes = torch.tensor(list(itertools.product([0.0, 1.0], repeat=g)))
    k = outcomes.sum(dim=1).double()
    errors = {}
    for name, b in (("budget", budget), ("grpo", None)):
        a = compute_advantages(outcomes, "grpo", budget=b).double()
        errs = []
        for p in ps:
            prob = p**k * (1 - p) ** (g - k)
            lhs = float((prob * (a * (outcomes.double() - p)).sum(dim=1)).sum()) / (p * (1 - p))
            target = budget * (1 - (1 - p) ** (g - 1)) / p
            errs.append(abs(lhs - target) / target)
        errors[name] = errs
    return max(errors["budget"]), min(errors["grpo"])
