"""Pure tensor functions: advantage estimators and the budget, sharpness (κ, κ_eff), losses, and
the registry of methods (`rbctl.algo.registry`) that names each of them.

Nothing here imports the rest of rbctl (only `rbctl.errors`): this is the plug-in a user of
another framework takes. Formulas: docs/method.md. The names below are imported on first use, so
that importing the registry (which needs no torch) does not import torch.
"""

import importlib as _importlib

_EXPORTS = {
    "rbctl.algo.registry": ("ESTIMATORS", "METHODS", "POLICY_LOSSES", "Method", "MetricDoc", "Setting", "get_estimator",
                            "get_policy_loss", "keyword_params", "register", "setting"),
    "rbctl.algo.advantages": ("STD_EPS", "budget_rewards"),
    "rbctl.algo.dispatch": ("compute_advantages", "compute_policy_loss"),
    "rbctl.algo.policy_losses": ("PolicyLossResult",),
    "rbctl.algo.sharpness": ("GroupStats", "advantage_gap", "group_stats", "kappa", "kappa_eff", "nanmean_or_none",
                             "sharpness_per_prompt"),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'rbctl.algo' has no attribute {name!r}")
    value = getattr(_importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value
