"""The policy update of one rollout batch, as functions of explicit inputs (`TrainState`): forward passes
that score a batch's responses, the optimizer steps (`update`: ppo_epochs × M mini-batches,
docs/method.md "Mini-batch updates") and the log-ratios κ_eff measures after them
(`logratio_sums`). `update` is read in its parts: the behaviour policy's log-probs
(`behaviour_logprobs`), one optimizer step per mini-batch (`mini_batch_step`, each micro-batch's
forward and backward in `micro_batch_loss`), the loss itself, a pure function of its tensors
(`minibatch_loss`: policy loss × TIS + KL − αH), and the statistics record (`UpdateStats`).
`rbctl.train.step.train_step` calls them in the order of a step.
"""

from __future__ import annotations


import contextlib
import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from rbctl.algo.losses import (BatchNorm, aggregation_weights, at_tokens, entropy_of_logprobs, fused_token_logprobs, k3_kl,
                               lean_token_logprobs, token_entropy, vocab_logprobs)
from rbctl.algo.sharpness import mixed_prompts
from rbctl.config.train import AlgoCfg, RolloutCfg
from rbctl.rollout.base import Engine
from rbctl.rollout.logprobs import logprob_mismatch, tis_weights
from rbctl.train.batch import RolloutBatch, dropout_active, micro_slices, mini_batch_rows, response_logits
from rbctl.train.distributed import DistContext
from rbctl.train.objective import Objective, stat_metric
from rbctl.train.precision import Precision


@dataclass(kw_only=True)
class TrainState:
    """What an update reads and steps: the config sections it reads, the policy (`model`;
    `train_model` is its DDP/FSDP-wrapped view that training forwards run through), the frozen
    reference (None with LoRA, whose reference is the adapter-disabled base, or when no KL is kept),
    the optimizer and its schedule, the arm's objective, the process group, the engine whose weights
    follow the policy, and where forwards run."""

    algo: AlgoCfg  # the arm's loss and update settings (`cfg.algo`)
    rollout: RolloutCfg  # the batch's group size, temperature and token limit (`cfg.rollout`)
    max_grad_norm: float  # `cfg.optim.max_grad_norm`
    seed: int  # the run's seed: it seeds the mini-batches' deal
    kappa_eff_every: int  # κ_eff is measured every this many steps (0: never)
    model: torch.nn.Module
    train_model: torch.nn.Module
    ref: torch.nn.Module | None
    opt: torch.optim.Optimizer
    sched: torch.optim.lr_scheduler.LRScheduler
    objective: Objective
    dist: DistContext
    engine: Engine
    device: torch.device
    precision: Precision
    lora: bool
    use_ref: bool  # a KL to the reference is penalised or logged
    fused_logprobs: bool = False  # algo.logprobs resolved: log-probs by `fused_token_logprobs`


@dataclass
class UpdateResult:
    """What `update` returns: the step's update metrics, the behaviour policy's log-probs (what
    κ_eff and the sampler mismatch compare against) and how many optimizer steps it took."""

    metrics: dict[str, float | int | None]  # entropy, kl, clip/*, policy_loss/*, tokens/*, loss/total, grad_norm, …
    old_logp: torch.Tensor  # [N, Lr] log π_old per response token (0 on padding)
    optimizer_steps: int  # ppo_epochs × M, skipped ones included


def micro_batches(p: TrainState, n: int) -> list[slice]:
    """The micro-batches (`algo.micro_batch_size` rows) of n rows."""
    return micro_slices(n, p.algo.micro_batch_size)


def mini_batches(p: TrainState, n_prompts: int, step: int, epoch: int) -> list[list]:
    """This rank's optimizer steps of one epoch (`mini_batch_rows`)."""
    return mini_batch_rows(n_prompts, p.rollout.group_size, mini_batches_per_epoch(p),
                           p.algo.micro_batch_size, (p.seed, step, epoch))


def mini_batches_per_epoch(p: TrainState) -> int:
    """M: optimizer steps per epoch (P / algo.ppo_mini_batch_size; 1 when that is null)."""
    mb = p.algo.ppo_mini_batch_size
    return 1 if mb is None else p.rollout.prompts_per_step // mb


