"""The policy update of one rollout batch, as functions of explicit inputs (`Policy`): forward passes
that score a batch's responses, the optimizer steps (`update`: ppo_epochs × M mini-batches,
docs/method.md "Mini-batch updates") and the log-ratios κ_eff measures after them
(`logratio_sums`). `rbctl.train.step.train_step` calls them in the order of a step.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import numpy as np
import torch

from rbctl.algo.losses import (BatchNorm, aggregation_weights, at_tokens, entropy_of_logprobs, k3_kl, lean_token_logprobs,
                               token_entropy, vocab_logprobs)
from rbctl.config.train import TrainConfig
from rbctl.rollout.base import Engine
from rbctl.rollout.logprobs import logprob_mismatch, tis_weights
from rbctl.train.batch import RolloutBatch, dropout_active, micro_slices, mini_batch_rows, response_logits
from rbctl.train.distributed import DistContext
from rbctl.train.objective import Objective, stat_metric
from rbctl.train.precision import Precision


@dataclass
class Policy:
    """What an update reads and steps: the policy (`model`; `train_model` is its DDP/FSDP-wrapped
    view that training forwards run through), the frozen reference (None with LoRA, whose reference
    is the adapter-disabled base, or when no KL is kept), the optimizer and its schedule, the arm's
    objective, the process group, the engine whose weights follow the policy, and where forwards run."""

    cfg: TrainConfig
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


@dataclass
class UpdateResult:
    """What `update` returns: the step's update metrics, the behaviour policy's log-probs (what
    κ_eff and the sampler mismatch compare against) and how many optimizer steps it took."""

    metrics: dict[str, float | int | None]  # entropy, kl, clip/*, policy_loss/*, tokens/*, loss/total, grad_norm, …
    old_logp: torch.Tensor  # [N, Lr] log π_old per response token (0 on padding)
    optimizer_steps: int  # ppo_epochs × M, skipped ones included


def micro_batches(cfg: TrainConfig, n: int) -> list[slice]:
    """The micro-batches (`algo.micro_batch_size` rows) of n rows."""
    return micro_slices(n, cfg.algo.micro_batch_size)


def mini_batches(cfg: TrainConfig, n_prompts: int, step: int, epoch: int) -> list[list]:
    """This rank's optimizer steps of one epoch (`mini_batch_rows`)."""
    return mini_batch_rows(n_prompts, cfg.rollout.group_size, mini_batches_per_epoch(cfg),
                           cfg.algo.micro_batch_size, (cfg.seed, step, epoch))


def mini_batches_per_epoch(cfg: TrainConfig) -> int:
    """M: optimizer steps per epoch (P / algo.ppo_mini_batch_size; 1 when that is null)."""
    mb = cfg.algo.ppo_mini_batch_size
    return 1 if mb is None else cfg.rollout.prompts_per_step // mb


def forward_logp(p: Policy, model, batch: RolloutBatch, sl, with_entropy: bool, entropy_grad: bool, lean: bool = False):
    """Log-probs [n, Lr] of rows `sl` of the batch's responses under `model`, and their per-token
    entropy [n, Lr] where `with_entropy` (with gradient where `entropy_grad`, else None). `lean`
    (no gradient, no entropy): by `lean_token_logprobs`, equal up to float rounding."""
    dev = p.device
    # Under DDP every row runs whole: the shared-prompt path calls the model twice per backward.
    group = 1 if p.dist.enabled else p.cfg.rollout.group_size
    with p.precision.context():
        logits = response_logits(model, batch.input_ids[sl].to(dev), batch.attention_mask[sl].to(dev),
                                 batch.prompt_width, group_size=group)
    t = p.cfg.rollout.temperature
    tokens = batch.response_ids[sl].to(dev)
    if lean and not with_entropy and not torch.is_grad_enabled():  # no [n, Lr, V] log-softmax is formed
        return lean_token_logprobs(logits, tokens, t), None
    vocab_logp = vocab_logprobs(logits, t)
    logp = at_tokens(vocab_logp, tokens)
    ent = None
    if with_entropy:  # with gradient for an entropy bonus; else logged from the log-softmax at hand
        ent = token_entropy(logits, t) if entropy_grad else entropy_of_logprobs(vocab_logp.detach())
    return logp, ent


