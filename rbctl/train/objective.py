"""An arm's training objective, composed from the method registry (rbctl.algo.registry): the reward
transforms, the advantage estimator (± budget), the policy loss and the token masks the config
selects or switches on. The trainer's update loop calls these and never branches per method; what
each does and its source: docs/method.md, "Other arms".
"""

from __future__ import annotations

import numpy as np
import torch

from rbctl import algo
from rbctl.algo.policy_losses import PolicyLossResult
from rbctl.algo.registry import MethodContext, needed
from rbctl.config.methods import method_params, optional_on
from rbctl.config.train import AlgoCfg
from rbctl.train import seeds

# Token statistics of the policy losses -> metric names (fractions of the valid tokens); another
# statistic of a loss is logged as policy_loss/frac_<name>, and a token mask's kept tokens under
# their metric name (a name with a '/').
STAT_METRICS = {"clipped_low": "clip/frac_low", "clipped_high": "clip/frac_high", "clipped_dual": "clip/frac_dual"}


def stat_metric(name: str) -> str:
    return name if "/" in name else STAT_METRICS.get(name, f"policy_loss/frac_{name}")


def mask_metric(name: str) -> str:
    """The metric of token mask `name`: the fraction of valid tokens it kept."""
    return f"tokens/frac_{name}"


def sequence_logprobs(samples) -> torch.Tensor:
    """Mean sampled-token log-prob of each response, [P, G], from the engine's log-probs (the old
    policy's: what a reward transform receives); an empty response scores 0."""
    rows = []
    for group in samples:
        row = []
        for s in group:
            if s.logprobs is None:
                raise ValueError("a reward transform needs the rollout engine's sampled-token log-probs")
            row.append(float(np.mean(s.logprobs)) if s.logprobs else 0.0)
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float32)


def update_methods(a) -> list:
    """The methods an `algo` section has on that are called per micro-batch with a `MethodContext`:
    the policy loss and the token masks."""
    return [algo.get_policy_loss(a.policy_loss), *optional_on(a, "token_mask")]


def keeps_reference(a) -> bool:
    """Whether a run of `algo` section `a` keeps a frozen reference: a KL to it is penalised or
    logged, or a method that is on needs its log-probs."""
    return a.kl_coef > 0 or a.log_kl or needed(update_methods(a), "ref_logp")


class Objective:
    """What one arm optimises, built once from its `algo` section; `seed` (the run's) seeds a
    policy loss's random choices (`context`)."""

    def __init__(self, a: AlgoCfg, seed: int):
        self.seed = seed
        self.cfg = a
        self.loss_name = a.policy_loss
        self.loss = algo.get_policy_loss(a.policy_loss)
        self.loss_params = method_params(a, a.policy_loss)  # its block + the PPO clip
        self.estimator_params = method_params(a, a.estimator)
        self.transforms = [(m, method_params(a, m.name)) for m in optional_on(a, "reward_transform")]
        self.masks = [(m, method_params(a, m.name)) for m in optional_on(a, "token_mask")]
        self.update_methods = update_methods(a)  # called per micro-batch with a context

    @property
    def shapes_rewards(self) -> bool:
        """A reward transform is on (the estimator sees other rewards than the graded ones)."""
        return bool(self.transforms)

    @property
    def needs_entropy(self) -> bool:
        """Every epoch's per-token entropy is needed: a token mask is on (its first argument), or the
        policy loss needs it."""
        return bool(self.masks) or needed(self.update_methods, "entropy")

    @property
    def needs_reference(self) -> bool:
        """A method that is on needs the reference's log-probs."""
        return needed(self.update_methods, "ref_logp")

    def context(self, mask: torch.Tensor, entropy: torch.Tensor | None = None, ref_logp: torch.Tensor | None = None,
                draw: tuple[int, ...] = ()) -> MethodContext:
        """The context of one micro-batch (rows of `mask` [n, T]) holding what the methods that are
        on need. `draw` (step, epoch, micro-batch) seeds the generator of a method's random choice,
        so a resumed run makes the same choices and no other RNG stream moves."""
        ms = self.update_methods
        return MethodContext(
            entropy=entropy.detach() if entropy is not None and needed(ms, "entropy") else None,
            ref_logp=ref_logp if needed(ms, "ref_logp") else None,
            lengths=mask.sum(-1) if needed(ms, "lengths") else None,
            generator=(torch.Generator().manual_seed(seeds.policy_loss_seed(self.seed, draw))
                       if needed(ms, "generator") else None))

    def shape_rewards(self, rewards: torch.Tensor, samples) -> torch.Tensor:
        """Rewards [P, G] as the estimator sees them (after the reward transforms, or unchanged)."""
        if not self.transforms:
            return rewards
        seq_logp = sequence_logprobs(samples)
        for m, params in self.transforms:
            rewards = m.fn(rewards, seq_logp, **params)
        return rewards

    def advantages(self, rewards: torch.Tensor) -> torch.Tensor:
        a = self.cfg
        return algo.compute_advantages(rewards, a.estimator, a.budget, a.shift, **self.estimator_params)

    def token_masks(self, entropy: torch.Tensor | None, mask: torch.Tensor,
                    ctx: MethodContext | None = None) -> dict[str, torch.Tensor]:
        """Each token mask's kept tokens, [N, T] bool, by its metric name; empty when none is on."""
        ctx = ctx or MethodContext()
        return {mask_metric(m.name): m.fn(entropy.detach(), mask, **params, **ctx.args_for(m)) for m, params in self.masks}

    def policy_loss(self, logp, old_logp, adv, mask, entropy=None, ctx: MethodContext | None = None,
                    draw: tuple[int, ...] = ()) -> PolicyLossResult:
        """The configured policy loss per token [N, T], given what it needs from `ctx` (by default
        `context(mask, entropy, draw=draw)`), times each token mask that is on (its kept tokens are
        a statistic under the mask's metric name)."""
        ctx = ctx or self.context(mask, entropy, draw=draw)
        out = algo.compute_policy_loss(self.loss_name, logp, old_logp, adv, mask, **self.loss_params,
                                       **ctx.args_for(self.loss))
        kept = self.token_masks(entropy, mask, ctx)
        for name, keep in kept.items():
            out.loss_mat = out.loss_mat * keep.to(out.loss_mat.dtype)
            out.token_stats[name] = keep
        return out
