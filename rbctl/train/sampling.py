"""One step's rollout groups: one round of P prompts, or, with a sampling hook on (a registry method
of kind sampling_hook, `rollout.<name>`; e.g. DAPO's dynamic sampling, Yu et al. 2025, arXiv
2503.14476, which keeps the groups with 0 < K < G correct), the groups every hook keeps, sampling
further rounds of P prompts until P are kept, for at most `rollout.max_resample_rounds` extra rounds. Where rounds run out, the batch is topped up with filtered-out groups, in the order
they were sampled (their advantages are 0 under the group-centred estimators), so every step
trains on P groups. Every rollout sampled counts in `generated` (`rollout/generated`), which is
what equal compute is measured in when arms use a sampling hook (docs/method.md, "Other arms").

Round 0 samples exactly what a run without a sampling hook samples (the same prompts and seed).
Round r > 0 draws its P prompts without replacement from a stream seeded by (run seed, step, r),
so a step's rollouts depend on (seed, step) only and a resumed run samples them again
(`rbctl.train.seeds`). `Sampler` samples and grades the rounds of one process.
"""

from __future__ import annotations

from dataclasses import dataclass, field
import functools
import operator
from collections.abc import Callable, Sequence
from functools import partial

import numpy as np
import torch

from rbctl.config.methods import hooks_on
from rbctl.config.train import RolloutCfg
from rbctl.rollout.base import Engine, SamplingParams
from rbctl.tasks.prompting import encode_prompts
from rbctl.train import seeds
from rbctl.train.batch import Groups
from rbctl.train.distributed import DistContext
from rbctl.train.precision import Precision


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
    """The sampling seed of a round: round 0's is the step's seed (as without a sampling hook)."""
    return seeds.step_seed(seed, step) if rnd == 0 else seeds.round_seed(seed, step, rnd)


def collect_groups(sample_round: Callable[[int], Groups], share: int, hooks: Sequence[Callable[[torch.Tensor], torch.Tensor]],
                   max_rounds: int) -> Groups:
    """`sample_round(rnd) -> Groups` of one round (`share` prompts); with `hooks` (each correct [P, G]
    -> keep [P]), keep the groups every hook keeps over up to 1 + max_rounds rounds and return
    `share` of them (topped up as the module says)."""
    first = sample_round(0)
    if not hooks:
        return first
    kept, dropped = [], []
    out = Groups(idx=[], rounds=0)
    for rnd in range(max_rounds + 1):
        g = first if rnd == 0 else sample_round(rnd)
        out.rounds += 1
        out.generated += g.generated
        out.grader_failures += g.grader_failures
        out.grader_unevaluated += g.grader_unevaluated
        keep = functools.reduce(operator.and_, (hook(g.correct) for hook in hooks)).tolist()
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


@dataclass(kw_only=True)
class Sampler:
    """Samples and grades this process's rollout groups of a step: the prompt pool (each prompt
    encoded once, with the run's template), the engine and the sampling precision, the grader
    (`rbctl.train.training_data.reward_function`) and the run's rollout settings."""

    rollout: RolloutCfg  # P, G, the sampling settings and hooks (`cfg.rollout`)
    seed: int  # the run's seed: each step's prompts and sampling seeds derive from it
    instruction: str  # `cfg.data.instruction`, appended to each problem
    engine: Engine
    precision: Precision
    dist: DistContext
    problems: list  # the training problems (rbctl.tasks Problem)
    reward_fn: Callable[[list[str], list], tuple[list[bool], int, int]]
    tokenizer: object
    template: str
    prompt_task: str  # the task whose format the `builtin` template uses
    _encoded: dict[int, list[int]] = field(default_factory=dict)

    def prompt_ids(self, idx: int) -> list[int]:
        """Problem `idx`'s prompt as token ids (encoded once and cached: no re-tokenisation per step)."""
        if idx not in self._encoded:
            self._encoded[idx] = encode_prompts(self.tokenizer, [self.problems[idx].problem], self.template,
                                                self.instruction, self.prompt_task)[0]
        return self._encoded[idx]

    def groups(self, step: int) -> Groups:
        """This process's groups of step `step`: one round, or the sampling hooks' (module docstring)."""
        r = self.rollout
        share = self.dist.shard(r.prompts_per_step)
        hooks = [m.fn for m in hooks_on(r)]
        return collect_groups(partial(self.round, step, share), share.stop - share.start, hooks, r.max_resample_rounds)

    def round(self, step: int, share: slice, rnd: int) -> Groups:
        """Round `rnd` of step `step`: this process's `share` of its prompts, G samples each, graded."""
        r = self.rollout
        idx = round_prompts(self.seed, step, rnd, r.prompts_per_step, len(self.problems))[share]
        prompts = [self.prompt_ids(i) for i in idx]
        # ranks sample different prompts from different streams; one process reproduces the same seeds
        params = SamplingParams(n=r.group_size, temperature=r.temperature, top_p=r.top_p,
                                max_new_tokens=r.max_new_tokens,
                                seed=seeds.rank_seed(round_seed(self.seed, step, rnd), self.dist.rank))
        # hf samples in the training precision (same autocast); vLLM in its own dtype (logprob_diff, TIS)
        with self.engine.sampling_context(self.precision):
            samples = self.engine.generate(prompts, params)
        flags, failures, unevaluated = self.reward_fn([s.text for group in samples for s in group],
                                                      [self.problems[i] for i in idx for _ in range(r.group_size)])
        correct = torch.tensor(flags, dtype=torch.bool).reshape(len(idx), r.group_size)
        return Groups(idx, samples, correct, failures, unevaluated, generated=len(flags))
