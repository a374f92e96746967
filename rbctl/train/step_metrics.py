"""The per-step metrics, in three namespaces built once each: the rollout batch's (`batch_metrics`:
rewards, groups, κ, advantages, responses, what sampling and grading cost, gathered over ranks),
the update's (`rbctl.train.update.update`: entropy, KL, clip fractions, loss, gradient norm, the
sampler's log-prob mismatch) and the step's own (`rbctl.train.step.train_step`: κ_eff, α, lr,
timings). `merge` lays them out as one line of metrics.jsonl. Every key is defined in
rbctl/train/metric_names.py (docs/metrics.md)."""

from __future__ import annotations

import torch

from rbctl import algo
from rbctl.algo import registry
from rbctl.train.batch import RolloutBatch
from rbctl.train.distributed import DistContext

# The order of a metrics.jsonl line: the rollout batch's, with the metrics of the methods that act on
# it (sampling hooks, then reward transforms: rbctl.algo.registry), then the update's and the step's;
# the policy losses' and token masks' own statistics (policy_loss/*, tokens/*) follow as logged.
BATCH_ORDER = (
    "reward/mean", "acc/mean", "kappa", "adv/gap", "adv/abs_mean", "groups/frac_all_correct",
    "groups/frac_all_wrong", "groups/frac_mixed", "response/len_mean", "response/frac_truncated",
    "rollout/generated",
)
STEP_ORDER = (
    "entropy", "kappa_eff", "clip/frac_low", "clip/frac_high", "clip/frac_dual", "kl", "loss/total",
    "entropy/alpha", "grad_norm", "nonfinite/skipped", "grader/failures", "grader/unevaluated", "lr",
    "time/step_s", "time/rollout_s", "time/train_s", "time/kappa_eff_s", "throughput/tokens_per_s",
    "rollout/logprob_diff",
)
LINE_ORDER = (*BATCH_ORDER,
              *(d.key for kind in ("sampling_hook", "reward_transform") for m in registry.of_kind(kind) for d in m.metrics),
              *STEP_ORDER)
_POSITION = {k: i for i, k in enumerate(LINE_ORDER)}


def merge(*namespaces: dict) -> dict:
    """One metrics line from the namespaces' dicts (no key in two of them), in `LINE_ORDER`."""
    merged: dict = {}
    for ns in namespaces:
        if twice := merged.keys() & ns.keys():
            raise ValueError(f"metrics logged by two namespaces: {sorted(twice)}")
        merged.update(ns)
    return dict(sorted(merged.items(), key=lambda kv: _POSITION.get(kv[0], len(LINE_ORDER))))


def batch_metrics(dist: DistContext, batch: RolloutBatch, resampled: bool,
                  shaped: bool) -> tuple[dict[str, float | int | None], int]:
    """(metrics of this step's rollouts over the global batch, response tokens generated over all
    ranks); `dist` gathers every rank's rows. `resampled`: a sampling hook is on (its rounds are
    logged); `shaped`: a reward transform is on."""
    rewards = dist.gather_rows(batch.rewards)  # [P, G] over all ranks
    correct = dist.gather_rows(batch.correct)
    advantages = dist.gather_rows(batch.advantages)
    resp_len = dist.gather_rows(batch.response_mask.sum(-1))
    g = batch.groups
    finished = dist.gather_rows(torch.tensor([s.finished for group in g.samples for s in group], dtype=torch.float32))
    gs = algo.group_stats(correct)
    metrics = {
        "reward/mean": rewards.mean().item(),
        "acc/mean": correct.float().mean().item(),
        "kappa": algo.nanmean_or_none(algo.kappa(rewards, advantages)),
        "adv/gap": algo.advantage_gap(correct, advantages),
        "adv/abs_mean": advantages.abs().mean().item(),
        "groups/frac_all_correct": gs.frac_all_correct,
        "groups/frac_all_wrong": gs.frac_all_wrong,
        "groups/frac_mixed": gs.frac_mixed,
        "response/len_mean": resp_len.float().mean().item(),
        "response/frac_truncated": 1.0 - finished.mean().item(),
    }
    generated, topped_up, rounds = dist.sum(g.generated, g.topped_up, g.rounds)
    metrics["rollout/generated"] = int(generated)  # what equal compute counts under a sampling hook
    if resampled:
        metrics.update({"rollout/rounds": rounds / dist.world, "rollout/topped_up": int(topped_up)})
    if shaped:
        metrics["reward/shaped_mean"] = dist.gather_rows(batch.shaped_rewards).mean().item()
    failures, unevaluated = dist.sum(g.grader_failures, g.grader_unevaluated)
    metrics["grader/failures"], metrics["grader/unevaluated"] = int(failures), int(unevaluated)
    return metrics, int(resp_len.sum().item())
