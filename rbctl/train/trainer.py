"""The trainer: one run's set-up and one training step: rollouts → rewards → advantages (± budget)
→ policy-loss update → κ_eff. The loop around it (checkpoints, logging, evaluation) is `loop.py`.

How one step runs (and where it departs from a textbook GRPO loop):
1. P prompts are taken in a seeded order (a fresh permutation of the pool each epoch), and G
   rollouts each are sampled with a seed derived from (run seed, step): a resumed run samples
   exactly what an uninterrupted one would. Dynamic sampling refills P with mixed groups (`sampling.py`).
2. Rewards: the built-in task's exact checker, or the shared math grader (`rbctl.grading`).
3. Advantages ([P, G] → [P, G], broadcast over tokens) and the loss are the arm's `Objective`
   (`objective.py`: reward transform, estimator ± budget, policy loss, token mask; no branch here).
4. The update (`update.py`): `ppo_epochs` passes over the batch, each dealing its groups into M
   mini-batches (`algo.ppo_mini_batch_size`), one optimizer step each, ratios against the
   behaviour policy's log-probs from before the first step (docs/method.md, "Mini-batch
   updates"). Entropy and the KL to the reference are logged for the pre-update policy. Forwards and hf sampling run in `model.precision` (rbctl.train.precision), unless
   `rollout.dtype: bfloat16` samples from a bf16 replica; the sampler's own log-probs against the
   old ones are logged as `rollout/logprob_diff` (TIS, `algo.tis_cap`, corrects them).
5. κ_eff (every `kappa_eff_every` steps): one more forward pass after the last step gives
   d_i = Σ_t log π_new − log π_old per rollout (docs/method.md, "Sharpness").
"""

from __future__ import annotations

import copy
import time
from pathlib import Path

import torch

from rbctl import algo
from rbctl.algo.losses import adaptive_alpha
from rbctl.config.train import TrainConfig
from rbctl.errors import UserError
from rbctl.rollout.base import SamplingParams
from rbctl.rollout.factory import build_engine
from rbctl.rollout.models import load_policy, lora_policy
from rbctl.store.rundir import Checkpoint, checkpoint_dir, checkpoints_to_try, first_intact
from rbctl.tasks.prompting import encode_prompts, resolve_template
from rbctl.train.batch import make_batch, sample_rows
from rbctl.train.checkpoint import load_state, rng_state, set_rng_state
from rbctl.train.data import load_training_problems, reward_function, task_spec, warm_start_spec
from rbctl.train.distributed import init_from_env
from rbctl.train.objective import Objective
from rbctl.train.optim import make_optimizer, schedule_record
from rbctl.train.parallel import parallel_for
from rbctl.train.precision import prepare_trainable, resolve_precision
from rbctl.train import seeds
from rbctl.train.sampling import Groups, collect_groups, round_prompts, round_seed
from rbctl.train.update import Updater
from rbctl.train.step_metrics import batch_metrics


