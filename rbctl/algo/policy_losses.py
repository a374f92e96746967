"""Policy-loss variants as pure functions; the registry (rbctl.algo.registry, modelled on verl's
`register_policy_loss`) names them, and the update loop picks one by name (`rbctl.algo.dispatch.compute_policy_loss`) and
never branches per method.

Every variant takes (logp [N, T], old_logp [N, T], advantages [N] or [N, T], mask [N, T], **params)
and returns a `PolicyLossResult`: the per-token loss matrix [N, T] (to be aggregated with
`rbctl.algo.losses.aggregation_weights`, or with the variant's own `loss_agg` when it forces one),
boolean per-token statistics [N, T] (the trainer sums them over valid tokens to log fractions) and
token counts of the call (summed over calls, logged as fractions of the same tokens).
Its settings are keyword-only parameters without defaults: the defaults are its registry record's
(rbctl.algo.registry), and the docstrings name the sources' values.
Padding entries of the loss matrix are whatever falls out of the formula; the aggregation weights
are 0 there. Formulas and sources: docs/method.md, "Other arms".

Clip-Cov and KL-Cov compute their covariance and choose their tokens over the tokens of the batch
they are given; verl applies them per micro-batch, and so does a trainer that calls them per
micro-batch (docs/method.md, "Other arms": which tokens, and what the floor of one token does).

verl's guards, and which loss has which (verl/trainer/ppo/core_algos.py at volcengine/verl
b178a3cd56f58b2d502255daba591e92833930a7): `compute_policy_loss_vanilla` clamps the log-ratio at
±20 before exp and applies the dual clip `clip_ratio_c` (`clip_loss` here);
`compute_policy_loss_gspo` clamps the sequence log-ratio at +10 only and has no dual clip;
`compute_policy_loss_clip_cov` and `compute_policy_loss_kl_cov` have neither. Each loss here does
what its verl counterpart does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from rbctl.errors import UserError

# verl clamps the sequence log-ratio of GSPO at 10 before exp "for numerical stability".
GSPO_LOG_RATIO_MAX = 10.0
# verl's compute_policy_loss_vanilla clamps the token log-ratio to ±20 before exp ("for stability"):
# exp(20) ≈ 4.9e8 is finite in float32 and bfloat16, so a large drift gives a large finite ratio, not inf.
LOG_RATIO_MAX = 20.0


@dataclass
class PolicyLossResult:
    loss_mat: torch.Tensor  # [N, T] per-token loss
    token_stats: dict[str, torch.Tensor] = field(default_factory=dict)  # name -> [N, T] bool
    counts: dict[str, float] = field(default_factory=dict)  # name -> a token count of this call (not per token)


def _token_adv(advantages: torch.Tensor, logp: torch.Tensor) -> torch.Tensor:
    """[N] (one per sequence) or [N, T] advantages -> [N, T] in logp's dtype."""
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)
    return advantages.to(logp.dtype).expand_as(logp)


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """verl_F.masked_mean: Σ x·mask / Σ mask."""
    return (x * mask).sum() / mask.sum()


def _ppo_terms(logp, old_logp, adv, clip_low: float, clip_high: float):
    """ρ = exp(logp − old_logp), −A·ρ and −A·clip(ρ, 1 − ε_low, 1 + ε_high) (ε_low = clip_low, ε_high = clip_high)."""
    return _ppo_terms_from_log_ratio(logp - old_logp, adv, clip_low, clip_high)


def _ppo_terms_from_log_ratio(log_ratio, adv, clip_low: float, clip_high: float):
    """`_ppo_terms` from log ρ."""
    ratio = torch.exp(log_ratio)
    return ratio, -adv * ratio, -adv * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)


def _clip_stats(ratio, adv, clip_low: float, clip_high: float) -> dict[str, torch.Tensor]:
    """Where the clip binds: ρ < 1 − ε_low with A < 0, ρ > 1 + ε_high with A > 0."""
    return {"clipped_low": (ratio < 1.0 - clip_low) & (adv < 0), "clipped_high": (ratio > 1.0 + clip_high) & (adv > 0)}


def _check_ratio(name: str, value: float) -> None:
    if not 0.0 < value <= 1.0:
        raise UserError(f"{name} must be in (0, 1], got {value}")


