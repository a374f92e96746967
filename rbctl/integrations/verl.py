"""Reward budgeting as verl advantage estimators: one config key turns it on.

    VERL_USE_EXTERNAL_MODULES=rbctl.integrations.verl_plugin python3 -m verl.trainer.main_ppo \\
        algorithm.adv_estimator=grpo_budget +algorithm.budget=1.0 +algorithm.budget_shift=0.0 ...

How it hooks in (verl 0.6 – 0.9; read in verl/trainer/ppo/ray_trainer.py `compute_advantage` and
verl/trainer/ppo/core_algos.py, tested with 0.9.1):

1. `register()` adds `grpo_budget`, `dr_grpo_budget`, `rloo_budget` and `reinforce_pp_budget` to
   verl's `ADV_ESTIMATOR_REGISTRY` with verl's own decorator `register_adv_est`. verl looks every
   estimator other than `gae`/`grpo` up there and calls it as
   `fn(token_level_rewards=[bs, L], response_mask=[bs, L], config=<algorithm config>, index=uid[bs])`.
2. Each rollout's scalar reward is `token_level_rewards.sum(-1)` (what verl's `grpo` uses), its
   group is its `uid`. Rows are gathered into rbctl's `[P, G]` layout, advantages come from
   `rbctl.algo.compute_advantages`, and are scattered back and broadcast over the response tokens
   (`A_i · response_mask`, shape [bs, L]); returns = advantages, as in verl's `grpo`.
3. B and c are read from the algorithm config: `algorithm.budget` (default 1.0, docs/method.md's
   default; `null` turns the budget off so the estimator is its base) and `algorithm.budget_shift`
   (default 0.0). verl's Hydra config is in struct mode, so new keys take a leading `+`.

Registration must happen in the process that computes advantages (verl's trainer runs in a Ray
actor): `VERL_USE_EXTERNAL_MODULES=rbctl.integrations.verl_plugin` makes every process that imports
verl import the plugin, which calls `register()`.

Diagnostics (docs/integrations.md, "verl: κ, κ_eff and the advantage gap"): a registered estimator
returns tensors only, so each call also leaves `rbctl/kappa` and `rbctl/adv_gap` for its batch in
`LAST_METRICS` (read and cleared by `pop_metrics()`); `sharpness_metrics(data)` computes them from a
DataProto after the fact, and `kappa_eff_from_batch(...)` computes κ_eff from log-probs before and
after the actor update. Getting them into verl's logged metrics is user wiring (a trainer subclass).

Differences from verl's built-ins, by design (docs/method.md is the contract):
- `grpo_budget` with the budget off equals verl's `grpo` (std unbiased, + 1e-6). With the budget
  on there is no per-group std scaling (it would cancel the budget for binary rewards).
- `reinforce_pp` whitens advantages per rollout over the batch, not per token like verl's
  `reinforce_plus_plus_baseline` (which weighs long responses more in the mean/std).
- A uid group must have at least 2 rollouts, and all groups the same size.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from rbctl.algo import ESTIMATORS, advantage_gap, compute_advantages, kappa, kappa_eff, nanmean_or_none
from rbctl.errors import UserError
from rbctl.integrations import require_version

SUPPORTED_VERL = ">=0.6,<0.10"
TESTED_VERL = "0.9.1"

DEFAULT_BUDGET = 1.0  # docs/method.md: B defaults to 1
DEFAULT_SHIFT = 0.0  # docs/method.md: c defaults to 0 for binary rewards

# verl estimator name -> rbctl base estimator (those that compose with the budget and take no parameters)
ESTIMATOR_NAMES: dict[str, str] = {
    f"{base}_budget": base for base, est in ESTIMATORS.items() if est.composes_with_budget and not est.params
}


def budget_settings(config: Any) -> tuple[float | None, float]:
    """(B, c) from verl's algorithm config (a DictConfig, an AlgoConfig or a dict: all have `.get`).

    `algorithm.budget` absent -> docs/method.md's default B = 1; `null` -> no budget (the base estimator)."""
    if config is None:
        return DEFAULT_BUDGET, DEFAULT_SHIFT
    budget = config.get("budget", DEFAULT_BUDGET)
    shift = config.get("budget_shift", DEFAULT_SHIFT)
    return (None if budget is None else float(budget)), float(shift)


