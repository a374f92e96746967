"""Reward budgeting in TRL: `BudgetGRPOTrainer` is TRL's `GRPOTrainer` with rbctl's advantages.

    from rbctl.integrations.trl import BudgetGRPOTrainer
    trainer = BudgetGRPOTrainer(model, reward_funcs=..., args=GRPOConfig(...), train_dataset=...,
                                estimator="grpo", budget=1.0, shift=0.0)

How it departs from `GRPOTrainer` (TRL 1.0 – 1.16, read in trl/trainer/grpo_trainer.py; tested
with 1.16.0). TRL computes advantages inline in `_generate_and_score_completions`, with no hook of
their own, so the subclass recomputes them right after it:

1. `_calculate_rewards` is wrapped to keep the reward matrix it returns, gathered over processes,
   [N, F] for N = P·G completions and F reward functions.
2. The scalar reward is r = Σ_f w_f·r_f (TRL's `reward_weights`, `nansum`, as TRL's default
   `multi_objective_aggregation="sum_then_normalize"` forms it). TRL's sampler puts a prompt's G =
   `num_generations` completions in consecutive rows, so r.view(P, G) is rbctl's [P, G] layout.
3. A = `rbctl.algo.compute_advantages(r, estimator, budget, shift)` replaces `advantages` in the
   batch that `compute_loss` optimises (this process's rows) and the same batch's entries in TRL's
   completion log (`self._logs["advantages"]`), so what TRL logs is what it optimised.
4. `kappa` and `adv/gap` (docs/metrics.md) are logged beside TRL's metrics. `adv/gap` needs a
   notion of "correct", so it is logged only when every reward is 0 or 1 (correct = r == 1).

Everything else is TRL's: the loss (`loss_type`), clipping, KL (`beta`), sampling. TRL's own reward
scaling is replaced, not composed: `scale_rewards` must stay at its default "group" (the
estimator decides scaling: `grpo` divides by the group std, `dr_grpo` does not) and
`multi_objective_aggregation` must be "sum_then_normalize".
"""

from __future__ import annotations

import torch

from rbctl.algo import advantage_gap, compute_advantages, kappa, nanmean_or_none
from rbctl.errors import UserError
from rbctl.integrations import require_version

SUPPORTED_TRL = ">=1.0,<1.17"
TESTED_TRL = "1.16.0"

try:
    import trl
except ImportError as e:
    raise ImportError(f"rbctl.integrations.trl needs trl{SUPPORTED_TRL}: pip install 'trl=={TESTED_TRL}'") from e
require_version("trl", trl.__version__, SUPPORTED_TRL, TESTED_TRL)

from trl import GRPOTrainer  # noqa: E402  (after the version check: an unsupported TRL may not import cleanly)

# scale_rewards values that ask for a different estimator than the one passed
_SCALE_REWARDS_HINT = {"none": "estimator='dr_grpo'", "batch": "estimator='reinforce_pp' (batch whitening)"}


class BudgetGRPOTrainer(GRPOTrainer):
    """TRL's GRPOTrainer whose advantages come from `rbctl.algo.compute_advantages`.

    estimator: one of rbctl.algo.ESTIMATORS ("grpo", "dr_grpo", "rloo", "reinforce_pp").
    budget: B > 0 splits B among each prompt's completions (docs/method.md); None = the base estimator.
    shift: c ≥ 0 added to every reward before the split; every r + c must be ≥ 0.
    All other arguments are GRPOTrainer's.
    """

    def __init__(self, *args, estimator: str = "grpo", budget: float | None = 1.0, shift: float = 0.0, **kwargs):
        # Validate before TRL loads the model: a dry run on one group of zeros checks the
        # estimator name, B > 0 and c ≥ 0 with the same code that will run in training.
        compute_advantages(torch.zeros(1, 2), estimator, budget=budget, shift=shift)
        self.estimator, self.budget, self.shift = estimator, budget, shift
        self._rbctl_rewards_per_func: torch.Tensor | None = None
        super().__init__(*args, **kwargs)
        if self.args.multi_objective_aggregation != "sum_then_normalize":
            raise UserError(
                f"BudgetGRPOTrainer needs multi_objective_aggregation='sum_then_normalize' (got "
                f"'{self.args.multi_objective_aggregation}'): rbctl's estimators act on the weighted sum of rewards"
            )
        if self.scale_rewards != "group":
            hint = _SCALE_REWARDS_HINT.get(self.scale_rewards, "the estimator that scales as you want")
            raise UserError(
                f"scale_rewards='{self.scale_rewards}' is ignored by BudgetGRPOTrainer: the rbctl estimator decides "
                f"the scaling. Leave scale_rewards at its default and pass {hint}."
            )

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._rbctl_rewards_per_func = rewards_per_func  # [N, F], gathered over processes
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        rewards_per_func, self._rbctl_rewards_per_func = self._rbctl_rewards_per_func, None
        if rewards_per_func is None:
            raise RuntimeError(f"trl {trl.__version__} did not score completions through _calculate_rewards")
        mode = "train" if self.model.training else "eval"
        group_size = self.num_generations if mode == "train" else self.num_generations_eval
        if group_size < 2:  # eval with one completion per prompt: nothing to centre, TRL's zeros stand
            return output

        unscorable = torch.isnan(rewards_per_func).all(dim=1)
        if unscorable.any():
            raise UserError(
                f"{int(unscorable.sum())} completions got None from every reward function; rbctl's estimators need "
                "a reward for every completion (return 0.0 instead of None)"
            )
        rewards = (rewards_per_func * self.reward_weights.to(rewards_per_func.device)).nansum(dim=1)  # [N]
        rewards_pg = rewards.view(-1, group_size)  # [P, G]
        advantages_pg = compute_advantages(rewards_pg, self.estimator, budget=self.budget, shift=self.shift)
        advantages = advantages_pg.flatten()  # [N]

        local = len(output["advantages"])
        start = self.accelerator.process_index * local
        output["advantages"] = advantages[start : start + local].to(output["advantages"].dtype)

        logged = self._logs["advantages"]  # TRL appended this batch's N advantages last
        for _ in range(min(len(advantages), len(logged))):
            logged.pop()
        logged.extend(advantages.tolist())

        nan = float("nan")  # TRL's log() averages metrics over steps and skips NaN
        k = nanmean_or_none(kappa(rewards_pg, advantages_pg))
        self._metrics[mode]["kappa"].append(nan if k is None else k)
        binary = bool(((rewards_pg == 0) | (rewards_pg == 1)).all())
        gap = advantage_gap(rewards_pg == 1, advantages_pg) if binary else None
        self._metrics[mode]["adv/gap"].append(nan if gap is None else gap)
        return output
