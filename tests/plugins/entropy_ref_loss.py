"""A policy loss that exists only for the tests and needs more than a policy loss's arguments: PPO's
clipped surrogate on the tokens whose log-prob has not drifted from the reference's by more than
`max_drift`, plus an entropy-weighted term: loss = clip_loss · keep + coef · H_t · ratio. Its record
`needs` the per-token entropy and the reference's log-probs, which the trainer then computes and hands
it (rbctl.algo.registry.MethodContext). This module is all it takes to add it: run with
RBCTL_METHODS=tests.plugins.entropy_ref_loss and it is trained, labelled, validated and documented
(tests/integration/test_method_plugin.py)."""

from __future__ import annotations

import torch

from rbctl.algo.policy_losses import PolicyLossResult, clip_loss
from rbctl.algo.registry import Method, MetricDoc, register, setting


def entropy_ref_loss(logp, old_logp, advantages, mask, *, clip_low: float, clip_high: float, max_drift: float,
                     coef: float, entropy: torch.Tensor, ref_logp: torch.Tensor) -> PolicyLossResult:
    """The clipped surrogate where |log π − log π_ref| ≤ max_drift (0 elsewhere), plus coef · H_t · ρ_t."""
    base = clip_loss(logp, old_logp, advantages, mask, clip_low=clip_low, clip_high=clip_high, clip_ratio_c=None)
    near = (logp.detach() - ref_logp).abs() <= max_drift
    ratio = torch.exp(logp - old_logp)
    base.loss_mat = base.loss_mat * near.to(base.loss_mat.dtype) + coef * entropy * ratio
    base.token_stats["near_ref"] = near
    return base


register(Method(
    "entropy_ref", "policy_loss", entropy_ref_loss,
    "Entropy-and-reference loss (a test plug-in): the clipped surrogate near the reference, plus an entropy term",
    settings={"max_drift": setting(1.0, "Largest |log π − log π_ref| of a token that keeps its surrogate.", gt=0.0),
              "coef": setting(0.01, "Weight of the entropy term H_t · ρ_t.", ge=0.0)},
    shared=("clip_low", "clip_high"), needs=("entropy", "ref_logp"),
    metrics=(MetricDoc("policy_loss/frac_near_ref", "fraction of valid tokens within max_drift of the reference"),)))