def forward_logp(p: TrainState, model, batch: RolloutBatch, sl, with_entropy: bool, entropy_grad: bool, lean: bool = False):
    """Log-probs [n, Lr] of rows `sl` of the batch's responses under `model`, and their per-token
    entropy [n, Lr] where `with_entropy` (with gradient where `entropy_grad`, else None). `lean`
    (no gradient, no entropy): by `lean_token_logprobs`, equal up to float rounding. The forward runs
    only up to these rows' longest response (packed where `response_logits` packs); the columns past it
    come back as 0."""
    dev = p.device
    # Under DDP every row runs whole: the shared-prompt path calls the model twice per backward.
    group = 1 if p.dist.enabled else p.rollout.group_size
    lr = batch.response_ids.shape[1]
    lengths = batch.response_mask[sl].sum(1)
    w = max(1, int(lengths.max().item())) if len(lengths) else 1  # the columns past the longest response are padding
    end = batch.prompt_width + w
    with p.precision.context():
        logits = response_logits(model, batch.input_ids[sl][:, :end].to(dev), batch.attention_mask[sl][:, :end].to(dev),
                                 batch.prompt_width, group_size=group, lengths=lengths)
    t = p.rollout.temperature
    tokens = batch.response_ids[sl][:, :w].to(dev)
    logp, ent = _token_logp(p, logits, tokens, t, with_entropy, entropy_grad, lean)
    if w < lr:  # back to the batch's width: 0 (log-prob and entropy) on the padding cut off
        logp = torch.nn.functional.pad(logp, (0, lr - w))
        ent = None if ent is None else torch.nn.functional.pad(ent, (0, lr - w))
    return logp, ent


def _token_logp(p: TrainState, logits, tokens, t: float, with_entropy: bool, entropy_grad: bool, lean: bool):
    """`forward_logp`'s log-probs (and entropy) of `tokens` from `logits` [n, w, V]."""
    if lean and not with_entropy and not torch.is_grad_enabled():  # no [n, Lr, V] log-softmax is formed
        return lean_token_logprobs(logits, tokens, t), None
    if p.fused_logprobs and not entropy_grad:  # no [n, Lr, V] log-softmax either, gradient or not
        return fused_token_logprobs(logits, tokens, t, with_entropy)
    vocab_logp = vocab_logprobs(logits, t)
    logp = at_tokens(vocab_logp, tokens)
    ent = None
    if with_entropy:  # with gradient for an entropy bonus; else logged from the log-softmax at hand
        ent = token_entropy(logits, t) if entropy_grad else entropy_of_logprobs(vocab_logp.detach())
    return logp, ent


@torch.no_grad()
def eval_logp(p: TrainState, model, batch: RolloutBatch, slices: list[slice], with_entropy: bool = False, lean: bool = False):
    """No-grad log-probs [N, Lr] of the whole batch in eval mode (no dropout, as the rollouts were
    sampled), run micro-batch by micro-batch; with `with_entropy` also (log-probs, the token
    entropy summed over response tokens). `model` None: the reference (the adapter-disabled base
    with LoRA, else the frozen copy)."""
    ref = model is None
    model = (p.model if p.lora else p.ref) if ref else model
    was = model.training
    model.eval()
    try:
        with p.model.disable_adapter() if ref and p.lora else contextlib.nullcontext():
            outs = [forward_logp(p, model, batch, sl, with_entropy, False, lean) for sl in slices]
    finally:
        model.train(was)
    logp = torch.cat([lp for lp, _ in outs])
    if not with_entropy:
        return logp
    mask = batch.response_mask.to(p.device)
    return logp, sum((ent * mask[sl]).sum().item() for (_, ent), sl in zip(outs, slices))


@dataclass
class Behaviour:
    """The behaviour policy's log-probs (`logp`, [N, Lr]: the model before the batch's first
    optimizer step; None until the first epoch's training forwards fill them in, where
    `from_forward`), the reference's (`ref_logp`, None without a reference) and whether the
    pre-update entropy and KL were logged by a separate pass (`pre_logged`, with the entropy sum
    in `entropy_sum`)."""

    logp: torch.Tensor | None
    ref_logp: torch.Tensor | None
    pre_logged: bool
    from_forward: bool
    entropy_sum: float = 0.0


