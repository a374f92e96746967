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
4. `rbctl/kappa` and `rbctl/adv_gap` (docs/metrics.md's `kappa` and `adv/gap`) are logged beside
   TRL's metrics at every step. `rbctl/adv_gap` needs a notion of "correct", so it is logged only
   when every reward is 0 or 1 (correct = r == 1).
5. `rbctl/kappa_eff` (docs/method.md, "Sharpness") every `kappa_eff_every` optimizer steps: the
   batch's old per-token log-probs are kept as `_compute_loss` sees them (TRL's
   `old_per_token_logps` when it computed them, else the first forward's detached log-probs, which
   TRL itself uses as π_old); when the optimizer step that ends the generation batch's last use is
   done (a callback's `on_step_end`, before TRL logs), one no-grad forward with TRL's
   `_get_per_token_logps_and_entropies` gives log π_new for the same completions, d_i = Σ_t (log π_new
   − log π_old) over completion tokens, and κ_eff = nanmean_or_none(kappa_eff(r [P, G], d [P, G])).

Everything else is TRL's: the loss (`loss_type`), clipping, KL (`beta`), sampling. TRL's own reward
scaling is replaced, not composed: `scale_rewards` must stay at its default "group" (the
estimator decides scaling: `grpo` divides by the group std, `dr_grpo` does not) and
`multi_objective_aggregation` must be "sum_then_normalize".
"""

from __future__ import annotations

import inspect

import torch

from rbctl.algo import advantage_gap, compute_advantages, kappa, kappa_eff, nanmean_or_none
from rbctl.errors import UserError
from rbctl.integrations import require_version

SUPPORTED_TRL = ">=1.0,<1.17"
TESTED_TRL = "1.16.0"

try:
    import trl
except ImportError as e:
    raise ImportError(f"rbctl.integrations.trl needs trl{SUPPORTED_TRL}: pip install 'trl=={TESTED_TRL}'") from e
require_version("trl", trl.__version__, SUPPORTED_TRL, TESTED_TRL)

from transformers import TrainerCallback  # noqa: E402
from trl import GRPOTrainer  # noqa: E402  (after the version check: an unsupported TRL may not import cleanly)

# scale_rewards values that ask for a different estimator than the one passed
_SCALE_REWARDS_HINT = {"none": "estimator='dr_grpo'", "batch": "estimator='reinforce_pp' (batch whitening)"}


class BudgetGRPOTrainer(GRPOTrainer):
    """TRL's GRPOTrainer whose advantages come from `rbctl.algo.compute_advantages`.

    estimator: one of rbctl.algo.ESTIMATORS ("grpo", "dr_grpo", "rloo", "reinforce_pp").
    budget: B > 0 splits B among each prompt's completions (docs/method.md); None = the base estimator.
    shift: c ≥ 0 added to every reward before the split; every r + c must be ≥ 0.
    kappa_eff_every: log `rbctl/kappa_eff` every this many optimizer steps (one extra no-grad
        forward over the step's completions); 0 = never.
    All other arguments are GRPOTrainer's.
    """

    def __init__(
        self,
        *args,
        estimator: str = "grpo",
        budget: float | None = 1.0,
        shift: float = 0.0,
        kappa_eff_every: int = 1,
        **kwargs,
    ):
        # Validate before TRL loads the model: a dry run on one group of zeros checks the
        # estimator name, B > 0 and c ≥ 0 with the same code that will run in training.
        compute_advantages(torch.zeros(1, 2), estimator, budget=budget, shift=shift)
        if isinstance(kappa_eff_every, bool) or not isinstance(kappa_eff_every, int) or kappa_eff_every < 0:
            raise UserError(f"kappa_eff_every must be an integer >= 0 (0 = off), got {kappa_eff_every!r}")
        self.estimator, self.budget, self.shift = estimator, budget, shift
        self.kappa_eff_every = kappa_eff_every
        self._rbctl_rewards_per_func: torch.Tensor | None = None
        # The current generation batch, for kappa_eff: its rewards [N] (gathered), group size, and
        # per micro-batch (inputs, old per-token log-probs) as _compute_loss first saw them.
        self._rbctl_gen: dict | None = None
        self._rbctl_capture_logps = False
        super().__init__(*args, **kwargs)
        if kappa_eff_every:
            self.add_callback(_KappaEffCallback(self))
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
        if mode == "train" and self.kappa_eff_every:
            # Each row's place in the gathered batch survives TRL's shuffle and split into micro-batches.
            output["rbctl_row"] = torch.arange(start, start + local, device=output["advantages"].device)
            self._rbctl_gen = {"rewards": rewards.detach().clone(), "group_size": group_size, "batches": [], "rows": 0}

        logged = self._logs["advantages"]  # TRL appended this batch's N advantages last
        for _ in range(min(len(advantages), len(logged))):
            logged.pop()
        logged.extend(advantages.tolist())

        nan = float("nan")  # TRL's log() averages metrics over steps and skips NaN (None when all are)
        k = nanmean_or_none(kappa(rewards_pg, advantages_pg))
        self._metrics[mode]["rbctl/kappa"].append(nan if k is None else k)
        binary = bool(((rewards_pg == 0) | (rewards_pg == 1)).all())
        gap = advantage_gap(rewards_pg == 1, advantages_pg) if binary else None
        self._metrics[mode]["rbctl/adv_gap"].append(nan if gap is None else gap)
        return output

    # --- kappa_eff: keep π_old's log-probs, recompute after the optimizer step -----------------------

    def _compute_loss(self, model, inputs):
        gen = self._rbctl_gen
        capture = gen is not None and self.model.training and "rbctl_row" in inputs
        if capture and any(b[0] is inputs for b in gen["batches"]):
            capture = False  # a later pass over the same micro-batch (num_iterations > 1): π_old is kept
        if capture and inputs.get("old_per_token_logps") is not None:
            gen["batches"].append((inputs, inputs["old_per_token_logps"].detach()))
            gen["rows"] += len(inputs["rbctl_row"])
            capture = False
        self._rbctl_capture_logps = capture
        self._rbctl_captured = None
        try:
            loss = super()._compute_loss(model, inputs)
        finally:
            self._rbctl_capture_logps = False
        if capture and self._rbctl_captured is not None:
            # TRL uses the first forward's detached log-probs as π_old when it did not compute them.
            gen["batches"].append((inputs, self._rbctl_captured))
            gen["rows"] += len(inputs["rbctl_row"])
        self._rbctl_captured = None
        return loss

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        out = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        if self._rbctl_capture_logps:
            self._rbctl_captured = out[0].detach()
            self._rbctl_capture_logps = False  # the first call in _compute_loss is the policy's forward
        return out

    def _rbctl_new_logps(self, inputs) -> torch.Tensor:
        """log π_new per completion token for one micro-batch, called as TRL's _compute_loss calls it."""
        input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        accepted = inspect.signature(super()._get_per_token_logps_and_entropies).parameters
        extra = {
            name: inputs.get(name)
            for name in ("pixel_values", "image_grid_thw", "num_images", "pixel_attention_mask", "spatial_shapes",
                         "num_tiles", "image_sizes", "token_type_ids", "mm_token_type_ids", "image_position_ids")
            if name in accepted and inputs.get(name) is not None
        }
        logps, _, _ = super()._get_per_token_logps_and_entropies(
            self.model, input_ids, attention_mask, inputs["completion_ids"].size(1), **extra
        )
        return logps

    def _rbctl_measure_kappa_eff(self) -> None:
        """After an optimizer step: κ_eff of the generation batch whose last use that step was."""
        gen = self._rbctl_gen
        generate_every = self.args.steps_per_generation * self.num_iterations
        if gen is None or self._step % generate_every != 0:
            return  # the batch is still in use (or nothing was generated): its policy update is not done
        self._rbctl_gen = None
        local = len(gen["rewards"]) // self.accelerator.num_processes
        if self.state.global_step % self.kappa_eff_every != 0 or gen["rows"] != local:
            return  # not a measuring step, or not every row was seen by _compute_loss (misaligned accumulation)
        device = gen["rewards"].device
        rows = torch.empty(0, dtype=torch.long, device=device)
        d = torch.empty(0, dtype=torch.float32, device=device)
        with torch.no_grad():
            for inputs, old in gen["batches"]:
                new = self._rbctl_new_logps(inputs)
                mask = inputs["completion_mask"]
                if "tool_mask" in inputs:  # as TRL's loss: tool-call tokens are not the policy's
                    mask = mask * inputs["tool_mask"]
                d_batch = ((new.float() - old.float()) * mask).sum(dim=1)
                rows = torch.cat([rows, inputs["rbctl_row"].to(device)])
                d = torch.cat([d, d_batch.to(device)])
        rows, d = self.accelerator.gather(rows), self.accelerator.gather(d)
        d_all = torch.full_like(gen["rewards"], float("nan"), dtype=torch.float32)
        d_all[rows] = d
        ke = nanmean_or_none(kappa_eff(gen["rewards"].view(-1, gen["group_size"]), d_all.view(-1, gen["group_size"])))
        self._metrics["train"]["rbctl/kappa_eff"].append(float("nan") if ke is None else ke)


class _KappaEffCallback(TrainerCallback):
    """Runs BudgetGRPOTrainer's κ_eff measurement after each optimizer step, before TRL logs it."""

    def __init__(self, trainer: BudgetGRPOTrainer):
        self.trainer = trainer

    def on_step_end(self, args, state, control, **kwargs):
        self.trainer._rbctl_measure_kappa_eff()
