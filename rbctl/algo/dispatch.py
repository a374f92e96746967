"""Calls by method name: the registered estimator with the budget (`compute_advantages`) and the
registered policy loss (`compute_policy_loss`), each with exactly its function's keyword parameters
(rbctl.algo.registry). The functions' modules import no registry; this one imports both.
"""

from __future__ import annotations

import torch

from rbctl.algo.advantages import budget_rewards, check_rewards
from rbctl.algo.policy_losses import PolicyLossResult
from rbctl.algo.registry import get_estimator, get_policy_loss, param_problems
from rbctl.errors import UserError


def compute_advantages(
    rewards: torch.Tensor,
    estimator: str,
    budget: float | None = None,
    shift: float = 0.0,
    **params: object,
) -> torch.Tensor:
    """Advantages [P, G] from rewards [P, G] with one of `ESTIMATORS`, optionally budgeted.

    budget=None: the base estimator as docs/method.md's table defines it.
    budget=B:   r̃ = budget_rewards(r, B, shift), then the base estimator's centring of r̃
                without its per-group std scaling. An estimator whose `composes_with_budget` is
                False refuses a budget.
    params:     the estimator's own keyword parameters, exactly those in `Method.params`,
                e.g. k=4 for an estimator whose function takes k.
    """
    check_rewards(rewards)
    est = get_estimator(estimator)
    known = est.params
    unknown, missing = param_problems(known, params)
    if unknown:
        takes = ", ".join(known) or "none"
        raise UserError(f"estimator '{estimator}' has no parameter {', '.join(unknown)} (its parameters: {takes})")
    if missing:
        raise UserError(f"estimator '{estimator}' needs {', '.join(missing)}, e.g. compute_advantages(r, '{estimator}', "
                        + ", ".join(f"{p}=..." for p in missing) + ")")
    rewards = rewards.float()
    if budget is None:
        return est.fn(rewards, False, **params)
    if not est.composes_with_budget:
        raise UserError(f"estimator '{estimator}' does not compose with the budget ({est.no_budget}); set budget to null")
    return est.fn(budget_rewards(rewards, budget, shift), True, **params)


def compute_policy_loss(name: str, logp, old_logp, advantages, mask, **params) -> PolicyLossResult:
    """The registered loss `name` with exactly its keyword parameters (unknown or missing ones are
    a UserError naming them). logp, old_logp, mask [N, T]; advantages [N] or [N, T]."""
    entry = get_policy_loss(name)
    known = entry.params
    unknown, missing = param_problems(known, params)
    if unknown or missing:
        parts = ([f"unknown parameter(s) {', '.join(unknown)}"] if unknown else []) + (
            [f"missing {', '.join(missing)}"] if missing else [])
        raise UserError(f"policy loss '{name}': {'; '.join(parts)} (its parameters: {', '.join(known)})")
    if logp.shape != old_logp.shape or logp.shape != mask.shape:
        raise UserError(f"logp, old_logp and mask must share one [N, T] shape, got "
                        f"{tuple(logp.shape)}, {tuple(old_logp.shape)}, {tuple(mask.shape)}")
    return entry.fn(logp, old_logp, advantages, mask, **params)
