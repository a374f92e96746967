"""The training config (`rbctl train`): one validated, typed schema; YAML presets in configs/ plus
`--set` overrides (rbctl.config.base).

Every field has a one-line description. What is written to RUN_DIR/config.yaml is the resolved
config the trainer used (defaults filled in, estimator-dependent defaults made explicit).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional, Union

from pydantic import Field, field_validator, model_validator

from rbctl.config.base import Section, apply_overrides, read_yaml, validate
from rbctl.config.eval import EvalSection, check_fits_run_engine, for_run, run_engine
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


class BuiltinTaskCfg(Section):
    task: Literal["links", "fixpoint"] = Field("links", description="Built-in task: 'links' (follow k hops, the hop count shown; the quick default) or 'fixpoint' (follow the links to a fixed point, depth hidden: the plateau testbed, docs/plateau_task.md).")
    num_keys: int = Field(8, ge=2, le=16, description="Letters in the random function (difficulty of one look-up).")
    min_hops: int = Field(1, ge=1, le=9, description="links: fewest hops of a problem.")
    max_hops: int = Field(6, ge=1, le=9, description="Most hops of a problem (difficulty spread).")
    num_roots: int = Field(3, ge=1, le=8, description="fixpoint: fixed points of the function (letters that map to themselves).")
    depth1_frac: float = Field(0.7, ge=0.0, le=1.0, description="fixpoint: share of problems one hop from their fixed point (where the 2-token shortcut is right); the others have depth uniform in [2, max_hops].")
    train_size: int = Field(4096, ge=1, description="Problems in the fixed training pool.")
    test_size: int = Field(256, ge=1, description="Problems in the held-out test split (benchmark 'builtin').")
    seed: int = Field(1234, description="Task seed: the same problems for every arm and run seed.")
    demo_error: float = Field(0.2, ge=0.0, lt=1.0, description="Warm start: probability that a demonstration hop is wrong (fixpoint: that a demonstrated walk stops early at a hop).")
    walk_demo_frac: float = Field(0.15, ge=0.0, le=1.0, description="fixpoint warm start: share of demonstrations that walk to the fixed point (the others take the shortcut).")
    shortcut_demo_error: float = Field(0.0, ge=0.0, lt=1.0, description="fixpoint warm start: probability that a shortcut demonstration's single look-up is wrong.")
    warm_start_steps: int = Field(1200, ge=0, description="Warm start: supervised steps on demonstrations (cached).")

    @model_validator(mode="after")
    def _hops(self):
        if self.min_hops > self.max_hops:
            raise ValueError("min_hops must be <= max_hops")
        return self


class DataCfg(Section):
    source: str = Field("builtin", description="'builtin', a Hugging Face dataset id, or a local .jsonl/.parquet file.")
    hf_config: Optional[str] = Field(None, description="Dataset config name (for a Hugging Face dataset id).")
    split: str = Field("train", description="Dataset split.")
    problem_field: str = Field("problem", description="Record field holding the problem text (dotted path allowed).")
    answer_field: str = Field("answer", description="Record field holding the gold answer (dotted path allowed).")
    template: Literal["auto", "chat", "plain", "builtin"] = Field("auto", description="Prompt template: auto = builtin for the built-in policy, else the chat template if the tokenizer has one, else plain.")
    instruction: str = Field(MATH_INSTRUCTION, description="Appended to each problem (not used by the built-in task).")
    builtin: BuiltinTaskCfg = Field(default_factory=BuiltinTaskCfg, description="The built-in task (source: builtin).")


TOP_P_REFUSED = ("top_p < 1 is not supported for training: rollouts would sample from the nucleus while log-probs, "
                 "PPO ratios, entropy and κ_eff use the full distribution (set 1; eval.top_p may be < 1)")


class VllmCfg(Section):
    gpu_memory_utilization: float = Field(0.5, gt=0.0, le=1.0, description="Share of GPU memory vLLM may take (colocated with training).")
    sleep_mode: bool = Field(False, description="Free vLLM's memory between rollout phases (vLLM sleep/wake).")
    max_model_len: Optional[int] = Field(None, ge=1, description="vLLM context length; null = the model's.")


class RolloutCfg(Section):
    engine: Literal["hf", "vllm"] = Field("hf", description="Rollout engine: transformers generation, or vLLM (GPU, optional extra).")
    prompts_per_step: int = Field(16, ge=1, description="P: prompts per optimizer step.")
    group_size: int = Field(8, ge=2, description="G: rollouts per prompt (>= 2 to centre rewards).")
    max_new_tokens: int = Field(20, ge=1, description="Token limit of a response (also Dr.GRPO's divisor).")
    temperature: float = Field(1.0, gt=0.0, description="Sampling temperature (> 0: RL needs on-policy samples); log-probs and entropy use it too.")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus threshold; must be 1 for training: log-probs, PPO ratios, entropy and κ_eff use the full distribution, so nucleus-sampled rollouts would be off-policy and uncorrected (eval.top_p may be < 1).")
    max_batch: int = Field(512, ge=1, description="Most sequences per generate call.")
    dtype: Literal["auto", "bfloat16"] = Field("auto", description="Weights the hf engine samples with: auto = the policy itself, in the training precision; bfloat16 = a bfloat16 copy of the policy, refreshed before every generation (on a CPU with native bf16, SmolLM2-135M sampled 1.3-1.6x faster; the samples then come from the bf16 policy, whose log-probs differ from the trainer's: logged as rollout/logprob_diff, correctable with algo.tis_cap). vLLM samples in its own dtype.")
    dynamic_sampling: bool = Field(False, description="DAPO dynamic sampling: keep only groups with 0 < K < G correct and sample more prompts to fill P (docs/method.md, \"Other arms\"); equal compute is then counted in generated rollouts (`rollout/generated`).")
    max_resample_rounds: int = Field(4, ge=0, description="Dynamic sampling: most extra rounds of P prompts per step; if P mixed groups are still missing, the batch is topped up with filtered-out groups (zero advantage; `rollout/topped_up`).")
    vllm: VllmCfg = Field(default_factory=VllmCfg, description="vLLM engine settings (engine: vllm).")

    @field_validator("top_p")
    @classmethod
    def _full_distribution(cls, v: float) -> float:
        if v < 1.0:
            raise ValueError(TOP_P_REFUSED)
        return v


class EntropyCfg(Section):
    mode: Literal["none", "static", "adaptive"] = Field("none", description="Entropy bonus: none, static alpha, or adaptive toward a target.")
    alpha: float = Field(0.0, ge=0.0, description="Bonus coefficient α (loss −= α·H); the starting α when adaptive.")
    target: float = Field(0.3, ge=0.0, description="Adaptive: target entropy H* (nats per token).")
    delta: float = Field(0.001, ge=0.0, description="Adaptive: step δ of α per optimizer step.")
    alpha_min: float = Field(0.0, ge=0.0, description="Adaptive: lower bound of α.")
    alpha_max: float = Field(0.1, ge=0.0, description="Adaptive: upper bound of α.")


class AlgoCfg(Section):
    estimator: Literal["grpo", "dr_grpo", "rloo", "reinforce_pp", "maxrl", "passk"] = Field("grpo", description="Advantage estimator (docs/method.md); maxrl and passk do not compose with the budget.")
    passk_k: Optional[int] = Field(None, ge=1, description="Pass@k Training's k (estimator passk only; 1 <= k <= G).")
    budget: Optional[float] = Field(None, gt=0.0, description="Reward budget B per prompt; null = no budgeting.")
    shift: float = Field(0.0, ge=0.0, description="Reward shift c for budgeting (every r + c must be >= 0).")
    loss_agg: Optional[Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]] = Field(None, description="Loss aggregation; null = the one the policy loss forces (gspo), else the estimator's default (docs/method.md).")
    clip_low: float = Field(0.2, ge=0.0, lt=1.0, description="PPO ε_low: ratio floor 1 − ε_low.")
    clip_high: float = Field(0.28, ge=0.0, description="PPO ε_high: ratio ceiling 1 + ε_high (> ε_low is clip-higher).")
    kl_coef: float = Field(0.0, ge=0.0, description="Coefficient of the k3 KL to the frozen initial policy (0 = no KL term).")
    log_kl: bool = Field(True, description="Keep a frozen reference to log the KL even when kl_coef is 0 (an extra forward pass).")
    ppo_epochs: int = Field(1, ge=1, description="Passes over each rollout batch (each pass takes one optimizer step per mini-batch).")
    ppo_mini_batch_size: Optional[int] = Field(None, ge=1, description="Prompts per mini-batch (verl's ppo_mini_batch_size; each prompt brings its G rollouts): every epoch deals the batch's groups into P / this many mini-batches, one optimizer step each, with ratios against the log-probs from before the first step (docs/method.md, \"Mini-batch updates\"); null = P: one optimizer step per epoch.")
    tis_cap: Optional[float] = Field(None, gt=0.0, description="Truncated importance sampling cap C for the sampler/trainer log-prob mismatch (vLLM, or the hf engine's rollout.dtype bfloat16; any engine that records its log-probs): each token's policy-gradient loss × min(π_old/π_sampler, C); null = off.")
    micro_batch_size: int = Field(0, ge=0, description="Sequences per forward/backward (gradient accumulation inside one optimizer step); 0 = the whole (mini-)batch.")
    entropy: EntropyCfg = Field(default_factory=EntropyCfg, description="Entropy bonus (the ablation arm).")
    policy_loss: Literal["clip", "clip_cov", "kl_cov", "gspo"] = Field("clip", description="Policy loss (rbctl.algo.POLICY_LOSSES): PPO clip, Clip-Cov, KL-Cov or GSPO (docs/method.md, \"Other arms\").")
    clip_cov_ratio: float = Field(2e-4, gt=0.0, le=1.0, description="Clip-Cov: fraction of valid tokens whose gradient is detached.")
    clip_cov_lb: float = Field(1.0, description="Clip-Cov: lower bound of the covariance window of candidate tokens.")
    clip_cov_ub: float = Field(5.0, description="Clip-Cov: upper bound of the covariance window of candidate tokens.")
    kl_cov_ratio: float = Field(2e-4, gt=0.0, le=1.0, description="KL-Cov: fraction of valid tokens (largest covariance) that get the KL penalty.")
    kl_cov_coef: float = Field(1.0, ge=0.0, description="KL-Cov: coefficient β of |log π − log π_old| (verl's ppo_kl_coef).")
    gspo_clip_low: float = Field(3e-4, ge=0.0, lt=1.0, description="GSPO: ε_low of the sequence ratio (the paper's 3e-4; clip_low is not used).")
    gspo_clip_high: float = Field(4e-4, ge=0.0, description="GSPO: ε_high of the sequence ratio (the paper's 4e-4; clip_high is not used).")
    entropy_token_quantile: Optional[float] = Field(None, gt=0.0, le=1.0, description="High-entropy token mask (\"80/20\"): policy-gradient loss only on the top ρ fraction of tokens by entropy (per micro-batch); null = off.")
    unlikeliness_beta: Optional[float] = Field(None, ge=0.0, le=1.0, description="Unlikeliness reward β: r ← r·(1 − β·rank/G), rank by the sampler's mean token log-prob; null or 0 = off.")

    @model_validator(mode="after")
    def _arms(self):
        from rbctl.algo import ESTIMATORS

        est = ESTIMATORS[self.estimator]
        if self.budget is not None and not est.composes_with_budget:
            raise ValueError(f"algo.estimator {self.estimator} does not compose with algo.budget ({est.no_budget}); set algo.budget to null")
        if self.estimator == "passk" and self.passk_k is None:
            raise ValueError("algo.estimator passk needs algo.passk_k (1 <= k <= rollout.group_size)")
        if self.estimator != "passk" and self.passk_k is not None:
            raise ValueError("algo.passk_k is used by algo.estimator passk only; set it to null")
        if self.estimator == "passk" and self.unlikeliness_beta:
            raise ValueError("algo.unlikeliness_beta does not compose with algo.estimator passk (its rewards must stay binary)")
        if self.clip_cov_lb >= self.clip_cov_ub:
            raise ValueError("algo.clip_cov_lb must be < algo.clip_cov_ub")
        return self


class OptimCfg(Section):
    lr: float = Field(1e-3, gt=0.0, description="AdamW learning rate.")
    weight_decay: float = Field(0.0, ge=0.0, description="AdamW weight decay.")
    beta1: float = Field(0.9, ge=0.0, lt=1.0, description="AdamW β1.")
    beta2: float = Field(0.999, ge=0.0, lt=1.0, description="AdamW β2.")
    warmup_steps: int = Field(0, ge=0, description="Linear learning-rate warm-up steps.")
    schedule: Literal["constant", "cosine"] = Field("constant", description="Learning-rate schedule after warm-up.")
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


class TrainConfig(Section):
    seed: int = Field(0, description="Run seed: prompt order, sampling and initialisation of anything random.")
    steps: int = Field(100, ge=1, description="Optimizer steps (one rollout batch each).")
    threads: int = Field(0, ge=0, description="torch CPU threads; 0 = torch's default.")
    max_nonfinite_steps: int = Field(3, ge=1, description="Stop the run after this many steps in a row with a non-finite loss or gradient (each is skipped).")
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
    log: LogCfg = Field(default_factory=LogCfg, description="Trackers besides metrics.jsonl.")

    @model_validator(mode="after")
    def _resolve(self):
        # One source of truth: the aggregation used (forced by the policy loss, else the estimator's
        # default) is written into the config.
        from rbctl.algo import ESTIMATORS, POLICY_LOSSES

        forced = POLICY_LOSSES[self.algo.policy_loss].loss_agg  # GSPO's sequence objective
        if forced is not None and self.algo.loss_agg not in (None, forced):
            raise ValueError(f"algo.policy_loss {self.algo.policy_loss} needs algo.loss_agg {forced} (or null), got {self.algo.loss_agg}")
        if self.algo.loss_agg is None:
            self.algo.loss_agg = forced or ESTIMATORS[self.algo.estimator].default_loss_agg
        if self.algo.passk_k is not None and self.algo.passk_k > self.rollout.group_size:
            raise ValueError(f"algo.passk_k={self.algo.passk_k} must be <= rollout.group_size={self.rollout.group_size}")
        mb = self.algo.ppo_mini_batch_size
        if mb is not None and (mb > self.rollout.prompts_per_step or self.rollout.prompts_per_step % mb):
            raise ValueError(f"algo.ppo_mini_batch_size={mb} must divide rollout.prompts_per_step={self.rollout.prompts_per_step}")
        self.eval.engine = run_engine(self.eval, self)  # written out: the engine periodic evaluation uses
        if self.eval.every:
            check_fits_run_engine(for_run(self.eval, self), self)
        if self.algo.entropy.mode == "static" and self.algo.entropy.alpha <= 0:
            raise ValueError("algo.entropy.alpha must be > 0 when algo.entropy.mode is 'static'")
        return self


def load_train_config(path: Path | None, overrides: list[str] = ()) -> TrainConfig:
    """The config file (or the defaults) with the `--set key=value` overrides applied, validated; an
    error names the key and where it was set (the file or the `--set` item)."""
    data = read_yaml(path) if path is not None else {}
    data = apply_overrides(data, list(overrides))
    return validate(TrainConfig, data, str(path) if path else "config", list(overrides))