def group_rows(index: Any) -> torch.Tensor:
    """Row numbers of each uid group, [P, G], groups in order of first appearance.

    index: verl's `uid` array [bs] (numpy object array of strings, or any sequence of hashables);
    rows of one group need not be contiguous."""
    uids = index.tolist() if hasattr(index, "tolist") else list(index)
    groups: dict[Any, list[int]] = {}
    for row, uid in enumerate(uids):
        groups.setdefault(uid, []).append(row)
    sizes = sorted({len(rows) for rows in groups.values()})
    if len(sizes) != 1:
        raise UserError(
            f"rbctl's estimators need every uid group to have the same number of rollouts; got group sizes {sizes}"
        )
    if sizes[0] < 2:
        raise UserError("each uid group needs at least 2 rollouts to centre rewards: set actor_rollout_ref.rollout.n >= 2")
    return torch.tensor(list(groups.values()), dtype=torch.long)


def outcome_advantages(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    estimator: str,
    budget: float | None,
    shift: float = DEFAULT_SHIFT,
    metrics: dict[str, float] | None = None,
) -> torch.Tensor:
    """rbctl's advantages in verl's layout: [bs, L] token rewards -> [bs, L] advantages (A_i on every response token).

    metrics: if given, filled with rbctl/kappa and rbctl/adv_gap of this batch (see _sharpness)."""
    scores = token_level_rewards.sum(dim=-1)  # [bs]: one outcome reward per rollout, as verl's grpo
    rows = group_rows(index).to(scores.device)  # [P, G]
    adv = compute_advantages(scores[rows], estimator, budget=budget, shift=shift)  # [P, G]
    if metrics is not None:
        metrics.update(_sharpness(scores[rows], adv))
    per_rollout = torch.empty_like(scores)
    per_rollout[rows.flatten()] = adv.flatten().to(scores.dtype)
    return per_rollout.unsqueeze(-1) * response_mask


# The last estimator call's diagnostics, in this process (verl computes advantages in its trainer
# process): {"rbctl/kappa": float, "rbctl/adv_gap": float}, a key left out when it is undefined.
LAST_METRICS: dict[str, float] = {}


def pop_metrics() -> dict[str, float]:
    """The diagnostics of the last budgeted-estimator call (see LAST_METRICS), cleared so a step never logs a stale one."""
    out = dict(LAST_METRICS)
    LAST_METRICS.clear()
    return out


def _sharpness(scores_pg: torch.Tensor, adv_pg: torch.Tensor) -> dict[str, float]:
    """rbctl/kappa (mean over mixed prompts) and, for 0/1 rewards, rbctl/adv_gap; undefined ones left out."""
    out = {}
    k = nanmean_or_none(kappa(scores_pg, adv_pg))
    if k is not None:
        out["rbctl/kappa"] = k
    if bool(((scores_pg == 0) | (scores_pg == 1)).all()):
        gap = advantage_gap(scores_pg == 1, adv_pg)
        if gap is not None:
            out["rbctl/adv_gap"] = gap
    return out