@torch.no_grad()
def eval_logp(p: Policy, model, batch: RolloutBatch, slices: list[slice], with_entropy: bool = False, lean: bool = False):
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


def update(p: Policy, batch: RolloutBatch, alpha: float) -> UpdateResult:
    """`ppo_epochs` × M optimizer steps on this rank's share of the batch: each epoch deals the
    groups into M mini-batches (`algo.ppo_mini_batch_size`; docs/method.md, "Mini-batch
    updates"), one optimizer step each. Ratios are against the behaviour policy's log-probs from
    before the first step; loss normalisers are the mini-batch's (sequences and tokens, summed
    over ranks), so micro-batching and the number of processes do not change a step."""
    c = p.cfg
    dev = p.device
    a = c.algo
    world = p.dist.world
    m = mini_batches_per_epoch(c)
    whole = micro_batches(p.cfg, batch.n)
    adv_flat = batch.advantages.reshape(-1)
    mask_all = batch.response_mask.to(dev)
    # The behaviour policy's log-probs [N, Lr]: with one mini-batch, the first epoch's training
    # forward gives them (nothing has changed yet), unless dropout is active. Otherwise a no-grad
    # eval-mode pass over the whole batch takes them before the first step; with M > 1 it also
    # gives the logged pre-update entropy (and KL), since later mini-batches are stepped on after
    # earlier ones.
    pre_logged = m > 1
    old, ent_pre = None, 0.0
    if pre_logged:
        old, ent_pre = eval_logp(p, p.model, batch, whole, with_entropy=True)
    elif dropout_active(p.model):
        old = eval_logp(p, p.model, batch, whole)
    from_forward = old is None  # the first epoch's forward passes fill them in
    ref_logp = eval_logp(p, None, batch, whole) if p.use_ref else None
    entropy_on = a.entropy.mode != "none"
    obj = p.objective
    stats = {"entropy_sum": 0.0, "kl_sum": 0.0, "loss": 0.0, "grad_norm": []}
    # policy-loss token statistics (+ mask), summed over tokens; the clip's three are logged for every
    # loss (0 where it has no such clip, as for verl's losses without a PPO or a dual clip)
    tok = {"clipped_low": 0.0, "clipped_high": 0.0, "clipped_dual": 0.0}
    skipped = steps = 0
    for epoch in range(a.ppo_epochs):
        k = 0  # micro-batch counter of the epoch: seeds a policy loss's random choice
        for micro in mini_batches(c, batch.n // c.rollout.group_size, batch.step, epoch):
            n_seqs, n_tokens = p.dist.sum(sum(mask_all[r].shape[0] for r in micro),
                                             sum(mask_all[r].sum().item() for r in micro))
            norm = BatchNorm(n_seqs=int(n_seqs), n_tokens=int(n_tokens), max_new_tokens=c.rollout.max_new_tokens)
            p.opt.zero_grad(set_to_none=True)
            loss_total = 0.0
            for j, rows in enumerate(micro):
                mask = mask_all[rows]
                last = j == len(micro) - 1
                sync = p.train_model.no_sync() if (p.dist.enabled and not last) else contextlib.nullcontext()
                with sync:
                    logp, ent = forward_logp(p, p.train_model, batch, rows, entropy_grad=entropy_on,
                                                   with_entropy=(epoch == 0 and not pre_logged) or entropy_on
                                                   or obj.needs_entropy)
                    if from_forward and epoch == 0:
                        if old is None:
                            old = logp.new_zeros(mask_all.shape)
                        old[rows] = logp.detach()  # behaviour policy = the model before any update
                    # the arm's policy loss, restricted to its token mask if it has one
                    pg = obj.policy_loss(logp, old[rows], adv_flat[rows].to(dev), mask, ent, draw=(batch.step, epoch, k))
                    w = aggregation_weights(mask, a.loss_agg, norm)
                    loss_mat = pg.loss_mat
                    if batch.engine_logp is not None and a.tis_cap is not None:
                        loss_mat = loss_mat * tis_weights(old[rows], batch.engine_logp[rows].to(dev), a.tis_cap)
                    kl = None
                    if p.use_ref:
                        kl = k3_kl(logp, ref_logp[rows])
                        if a.kl_coef > 0:
                            loss_mat = loss_mat + a.kl_coef * kl
                    if entropy_on:
                        loss_mat = loss_mat - alpha * ent
                    loss = (w * loss_mat).sum()
                    # DDP averages gradients over ranks; the weights are already global, so undo the 1/world
                    (loss * world).backward()
                loss_total += loss.item()
                for name, hit in pg.token_stats.items():
                    tok[name] = tok.get(name, 0.0) + (hit.float() * mask).sum().item() / a.ppo_epochs
                for name, count in pg.counts.items():
                    tok[name] = tok.get(name, 0.0) + count / a.ppo_epochs
                if epoch == 0 and not pre_logged:
                    stats["entropy_sum"] += (ent.detach() * mask).sum().item()
                    if kl is not None:
                        stats["kl_sum"] += (kl.detach() * mask).sum().item()
                k += 1
            loss_total = p.dist.sum(loss_total)[0]
            grad_norm = torch.nn.utils.clip_grad_norm_([w for w in p.model.parameters() if w.requires_grad],
                                                       c.optim.max_grad_norm)
            steps += 1
            if not (math.isfinite(loss_total) and torch.isfinite(grad_norm)):
                p.opt.zero_grad(set_to_none=True)
                skipped += 1
                continue  # never step on a non-finite loss or gradient
            p.opt.step()
            stats["grad_norm"].append(grad_norm.item())
            stats["loss"] += loss_total / (a.ppo_epochs * m)
    p.sched.step()
    if pre_logged:
        stats["entropy_sum"] = ent_pre
        if p.use_ref:
            stats["kl_sum"] = (k3_kl(old, ref_logp) * mask_all).sum().item()
    p.engine.sync_weights(p.model)  # the next rollout samples from the updated policy
    n_tokens = p.dist.sum(mask_all.sum().item())[0]
    ent_sum, kl_sum, *tok_sums = p.dist.sum(stats["entropy_sum"], stats["kl_sum"], *tok.values())
    n_tok = max(n_tokens, 1)
    metrics = {
        "entropy": ent_sum / n_tok,
        "kl": kl_sum / n_tok if p.use_ref else None,
        **{stat_metric(name): v / n_tok for name, v in zip(tok, tok_sums)},
        "loss/total": stats["loss"],
        "grad_norm": float(np.mean(stats["grad_norm"])) if stats["grad_norm"] else None,
        "nonfinite/skipped": skipped,
    }
    if batch.engine_logp is not None:  # the sampling path's log-probs vs the trainer's (any engine)
        metrics["rollout/logprob_diff"] = logprob_mismatch(batch.engine_logp.to(dev), old, mask_all)
    return UpdateResult(metrics, old, steps)


@torch.no_grad()
def logratio_sums(p: Policy, batch: RolloutBatch, old_logp: torch.Tensor) -> torch.Tensor:
    """d_i = Σ_t (log π_new − log π_old) over each rollout's response tokens, as [P, G]."""
    # eval mode, as the old ones; a measurement only, so the lean log-probs (rounding apart, the same)
    new_logp = eval_logp(p, p.model, batch, micro_batches(p.cfg, batch.n), lean=True)
    d = ((new_logp - old_logp) * batch.response_mask.to(p.device)).sum(-1).cpu()
    return p.dist.gather_rows(d.reshape(batch.rewards.shape))
