"""Advantage estimators and reward budgeting (pure functions, no I/O).

This module is the plug-in: a user of another framework needs only `compute_advantages`
(or `budget_rewards`) on a `[P, G]` tensor of rewards — P prompts, G rollouts each.
Every formula here is the one in docs/method.md; the docstrings restate it.

    >>> import torch
    >>> from rbctl.algo.advantages import compute_advantages
    >>> r = torch.tensor([[1., 0., 0., 0.]])
    >>> compute_advantages(r, "grpo", budget=1.0)      # K=1 correct of G=4: gap B/K = 1
    tensor([[ 0.7500, -0.2500, -0.2500, -0.2500]])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from rbctl.errors import UserError

# docs/method.md: GRPO divides by (std + 1e-6); the same epsilon guards batch whitening.
STD_EPS = 1e-6


def _check_rewards(rewards: torch.Tensor) -> None:
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


@dataclass(frozen=True)
class Estimator:
    """An advantage estimator and the loss aggregation docs/method.md pairs it with by default."""

    fn: Callable[[torch.Tensor, bool], torch.Tensor]
    default_loss_agg: str


ESTIMATORS: dict[str, Estimator] = {
    "grpo": Estimator(grpo, "seq-mean-token-mean"),
    "dr_grpo": Estimator(dr_grpo, "seq-mean-token-sum-norm"),
    "rloo": Estimator(rloo, "token-mean"),
    "reinforce_pp": Estimator(reinforce_pp, "token-mean"),
}


def get_estimator(name: str) -> Estimator:
    try:
        return ESTIMATORS[name]
    except KeyError:
        raise UserError(f"unknown estimator '{name}'; valid: {', '.join(ESTIMATORS)}") from None


# --- reward budgeting ----------------------------------------------------------------------------


def budget_rewards(rewards: torch.Tensor, budget: float, shift: float = 0.0) -> torch.Tensor:
    """Split a fixed budget B among each prompt's rollouts in proportion to the shifted reward.

        r̃_i = B · (r_i + c) / Σ_j (r_j + c)   when Σ_j (r_j + c) > 0
        r̃_i = 0                                 when Σ_j (r_j + c) = 0

    rewards: [P, G]; budget B > 0; shift c ≥ 0 with every r_i + c ≥ 0 (a reward below −c is an
    error, never a silent clamp). Each row of the result sums to B when it earned anything.
    """
    _check_rewards(rewards)
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


def compute_advantages(
    rewards: torch.Tensor,
    estimator: str,
    budget: float | None = None,
    shift: float = 0.0,
) -> torch.Tensor:
    """Advantages [P, G] from rewards [P, G] with one of `ESTIMATORS`, optionally budgeted.

    budget=None: the base estimator as docs/method.md's table defines it.
    budget=B:   r̃ = budget_rewards(r, B, shift), then the base estimator's centring of r̃
                without its per-group std scaling.
    """
    _check_rewards(rewards)
    est = get_estimator(estimator)
    rewards = rewards.float()
    if budget is None:
        return est.fn(rewards, False)
    return est.fn(budget_rewards(rewards, budget, shift), True)
