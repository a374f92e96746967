"""One training step, top to bottom: sample → grade → advantages → mini-batch updates → κ_eff →
metrics (`train_step`), from explicit inputs: the training state (`update.TrainState`: the policy and what updates it),
the sampler of the prompts (`sampling.Sampler`) and the entropy coefficient α the step uses.

1. P prompts are taken in a seeded order (a fresh permutation of the pool each epoch), and G
   rollouts each are sampled with a seed derived from (run seed, step) (`rbctl.train.seeds`): a
   resumed run samples exactly what an uninterrupted one would. A sampling hook (DAPO's dynamic
   sampling) refills P with the groups it keeps (`sampling.py`).
2. Rewards: the built-in task's exact checker, or the shared math grader (`rbctl.grading`).
3. Advantages ([P, G] → [P, G], broadcast over tokens) and the loss are the arm's `Objective`
   (`objective.py`: reward transforms, estimator ± budget, policy loss, token masks; no branch here),
   over the global batch (every rank's rewards).
4. The update (`update.py`), then the learning-rate schedule's step and the engine's weight sync
   (the next rollout samples from the updated policy): `ppo_epochs` passes over the batch, each dealing its groups into M
   mini-batches (`algo.ppo_mini_batch_size`), one optimizer step each, ratios against the
   behaviour policy's log-probs from before the first step (docs/method.md, "Mini-batch
   updates"). Entropy and the KL to the reference are logged for the pre-update policy. Forwards
   and hf sampling run in `model.precision` (rbctl.train.precision), unless `rollout.dtype:
   bfloat16` samples from a bf16 replica; the sampler's own log-probs against the old ones are
   logged as `rollout/logprob_diff` (TIS, `algo.tis_cap`, corrects them).
5. κ_eff (every `kappa_eff_every` steps): one more forward pass after the last step gives
   d_i = Σ_t log π_new − log π_old per rollout (docs/method.md, "Sharpness").
6. α: the entropy bonus's coefficient for the next step (adaptive mode moves it toward a target).
7. Metrics: the rollout batch's, the update's and the step's own, merged once (`step_metrics.py`).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

from rbctl import algo
from rbctl.algo.losses import adaptive_alpha
from rbctl.config.methods import hooks_on
from rbctl.train.batch import RolloutBatch, make_batch, sample_rows
from rbctl.train.sampling import Sampler
from rbctl.train.step_metrics import batch_metrics, merge
from rbctl.train.update import TrainState, logratio_sums, update


@dataclass
class StepOutput:
    """What one step gives the loop: its metrics line, its rows of samples.jsonl and the α of the next step."""

    metrics: dict[str, float | int | None]
    rows: list[dict]
    alpha: float


def rollout_batch(state: TrainState, sampler: Sampler, step: int) -> RolloutBatch:
    """Steps 1–3: this rank's prompts and rollouts, graded, with advantages over the global batch."""
    groups = sampler.groups(step)  # sampled and graded (a sampling hook: more rounds)
    rewards = groups.correct.float()
    shaped = state.objective.shape_rewards(rewards, groups.samples)  # what the estimator sees (the reward transforms)
    adv = state.objective.advantages(state.dist.gather_rows(shaped))
    n, rank = len(groups.idx), state.dist.rank
    prompts = [sampler.prompt_ids(i) for i in groups.idx]
    return make_batch(prompts, groups.samples, state.engine.pad_id, rewards=rewards, correct=groups.correct,
                      advantages=adv[rank * n:(rank + 1) * n], step=step, shaped_rewards=shaped, groups=groups)


def train_step(state: TrainState, sampler: Sampler, step: int, alpha: float) -> StepOutput:
    """One rollout batch and its updates (module docstring, steps 1–7)."""
    t0 = time.perf_counter()
    batch = rollout_batch(state, sampler, step)
    t1 = time.perf_counter()
    lr_used = state.opt.param_groups[0]["lr"]  # the lr of this batch's optimizer steps
    result = update(state, batch, alpha)
    with warnings.catch_warnings():
        # the schedule moves once per rollout batch, an update or not: where every optimizer step so far was
        # skipped (non-finite), torch warns of a schedule stepped before the optimizer, which is intended here
        warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step\\(\\)` before")
        state.sched.step()
    state.engine.sync_weights(state.model)  # the next rollout samples from the updated policy
    t2 = time.perf_counter()
    # κ_eff is measured after the last optimizer step of the batch; when every step was skipped
    # (non-finite), nothing changed and κ_eff is null
    kappa_eff = None
    if state.kappa_eff_every and step % state.kappa_eff_every == 0 and result.metrics["nonfinite/skipped"] < result.optimizer_steps:
        d = logratio_sums(state, batch, result.old_logp)
        kappa_eff = algo.nanmean_or_none(algo.kappa_eff(state.dist.gather_rows(batch.rewards), d))
    t3 = time.perf_counter()
    ent = state.algo.entropy
    next_alpha = alpha
    if ent.mode == "adaptive":
        next_alpha = adaptive_alpha(alpha, result.metrics["entropy"], ent.target, ent.delta, ent.alpha_min, ent.alpha_max)
    rollouts, gen_tokens = batch_metrics(state.dist, batch, bool(hooks_on(state.rollout)), state.objective.shapes_rewards)
    step_s = t3 - t0
    own = {
        "kappa_eff": kappa_eff,
        "entropy/alpha": alpha if ent.mode != "none" else 0.0,
        "lr": lr_used,
        "time/step_s": step_s,
        "time/rollout_s": t1 - t0,
        "time/train_s": t2 - t1,
        "time/kappa_eff_s": t3 - t2,
        "throughput/tokens_per_s": gen_tokens / step_s if step_s > 0 else None,
    }
    return StepOutput(merge(rollouts, result.metrics, own), sample_rows(step, sampler.problems, batch), next_alpha)
