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
    reinforce_pp,
    rloo,
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
    "grpo", "reinforce_pp", "rloo", "GroupStats", "advantage_gap", "group_stats", "kappa", "kappa_eff",
    "nanmean_or_none", "sharpness_per_prompt",
]
