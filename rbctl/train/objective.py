"""An arm's training objective, composed from the registries of `rbctl.algo`: the reward transform
(unlikeliness), the advantage estimator (± budget), the policy loss (clip, clip_cov, kl_cov, gspo)
and the token mask (high-entropy tokens). The trainer's update loop calls these and never branches
per method; what each does and its source: docs/method.md, "Other arms".
"""

from __future__ import annotations

import numpy as np
import torch

from rbctl import algo
from rbctl.algo.policy_losses import PolicyLossResult
from rbctl.config.methods import method_params
from rbctl.config.train import TrainConfig
from rbctl.train import seeds

# Token statistics of the policy losses -> metric names (fractions of the valid tokens).
STAT_METRICS = {"clipped_low": "clip/frac_low", "clipped_high": "clip/frac_high", "clipped_dual": "clip/frac_dual",
                "entropy_mask_kept": "tokens/frac_entropy_mask"}


def stat_metric(name: str) -> str:
    return STAT_METRICS.get(name, f"policy_loss/frac_{name}")


def sequence_logprobs(samples) -> torch.Tensor:
    """Mean sampled-token log-prob of each response, [P, G], from the engine's log-probs (the old
    policy's, as the unlikeliness release ranks by); an empty response scores 0."""
    rows = []
    for group in samples:
        row = []
        for s in group:
            if s.logprobs is None:
                raise ValueError("algo.unlikeliness needs the rollout engine's sampled-token log-probs")
            row.append(float(np.mean(s.logprobs)) if s.logprobs else 0.0)
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float32)


class Objective:
    """What one arm optimises, built once from the config."""

    def __init__(self, cfg: TrainConfig):
        a = cfg.algo
        self.seed = cfg.seed
        self.cfg = a
        self.loss_name = a.policy_loss
        self.loss_params = method_params(a, a.policy_loss)  # its block + the PPO clip
        self.seeded = "generator" in algo.get_policy_loss(a.policy_loss).params  # clip_cov's random pick
        self.estimator_params = method_params(a, a.estimator)  # passk: {k}
        self.rho = a.entropy_mask.rho if a.entropy_mask is not None else None
        self.beta = a.unlikeliness.beta if a.unlikeliness is not None else 0.0

    @property
    def needs_entropy(self) -> bool:
        """The token mask needs every epoch's per-token entropy."""
        return self.rho is not None

    def shape_rewards(self, rewards: torch.Tensor, samples) -> torch.Tensor:
        """Rewards [P, G] as the estimator sees them (unlikeliness reward, or unchanged)."""
        if not self.beta:
            return rewards
        return algo.unlikeliness_rewards(rewards, sequence_logprobs(samples), beta=self.beta)

    def advantages(self, rewards: torch.Tensor) -> torch.Tensor:
        a = self.cfg
        return algo.compute_advantages(rewards, a.estimator, a.budget, a.shift, **self.estimator_params)

    def token_mask(self, entropy: torch.Tensor | None, mask: torch.Tensor) -> torch.Tensor | None:
        """[N, T] bool: the tokens that keep their policy-gradient loss; None = all (mask off)."""
        if self.rho is None:
            return None
        return algo.high_entropy_mask(entropy.detach(), mask, rho=self.rho)

    def policy_loss(self, logp, old_logp, adv, mask, entropy=None, draw: tuple[int, ...] = ()) -> PolicyLossResult:
        """The configured policy loss per token [N, T], times the token mask when there is one
        (its kept tokens are the statistic `entropy_mask_kept`). `draw` (step, epoch, micro-batch)
        seeds a loss's random choice (clip_cov), so a resumed run makes the same choices and no
        other RNG stream moves."""
        params = dict(self.loss_params)
        if self.seeded:
            seed = seeds.policy_loss_seed(self.seed, draw)
            params["generator"] = torch.Generator().manual_seed(seed)
        out = algo.compute_policy_loss(self.loss_name, logp, old_logp, adv, mask, **params)
        keep = self.token_mask(entropy, mask)
        if keep is not None:
            out.loss_mat = out.loss_mat * keep.to(out.loss_mat.dtype)
            out.token_stats["entropy_mask_kept"] = keep
        return out
