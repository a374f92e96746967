"""The sweep file (`rbctl ablate`): a base training config, arms of overrides, seeds, the final
evaluation of every run and the launcher settings."""

from __future__ import annotations

from typing import Any, Optional

from pydantic import Field, field_validator

from rbctl.config.base import Section
from rbctl.config.launcher import LauncherCfg


class SweepEval(Section):
    benchmarks: list[str] = Field(default_factory=lambda: ["builtin"], description="Benchmarks of each run's final evaluation.")
    n: int = Field(8, ge=1, description="Samples per problem (n >= 8 gives pass@k curves up to k = 8).")
    temperature: float = Field(1.0, ge=0.0, description="Sampling temperature (0 = greedy).")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling threshold.")
    max_new_tokens: Optional[int] = Field(None, ge=1, description="Null = the training config's rollout.max_new_tokens.")
    limit: Optional[int] = Field(None, ge=1, description="Problems per benchmark (null = all).")
    data_dir: Optional[str] = Field(None, description="Local benchmark JSONL directory (else RBCTL_DATA_DIR or the Hub).")


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


# What an arm can add to its estimator (the estimator itself is the arm's baseline), in the order its
# variant names them: (label, dotted config key, the key's value when nothing is added: its schema
# default, which tests/unit/test_config_blocks.py checks). A label "{}" is the key's value: the policy
# loss's registry name (rbctl.algo.POLICY_LOSSES) or the entropy bonus's mode. Every optional method
# block of `algo` (null = off) is listed here; that test fails for one that is not.
VARIANT_PARTS: tuple[tuple[str, str, object], ...] = (
    ("budget", "algo.budget", None),
    ("entropy_{}", "algo.entropy.mode", "none"),
    ("{}", "algo.policy_loss", "clip"),
    ("entropy_mask", "algo.entropy_mask", None),
    ("unlikeliness", "algo.unlikeliness", None),
    ("dynamic_sampling", "rollout.dynamic_sampling", False),
)


def arm_variant(algo: dict, rollout: dict | None = None) -> str:
    """An arm's variant from its config's `algo` and `rollout` sections (what `rbctl report` groups
    arms by, beside the baseline = the estimator): the labels of `VARIANT_PARTS` whose key differs
    from its off value, joined by '+' (e.g. `budget+clip_cov`), or `base` when nothing is added.
    A key that is absent is off (the sections may be partial)."""
    sections = {"algo": algo or {}, "rollout": rollout or {}}
    parts = []
    for label, key, off in VARIANT_PARTS:
        value = sections
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if value is not None and value != off:
            parts.append(label.format(value))
    return "+".join(parts) or "base"