def clip_loss(logp, old_logp, advantages, mask, *, clip_low: float, clip_high: float,
              clip_ratio_c: float | None) -> PolicyLossResult:
    """PPO's clipped surrogate (Schulman et al. 2017, arXiv 1707.06347, eq. 7) with dual ε (DAPO's
    clip-higher: ε_low = clip_low, ε_high = clip_high) and verl's two guards, as its
    `compute_policy_loss_vanilla` (verl/trainer/ppo/core_algos.py at b178a3cd, lines 1159-1250):

        ρ = exp(clamp(logp − old_logp, −20, 20))
        l = max(−A·ρ, −A·clip(ρ, 1 − ε_low, 1 + ε_high))
        l = min(l, −A·c)    where A < 0                 (dual clip, c = clip_ratio_c > 1; None: off)

    verl: pg_losses3 = −A·c; clip_pg_losses2 = min(pg_losses3, clip_pg_losses1);
    pg_losses = where(A < 0, clip_pg_losses2, clip_pg_losses1). Written here as one `where` that
    takes −A·c only where it is smaller (A < 0 and l > −A·c, i.e. ρ > c): elsewhere the loss and its
    gradient are exactly those of the plain surrogate (the clamp is the identity inside ±20), bit
    for bit. At a tie l = −A·c the value is the same as verl's; verl's min then splits the gradient
    in half, this keeps it whole. The dual clip bounds the loss of a token whose probability a
    negative advantage should lower but which rose by more than c×: without it the loss −A·ρ, and
    its gradient, grow with ρ without bound (Ye et al. 2020, arXiv 1912.09729).
    token_stats: clipped_low/high (the PPO clip), clipped_dual (A < 0 and ρ > c: the dual clip
    binds; verl's pg_clipfrac_lower; all False when c is None)."""
    adv = _token_adv(advantages, logp)
    log_ratio = torch.clamp(logp - old_logp, min=-LOG_RATIO_MAX, max=LOG_RATIO_MAX)
    ratio, unclipped, clipped = _ppo_terms_from_log_ratio(log_ratio, adv, clip_low, clip_high)
    loss = torch.maximum(unclipped, clipped)
    stats = _clip_stats(ratio, adv, clip_low, clip_high)
    if clip_ratio_c is None:
        stats["clipped_dual"] = torch.zeros_like(logp, dtype=torch.bool)
        return PolicyLossResult(loss, stats)
    if not clip_ratio_c > 1.0:
        raise UserError(f"clip_ratio_c must be > 1 (the dual clip bounds ratios above 1), got {clip_ratio_c}")
    dual = -adv * clip_ratio_c  # no gradient: A and c are constants
    binds = (adv < 0) & (loss.detach() > dual)  # verl: torch.gt(clip_pg_losses1, pg_losses3) * (A < 0)
    stats["clipped_dual"] = binds
    return PolicyLossResult(torch.where(binds, dual, loss), stats)


def clip_cov_loss(
    logp, old_logp, advantages, mask, *, clip_low: float, clip_high: float, ratio: float, lb: float, ub: float,
    generator: torch.Generator | None = None,
) -> PolicyLossResult:
    """Clip-Cov (Cui et al. 2025, arXiv 2505.22617), as verl's `compute_policy_loss_clip_cov`
    (verl/trainer/ppo/core_algos.py, adapted from PRIME-RL/Entropy-Mechanism-of-RL):

        Cov_t = (A_t − mean A)·(log π_t − mean log π)      means over the valid tokens (log π detached)
        candidates: valid tokens with lb < Cov_t < ub whose PPO clip does not already bind
        n = max(⌊ratio · #valid⌋, 1); pick min(n, #candidates) candidates at random:
            torch.randperm(#candidates) over them in row-major order, the first n
        l_t = max(−A·ρ, −A·clip(ρ, 1 − ε_low, 1 + ε_high)) · (0 at picked tokens, else 1)

    verl's defaults (clip_cov_ratio, clip_cov_lb, clip_cov_ub): ratio 2e-4, lb 1, ub 5. The picked
    tokens carry loss 0 and no gradient. As verl's, no log-ratio clamp and no dual clip. The floor
    of one token makes the picked fraction 1/#valid whenever ratio · #valid < 1 (2.7e-3 for a
    call of 375 tokens, not 2e-4). `generator` None draws from torch's global RNG,
    as verl does; pass a seeded `torch.Generator` for a reproducible pick.
    token_stats: clipped_low/high (the PPO clip), cov_clipped (the picked tokens; verl's pg_clipfrac);
    counts: cov_quota (n, what the call asked for; more than it picks when there are fewer candidates)."""
    _check_ratio("clip_cov ratio", ratio)
    adv = _token_adv(advantages, logp)
    valid = mask > 0
    rho, unclipped, clipped = _ppo_terms(logp, old_logp, adv, clip_low, clip_high)
    with torch.no_grad():
        clip_by_origin = (clipped > unclipped) & valid
        m = mask.to(logp.dtype)
        lp = logp.detach()
        cov = (adv - _masked_mean(adv, m)) * (lp - _masked_mean(lp, m))
        cov = cov.masked_fill(~valid | clip_by_origin, float("-inf"))
        clip_num = max(int(ratio * mask.sum().item()), 1)
        idx = torch.nonzero((cov < ub) & (cov > lb) & valid)  # [C, 2], row-major
        if len(idx) > 0:
            perm = torch.randperm(len(idx), generator=generator)
            idx = idx[perm[: min(clip_num, len(idx))].to(idx.device)]
        picked = torch.zeros_like(valid)
        picked[idx[:, 0], idx[:, 1]] = True
    loss = torch.maximum(unclipped, clipped) * (~picked).to(logp.dtype)
    return PolicyLossResult(loss, {**_clip_stats(rho, adv, clip_low, clip_high), "cov_clipped": picked},
                            {"cov_quota": float(clip_num)})


