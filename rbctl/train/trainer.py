"""The trainer: one run's set-up (policy, reference, optimizer, engine, data, resume) and its
step. What a step does, top to bottom, is `rbctl.train.step.train_step`, from the parts set up
here (`Trainer.state`, `Trainer.sampler`); the loop around it (checkpoints, logging, evaluation)
is `loop.py`, its callbacks `callbacks.py`.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from rbctl.algo.losses import resolve_logprobs
from rbctl.config.train import TrainConfig
from rbctl.errors import UserError
from rbctl.rollout.factory import build_engine
from rbctl.rollout.models import load_policy, lora_policy
from rbctl.store.checkpoint import Checkpoint, checkpoints_to_try, first_intact, load_state
from rbctl.store.rundir import checkpoint_dir
from rbctl.tasks.prompting import resolve_template
from rbctl.train.rng_state import rng_state, set_rng_state
from rbctl.train.training_data import base_model, load_training_problems, reward_function
from rbctl.train.distributed import init_from_env
from rbctl.train.objective import Objective, keeps_reference
from rbctl.train.optim import make_optimizer, schedule_record
from rbctl.train.parallel import parallel_for
from rbctl.train.precision import prepare_trainable, resolve_precision
from rbctl.train.sampling import Sampler
from rbctl.train.step import train_step
from rbctl.train.update import TrainState


def enable_gradient_checkpointing(model, lora: bool, use_reentrant: bool = False) -> None:
    """Activation checkpointing of every decoder layer (`model.gradient_checkpointing`), alike on
    transformers 4.x and 5.x. Non-reentrant by default (torch's recommendation, 5.x's default; 4.x
    defaulted to reentrant), stated rather than left to the installed version. With `lora`, called
    on the base model before PEFT wraps it, as PEFT's `prepare_model_for_kbit_training` does, and the
    input embeddings' output is made to require grad (`enable_input_require_grads`): every weight of
    a checkpointed block is frozen but its adapters, and under reentrant checkpointing a block whose
    inputs need no gradient returns outputs without any, so the adapters got none. 4.x enabled it only
    for transformers' own PEFT integration, and PEFT only when checkpointing is on before it wraps."""
    kwargs = {"use_reentrant": use_reentrant}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers 5.x's name (the old one is deprecated)
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    if lora:
        model.enable_input_require_grads()