class Trainer(Updater):
    """One run's model, optimizer and engine, and one training step (rollout → update → κ_eff)."""

    def __init__(self, cfg: TrainConfig, run_dir: Path, log=print, resume_at_most: int | None = None):
        """`resume_at_most`: resume from no checkpoint past this step (the last step the run logs
        hold whole, `rbctl.train.loop`); None: the newest usable one."""
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.log = log
        self.objective = Objective(cfg)  # policy loss, token mask, reward transform, estimator
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.dist = init_from_env()
        warn = log if self.dist.is_main else None
        candidates = checkpoints_to_try(self.run_dir, log=warn)  # chosen once, no weight byte read
        if resume_at_most is not None:
            candidates = [c for c in candidates if c.step <= resume_at_most]
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
        else:  # vLLM was built on the base model: it must sample from the policy (resumed, LoRA)
            self.engine.sync_weights(self.model)
        # the sampler's own log-probs: rollout/logprob_diff, and what TIS corrects
        if not self.engine.record_logprobs() and cfg.algo.tis_cap is not None:
            raise UserError(f"algo.tis_cap needs the sampler's log-probs; the {cfg.rollout.engine} engine gives none")
        self.pad_id = self.engine.pad_id
        self.eval_problems = None  # loaded at the first periodic evaluation

    # -- set-up --

    def _load_base(self):
        cfg = self.cfg
        device = cfg.model.device
        if self.dist.enabled and torch.cuda.is_available() and device in ("auto", "cuda"):
            device = f"cuda:{self.dist.local_rank}"
        self.load_kwargs = dict(device=device, dtype=cfg.model.dtype, log=self.log,
                                builtin_task=task_spec(cfg), builtin_warm_start=warm_start_spec(cfg),
                                builtin_shipped=cfg.data.builtin.warm_start)
        base = load_policy(cfg.model.name, **self.load_kwargs)
        self.base_source, self.builtin, self.tokenizer = base.source, base.builtin, base.tokenizer
        self.device = next(base.model.parameters()).device
        self.precision = resolve_precision(cfg.model.precision, self.device)
        self.lora = cfg.model.lora is not None
        return base

    def _engine(self, model):
        r = self.cfg.rollout
        opts = r.vllm.model_dump() if r.engine == "vllm" else {}
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
        self.template = resolve_template(self.tokenizer, self.cfg.data.template, builtin_model=self.builtin is not None)
        # the `builtin` template formats the problems as their task does (the policy's own for other data)
        self.prompt_task = self.cfg.data.builtin.task if self.cfg.data.source == "builtin" else (self.builtin or "links")
        self._prompt_cache: dict[int, list[int]] = {}
        self.reward_fn = reward_function(self.cfg)

    def prompt_ids(self, idx: int) -> list[int]:
        """Prompts are encoded once and cached: no re-tokenisation per step."""
        if idx not in self._prompt_cache:
            self._prompt_cache[idx] = encode_prompts(self.tokenizer, [self.problems[idx].problem], self.template,
                                                     self.cfg.data.instruction, self.prompt_task)[0]
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
                                seed=seeds.rank_seed(round_seed(c.seed, step, rnd), self.dist.rank))
        # hf samples in the training precision (same autocast); vLLM in its own dtype (logprob_diff, TIS)
        with self.engine.sampling_context(self.precision):
            samples = self.engine.generate(prompts, params)
        flags, failures = self.reward_fn([s.text for group in samples for s in group],
                                         [self.problems[i] for i in idx for _ in range(c.rollout.group_size)])
        correct = torch.tensor(flags, dtype=torch.bool).reshape(len(idx), c.rollout.group_size)
        return Groups(idx, samples, correct, failures, generated=len(flags))

    def step(self, step: int) -> tuple[dict, list]:
        c = self.cfg
        t0 = time.perf_counter()
        batch, idx, samples = self.rollout(step)
        t1 = time.perf_counter()
        lr_used = self.opt.param_groups[0]["lr"]  # read before the update, which steps the schedule
        result = self.update(batch)
        upd = result.metrics
        t2 = time.perf_counter()
        kappa_eff = None
        # κ_eff is measured after the last optimizer step of the batch; when every step was skipped
        # (non-finite), nothing changed and κ_eff is null
        if c.kappa_eff_every and step % c.kappa_eff_every == 0 and upd["nonfinite/skipped"] < result.optimizer_steps:
            d = self.logratio_sums(batch, result.old_logp)
            kappa_eff = algo.nanmean_or_none(algo.kappa_eff(self.dist.gather_rows(batch.rewards), d))
        t3 = time.perf_counter()
        ent_cfg = c.algo.entropy
        alpha_used = self.alpha
        if ent_cfg.mode == "adaptive":
            self.alpha = adaptive_alpha(self.alpha, upd["entropy"], ent_cfg.target, ent_cfg.delta,
                                        ent_cfg.alpha_min, ent_cfg.alpha_max)
        rollouts, gen_tokens = batch_metrics(self.dist, batch, samples, c.rollout.dynamic_sampling,
                                             bool(self.objective.beta))
        step_s = t3 - t0
        metrics = {
            **rollouts,
            "entropy": upd["entropy"],
            "kappa_eff": kappa_eff,
            "clip/frac_low": upd["clip/frac_low"],
            "clip/frac_high": upd["clip/frac_high"],
            "clip/frac_dual": upd["clip/frac_dual"],
            "kl": upd["kl"],
            "loss/total": upd["loss/total"],
            "entropy/alpha": alpha_used if ent_cfg.mode != "none" else 0.0,
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


