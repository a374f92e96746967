"""Token masks, reward transforms and batch filters of the comparison arms (pure functions).

Each is a small function the update loop composes with the estimators and policy losses; formulas
and sources in docs/method.md, "Other arms".
"""

from __future__ import annotations

import torch

from rbctl.errors import UserError


def high_entropy_mask(entropy: torch.Tensor, mask: torch.Tensor, *, rho: float) -> torch.Tensor:
    """The "80/20" high-entropy token mask (Wang et al. 2025, arXiv 2506.01939), with TRL's
    `top_entropy_quantile` semantics (GRPOTrainer.get_high_entropy_mask, called with 1 − ρ):

        τ = torch.quantile(H over the valid tokens, 1 − ρ)      (linear interpolation)
        keep_t = valid_t and H_t ≥ τ

    ρ ∈ (0, 1] is the fraction of the batch's valid tokens kept (ρ = 0.2: the paper's top 20%;
    ρ = 1 keeps every valid token, TRL's "off"). Ties at τ are all kept, so slightly more than a
    ρ fraction can pass. entropy, mask [N, T] -> bool [N, T]; no valid token -> all False.
    The policy-gradient loss is multiplied by this mask (TRL applies it before adding the KL term)."""
    if not 0.0 < rho <= 1.0:
        raise UserError(f"entropy token quantile rho must be in (0, 1], got {rho}")
    if entropy.shape != mask.shape:
        raise UserError(f"entropy and mask must share one [N, T] shape, got {tuple(entropy.shape)}, {tuple(mask.shape)}")
    valid = mask.bool()
    values = entropy[valid].float()
    if values.numel() == 0:
        return torch.zeros_like(valid)
    threshold = torch.quantile(values, 1.0 - rho)
    return (entropy * mask >= threshold) & valid


def unlikeliness_rewards(rewards: torch.Tensor, seq_logp: torch.Tensor, *, beta: float) -> torch.Tensor:
    """Unlikeliness reward (He, Fried & Welleck 2025, arXiv 2506.02355), as the authors' release
    (rewarding-unlikely-release, verl/trainer/ppo/ray_lean_trainer.py, `_compute_advantages`):

        rank_i = position of y_i when the group's G samples are sorted by seq_logp ascending
                 (0 = least likely under the old policy, G − 1 = most likely)
        r_i ← r_i · (1 − β · rank_i / G)

    All G samples of the group are ranked (not only the correct ones); with binary rewards only the
    correct samples change, and the most likely correct sample loses the most. The release ranks
    by the old policy's *mean* token log-prob (masked_mean over the response), so pass that as
    seq_logp. Ties keep sample order (stable sort). rewards, seq_logp [P, G] -> [P, G];
    0 ≤ β ≤ 1 keeps non-negative rewards non-negative (the release uses β = 0.25)."""
    if rewards.dim() != 2 or rewards.shape != seq_logp.shape:
        raise UserError(f"rewards and seq_logp must share one [P, G] shape, got "
                        f"{tuple(rewards.shape)}, {tuple(seq_logp.shape)}")
    if not 0.0 <= beta <= 1.0:
        raise UserError(f"unlikeliness beta must be in [0, 1], got {beta}")
    g = rewards.shape[1]
    order = torch.argsort(seq_logp, dim=1, stable=True)
    ranks = torch.argsort(order, dim=1, stable=True).to(torch.float32)
    return rewards.float() * (1.0 - beta * ranks / g)


def dynamic_sampling_keep(correct: torch.Tensor) -> torch.Tensor:
    """DAPO's dynamic sampling filter (Yu et al. 2025, arXiv 2503.14476: the constraint
    0 < |{o_i : is_equivalent(a, o_i)}| < G of its objective): keep the groups with K correct of G, 0 < K < G.

    correct [P, G] (bool or 0/1) -> bool [P]. For binary rewards this is verl's DAPO recipe filter
    (keep groups whose reward std > 0). The resampling loop that refills the batch up to a bounded
    number of rounds is the trainer's."""
    if correct.dim() != 2:
        raise UserError(f"correct must be a [P, G] tensor, got shape {tuple(correct.shape)}")
    k = correct.bool().sum(dim=1)
    return (k > 0) & (k < correct.shape[1])