def behaviour_logprobs(state: TrainState, batch: RolloutBatch) -> Behaviour:
    """The behaviour policy's and the reference's log-probs of the batch, before any step. With one
    mini-batch the first epoch's training forward gives the behaviour log-probs (nothing has changed
    yet), unless dropout is active. Otherwise a no-grad eval-mode pass over the whole batch takes
    them; with M > 1 it also gives the logged pre-update entropy (and KL), since later mini-batches
    are stepped on after earlier ones."""
    whole = micro_batches(state, batch.n)
    pre_logged = mini_batches_per_epoch(state) > 1
    old, ent_pre = None, 0.0
    if pre_logged:
        old, ent_pre = eval_logp(state, state.model, batch, whole, with_entropy=True)
    elif dropout_active(state.model):
        old = eval_logp(state, state.model, batch, whole)
    ref_logp = eval_logp(state, None, batch, whole) if state.use_ref else None
    return Behaviour(old, ref_logp, pre_logged, from_forward=old is None, entropy_sum=ent_pre)


def minibatch_loss(a: AlgoCfg, pg_loss: torch.Tensor, logp: torch.Tensor, old_logp: torch.Tensor,
                   engine_logp: torch.Tensor | None, ref_logp: torch.Tensor | None, entropy: torch.Tensor | None,
                   weights: torch.Tensor, alpha: float) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(the loss of a micro-batch's rows, their per-token k3 KL to the reference or None): the
    policy loss per token [n, Lr] × the TIS weights (where the sampler's log-probs are kept and
    `algo.tis_cap` is set) + kl_coef·KL − α·H, aggregated by `weights` (`aggregation_weights`)."""
    loss_mat = pg_loss
    if engine_logp is not None and a.tis_cap is not None:
        loss_mat = loss_mat * tis_weights(old_logp, engine_logp, a.tis_cap)
    kl = None
    if ref_logp is not None:
        kl = k3_kl(logp, ref_logp)
        if a.kl_coef > 0:
            loss_mat = loss_mat + a.kl_coef * kl
    if a.entropy.mode != "none":
        loss_mat = loss_mat - alpha * entropy
    return (weights * loss_mat).sum(), kl


@dataclass
class UpdateStats:
    """What an update sums as it goes: the first epoch's entropy and KL (token sums), the policy
    loss's token statistics (+ mask) summed over tokens and averaged over epochs (the clip's three
    for every loss, 0 where it has no such clip), the mean loss, the gradient norms of the steps
    taken, and the optimizer steps counted and skipped."""

    entropy_sum: float = 0.0
    kl_sum: float = 0.0
    loss: float = 0.0
    grad_norms: list[float] = field(default_factory=list)
    tokens: dict[str, float] = field(default_factory=lambda: {"clipped_low": 0.0, "clipped_high": 0.0, "clipped_dual": 0.0})
    steps: int = 0
    skipped: int = 0

    def add_micro_batch(self, pg, mask: torch.Tensor, epochs: int, entropy=None, kl=None) -> None:
        """A micro-batch's policy-loss statistics; its entropy and KL sums where given (first epoch)."""
        for name, hit in pg.token_stats.items():
            self.tokens[name] = self.tokens.get(name, 0.0) + (hit.float() * mask).sum().item() / epochs
        for name, count in pg.counts.items():
            self.tokens[name] = self.tokens.get(name, 0.0) + count / epochs
        if entropy is not None:
            self.entropy_sum += (entropy.detach() * mask).sum().item()
            if kl is not None:
                self.kl_sum += (kl.detach() * mask).sum().item()

    def metrics(self, state: TrainState, batch: RolloutBatch, old_logp: torch.Tensor) -> dict[str, float | int | None]:
        """The update's metrics over all ranks (per valid token where a sum)."""
        mask_all = batch.response_mask.to(state.device)
        n_tokens = state.dist.sum(mask_all.sum().item())[0]
        ent_sum, kl_sum, *tok_sums = state.dist.sum(self.entropy_sum, self.kl_sum, *self.tokens.values())
        n_tok = max(n_tokens, 1)
        metrics = {
            "entropy": ent_sum / n_tok,
            "kl": kl_sum / n_tok if state.use_ref else None,
            **{stat_metric(name): v / n_tok for name, v in zip(self.tokens, tok_sums)},
            "loss/total": self.loss,
            "grad_norm": float(np.mean(self.grad_norms)) if self.grad_norms else None,
            "nonfinite/skipped": self.skipped,
        }
        if batch.engine_logp is not None:  # the sampling path's log-probs vs the trainer's (any engine)
            metrics["rollout/logprob_diff"] = logprob_mismatch(batch.engine_logp.to(state.device), old_logp, mask_all)
        return metrics


