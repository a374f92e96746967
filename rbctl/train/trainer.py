"""The trainer: one run's set-up and one training step: rollouts → rewards → advantages (± budget)
→ policy-loss update → κ_eff. The loop around it (checkpoints, logging, evaluation) is `loop.py`.

How one step runs (and where it departs from a textbook GRPO loop):
1. P prompts are taken in a seeded order (a fresh permutation of the pool each epoch), and G
   rollouts each are sampled with a seed derived from (run seed, step): a resumed run samples
   exactly what an uninterrupted one would. Dynamic sampling refills P with mixed groups (`sampling.py`).
2. Rewards: the built-in task's exact checker, or the shared math grader (`rbctl.grading`).
3. Advantages ([P, G] → [P, G], broadcast over tokens) and the loss are the arm's `Objective`
   (`objective.py`: reward transform, estimator ± budget, policy loss, token mask; no branch here).
4. `ppo_epochs` optimizer steps on the batch. The log-probs of the first epoch's forward pass are
   the behaviour policy's (nothing has changed yet), so no separate "old log-prob" pass is run,
   unless dropout is active: then they come from a no-grad eval-mode pass, as the rollouts were
   sampled. Entropy and the KL to the reference are logged from the pre-update forward passes.
   Forwards and hf sampling run in `model.precision` (rbctl.train.precision), unless
   `rollout.dtype: bfloat16` samples from a bf16 replica; the sampler's own log-probs against the
   old ones are logged as `rollout/logprob_diff` (TIS, `algo.tis_cap`, corrects them).
5. κ_eff (every `kappa_eff_every` steps): one more forward pass after the update gives
   d_i = Σ_t log π_new − log π_old per rollout (docs/method.md, "Sharpness").
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from pathlib import Path

import numpy as np
import torch

from rbctl import algo
from rbctl.algo.losses import (BatchNorm, adaptive_alpha, aggregation_weights, at_tokens, entropy_of_logprobs, k3_kl,
                               token_entropy, vocab_logprobs)
from rbctl.config.train import TrainConfig
from rbctl.errors import UserError
from rbctl.rollout.base import SamplingParams
from rbctl.rollout.factory import build_engine
from rbctl.rollout.models import load_policy, lora_policy
from rbctl.rollout.vllm import logprob_mismatch, tis_weights
from rbctl.store.rundir import Checkpoint, checkpoint_dir, checkpoints_to_try, first_intact
from rbctl.tasks.prompting import encode_prompts, resolve_template
from rbctl.train.batch import RolloutBatch, dropout_active, make_batch, response_logits, sample_rows
from rbctl.train.checkpoint import load_state, rng_state, set_rng_state
from rbctl.train.data import load_training_problems, reward_function, task_spec, warm_start_spec
from rbctl.train.distributed import init_from_env
from rbctl.train.objective import Objective, stat_metric
from rbctl.train.optim import make_optimizer, schedule_record
from rbctl.train.parallel import parallel_for
from rbctl.train.precision import prepare_trainable, resolve_precision
from rbctl.train.sampling import Groups, collect_groups, round_prompts, round_seed


class Trainer:
    """One run's model, optimizer and engine, and one training step (rollout → update → κ_eff)."""

    def __init__(self, cfg: TrainConfig, run_dir: Path, log=print):
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.log = log
        self.objective = Objective(cfg)  # policy loss, token mask, reward transform, estimator
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.dist = init_from_env()
        warn = log if self.dist.is_main else None
        candidates = checkpoints_to_try(self.run_dir, log=warn)  # chosen once, no weight byte read
        base = self._load_base()
        self.parallel = parallel_for(cfg, self.dist, self.device, log)  # one process, DDP or FSDP
        torch.manual_seed(cfg.seed)
        # vLLM is built first (it checks that its share of GPU memory is free); hf once the policy is final
        self.engine = self._engine(base.model) if cfg.rollout.engine == "vllm" else None
        self.use_ref = cfg.algo.kl_coef > 0 or cfg.algo.log_kl
        # with LoRA the reference is the adapter-disabled base; otherwise a frozen copy
        self.ref = copy.deepcopy(base.model).eval().requires_grad_(False) if self.use_ref and not self.lora else None
        self.resume_step, state, self.model = self._resume(base, candidates, warn)
        del base
        self.train_model = self.parallel.wrap(self.model)
        self.ref = self.parallel.wrap_frozen(self.ref) if self.ref is not None else None
        self._make_optimizer()
        if state is not None:
            self._restore(state)
        self._setup_data()
        if self.engine is None:
            self.engine = self.parallel.engine(self._engine(self.model), self.model)
        else:  # vLLM was built on the base model: its first generation must push the policy (resumed, LoRA)
            self.engine.model = self.model
        self.pad_id = self.engine.pad_id
        self.eval_problems = None  # loaded at the first periodic evaluation

    # -- set-up --

    def _load_base(self):
        cfg = self.cfg
        device = cfg.model.device
        if self.dist.enabled and torch.cuda.is_available() and device in ("auto", "cuda"):
            device = f"cuda:{self.dist.local_rank}"
        self.load_kwargs = dict(device=device, dtype=cfg.model.dtype, log=self.log,
                                builtin_task=task_spec(cfg), builtin_warm_start=warm_start_spec(cfg))
        base = load_policy(cfg.model.name, **self.load_kwargs)
        self.base_source, self.builtin, self.tokenizer = base.source, base.builtin, base.tokenizer
        self.device = next(base.model.parameters()).device
        self.precision = resolve_precision(cfg.model.precision, self.device)
        self.lora = cfg.model.lora is not None
        return base

    def _engine(self, model):
        r = self.cfg.rollout
        opts = r.vllm.model_dump() if r.engine == "vllm" else {"logprobs": True}  # rollout/logprob_diff
        return build_engine(r.engine, model, self.tokenizer, source=self.base_source, batch_size=r.max_batch,
                            seed=self.cfg.seed, sample_dtype=r.dtype, **opts)

    def _policy_model(self, base, resume: Checkpoint | None):
        """The policy to train: the base (± fresh LoRA adapters), or checkpoint `resume`'s weights
        (read once, verified as read, before anything of the base is changed)."""
        if self.lora:
            model = lora_policy(base.model, self.cfg.model.lora, resume)
        elif resume is not None:  # the checkpoint holds the float32 master weights, unless bf16-pure
            dtype = "float32" if self.precision.master_fp32 else self.cfg.model.dtype
            model = load_policy(resume, **{**self.load_kwargs, "dtype": dtype}).model
        else:
            model = base.model
        prepare_trainable(model, self.precision, self.lora, self.log)
        if self.cfg.model.gradient_checkpointing:
            model.gradient_checkpointing_enable()
        return model.train()

    def _resume(self, base, candidates: list[Checkpoint], warn):
        """(step, trainer state, policy) of the newest checkpoint whose files verify as they are read
        (a corrupted one: the one before), else (0, None, the base policy). Under FSDP rank 0 alone
        reads it; the other ranks get its state by broadcast, and the weights and optimizer state
        reach every rank's shards in `_restore`."""
        if self.parallel.sharded:
            return (*self.parallel.resume(candidates, warn), self._policy_model(base, None))
        ck, loaded = first_intact(candidates, lambda c: (load_state(c), self._policy_model(base, c)), warn)
        return (ck.step, *loaded) if ck is not None else (0, None, self._policy_model(base, None))

    def _make_optimizer(self) -> None:
        self.opt, self.sched = make_optimizer([p for p in self.model.parameters() if p.requires_grad], self.cfg)
        self.alpha = self.cfg.algo.entropy.alpha

    def _restore(self, state: dict) -> None:
        ck = checkpoint_dir(self.run_dir, self.resume_step)
        ran, now = state.get("schedule"), schedule_record(self.cfg)  # None: written before schedules were recorded
        if ran is not None and ran != now:
            raise UserError(f"checkpoint {ck} ran with the learning-rate schedule {ran}; this config gives {now}: "
                            "a run keeps its schedule (rbctl train --extend only lengthens it; docs/scaling.md)")
        if state.get("world_size", 1) != self.dist.world:
            raise UserError(f"checkpoint {ck} was written by {state.get('world_size', 1)} processes; "
                            f"resume with the same number (now {self.dist.world})")
        if state.get("fsdp", False) != self.parallel.sharded:
            raise UserError(f"checkpoint {ck} was written {'with' if state.get('fsdp') else 'without'} FSDP "
                            "sharding; resume with the same model.fsdp")
        self.parallel.load(self.model, self.opt, state)
        self.sched.load_state_dict(state["scheduler"])
        self.alpha = state["alpha"]
        set_rng_state(state["rng"])

    def _setup_data(self) -> None:
        self.problems = load_training_problems(self.cfg)
        if not self.problems:
            raise UserError("the training data has no problems")
        self.template = resolve_template(self.tokenizer, self.cfg.data.template, builtin_model=self.builtin)
        self._prompt_cache: dict[int, list[int]] = {}
        self.reward_fn = reward_function(self.cfg)

    def prompt_ids(self, idx: int) -> list[int]:
        """Prompts are encoded once and cached: no re-tokenisation per step."""
        if idx not in self._prompt_cache:
            self._prompt_cache[idx] = encode_prompts(self.tokenizer, [self.problems[idx].problem], self.template,
                                                     self.cfg.data.instruction)[0]
        return self._prompt_cache[idx]

    # -- one step --

    def rollout(self, step: int):
        """This rank's prompts and rollouts; rewards are gathered so advantages use the global batch."""
        c = self.cfg
        share = self.dist.shard(c.rollout.prompts_per_step)
        groups = collect_groups(lambda rnd: self._sample_round(step, rnd, share), share.stop - share.start,
                                c.rollout.dynamic_sampling, c.rollout.max_resample_rounds)
        idx, samples, correct, self.grader_failures = groups.idx, groups.samples, groups.correct, groups.grader_failures
        prompts, rewards = [self.prompt_ids(i) for i in idx], correct.float()
        shaped = self.objective.shape_rewards(rewards, samples)  # what the estimator sees (unlikeliness)
        adv = self.objective.advantages(self.dist.gather_rows(shaped))
        mine = slice(self.dist.rank * len(idx), (self.dist.rank + 1) * len(idx))
        batch = make_batch(prompts, samples, self.pad_id, rewards=rewards, correct=correct, advantages=adv[mine],
                           step=step, shaped_rewards=shaped, groups=groups)
        return batch, idx, samples

    def _sample_round(self, step: int, rnd: int, share: slice) -> Groups:
        c = self.cfg
        idx = round_prompts(c.seed, step, rnd, c.rollout.prompts_per_step, len(self.problems))[share]
        prompts = [self.prompt_ids(i) for i in idx]
        # ranks sample different prompts from different streams; one process reproduces the same seeds
        params = SamplingParams(n=c.rollout.group_size, temperature=c.rollout.temperature, top_p=c.rollout.top_p,
                                max_new_tokens=c.rollout.max_new_tokens,
                                seed=round_seed(c.seed, step, rnd) + 1_000_003 * self.dist.rank)
        # hf samples in the training precision (same autocast); vLLM in its own dtype (logprob_diff, TIS)
        with self.precision.context() if self.engine.name == "hf" else contextlib.nullcontext():
            samples = self.engine.generate(prompts, params)
        flags, failures = self.reward_fn([s.text for group in samples for s in group],
                                         [self.problems[i].answer for i in idx for _ in range(c.rollout.group_size)])
        correct = torch.tensor(flags, dtype=torch.bool).reshape(len(idx), c.rollout.group_size)
        return Groups(idx, samples, correct, failures, generated=len(flags))

    def _micro_batches(self, n: int) -> list[slice]:
        mb = self.cfg.algo.micro_batch_size or n
        return [slice(i, min(i + mb, n)) for i in range(0, n, mb)]

    def _forward_logp(self, model, batch: RolloutBatch, sl: slice, with_entropy: bool, entropy_grad: bool):
        dev = self.device
        # Under DDP every row runs whole: the shared-prompt path calls the model twice per backward.
        group = 1 if self.dist.enabled else self.cfg.rollout.group_size
        with self.precision.context():
            logits = response_logits(model, batch.input_ids[sl].to(dev), batch.attention_mask[sl].to(dev),
                                     batch.prompt_width, group_size=group)
        t = self.cfg.rollout.temperature
        vocab_logp = vocab_logprobs(logits, t)
        logp = at_tokens(vocab_logp, batch.response_ids[sl].to(dev))
        ent = None
        if with_entropy:  # with gradient for an entropy bonus; else logged from the log-softmax at hand
            ent = token_entropy(logits, t) if entropy_grad else entropy_of_logprobs(vocab_logp.detach())
        return logp, ent

    @torch.no_grad()
    def _eval_logp(self, model, batch: RolloutBatch, slices: list[slice]) -> list[torch.Tensor]:
        """No-grad log-probs in eval mode (no dropout, as the rollouts were sampled), per micro-batch.
        `model` None: the reference (the adapter-disabled base with LoRA, else the frozen copy)."""
        ref = model is None
        model = (self.model if self.lora else self.ref) if ref else model
        was = model.training
        model.eval()
        try:
            with self.model.disable_adapter() if ref and self.lora else contextlib.nullcontext():
                return [self._forward_logp(model, batch, sl, False, False)[0] for sl in slices]
        finally:
            model.train(was)

    def update(self, batch: RolloutBatch) -> dict:
        """`ppo_epochs` optimizer steps on this rank's share of the batch; every normaliser is global."""
        c = self.cfg
        dev = self.device
        a = c.algo
        world = self.dist.world
        n_seqs, n_tokens = self.dist.sum(batch.n, batch.response_mask.sum().item())
        norm = BatchNorm(n_seqs=int(n_seqs), n_tokens=int(n_tokens), max_new_tokens=c.rollout.max_new_tokens)
        adv_flat = batch.advantages.reshape(-1)
        slices = self._micro_batches(batch.n)
        # with dropout active the training forward is noisy: the behaviour policy's log-probs are taken
        # in eval mode, as the rollouts were sampled; otherwise the first epoch's forward gives them
        eval_old = dropout_active(self.model)
        old_logp: list[torch.Tensor] = self._eval_logp(self.model, batch, slices) if eval_old else []
        ref_logp = self._eval_logp(None, batch, slices) if self.use_ref else []
        entropy_on = a.entropy.mode != "none"
        obj = self.objective
        stats = {"entropy_sum": 0.0, "kl_sum": 0.0, "loss": 0.0, "grad_norm": [], "logprob_diff": None}
        tok = {"clipped_low": 0.0, "clipped_high": 0.0}  # policy-loss token statistics (+ mask), summed over tokens
        skipped = 0
        for epoch in range(a.ppo_epochs):
            self.opt.zero_grad(set_to_none=True)
            loss_total = 0.0
            for k, sl in enumerate(slices):
                mask = batch.response_mask[sl].to(dev)
                last = k == len(slices) - 1
                sync = self.train_model.no_sync() if (self.dist.enabled and not last) else contextlib.nullcontext()
                with sync:
                    logp, ent = self._forward_logp(self.train_model, batch, sl, entropy_grad=entropy_on,
                                                   with_entropy=epoch == 0 or entropy_on or obj.needs_entropy)
                    if epoch == 0 and not eval_old:
                        old_logp.append(logp.detach())  # behaviour policy = the model before any update
                    # the arm's policy loss, restricted to its token mask if it has one
                    pg = obj.policy_loss(logp, old_logp[k], adv_flat[sl].to(dev), mask, ent, draw=(batch.step, epoch, k))
                    w = aggregation_weights(mask, a.loss_agg, norm)
                    loss_mat = pg.loss_mat
                    if batch.engine_logp is not None and a.tis_cap is not None:
                        loss_mat = loss_mat * tis_weights(old_logp[k], batch.engine_logp[sl].to(dev), a.tis_cap)
                    kl = None
                    if self.use_ref:
                        kl = k3_kl(logp, ref_logp[k])
                        if a.kl_coef > 0:
                            loss_mat = loss_mat + a.kl_coef * kl
                    if entropy_on:
                        loss_mat = loss_mat - self.alpha * ent
                    loss = (w * loss_mat).sum()
                    # DDP averages gradients over ranks; the weights are already global, so undo the 1/world
                    (loss * world).backward()
                loss_total += loss.item()
                for name, hit in pg.token_stats.items():
                    tok[name] = tok.get(name, 0.0) + (hit.float() * mask).sum().item() / a.ppo_epochs
                if epoch == 0:
                    stats["entropy_sum"] += (ent.detach() * mask).sum().item()
                    if kl is not None:
                        stats["kl_sum"] += (kl.detach() * mask).sum().item()
            loss_total = self.dist.sum(loss_total)[0]
            grad_norm = torch.nn.utils.clip_grad_norm_([p for p in self.model.parameters() if p.requires_grad],
                                                       c.optim.max_grad_norm)
            if not (math.isfinite(loss_total) and torch.isfinite(grad_norm)):
                self.opt.zero_grad(set_to_none=True)
                skipped += 1
                continue  # never step on a non-finite loss or gradient
            self.opt.step()
            stats["grad_norm"].append(grad_norm.item())
            stats["loss"] += loss_total / a.ppo_epochs
        self.sched.step()
        if batch.engine_logp is not None:  # the sampling path's log-probs vs the trainer's (any engine)
            stats["logprob_diff"] = logprob_mismatch(batch.engine_logp.to(dev), torch.cat(old_logp), batch.response_mask.to(dev))
        if hasattr(self.engine, "sync_weights"):
            self.engine.sync_weights(self.model)  # vLLM: the next rollout samples from the updated policy
        ent_sum, kl_sum, *tok_sums = self.dist.sum(stats["entropy_sum"], stats["kl_sum"], *tok.values())
        n_tok = max(norm.n_tokens, 1)
        return {
            "old_logp": old_logp,
            "slices": slices,
            "entropy": ent_sum / n_tok,
            "kl": kl_sum / n_tok if self.use_ref else None,
            **{stat_metric(name): v / n_tok for name, v in zip(tok, tok_sums)},
            "loss/total": stats["loss"],
            "grad_norm": float(np.mean(stats["grad_norm"])) if stats["grad_norm"] else None,
            "nonfinite/skipped": skipped,
            "rollout/logprob_diff": stats["logprob_diff"],
        }

    @torch.no_grad()
    def logratio_sums(self, batch: RolloutBatch, old_logp: list[torch.Tensor], slices: list[slice]) -> torch.Tensor:
        """d_i = Σ_t (log π_new − log π_old) over each rollout's response tokens, as [P, G]."""
        d = []
        new_logp = self._eval_logp(self.model, batch, slices)  # eval mode, as the old log-probs
        for k, sl in enumerate(slices):
            logp = new_logp[k]
            mask = batch.response_mask[sl].to(self.device)
            d.append(((logp - old_logp[k]) * mask).sum(-1).cpu())
        return self.dist.gather_rows(torch.cat(d).reshape(batch.rewards.shape))

    def step(self, step: int) -> tuple[dict, list]:
        c = self.cfg
        t0 = time.perf_counter()
        batch, idx, samples = self.rollout(step)
        t1 = time.perf_counter()
        upd = self.update(batch)
        t2 = time.perf_counter()
        kappa_eff = None
        # no optimizer step was taken (every epoch's loss non-finite): nothing to measure, κ_eff is null
        if c.kappa_eff_every and step % c.kappa_eff_every == 0 and upd["nonfinite/skipped"] < c.algo.ppo_epochs:
            d = self.logratio_sums(batch, upd["old_logp"], upd["slices"])
            kappa_eff = algo.nanmean_or_none(algo.kappa_eff(self.dist.gather_rows(batch.rewards), d))
        t3 = time.perf_counter()
        lr_used = self.opt.param_groups[0]["lr"]
        ent_cfg = c.algo.entropy
        alpha_used = self.alpha
        if ent_cfg.mode == "adaptive":
            self.alpha = adaptive_alpha(self.alpha, upd["entropy"], ent_cfg.target, ent_cfg.delta,
                                        ent_cfg.alpha_min, ent_cfg.alpha_max)
        rewards = self.dist.gather_rows(batch.rewards)  # [P, G] over all ranks
        correct = self.dist.gather_rows(batch.correct)
        advantages = self.dist.gather_rows(batch.advantages)
        resp_len = self.dist.gather_rows(batch.response_mask.sum(-1))
        finished = self.dist.gather_rows(torch.tensor([s.finished for g in samples for s in g], dtype=torch.float32))
        gs = algo.group_stats(correct)
        kappa_p = algo.kappa(rewards, advantages)
        gen_tokens = int(resp_len.sum().item())
        step_s = t3 - t0
        metrics = {
            "reward/mean": rewards.mean().item(),
            "acc/mean": correct.float().mean().item(),
            "entropy": upd["entropy"],
            "kappa": algo.nanmean_or_none(kappa_p),
            "kappa_eff": kappa_eff,
            "adv/gap": algo.advantage_gap(correct, advantages),
            "adv/abs_mean": advantages.abs().mean().item(),
            "groups/frac_all_correct": gs.frac_all_correct,
            "groups/frac_all_wrong": gs.frac_all_wrong,
            "groups/frac_mixed": gs.frac_mixed,
            "clip/frac_low": upd["clip/frac_low"],
            "clip/frac_high": upd["clip/frac_high"],
            "kl": upd["kl"],
            "loss/total": upd["loss/total"],
            "entropy/alpha": alpha_used if ent_cfg.mode != "none" else 0.0,
            "response/len_mean": resp_len.float().mean().item(),
            "response/frac_truncated": 1.0 - finished.mean().item(),
            "grad_norm": upd["grad_norm"],
            "nonfinite/skipped": upd["nonfinite/skipped"],
            "grader/failures": int(self.dist.sum(self.grader_failures)[0]),
            "lr": lr_used,
            "time/step_s": step_s,
            "time/rollout_s": t1 - t0,
            "time/train_s": t2 - t1,
            "time/kappa_eff_s": t3 - t2,
            "throughput/tokens_per_s": gen_tokens / step_s if step_s > 0 else None,
        }
        if upd["rollout/logprob_diff"] is not None:
            metrics["rollout/logprob_diff"] = upd["rollout/logprob_diff"]
        metrics.update({k: v for k, v in upd.items() if k.startswith(("policy_loss/", "tokens/"))})
        g = batch.groups
        generated, topped_up, rounds = self.dist.sum(g.generated, g.topped_up, g.rounds)
        metrics["rollout/generated"] = int(generated)  # what equal compute counts under dynamic sampling
        if c.rollout.dynamic_sampling:
            metrics.update({"rollout/rounds": rounds / self.dist.world, "rollout/topped_up": int(topped_up)})
        if self.objective.beta:
            metrics["reward/shaped_mean"] = self.dist.gather_rows(batch.shaped_rewards).mean().item()
        return metrics, sample_rows(step, self.problems, idx, samples, batch)

    def checkpoint(self, step: int) -> tuple[dict | None, dict]:
        """(the weights to save, None: the model's own; what a checkpoint needs beside them: tensors,
        lists and numbers only). Every rank calls it: under FSDP it gathers the shards to rank 0."""
        weights, optimizer = self.parallel.full_state(self.model, self.opt)
        return weights, {"step": step, "optimizer": optimizer, "scheduler": self.sched.state_dict(),
                         "alpha": self.alpha, "rng": rng_state(), "world_size": self.dist.world,
                         "schedule": schedule_record(self.cfg), "fsdp": self.parallel.sharded}

    def full_weights(self):
        """A context in which `self.model` holds its full parameters; every rank enters it (FSDP)."""
        return self.parallel.gathered(self.model)