def kl_cov_loss(
    logp, old_logp, advantages, mask, *, ratio: float, coef: float,
) -> PolicyLossResult:
    """KL-Cov (Cui et al. 2025, arXiv 2505.22617), as verl's `compute_policy_loss_kl_cov`
    (verl: `kl_cov_ratio`, default 2e-4, and `ppo_kl_coef`, default 1):

        Cov_t = (A_t − mean A)·(log π_t − mean log π)      means over the valid tokens (log π detached)
        n = max(⌊ratio · #valid⌋, 1) valid tokens with the largest Cov (torch.topk)
        l_t = −A·ρ + coef·|log π − log π_old|               at those n tokens
        l_t = −A·ρ                                          elsewhere (no PPO clip, as in verl)

    As verl's, no log-ratio clamp and no dual clip. The floor of one token makes the penalised
    fraction 1/#valid whenever ratio · #valid < 1. token_stats: kl_penalised (the n tokens)."""
    _check_ratio("kl_cov ratio", ratio)
    adv = _token_adv(advantages, logp)
    valid = mask > 0
    surrogate = -adv * torch.exp(logp - old_logp)  # −A·ρ
    with torch.no_grad():
        flat_valid = torch.nonzero(valid.reshape(-1), as_tuple=True)[0]
        penalised = torch.zeros(valid.numel(), dtype=torch.bool, device=logp.device)
        if len(flat_valid) > 0:
            va, vl = adv[valid].detach(), logp[valid].detach()
            cov = (va - va.mean()) * (vl - vl.mean())
            n = max(1, int(len(cov) * ratio))
            penalised[flat_valid[torch.topk(cov, n, largest=True).indices]] = True
        penalised = penalised.reshape(valid.shape)
    loss = torch.where(penalised, surrogate + coef * (logp - old_logp).abs(), surrogate)
    return PolicyLossResult(loss, {"kl_penalised": penalised})


def gspo_loss(logp, old_logp, advantages, mask, *, clip_low: float, clip_high: float) -> PolicyLossResult:
    """GSPO (Zheng et al. 2025, arXiv 2507.18071), as verl's `compute_policy_loss_gspo`:

        s_i = (π(y_i)/π_old(y_i))^(1/|y_i|) = exp((1/|y_i|)·Σ_t (log π_t − log π_old,t))
        s_i,t = sg[s_i] · π_t / sg[π_t]          (value s_i on every token; gradient s_i·∇log π_t)
        log s_i,t is clamped at 10 before exp (verl; from above only, and no dual clip: verl's GSPO has
        neither a lower clamp nor clip_ratio_c, and reports pg_clipfrac_lower as 0)
        l_i,t = max(−A_i·s_i,t, −A_i·clip(s_i,t, 1 − ε_low, 1 + ε_high))     ε_low = clip_low, ε_high = clip_high

    With `seq-mean-token-mean` aggregation (forced by the registry entry, as verl forces it) this
    is the paper's sequence objective mean_i min(s_i A_i, clip(s_i) A_i). The paper's ranges are
    ε_low = 3e-4, ε_high = 4e-4. token_stats: clipped_low/high, per sequence on its tokens."""
    adv = _token_adv(advantages, logp)
    m = mask.to(logp.dtype)
    seq_log_ratio = ((logp - old_logp) * m).sum(dim=-1) / m.sum(dim=-1).clamp(min=1)
    log_s = logp - logp.detach() + seq_log_ratio.detach().unsqueeze(-1)
    s = torch.exp(torch.clamp(log_s, max=GSPO_LOG_RATIO_MAX))
    unclipped = -adv * s
    clipped = -adv * torch.clamp(s, 1.0 - clip_low, 1.0 + clip_high)
    return PolicyLossResult(torch.maximum(unclipped, clipped), _clip_stats(s.detach(), adv, clip_low, clip_high))