def sharpness_metrics(data: Any) -> dict[str, float]:
    """rbctl/kappa and rbctl/adv_gap of a verl batch after compute_advantage, for any estimator.

    data: a verl DataProto (or anything with `.batch` and `.non_tensor_batch` mappings) holding
    `token_level_rewards` [bs, L], `advantages` [bs, L], `response_mask` [bs, L] and the `uid` array.
    A rollout's reward is its summed token rewards; its advantage is the mean of `advantages` over its
    response tokens (the A_i that outcome estimators broadcast). Keys are left out when undefined:
    no mixed prompt, or (for the gap) a reward other than 0 or 1."""
    batch, non_tensor = data.batch, data.non_tensor_batch
    mask = batch["response_mask"].float()
    scores = batch["token_level_rewards"].float().sum(dim=-1)
    adv = (batch["advantages"].float() * mask).sum(dim=-1) / mask.sum(dim=-1).clamp(min=1)
    rows = group_rows(non_tensor["uid"]).to(scores.device)
    return _sharpness(scores[rows], adv[rows])


def kappa_eff_from_batch(
    old_log_probs: torch.Tensor,
    new_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    scores: torch.Tensor,
    index: Any,
) -> float | None:
    """κ_eff of one verl batch (docs/method.md, "Sharpness"), mean over mixed prompts; None if none is mixed.

    old_log_probs: [bs, L] log π_old per response token (verl's batch field `old_log_probs`);
    new_log_probs: [bs, L] the same tokens' log π after the actor update (one more compute_log_prob);
    response_mask: [bs, L]; scores: [bs] each rollout's reward (token_level_rewards.sum(-1), or
    [bs, L] token rewards, summed here); index: the `uid` array [bs].
    d_i = Σ_t (log π_new − log π_old)·mask, gathered by uid into [P, G], then kappa_eff(r, d)."""
    if scores.dim() == 2:
        scores = scores.sum(dim=-1)
    mask = response_mask.double()
    d = ((new_log_probs.double() - old_log_probs.double()) * mask).sum(dim=-1)
    rows = group_rows(index).to(d.device)
    return nanmean_or_none(kappa_eff(scores.double()[rows.to(scores.device)], d[rows]))


def _make_estimator(base: str) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    def estimator_fn(token_level_rewards, response_mask, index=None, config=None, **kwargs):
        if index is None:
            raise UserError(f"{base}_budget needs verl's group index (the 'uid' field of the batch)")
        budget, shift = budget_settings(config)
        if base == "grpo" and budget is None and config is not None and not config.get("norm_adv_by_std_in_grpo", True):
            # With the budget off, grpo_budget is verl's grpo *with* std scaling; the unscaled one is dr_grpo.
            raise UserError("norm_adv_by_std_in_grpo=False asks for Dr.GRPO: use algorithm.adv_estimator=dr_grpo_budget")
        with torch.no_grad():
            LAST_METRICS.clear()
            advantages = outcome_advantages(
                token_level_rewards, response_mask, index, base, budget, shift, metrics=LAST_METRICS
            )
        return advantages, advantages

    estimator_fn.__name__ = estimator_fn.__qualname__ = f"compute_{base}_budget_outcome_advantage"
    estimator_fn.__doc__ = f"verl advantage estimator '{base}_budget': rbctl.algo.compute_advantages(r, '{base}', B, c)."
    return estimator_fn


# One function object per name, made once: verl's register_adv_est refuses to re-register a name
# with a different function, so register() stays idempotent.
ESTIMATOR_FNS: dict[str, Callable[..., tuple[torch.Tensor, torch.Tensor]]] = {
    name: _make_estimator(base) for name, base in ESTIMATOR_NAMES.items()
}


def register() -> list[str]:
    """Add the budgeted estimators to verl's advantage-estimator registry; returns their names."""
    try:
        import verl
    except ImportError as e:
        raise ImportError(f"rbctl.integrations.verl needs verl{SUPPORTED_VERL}: pip install 'verl=={TESTED_VERL}'") from e
    require_version("verl", verl.__version__, SUPPORTED_VERL, TESTED_VERL)
    from verl.trainer.ppo.core_algos import register_adv_est

    for name, fn in ESTIMATOR_FNS.items():
        register_adv_est(name)(fn)
    return list(ESTIMATOR_FNS)
