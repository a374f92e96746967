"""Pure tensor functions: advantage estimators and the budget, sharpness (κ, κ_eff), losses.

Nothing here imports the rest of rbctl (only `rbctl.errors`): this is the plug-in a user of
another framework takes. Formulas: docs/method.md.
"""

from rbctl.algo.advantages import (
    ESTIMATORS,
    STD_EPS,
    Estimator,
    budget_rewards,
    compute_advantages,
    dr_grpo,
    get_estimator,
    grpo,
    keyword_params,
    maxrl,
    passk,
    passk_advantages,
    reinforce_pp,
    rloo,
)
from rbctl.algo.arms import dynamic_sampling_keep, high_entropy_mask, unlikeliness_rewards
from rbctl.algo.policy_losses import (
    POLICY_LOSSES,
    PolicyLoss,
    PolicyLossResult,
    compute_policy_loss,
    get_policy_loss,
    register_policy_loss,
)
from rbctl.algo.sharpness import (
    GroupStats,
    advantage_gap,
    group_stats,
    kappa,
    kappa_eff,
    nanmean_or_none,
    sharpness_per_prompt,
)

__all__ = [
    "ESTIMATORS", "STD_EPS", "Estimator", "budget_rewards", "compute_advantages", "dr_grpo", "get_estimator",
    "grpo", "keyword_params", "reinforce_pp", "rloo", "GroupStats", "advantage_gap", "group_stats", "kappa", "kappa_eff",
    "nanmean_or_none", "sharpness_per_prompt", "maxrl", "passk", "passk_advantages", "dynamic_sampling_keep",
    "high_entropy_mask", "unlikeliness_rewards", "POLICY_LOSSES", "PolicyLoss", "PolicyLossResult",
    "compute_policy_loss", "get_policy_loss", "register_policy_loss",
]
