"""The sweep file (`rbctl ablate`): a base training config, arms of overrides, seeds, the final
evaluation of every run and the launcher settings."""

from __future__ import annotations

from typing import Any, Optional

from pydantic import Field, field_validator

from rbctl.config.base import Section
from rbctl.config.eval import EvalSection
from rbctl.config.launcher import LauncherCfg


class SweepEval(EvalSection):
    """Each run's final evaluation: an `EvalSection` (rbctl.config.eval); what it leaves open comes
    from the run's training config (`rbctl.config.eval.for_run`)."""

    benchmarks: list[str] = Field(default_factory=lambda: ["builtin"], min_length=1, description="Benchmarks of each run's final evaluation.")
    n: int = Field(8, ge=1, description="Samples per problem (n >= 8 gives pass@k curves up to k = 8).")
    temperature: float = Field(1.0, ge=0.0, description="Sampling temperature (0 = greedy).")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling threshold.")
    max_new_tokens: Optional[int] = Field(None, ge=1, description="Null = the training config's rollout.max_new_tokens.")


class SweepConfig(Section):
    name: str = Field("sweep", description="Sweep name (shown in reports).")
    base: str = Field(..., description="Base training config YAML, relative to the sweep file.")
    set: dict[str, Any] = Field(default_factory=dict, description="Overrides applied to the base for every arm.")
    seeds: list[int] = Field(default_factory=lambda: [0], description="Run seeds; every arm runs every seed.")
    arms: dict[str, dict[str, Any]] = Field(..., description="Arm name -> dotted-key overrides of the base config.")
    eval: SweepEval = Field(default_factory=SweepEval, description="Final evaluation of every run.")
    jobs: int = Field(2, ge=1, description="Runs in parallel (worker processes); threads are divided between them.")
    allow_unequal_compute: bool = Field(False, description="Allow arms to differ in steps, P, G, max_new_tokens, ppo_epochs or ppo_mini_batch_size.")
    launcher: Optional[LauncherCfg] = Field(None, description="submitit settings for `--launcher submitit` (Slurm, or its local mode).")

    @field_validator("arms")
    @classmethod
    def _names(cls, arms):
        if not arms:
            raise ValueError("a sweep needs at least one arm")
        for name in arms:
            if not name or "/" in name or name.startswith("."):
                raise ValueError(f"arm name '{name}' is not a valid directory name")
        return arms


def arm_variant(algo: dict, rollout: dict | None = None) -> str:
    """An arm's variant from its config's `algo` and `rollout` sections (what `rbctl report` groups
    arms by, beside the baseline = the estimator): `base` when nothing is added to the estimator,
    else what is added, joined by '+': `budget`, `entropy_static` / `entropy_adaptive` (the bonus),
    the policy loss when not `clip` (`clip_cov`, `kl_cov`, `gspo`), `entropy_mask`,
    `unlikeliness`, `dynamic_sampling`."""
    parts = []
    if algo.get("budget") is not None:
        parts.append("budget")
    mode = (algo.get("entropy") or {}).get("mode", "none")
    if mode not in (None, "none"):
        parts.append(f"entropy_{mode}")
    if algo.get("policy_loss", "clip") not in (None, "clip"):
        parts.append(str(algo["policy_loss"]))
    if algo.get("entropy_token_quantile") is not None:
        parts.append("entropy_mask")
    if algo.get("unlikeliness_beta"):
        parts.append("unlikeliness")
    if (rollout or {}).get("dynamic_sampling"):
        parts.append("dynamic_sampling")
    return "+".join(parts) or "base"
