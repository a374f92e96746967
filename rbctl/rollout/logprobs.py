"""The sampler's log-probs beside the trainer's, for any engine that records them (the hf engine in
training, vLLM): laid out as a batch's response tokens (`engine_logprobs_tensor`), their mismatch
(`logprob_mismatch`, the metric `rollout/logprob_diff`) and the truncated importance sampling
weights that correct for it (`tis_weights`, `algo.tis_cap`)."""

from __future__ import annotations

import math

import torch

from rbctl.rollout.base import Sample


def engine_logprobs_tensor(samples: list[list[Sample]], width: int) -> torch.Tensor:
    """Engine log-probs laid out like `build_batch`'s response tokens: [N = P·G, width], prompt-major,
    right-padded with 0. Every sample must carry `logprobs`."""
    rows = [s for group in samples for s in group]
    out = torch.zeros(len(rows), width, dtype=torch.float32)
    for i, s in enumerate(rows):
        if s.logprobs is None:
            raise ValueError(f"sample {i} has no engine log-probs")
        if s.logprobs:
            out[i, : len(s.logprobs)] = torch.tensor(s.logprobs, dtype=torch.float32)
    return out


def logprob_mismatch(engine_logprobs: torch.Tensor, trainer_logprobs: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean absolute log-prob difference over response tokens (the metric `rollout/logprob_diff`):

        Σ_t m_t · |log π_engine(y_t) − log π_trainer(y_t)| / Σ_t m_t

    All tensors [N, T]; `mask` is 1 on response tokens, 0 on padding. 0 when there are no tokens.
    Same weights in both: the gap is numerics alone (kernels, bf16, batch shapes), plus top-p
    renormalisation when top_p < 1 (the engine's log-probs are over the nucleus).
    """
    m = mask.to(torch.float64)
    n = m.sum()
    if n == 0:
        return 0.0
    diff = (engine_logprobs.to(torch.float64) - trainer_logprobs.to(torch.float64)).abs()
    return float((diff * m).sum() / n)


def tis_weights(trainer_old_logp: torch.Tensor, engine_logp: torch.Tensor, cap: float) -> torch.Tensor:
    """Truncated importance sampling weights per token (Yao et al. 2025, "Your Efficient RL Framework
    Secretly Brings You Off-Policy RL Training"; verl's `tis_imp_ratio_cap`):

        w_t = min( π_old(y_t) / π_engine(y_t), C ) = min( exp(log π_old − log π_engine), C )

    The tokens were sampled by the engine, the PPO ratio is taken against the trainer's π_old, so
    each token's policy-gradient loss is multiplied by w_t (a constant: no gradient flows through
    it). Shapes [N, T] → [N, T]; padding positions come out as whatever their inputs give (mask them).
    """
    if not cap > 0:
        raise ValueError(f"TIS cap must be > 0, got {cap}")
    log_ratio = (trainer_old_logp - engine_logp).detach()
    # min(exp(x), C) = exp(min(x, log C)): the same value with no overflow to inf
    return torch.exp(torch.clamp(log_ratio, max=math.log(cap)))