def micro_batch_loss(state: TrainState, batch: RolloutBatch, rows, behaviour: Behaviour, epoch: int, draw: tuple,
                     norm: BatchNorm, alpha: float, stats: UpdateStats) -> float:
    """Forward and backward of one micro-batch (`rows` of the batch) of a mini-batch; its loss."""
    a = state.algo
    dev = state.device
    mask = batch.response_mask[rows].to(dev)
    first = epoch == 0 and not behaviour.pre_logged  # the first epoch's forwards log entropy and KL
    entropy_on = a.entropy.mode != "none"
    logp, ent = forward_logp(state, state.train_model, batch, rows, entropy_grad=entropy_on,
                             with_entropy=first or entropy_on or state.objective.needs_entropy)
    if behaviour.from_forward and epoch == 0:
        if behaviour.logp is None:
            behaviour.logp = logp.new_zeros(batch.response_mask.shape)
        behaviour.logp[rows] = logp.detach()  # behaviour policy = the model before any update
    old = behaviour.logp[rows]
    ref = behaviour.ref_logp[rows] if behaviour.ref_logp is not None else None
    # the arm's policy loss, restricted to its token mask if it has one, given what its methods need
    ctx = state.objective.context(mask, ent, ref, draw)
    pg = state.objective.policy_loss(logp, old, batch.advantages.reshape(-1)[rows].to(dev), mask, ent, ctx)
    engine_logp = batch.engine_logp[rows].to(dev) if batch.engine_logp is not None else None
    loss, kl = minibatch_loss(a, pg.loss_mat, logp, old, engine_logp, ref, ent,
                              aggregation_weights(mask, a.loss_agg, norm), alpha)
    # DDP averages gradients over ranks; the weights are already global, so undo the 1/world
    (loss * state.dist.world).backward()
    stats.add_micro_batch(pg, mask, a.ppo_epochs, *((ent, kl) if first else ()))
    return loss.item()


def mini_batch_step(state: TrainState, batch: RolloutBatch, mini_batch: list, behaviour: Behaviour, epoch: int,
                    k: int, alpha: float, stats: UpdateStats) -> int:
    """One optimizer step on a mini-batch (its micro-batches' gradients summed; loss normalisers
    over the mini-batch's sequences and tokens on all ranks), skipped on a non-finite loss or
    gradient. `k` counts the epoch's micro-batches (it seeds a policy loss's random choice); the
    count after this mini-batch is returned."""
    mask = batch.response_mask
    n_seqs, n_tokens = state.dist.sum(sum(mask[r].shape[0] for r in mini_batch), sum(mask[r].sum().item() for r in mini_batch))
    norm = BatchNorm(n_seqs=int(n_seqs), n_tokens=int(n_tokens), max_new_tokens=state.rollout.max_new_tokens)
    state.opt.zero_grad(set_to_none=True)
    loss_total = 0.0
    for j, rows in enumerate(mini_batch):
        last = j == len(mini_batch) - 1
        with state.train_model.no_sync() if (state.dist.enabled and not last) else contextlib.nullcontext():
            loss_total += micro_batch_loss(state, batch, rows, behaviour, epoch, (batch.step, epoch, k), norm, alpha, stats)
        k += 1
    loss_total = state.dist.sum(loss_total)[0]
    grad_norm = torch.nn.utils.clip_grad_norm_([w for w in state.model.parameters() if w.requires_grad],
                                               state.max_grad_norm)
    stats.steps += 1
    if not (math.isfinite(loss_total) and torch.isfinite(grad_norm)):
        state.opt.zero_grad(set_to_none=True)
        stats.skipped += 1
        return k  # never step on a non-finite loss or gradient
    state.opt.step()
    stats.grad_norms.append(grad_norm.item())
    stats.loss += loss_total / (state.algo.ppo_epochs * mini_batches_per_epoch(state))
    return k


