"""Token-level quantities: log-probs, entropy, loss aggregation, the KL estimator and the entropy
bonus's α (the policy losses: rbctl.algo.policy_losses).

Shapes: N sequences (P prompts × G rollouts) of T response tokens; `mask` [N, T] is 1 on response
tokens (up to and including EOS) and 0 on padding. Every aggregation is written as a weight per
token, normalised over the *whole optimizer batch*, so that splitting a batch into micro-batches
(gradient accumulation) gives the same gradient as one pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rbctl.errors import UserError

# --- per-token quantities --------------------------------------------------------------------------


def scaled(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """logits / T in float32. At T = 1 the logits themselves: dividing by 1 changes no bit, but costs
    a pass over [N, T, V] (and another in the backward), about 0.2 s a pass for 16 × 64 tokens of a
    49k vocabulary on 2 CPU threads."""
    z = logits.float()
    return z if temperature == 1.0 else z / temperature


def vocab_logprobs(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log π(v | context) over the vocabulary at the sampling temperature, in float32: [N, T, V]."""
    return torch.log_softmax(scaled(logits, temperature), dim=-1)


def at_tokens(vocab_logp: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """The entries of `vocab_logp` [N, T, V] at `tokens` [N, T] -> [N, T]."""
    return vocab_logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log π(y_t | context) at the sampling temperature. logits [N, T, V], tokens [N, T] -> [N, T]."""
    return at_tokens(vocab_logprobs(logits, temperature), tokens)


@torch.no_grad()
def lean_token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """`token_logprobs` without gradient and without the [N, T, V] log-softmax: z_y − logsumexp(z),
    a few rows at a time (the no-grad passes that need only the tokens' log-probs: κ_eff, the
    behaviour policy's, the reference's). Equal to `token_logprobs` up to float rounding."""
    out = logits.new_empty(tokens.shape, dtype=torch.float32)
    for lg, tk, o in zip(logits.split(4), tokens.split(4), out.split(4)):
        z = scaled(lg, temperature)
        torch.sub(z.gather(-1, tk.unsqueeze(-1)).squeeze(-1), torch.logsumexp(z, dim=-1), out=o)
    return out


@torch.no_grad()
def entropy_of_logprobs(vocab_logp: torch.Tensor) -> torch.Tensor:
    """H_t = −Σ_v π(v) log π(v) from log-probabilities [N, T, V] -> [N, T], without gradient: the
    logged entropy, from the log-softmax the log-probs already needed (no second softmax pass over
    the vocabulary). Equal to `token_entropy` up to float rounding (tests/unit/test_losses.py)."""
    out = vocab_logp.new_empty(vocab_logp.shape[:-1])
    # a few rows at a time: the temporaries stay small (16 × 64 × 49k float32 would be 200 MB each)
    for lp, h in zip(vocab_logp.split(4), out.split(4)):
        plogp = lp.exp().mul_(lp).masked_fill_(lp == float("-inf"), 0.0)  # p = 0 terms: 0·(−inf) → 0, not NaN
        torch.sum(plogp, dim=-1, out=h).neg_()
    return out


def token_entropy(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """H_t = −Σ_v π(v|ctx) log π(v|ctx) over the full vocabulary at the sampling temperature.

    logits [N, T, V] -> [N, T]. Computed as logsumexp(z) − Σ_v softmax(z)_v z_v, which never
    forms log 0 for tokens with vanishing probability (docs/method.md, "Entropy")."""
    z = scaled(logits, temperature)
    p = torch.softmax(z, dim=-1)
    # A −inf logit (masked vocabulary) has p = 0; 0·(−inf) would be NaN, so those terms are zeroed.
    return torch.logsumexp(z, dim=-1) - (p * z.masked_fill(p == 0, 0.0)).sum(dim=-1)


# --- loss aggregation ----------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchNorm:
    """Normalisers of the whole optimizer batch (all micro-batches together)."""

    n_seqs: int  # N sequences in the optimizer batch
    n_tokens: int  # response tokens in the optimizer batch
    max_new_tokens: int  # the rollout's token limit (Dr.GRPO's constant divisor)


def token_mean_weights(mask: torch.Tensor, norm: BatchNorm) -> torch.Tensor:
    """`token-mean`: Σ_{i,t} l_it / Σ_{i,t} 1. Every token weighs the same, so long responses
    weigh more in total (length bias towards long sequences' tokens; DAPO's choice)."""
    return mask / max(norm.n_tokens, 1)


def seq_mean_token_mean_weights(mask: torch.Tensor, norm: BatchNorm) -> torch.Tensor:
    """`seq-mean-token-mean`: mean_i (Σ_t l_it / |y_i|). Each sequence weighs the same, so a token of a
    short response weighs more than one of a long response (GRPO's length bias: short wrong answers
    are penalised harder than long wrong ones)."""
    lengths = mask.sum(dim=1, keepdim=True).clamp(min=1)
    return mask / lengths / max(norm.n_seqs, 1)


def seq_mean_token_sum_norm_weights(mask: torch.Tensor, norm: BatchNorm) -> torch.Tensor:
    """`seq-mean-token-sum-norm`: mean_i (Σ_t l_it / max_new_tokens). A constant divisor, so no
    length bias (Dr.GRPO). verl's mode of the same name divides the batch sum by T only, which is
    this value times N — a constant factor absorbed by the learning rate."""
    return mask / float(norm.max_new_tokens) / max(norm.n_seqs, 1)


LOSS_AGG = {
    "token-mean": token_mean_weights,
    "seq-mean-token-mean": seq_mean_token_mean_weights,
    "seq-mean-token-sum-norm": seq_mean_token_sum_norm_weights,
}


def aggregation_weights(mask: torch.Tensor, mode: str, norm: BatchNorm) -> torch.Tensor:
    """Per-token weights [N, T] so that loss = Σ weights · l_it is the aggregated loss of `mode`."""
    try:
        return LOSS_AGG[mode](mask.float(), norm)
    except KeyError:
        raise UserError(f"unknown loss aggregation '{mode}'; valid: {', '.join(LOSS_AGG)}") from None


# --- KL, entropy bonus ---------------------------------------------------------------------------


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(π_θ || π_ref) per token: exp(q) − q − 1 with q = ref − logp (≥ 0)."""
    q = ref_logp - logp
    return torch.exp(q) - q - 1.0


def adaptive_alpha(alpha: float, entropy: float, target: float, delta: float, lo: float, hi: float) -> float:
    """α ← clip(α + δ·sign(H* − H), α_min, α_max): raise the bonus when entropy is below target."""
    diff = target - entropy
    sign = (diff > 0) - (diff < 0)
    return min(max(alpha + delta * sign, lo), hi)
