"""The training config (`rbctl train`): one validated, typed schema; YAML presets in configs/ plus
`--set` overrides (rbctl.config.base).

Every field has a one-line description. What is written to RUN_DIR/config.yaml is the resolved
config the trainer used (defaults filled in, estimator-dependent defaults made explicit).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional, Union

from pydantic import Field, create_model, field_validator, model_validator

from rbctl import algo
from rbctl.algo.losses import LOSS_AGG
from rbctl.config.base import Section, apply_overrides, read_yaml, validate
from rbctl.config.data_builtin import TASK_DOC, BuiltinCfg, default_section
from rbctl.config.eval import CPU_LINEAR_KERNELS, EvalConfig, EvalSection
from rbctl.config.hardware import CARDS
from rbctl.config.methods import at_most_problems, block_fields, check_selection, fill_selected, hook_fields
from rbctl.config.presets import SWEEP_KEYS, is_sweep, resolve_config
from rbctl.errors import UserError
from rbctl.grading.extract import EXTRACTION_MODES
from rbctl.tasks.prompting import MATH_INSTRUCTION


class LoraCfg(Section):
    r: int = Field(16, ge=1, description="LoRA rank.")
    alpha: float = Field(32.0, gt=0.0, description="LoRA scaling α (the update is scaled by α/r).")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="LoRA dropout.")
    target_modules: Union[list[str], str] = Field("all-linear", description="Modules that get adapters: a list of names, or 'all-linear'.")


class ModelCfg(Section):
    name: str = Field("builtin", description="Hub id, local dir, GGUF file, run dir, or 'builtin' (the embedded default's warm-started tiny policy).")
    device: str = Field("auto", description="'auto' (cuda if available, else cpu), 'cpu', 'cuda', 'cuda:N'.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field("auto", description="Dtype the weights are loaded in (frozen weights and the vLLM engine keep it; trainable ones follow model.precision); auto = bf16 on GPUs that support it, else float32.")
    gradient_checkpointing: bool = Field(False, description="Trade compute for activation memory on large models.")
    precision: Literal["auto", "bf16-mixed", "fp32", "bf16-pure"] = Field("auto", description="Training precision: bf16-mixed = float32 trainable weights (master copy) with bf16 autocast forwards; fp32; bf16-pure = weights as loaded, no autocast (warned for full-parameter AdamW: small updates round away); auto = bf16-mixed on CUDA, fp32 on CPU.")
    lora: Optional[LoraCfg] = Field(None, description="Train LoRA adapters (peft) instead of all weights; the KL reference is then the adapter-disabled base.")
    cpu_linear: Literal[CPU_LINEAR_KERNELS] = Field("auto", description="Kernel of float32 Linear layers on the CPU: torch = torch's matmul (MKL's sgemm on x86); onednn = oneDNN's float32 gemm, forward and backward (the same precision, rounding apart; about twice MKL's rate on AMD CPUs, where MKL takes its generic path); auto = onednn for a pretrained model on an AMD CPU, else torch (the built-in policies, and FSDP, stay on torch). rbctl.rollout.cpu_linear.")
    fsdp: bool = Field(False, description="Shard parameters, gradients and AdamW state over the processes of `rbctl train --nproc N` / torchrun (FSDP2, fully_shard per decoder layer); hf rollouts gather the full parameters. Not with model.lora, rollout.engine vllm or rollout.dtype bfloat16 yet (docs/scaling.md).")


class DataCfg(Section):
    source: str = Field("builtin", description="'builtin', a Hugging Face dataset id, or a local .jsonl/.parquet file.")
    hf_config: Optional[str] = Field(None, description="Dataset config name (for a Hugging Face dataset id).")
    split: str = Field("train", description="Dataset split.")
    problem_field: str = Field("problem", description="Record field holding the problem text (dotted path allowed).")
    answer_field: str = Field("answer", description="Record field holding the gold answer (dotted path allowed).")
    template: Literal["auto", "chat", "plain", "builtin"] = Field("auto", description="Prompt template: auto = builtin for the built-in policy, else the chat template if the tokenizer has one, else plain.")
    instruction: str = Field(MATH_INSTRUCTION, description="Appended to each problem (not used by the built-in task).")
    extraction: Literal[EXTRACTION_MODES] = Field(
        "final", description="How the math grader finds the answer the reward grades (and the run's evaluations): final = "
        "the last \\boxed{}, else a final-answer phrase; last_number = then, without either, the completion's last number "
        "(docs/method.md, \"Answer extraction\"). Not used by the built-in task.",
    )
    builtin: BuiltinCfg = Field(default_factory=default_section, description="The built-in task (source: builtin): `task` selects one, the other keys are its own settings. " + TASK_DOC)


TOP_P_REFUSED = ("top_p < 1 is not supported for training: rollouts would sample from the nucleus while log-probs, "
                 "PPO ratios, entropy and κ_eff use the full distribution (set 1; eval.top_p may be < 1)")


class VllmCfg(Section):
    gpu_memory_utilization: float = Field(0.5, gt=0.0, le=1.0, description="Share of GPU memory vLLM may take (colocated with training).")
    sleep_mode: bool = Field(False, description="Free vLLM's memory between rollout phases (vLLM sleep/wake).")
    max_model_len: Optional[int] = Field(None, ge=1, description="vLLM context length; null = the model's.")


class RolloutBase(Section):
    engine: Literal["hf", "vllm"] = Field("hf", description="Rollout engine: transformers generation, or vLLM (GPU, optional extra).")
    prompts_per_step: int = Field(16, ge=1, description="P: prompts per rollout step (one rollout batch is P × G rollouts).")
    group_size: int = Field(8, ge=2, description="G: rollouts per prompt (>= 2 to centre rewards).")
    max_new_tokens: int = Field(20, ge=1, description="Token limit of a response (also Dr.GRPO's divisor).")
    temperature: float = Field(1.0, gt=0.0, description="Sampling temperature (> 0: RL needs on-policy samples); log-probs and entropy use it too.")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus threshold; must be 1 for training: log-probs, PPO ratios, entropy and κ_eff use the full distribution, so nucleus-sampled rollouts would be off-policy and uncorrected (eval.top_p may be < 1).")
    max_batch: int = Field(512, ge=1, description="Most sequences per generate call.")
    dtype: Literal["auto", "bfloat16"] = Field("auto", description="Weights the hf engine samples with: auto = the policy itself, in the training precision; bfloat16 = a bfloat16 copy of the policy, refreshed before every generation (on a CPU with native bf16, SmolLM2-135M sampled 1.3-1.6x faster; the samples then come from the bf16 policy, whose log-probs differ from the trainer's: logged as rollout/logprob_diff, correctable with algo.tis_cap). vLLM samples in its own dtype.")
    max_resample_rounds: int = Field(4, ge=0, description="Sampling hooks (rbctl.algo.registry): most extra rounds of P prompts per step; if P mixed groups are still missing, the batch is topped up with filtered-out groups (zero advantage; `rollout/topped_up`).")
    vllm: VllmCfg = Field(default_factory=VllmCfg, description="vLLM engine settings (engine: vllm).")

    @field_validator("top_p")
    @classmethod
    def _full_distribution(cls, v: float) -> float:
        if v < 1.0:
            raise ValueError(TOP_P_REFUSED)
        return v


RolloutCfg = create_model("RolloutCfg", __base__=RolloutBase, __doc__="Sampling, and the sampling hooks (rollout.<name>).",
                          **hook_fields())


class EntropyCfg(Section):
    mode: Literal["none", "static", "adaptive"] = Field("none", description="Entropy bonus: none, static alpha, or adaptive toward a target.")
    alpha: float = Field(0.0, ge=0.0, description="Bonus coefficient α (loss −= α·H); the starting α when adaptive.")
    target: float = Field(0.3, ge=0.0, description="Adaptive: target entropy H* (nats per token).")
    delta: float = Field(0.001, ge=0.0, description="Adaptive: step δ of α per rollout step.")
    alpha_min: float = Field(0.0, ge=0.0, description="Adaptive: lower bound of α.")
    alpha_max: float = Field(0.1, ge=0.0, description="Adaptive: upper bound of α.")


EstimatorName = Literal[tuple(algo.ESTIMATORS)]
PolicyLossName = Literal[tuple(algo.POLICY_LOSSES)]
LossAggName = Literal[tuple(LOSS_AGG)]


class AlgoBase(Section):
    estimator: EstimatorName = Field("grpo", description="Advantage estimator (rbctl.algo.registry, kind estimator; docs/method.md); the ones whose record says so do not compose with the budget.")
    budget: Optional[float] = Field(None, gt=0.0, description="Reward budget B per prompt; null = no budgeting.")
    shift: float = Field(0.0, ge=0.0, description="Reward shift c for budgeting (every r + c must be >= 0).")
    loss_agg: Optional[LossAggName] = Field(None, description="Loss aggregation; null = the one the policy loss forces (its registry record's loss_agg), else the estimator's default (docs/method.md).")
    clip_low: float = Field(0.2, ge=0.0, lt=1.0, description="PPO ε_low: ratio floor 1 − ε_low.")
    clip_high: float = Field(0.28, ge=0.0, description="PPO ε_high: ratio ceiling 1 + ε_high (> ε_low is clip-higher).")
    clip_ratio_c: Optional[float] = Field(3.0, gt=1.0, description="Dual clip c (verl's clip_ratio_c, default 3): with A < 0 the per-token loss is at most −A·c, so a token whose ratio rose above c stops pushing; policy_loss clip only (verl's other policy losses have none); null = off (docs/method.md, \"Setting\"). Where it does not bind the loss is bit-identical to null's.")
    kl_coef: float = Field(0.0, ge=0.0, description="Coefficient of the k3 KL to the frozen initial policy (0 = no KL term).")
    log_kl: bool = Field(True, description="Keep a frozen reference to log the KL even when kl_coef is 0 (an extra forward pass).")
    ppo_epochs: int = Field(1, ge=1, description="Passes over each rollout batch (each pass takes one optimizer update per mini-batch).")
    ppo_mini_batch_size: Optional[int] = Field(None, ge=1, description="Prompts per mini-batch (verl's ppo_mini_batch_size; each prompt brings its G rollouts): every epoch deals the batch's groups into P / this many mini-batches, one optimizer update each, with ratios against the log-probs from before the first update (docs/method.md, \"Mini-batch updates\"); null = P: one optimizer update per epoch.")
    tis_cap: Optional[float] = Field(None, gt=0.0, description="Truncated importance sampling cap C for the sampler/trainer log-prob mismatch (vLLM, or the hf engine's rollout.dtype bfloat16; any engine that records its log-probs): each token's policy-gradient loss × min(π_old/π_sampler, C); null = off.")
    micro_batch_size: int = Field(0, ge=0, description="Sequences per forward/backward (gradient accumulation inside one optimizer update); 0 = the whole (mini-)batch.")
    logprobs: Literal["auto", "fused", "softmax"] = Field("auto", description="How a training forward turns logits into the response tokens' log-probs and logged entropy: softmax = a log-softmax over the vocabulary, kept for the backward; fused = a logsumexp per token, chunk by chunk, the gradient formed in the backward (no [N, T, V] log-softmax: less memory and no pass on denormal floats; equal up to float rounding); auto = fused for a pretrained model, softmax for the built-in policies (whose documented results stay as measured). With an entropy bonus the entropy's gradient takes softmax's path. rbctl.algo.losses.fused_token_logprobs.")
    entropy: EntropyCfg = Field(default_factory=EntropyCfg, description="Entropy bonus (the ablation arm).")
    policy_loss: PolicyLossName = Field("clip", description="Policy loss (rbctl.algo.registry, kind policy_loss; docs/method.md, \"Other arms\").")

    @model_validator(mode="before")
    @classmethod
    def _selected_blocks(cls, data):
        """The selected estimator's and policy loss's blocks, when not given, take their defaults."""
        return fill_selected(cls, data)

    @model_validator(mode="after")
    def _arms(self):
        check_selection(self)
        return self


AlgoCfg = create_model("AlgoCfg", __base__=AlgoBase, __doc__="Estimator, budget, loss, and each method's block (algo.<name>).",
                       **block_fields())


def read_run_config(path: Path) -> "TrainConfig":
    """RUN_DIR/config.yaml (or a checkpoint's copy), validated; a one-line UserError naming the file."""
    return validate(TrainConfig, read_yaml(path), str(path))


class OptimCfg(Section):
    lr: float = Field(1e-3, gt=0.0, description="AdamW learning rate.")
    weight_decay: float = Field(0.0, ge=0.0, description="AdamW weight decay.")
    beta1: float = Field(0.9, ge=0.0, lt=1.0, description="AdamW β1.")
    beta2: float = Field(0.999, ge=0.0, lt=1.0, description="AdamW β2.")
    warmup_steps: int = Field(0, ge=0, description="Rollout steps of linear learning-rate warm-up (the lr changes once per rollout step).")
    schedule: Literal["constant", "cosine"] = Field("constant", description="Learning-rate schedule after warm-up.")
    schedule_steps: Optional[int] = Field(None, ge=1, description="Rollout steps the cosine schedule spans (null = steps); `rbctl train --extend` pins it to a run's first horizon, and steps past it keep the last step's lr.")
    max_grad_norm: float = Field(1.0, gt=0.0, description="Gradient clipping by global norm.")


class EvalDuringTrainingCfg(EvalSection):
    """Periodic held-out evaluation: an `EvalSection` (rbctl.config.eval) whose defaults follow the
    rollouts (full distribution at T = 1, a 64-problem subset)."""

    benchmarks: list[str] = Field(default_factory=lambda: ["builtin"], min_length=1, description="Benchmarks for periodic evaluation.")
    n: int = Field(4, ge=1, description="Samples per problem.")
    temperature: float = Field(1.0, ge=0.0, description="Sampling temperature of evaluation (0 = greedy).")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus threshold of evaluation (1 = the full distribution, as the rollouts sample).")
    max_new_tokens: Optional[int] = Field(None, ge=1, description="Null = rollout.max_new_tokens.")
    limit: Optional[int] = Field(64, ge=1, description="Problems per benchmark (null = all).")
    every: int = Field(0, ge=0, description="Evaluate every k steps (and at the last step); 0 = never.")


class LogCfg(Section):
    tensorboard: bool = Field(False, description="Also log to TensorBoard (RUN_DIR/tb).")
    wandb: bool = Field(False, description="Also log to Weights & Biases.")
    wandb_project: str = Field("rbctl", description="W&B project.")
    wandb_mode: Literal["online", "offline"] = Field("offline", description="W&B mode.")


class HardwareCfg(Section):
    """What the run is planned for: `rbctl train CONFIG --dry-run` checks the memory budget per GPU and the
    time against it (rbctl.train.footprint); training itself does not read it."""

    gpu: Optional[Literal[tuple(CARDS)]] = Field(None, description="The card the run is sized for: --dry-run checks the per-GPU memory estimate against its memory and times a step at its rates; null = not checked.")
    gpus: int = Field(1, ge=1, description="GPUs the run uses (rbctl train --nproc N): the budget is per GPU, a step's work is divided over them.")
    time_limit_min: Optional[int] = Field(None, ge=1, description="Wall-clock limit of one job (a Slurm partition's; a sweep's launcher.timeout_min): --dry-run warns where the run outlasts it (it is requeued and resumes from its last checkpoint) and where save_every steps do.")


class TrainConfig(Section):
    seed: int = Field(0, description="Run seed: prompt order, sampling and initialisation of anything random.")
    steps: int = Field(100, ge=1, description="Rollout steps: each samples one rollout batch (P prompts × G rollouts) and takes algo.ppo_epochs × M optimizer updates on it (M = P / algo.ppo_mini_batch_size mini-batches, 1 when that is null).")
    threads: int = Field(0, ge=0, description="torch CPU threads; 0 = torch's default.")
    dist_timeout_min: float = Field(180.0, gt=0.0, description="Minutes a collective of `rbctl train --nproc N` may wait before the run fails (NCCL's own default is 10): long enough for a rank's slower rollouts and rank 0's checkpoint writes at 8B. Rank 0's evaluations are waited for apart from it (docs/scaling.md).")
    max_nonfinite_steps: int = Field(3, ge=1, description="Stop the run after this many rollout steps in a row with a non-finite loss or gradient (such optimizer updates are skipped).")
    kappa_eff_every: int = Field(1, ge=0, description="Measure κ_eff every k steps (one extra forward pass); 0 = never.")
    save_every: int = Field(50, ge=1, description="Checkpoint every k steps (and at the last step).")
    keep_checkpoints: int = Field(2, ge=1, description="Checkpoints kept on disk (oldest deleted).")
    sample_every: int = Field(10, ge=1, description="Write a sample of rollouts to samples.jsonl every k steps.")
    samples_per_log: int = Field(4, ge=1, description="Rollouts written each time.")
    model: ModelCfg = Field(default_factory=ModelCfg, description="Policy model.")
    data: DataCfg = Field(default_factory=DataCfg, description="Training prompts.")
    rollout: RolloutCfg = Field(default_factory=RolloutCfg, description="Sampling.")
    algo: AlgoCfg = Field(default_factory=AlgoCfg, description="Estimator, budget, loss.")
    optim: OptimCfg = Field(default_factory=OptimCfg, description="Optimizer.")
    eval: EvalDuringTrainingCfg = Field(default_factory=EvalDuringTrainingCfg, description="Periodic held-out evaluation.")
    log: LogCfg = Field(default_factory=LogCfg, description="Experiment trackers (TensorBoard, W&B) besides metrics.jsonl.")
    hardware: HardwareCfg = Field(default_factory=HardwareCfg, description="The card, GPU count and job time limit the run is planned for (--dry-run's checks).")

    @model_validator(mode="after")
    def _resolve(self):
        # One source of truth: the aggregation used (forced by the policy loss, else the estimator's
        # default) is written into the config.
        forced = algo.POLICY_LOSSES[self.algo.policy_loss].loss_agg  # a sequence objective forces its own
        if forced is not None and self.algo.loss_agg not in (None, forced):
            raise ValueError(f"algo.policy_loss {self.algo.policy_loss} needs algo.loss_agg {forced} (or null), got {self.algo.loss_agg}")
        if self.algo.loss_agg is None:
            self.algo.loss_agg = forced or algo.ESTIMATORS[self.algo.estimator].loss_agg
        if problems := at_most_problems(self):
            raise ValueError(problems[0])
        mb = self.algo.ppo_mini_batch_size
        if mb is not None and (mb > self.rollout.prompts_per_step or self.rollout.prompts_per_step % mb):
            raise ValueError(f"algo.ppo_mini_batch_size={mb} must divide rollout.prompts_per_step={self.rollout.prompts_per_step}")
        self.eval.engine = run_engine(self.eval, self)  # written out: the engine periodic evaluation uses
        if self.eval.every:
            check_fits_run_engine(for_run(self.eval, self), self)
        if self.algo.entropy.mode == "static" and self.algo.entropy.alpha <= 0:
            raise ValueError("algo.entropy.alpha must be > 0 when algo.entropy.mode is 'static'")
        clash = [k for k, on in (("model.lora", self.model.lora is not None), ("rollout.engine vllm", self.rollout.engine == "vllm"),
                                 ("rollout.dtype bfloat16", self.rollout.dtype == "bfloat16"),
                                 ("model.cpu_linear onednn", self.model.cpu_linear == "onednn")) if on]
        if self.model.fsdp and clash:
            raise ValueError(f"model.fsdp does not combine with {clash[0]} yet (docs/scaling.md): set model.fsdp false")
        return self


def load_train_config(path: Path | None, overrides: list[str] = ()) -> TrainConfig:
    """The config file (or a shipped preset's name: `rbctl.config.presets.resolve_config`; None: the
    defaults) with the `--set key=value` overrides applied, validated; an error names the key and
    where it was set (the file or the `--set` item). A sweep file is refused naming `rbctl ablate`."""
    if path is not None:
        path = resolve_config(path)
    data = read_yaml(path) if path is not None else {}
    if is_sweep(data):
        keys = " and ".join(f"{k}:" for k in SWEEP_KEYS if k in data)
        raise UserError(f"{path} is a sweep file (it has {keys}), not a training config: run it with `rbctl ablate {path}`")
    data = apply_overrides(data, list(overrides))
    return validate(TrainConfig, data, str(path) if path else "config", list(overrides))


# --- a run's evaluations: an eval section read against the run's training config ----------------


def run_engine(section: EvalSection, cfg: TrainConfig) -> str:
    """The engine of a run's evaluation: the section's, else the run's rollout engine. vLLM is built
    once per process, so a vLLM evaluation must be of a vLLM run (it uses the run's engine)."""
    engine = section.engine or cfg.rollout.engine
    if engine == "vllm" and cfg.rollout.engine != "vllm":
        raise ValueError("eval.engine 'vllm' evaluates through the run's own vLLM engine: it needs rollout.engine "
                         "'vllm' (or set eval.engine to hf or null)")
    return engine


def for_run(section: EvalSection, cfg: TrainConfig) -> EvalConfig:
    """The `EvalConfig` of a run's periodic or final evaluation: the section's keys, and from the
    run's training config what the section leaves open: max_new_tokens (rollout.max_new_tokens),
    the engine (`run_engine`), the seed, the prompt template, instruction and answer extraction, the device."""
    values = section.model_dump(include=set(EvalSection.model_fields))
    values.update(max_new_tokens=section.max_new_tokens or cfg.rollout.max_new_tokens, engine=run_engine(section, cfg),
                  seed=cfg.seed, template=cfg.data.template, instruction=cfg.data.instruction,
                  extraction=cfg.data.extraction, device=cfg.model.device)
    return EvalConfig(**values)


def check_fits_run_engine(ecfg: EvalConfig, cfg: TrainConfig) -> None:
    """A vLLM evaluation runs on the run's own engine: its answers must fit that engine's context
    (`rollout.vllm.max_model_len`, when set), or vLLM would refuse the requests after training."""
    context = cfg.rollout.vllm.max_model_len
    if ecfg.engine == "vllm" and context is not None and ecfg.max_new_tokens >= context:
        raise ValueError(f"eval.max_new_tokens {ecfg.max_new_tokens} does not fit the run's vLLM context: "
                         f"rollout.vllm.max_model_len {context} must hold the prompt and the answer "
                         f"(raise it above {ecfg.max_new_tokens} + the longest prompt)")