def update(state: TrainState, batch: RolloutBatch, alpha: float) -> UpdateResult:
    """`ppo_epochs` × M optimizer steps on this rank's share of the batch: each epoch deals the
    groups into M mini-batches (`algo.ppo_mini_batch_size`; docs/method.md, "Mini-batch
    updates"), one optimizer step each. Ratios are against the behaviour policy's log-probs from
    before the first step; loss normalisers are the mini-batch's (sequences and tokens, summed
    over ranks), so micro-batching and the number of processes do not change a step. Neither the
    learning-rate schedule nor the engine's weights move here (`rbctl.train.step.train_step` does both)."""
    behaviour = behaviour_logprobs(state, batch)
    stats = UpdateStats()
    for epoch in range(state.algo.ppo_epochs):
        k = 0  # micro-batch counter of the epoch: seeds a policy loss's random choice
        for mini_batch in mini_batches(state, batch.n // state.rollout.group_size, batch.step, epoch):
            k = mini_batch_step(state, batch, mini_batch, behaviour, epoch, k, alpha, stats)
    if behaviour.pre_logged:
        stats.entropy_sum = behaviour.entropy_sum
        if state.use_ref:
            mask_all = batch.response_mask.to(state.device)
            stats.kl_sum = (k3_kl(behaviour.logp, behaviour.ref_logp) * mask_all).sum().item()
    return UpdateResult(stats.metrics(state, batch, behaviour.logp), behaviour.logp, stats.steps)


@torch.no_grad()
def logratio_sums(p: TrainState, batch: RolloutBatch, old_logp: torch.Tensor) -> torch.Tensor:
    """d_i = Σ_t (log π_new − log π_old) over each rollout's response tokens, as [P, G], for the
    rollouts of mixed prompts (rewards not all equal) only: κ_eff is defined over those
    (docs/method.md, "Sharpness"), so the others are not forwarded and their d is NaN. With more
    than one process every rank forwards all its prompts: a sharded model's forward is a collective,
    so ranks with different numbers of mixed prompts would fall out of step. Forwarding fewer rows
    changes only the GEMMs' float32 rounding: κ_eff is within 1e-5 relative of the all-rollouts
    forward's (tests/integration/test_train_defects.py asserts it)."""
    rewards = batch.rewards
    is_mixed = mixed_prompts(rewards)
    mixed = (torch.ones_like(is_mixed) if p.dist.enabled else is_mixed).nonzero().flatten()
    d = torch.full(tuple(rewards.shape), float("nan"), dtype=torch.float32)
    if len(mixed):
        g = rewards.shape[1]
        rows = (mixed[:, None] * g + torch.arange(g)).flatten()  # whole groups, prompt-major as the batch
        sub = dataclasses.replace(batch, input_ids=batch.input_ids[rows], attention_mask=batch.attention_mask[rows],
                                  response_ids=batch.response_ids[rows], response_mask=batch.response_mask[rows],
                                  rewards=rewards[mixed], correct=batch.correct[mixed],
                                  advantages=batch.advantages[mixed], engine_logp=None, shaped_rewards=None)
        # eval mode, as the old ones; a measurement only, so the lean log-probs (rounding apart, the same)
        new_logp = eval_logp(p, p.model, sub, micro_batches(p, sub.n), lean=True)
        rows_dev = rows.to(old_logp.device)
        d[mixed] = ((new_logp - old_logp[rows_dev]) * sub.response_mask.to(p.device)).sum(-1).float().cpu().reshape(-1, g)
        d[~is_mixed] = float("nan")
    return p.dist.gather_rows(d)
