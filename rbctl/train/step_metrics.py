"""The per-step metrics that describe a rollout batch (rewards, groups, κ, advantages, responses,
what sampling cost), gathered over ranks. The update's own metrics (entropy, clip fractions, loss,
gradient norm, KL) come from `Updater.update`; every key is defined in
rbctl/train/metric_names.py (docs/metrics.md)."""

from __future__ import annotations

import torch

from rbctl import algo
from rbctl.train.batch import RolloutBatch


def batch_metrics(dist, batch: RolloutBatch, samples, dynamic_sampling: bool, shaped: bool) -> dict:
    """Metrics of this step's rollouts over the global batch (`dist` gathers every rank's rows)."""
    rewards = dist.gather_rows(batch.rewards)  # [P, G] over all ranks
    correct = dist.gather_rows(batch.correct)
    advantages = dist.gather_rows(batch.advantages)
    resp_len = dist.gather_rows(batch.response_mask.sum(-1))
    finished = dist.gather_rows(torch.tensor([s.finished for g in samples for s in g], dtype=torch.float32))
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
    g = batch.groups
    generated, topped_up, rounds = dist.sum(g.generated, g.topped_up, g.rounds)
    metrics["rollout/generated"] = int(generated)  # what equal compute counts under dynamic sampling
    if dynamic_sampling:
        metrics.update({"rollout/rounds": rounds / dist.world, "rollout/topped_up": int(topped_up)})
    if shaped:
        metrics["reward/shaped_mean"] = dist.gather_rows(batch.shaped_rewards).mean().item()
    return metrics, int(resp_len.sum().item())
