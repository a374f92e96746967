"""Reward budgeting inside other RL frameworks, in a few lines each (docs/integrations.md).

- `rbctl.integrations.verl`: the budgeted estimators registered in verl's advantage-estimator
  registry, chosen with `algorithm.adv_estimator=grpo_budget` (or `dr_grpo_budget`, ...).
- `rbctl.integrations.trl`: `BudgetGRPOTrainer`, TRL's `GRPOTrainer` with rbctl's advantages.

Both compute advantages with `rbctl.algo.compute_advantages` and nothing else, so "X + budget"
means the same in rbctl, verl and TRL. Neither framework is a dependency of rbctl: each module
imports its framework only when used and refuses a version outside the range it was written for.
"""

from __future__ import annotations

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from rbctl.errors import UserError


def require_version(package: str, installed: str, supported: str, tested: str) -> None:
    """Raise a UserError naming the supported range when `installed` is outside it.

    The integrations override framework internals (TRL) or rely on a calling convention (verl)
    that were read in the supported range; outside it they may silently compute something else."""
    if Version(installed) not in SpecifierSet(supported):
        raise UserError(
            f"rbctl.integrations.{package} supports {package}{supported} (tested with {package}=={tested}); "
            f"found {package}=={installed}. Install a supported version, e.g. pip install '{package}=={tested}'."
        )
