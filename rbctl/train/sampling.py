"""One step's rollout groups: one round of P prompts, or DAPO's dynamic sampling (Yu et al. 2025,
arXiv 2503.14476): keep the groups with 0 < K < G correct (`rbctl.algo.dynamic_sampling_keep`) and
sample further rounds of P prompts until P are kept, for at most `rollout.max_resample_rounds`
extra rounds. Where rounds run out, the batch is topped up with filtered-out groups, in the order
they were sampled (their advantages are 0 under the group-centred estimators), so every step
trains on P groups. Every rollout sampled counts in `generated` (`rollout/generated`), which is
what equal compute is measured in when arms use dynamic sampling (docs/method.md, "Other arms").

Round 0 samples exactly what a run without dynamic sampling samples (the same prompts and seed).
Round r > 0 draws its P prompts without replacement from a stream seeded by (run seed, step, r),
so a step's rollouts depend on (seed, step) only and a resumed run samples them again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from rbctl.algo import dynamic_sampling_keep
from rbctl.train import seeds


@dataclass
class Groups:
    """A step's rollout groups: P prompts' ids, samples and correctness, and what it cost."""

    idx: list[int]
    samples: list = field(default_factory=list)  # [P][G] Sample
    correct: torch.Tensor | None = None  # [P, G] bool
    grader_failures: int = 0
    generated: int = 0  # rollouts sampled this step (all rounds)
    rounds: int = 1  # rounds sampled (1 = no resampling)
    topped_up: int = 0  # filtered-out groups put back to fill P


def prompt_order(seed: int, step: int, per_step: int, pool: int) -> list[int]:
    """Indices of step `step`'s prompts: a seeded permutation of the pool per epoch, read in order."""
    perms: dict[int, np.ndarray] = {}
    out = []
    for i in range((step - 1) * per_step, step * per_step):
        epoch, pos = divmod(i, pool)
        if epoch not in perms:
            perms[epoch] = seeds.epoch_permutation(seed, epoch, pool)
        out.append(int(perms[epoch][pos]))
    return out


def round_prompts(seed: int, step: int, rnd: int, per_step: int, pool: int) -> list[int]:
    """The prompts of round `rnd` of step `step`: round 0 is `prompt_order`'s, later rounds a seeded draw."""
    if rnd == 0:
        return prompt_order(seed, step, per_step, pool)
    rng = seeds.round_prompt_rng(seed, step, rnd)
    return [int(i) for i in rng.choice(pool, size=per_step, replace=pool < per_step)]


def round_seed(seed: int, step: int, rnd: int) -> int:
    """The sampling seed of a round: round 0's is the step's seed (as without dynamic sampling)."""
    return seeds.step_seed(seed, step) if rnd == 0 else seeds.round_seed(seed, step, rnd)


def collect_groups(sample_round, share: int, dynamic: bool, max_rounds: int) -> Groups:
    """`sample_round(rnd) -> Groups` of one round (`share` prompts); with `dynamic`, keep mixed groups
    over up to 1 + max_rounds rounds and return `share` of them (topped up as the module says)."""
    first = sample_round(0)
    if not dynamic:
        return first
    kept, dropped = [], []
    out = Groups(idx=[], rounds=0)
    for rnd in range(max_rounds + 1):
        g = first if rnd == 0 else sample_round(rnd)
        out.rounds += 1
        out.generated += g.generated
        out.grader_failures += g.grader_failures
        keep = dynamic_sampling_keep(g.correct).tolist()
        for p, k in enumerate(keep):
            (kept if k else dropped).append((g.idx[p], g.samples[p], g.correct[p]))
        if len(kept) >= share:
            break
    out.topped_up = max(0, share - len(kept))
    chosen = kept[:share] + dropped[:out.topped_up]
    out.idx = [c[0] for c in chosen]
    out.samples = [c[1] for c in chosen]
    out.correct = torch.stack([c[2] for c in chosen])
    return out
