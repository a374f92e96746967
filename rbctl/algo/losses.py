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


EXP_FLOOR = -80.0  # exp(−80) ≈ 1.8e-35, a normal float32 (below ≈ −87.3 exp is denormal)


def _tail_free_exp(d: torch.Tensor) -> torch.Tensor:
    """exp(d) in place of d, with exactly 0 where d < EXP_FLOOR (a new tensor's worth of work, no denormal)."""
    tail = d < EXP_FLOOR
    return d.clamp_(min=EXP_FLOOR).exp_().masked_fill_(tail, 0.0)


def _chunk_rows(v: int) -> int:
    """Token rows per chunk of a [rows, V] pass: about 1 MiB of float32, so a chunk's temporaries stay in cache."""
    return max(1, (1 << 18) // max(v, 1))


class _FusedTokenLogprobs(torch.autograd.Function):
    """(log π(y_t), H_t) from logits [n, T, V] in chunks of token rows: z = logits/τ, lse = logsumexp(z),
    log π(y) = z_y − lse, H = lse − Σ_v π_v z_v; saved for the backward are the logits themselves and lse
    [n·T] (no [n, T, V] log-softmax is formed or kept), and the backward forms ∂/∂z = (onehot(y) − π)·g/τ
    chunk by chunk, so every pass works on cache-sized pieces (in a SmolLM2 step of 16 × 64 tokens on
    one thread, torch's log-softmax backward and the zero-filled scatter of the gather's gradient took
    ~2.6–3 s and ~1.4 s, against ~0.15 s and ~0.09 s for the same shapes alone). Terms whose exponent
    is below EXP_FLOOR are exactly 0: each is < 1.8e-35 (< 1e-30 over a 49k vocabulary), far below a
    float32 ulp of a sum ≥ 1, and exp and products on the denormal floats such terms would be take a
    slow path on CPUs (exp of 50M entries mostly below −87: 1.2 s against 0.13 s). H has no gradient."""

    @staticmethod
    def forward(ctx, logits, tokens, temperature, with_entropy):
        v = logits.shape[-1]
        flat, tok = logits.reshape(-1, v), tokens.reshape(-1)
        lse = flat.new_empty(flat.shape[0], dtype=torch.float32)
        logp = torch.empty_like(lse)
        ent = torch.empty_like(lse) if with_entropy else None
        step = _chunk_rows(v)
        for i in range(0, flat.shape[0], step):
            z = scaled(flat[i:i + step], temperature)
            m = z.amax(-1, keepdim=True)
            e = _tail_free_exp(z - m)
            total = e.sum(-1)
            lse[i:i + step] = m.squeeze(-1) + total.log()
            logp[i:i + step] = z.gather(-1, tok[i:i + step, None]).squeeze(-1) - lse[i:i + step]
            if with_entropy:  # Σ π z over the terms kept (a −inf logit's term is 0, not NaN)
                ent[i:i + step] = lse[i:i + step] - e.mul_(z.masked_fill(e == 0, 0.0)).sum(-1) / total
        ctx.save_for_backward(logits, lse, tok)
        ctx.temperature = temperature
        shape = tokens.shape
        if ent is None:
            ent = logp.new_zeros(0)
        else:
            ent = ent.reshape(shape)
        ctx.mark_non_differentiable(ent)
        return logp.reshape(shape), ent

    @staticmethod
    def backward(ctx, g_logp, _g_ent):
        logits, lse, tok = ctx.saved_tensors
        t = ctx.temperature
        v = logits.shape[-1]
        flat = logits.reshape(-1, v)
        g = (g_logp.reshape(-1) / t).float()
        out = torch.empty(flat.shape, dtype=torch.float32, device=flat.device)
        step = _chunk_rows(v)
        for i in range(0, flat.shape[0], step):
            z = scaled(flat[i:i + step], t)
            gi = g[i:i + step, None]
            p = _tail_free_exp(z - lse[i:i + step, None])
            o = out[i:i + step]
            torch.mul(p, gi.neg(), out=o)
            o.scatter_add_(-1, tok[i:i + step, None], gi)
        return out.reshape(logits.shape).to(logits.dtype), None, None, None


def fused_token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0,
                         with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`token_logprobs` and, where `with_entropy`, the token entropy (no gradient), without the
    [N, T, V] log-softmax (`_FusedTokenLogprobs`): equal to `token_logprobs` and `entropy_of_logprobs`
    up to float rounding (tests/unit/test_losses.py), their gradient too."""
    logp, ent = _FusedTokenLogprobs.apply(logits, tokens, temperature, with_entropy)
    return logp, (ent if with_entropy else None)


def resolve_logprobs(kind: str, builtin: bool) -> bool:
    """`algo.logprobs` → whether training forwards use `fused_token_logprobs` (auto: for a pretrained model)."""
    return kind == "fused" or (kind == "auto" and not builtin)


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