class Trainer:
    """One run's model, optimizer and engine, the parts a step reads (`state`, `sampler`) and the
    state it carries from step to step (α)."""

    def __init__(self, cfg: TrainConfig, run_dir: Path, log=print, resume_at_most: int | None = None):
        """`resume_at_most`: resume from no checkpoint past this step (the last step the run logs
        hold whole, `rbctl.train.loop`); None: the newest usable one."""
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.log = log
        self.objective = Objective(cfg.algo, seed=cfg.seed)  # policy loss, token mask, reward transform, estimator
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.dist = init_from_env(cfg.dist_timeout_min)
        warn = log if self.dist.is_main else None
        candidates = checkpoints_to_try(self.run_dir, log=warn)  # chosen once, no weight byte read
        if resume_at_most is not None:
            candidates = [c for c in candidates if c.step <= resume_at_most]
        base = self._load_base()
        self.parallel = parallel_for(cfg, self.dist, self.device, log)  # one process, DDP or FSDP
        torch.manual_seed(cfg.seed)
        # vLLM is built first (it checks that its share of GPU memory is free); hf once the policy is final
        self.engine = self._engine(base.model) if cfg.rollout.engine == "vllm" else None
        self.use_ref = keeps_reference(cfg.algo)
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
        self.state = TrainState(
            algo=cfg.algo, rollout=cfg.rollout, max_grad_norm=cfg.optim.max_grad_norm, seed=cfg.seed,
            kappa_eff_every=cfg.kappa_eff_every, model=self.model, train_model=self.train_model, ref=self.ref,
            opt=self.opt, sched=self.sched, objective=self.objective, dist=self.dist, engine=self.engine,
            device=self.device, precision=self.precision, lora=self.lora, use_ref=self.use_ref,
            fused_logprobs=resolve_logprobs(cfg.algo.logprobs, builtin=self.builtin is not None))
        self.sampler = Sampler(
            rollout=cfg.rollout, seed=cfg.seed, instruction=cfg.data.instruction, engine=self.engine,
            precision=self.precision, dist=self.dist, problems=self.problems, reward_fn=self.reward_fn,
            tokenizer=self.tokenizer, template=self.template, prompt_task=self.prompt_task)

    # -- set-up --

    def _load_base(self):
        cfg = self.cfg
        device = cfg.model.device
        if self.dist.enabled and torch.cuda.is_available() and device in ("auto", "cuda"):
            device = f"cuda:{self.dist.local_rank}"
        cpu_linear = "torch" if cfg.model.fsdp else cfg.model.cpu_linear  # FSDP's shards: torch's kernels
        self.load_kwargs = dict(device=device, dtype=cfg.model.dtype, cpu_linear=cpu_linear, log=self.log)
        base = load_policy(base_model(cfg, self.log), **self.load_kwargs)
        self.base_source, self.builtin, self.tokenizer = base.source, base.builtin, base.tokenizer
        self.cpu_linear = base.cpu_linear  # the Linear layers' CPU kernel, resolved (provenance.json)
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
        checkpointing = self.cfg.model.gradient_checkpointing
        if self.lora:
            if checkpointing:  # before PEFT wraps the model (`enable_gradient_checkpointing`)
                enable_gradient_checkpointing(base.model, lora=True)
            model = lora_policy(base.model, self.cfg.model.lora, resume)
        elif resume is not None:  # the checkpoint holds the float32 master weights, unless bf16-pure
            dtype = "float32" if self.precision.master_fp32 else self.cfg.model.dtype
            model = load_policy(resume, **{**self.load_kwargs, "dtype": dtype}).model
        else:
            model = base.model
        prepare_trainable(model, self.precision, self.lora, self.log)
        if checkpointing and not self.lora:
            enable_gradient_checkpointing(model, lora=False)
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
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.opt, self.sched = make_optimizer(params, self.cfg.optim, self.cfg.steps)
        self.alpha = self.cfg.algo.entropy.alpha

    def _restore(self, state: dict) -> None:
        ck = checkpoint_dir(self.run_dir, self.resume_step)
        ran, now = state["schedule"], schedule_record(self.cfg.optim, self.cfg.steps)
        if ran != now:
            raise UserError(f"checkpoint {ck} ran with the learning-rate schedule {ran}; this config gives {now}: "
                            "a run keeps its schedule (rbctl train --extend only lengthens it; docs/scaling.md)")
        if state["world_size"] != self.dist.world:
            raise UserError(f"checkpoint {ck} was written by {state['world_size']} processes; "
                            f"resume with the same number (now {self.dist.world})")
        if state["fsdp"] != self.parallel.sharded:
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
        self.reward_fn = reward_function(self.cfg)

    # -- one step --

    def step(self, step: int) -> tuple[dict, list[dict]]:
        """Run step `step` (`rbctl.train.step.train_step`): its metrics line and rows of samples.jsonl."""
        out = train_step(self.state, self.sampler, step, self.alpha)
        self.alpha = out.alpha
        return out.metrics, out.rows

    def checkpoint(self, step: int) -> tuple[dict | None, dict]:
        """(the weights to save, None: the model's own; what a checkpoint needs beside them: tensors,
        lists and numbers only). Every rank calls it: under FSDP it gathers the shards to rank 0."""
        weights, optimizer = self.parallel.full_state(self.model, self.opt)
        return weights, {"step": step, "optimizer": optimizer, "scheduler": self.sched.state_dict(),
                         "alpha": self.alpha, "rng": rng_state(), "world_size": self.dist.world,
                         "schedule": schedule_record(self.cfg.optim, self.cfg.steps), "fsdp": self.parallel.sharded}

    def full_weights(self):
        """A context in which `self.model` holds its full parameters; every rank enters it (FSDP)."""
        return self.parallel.gathered(self.model)


