"""The sweep file (`rbctl ablate`): a base training config, arms of overrides, seeds, the final
evaluation of every run and the launcher settings."""

from __future__ import annotations

import re
from typing import Any, Literal, Optional

from pydantic import Field, field_validator, model_validator

from rbctl.algo import registry as methods
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


_METRIC = re.compile(r"avg@n|pass@[1-9][0-9]*")


class Comparisons(Section):
    """The principal comparisons, stated before running (docs/method.md, "Comparing arms"): the only
    Holm–Bonferroni family of the report; every other comparison it shows is exploratory."""

    principal: list[tuple[str, str]] = Field(..., min_length=1, description="Principal comparisons as [arm, reference] pairs (Δ = arm − reference).")
    metric: str = Field("avg@n", description="Principal metric: avg@n (pass@1 from n samples) or pass@k with k <= eval.n.")
    benchmark: Optional[str] = Field(None, description="Benchmark of the principal metric (null = the first of eval.benchmarks).")
    alpha: float = Field(0.05, gt=0.0, lt=1.0, description="Family-wise error rate of the principal family (Holm–Bonferroni).")
    mde: float = Field(..., gt=0.0, description="Minimum detectable effect the design must detect, in points of the metric.")
    planning_sd: float = Field(..., gt=0.0, description="Per-unit SD of Δ (points) the number of units was chosen from.")
    power: float = Field(0.8, gt=0.0, lt=1.0, description="Power at mde the design was chosen for (paired two-sided t-test at alpha/m).")

    @field_validator("metric")
    @classmethod
    def _metric(cls, v):
        if not _METRIC.fullmatch(v):
            raise ValueError("must be avg@n or pass@k (k >= 1)")
        return v

    @field_validator("principal")
    @classmethod
    def _pairs(cls, pairs):
        for i, (arm, ref) in enumerate(pairs):
            if arm == ref:
                raise ValueError(f"pair {i} compares arm '{arm}' with itself")
        dup = [p for i, p in enumerate(pairs) if p in pairs[:i]]
        if dup:
            raise ValueError(f"pair [{dup[0][0]}, {dup[0][1]}] is listed twice")
        return pairs


class Escape(Section):
    """When a run leaves the plateau's shortcut: the first periodic evaluation at which a logged
    eval.jsonl value crosses a threshold (docs/method.md, "Premature convergence", escape time)."""

    metric: str = Field("label/strategy/walk", description="Key of the periodic evaluation, e.g. label/strategy/walk (share of samples that walk).")
    threshold: float = Field(0.5, description="The run has escaped at the first evaluation where metric crosses this value.")
    direction: Literal["above", "below"] = Field("above", description="Escaped when metric >= threshold (above) or <= threshold (below).")
    benchmark: Optional[str] = Field(None, description="Benchmark of the periodic evaluation (null = the first of eval.benchmarks).")


class Ceiling(Section):
    """A pass@1 shown reachable on the sweep's task (docs/method.md, "Premature convergence"), for
    the plateau test; written to SWEEP_DIR/ceiling.json."""

    value: float = Field(..., gt=0.0, le=1.0, description="The reachable held-out pass@1, a fraction.")
    source: str = Field(..., min_length=1, description="Where it was shown reachable (a longer run, a policy trained on correct solutions).")


class SweepConfig(Section):
    name: str = Field("sweep", description="Sweep name (shown in reports).")
    base: str = Field(..., description="Base training config YAML, relative to the sweep file.")
    set: dict[str, Any] = Field(default_factory=dict, description="Overrides applied to the base for every arm.")
    seeds: list[int] = Field(default_factory=lambda: [0], description="Run seeds; every arm runs every seed.")
    warm_starts: list[str] = Field(default_factory=list, description="Shipped warm starts crossed with the seeds (a level of the study: every arm runs every warm start × seed, in runs/ARM/WARM_START/seed_S, paired by (warm start, seed)); empty = the base config's own warm start.")
    arms: dict[str, dict[str, Any]] = Field(..., description="Arm name -> dotted-key overrides of the base config.")
    eval: SweepEval = Field(default_factory=SweepEval, description="Final evaluation of every run.")
    jobs: int = Field(2, ge=1, description="Runs in parallel (worker processes); threads are divided between them.")
    allow_unequal_compute: bool = Field(False, description="Allow arms to differ in steps, P, G, max_new_tokens, ppo_epochs or ppo_mini_batch_size.")
    same_labels: bool = Field(False, description="Allow two arms the same (baseline, variant) label, for a sweep over settings (G, α, ...) rather than methods; the report's label-based pairs (each baseline + X against that baseline) then do not tell those arms apart. false = two arms with one label are an error.")
    launcher: Optional[LauncherCfg] = Field(None, description="submitit settings for `--launcher submitit` (Slurm, or its local mode).")
    comparisons: Optional[Comparisons] = Field(None, description="Principal comparisons, metric and power design, stated before running (null = every stated pair, one Holm family).")
    escape: Optional[Escape] = Field(None, description="Escape-time analysis of the report (null = off).")
    ceiling: Optional[Ceiling] = Field(None, description="A reachable pass@1 for the plateau test, written to SWEEP_DIR/ceiling.json (null = the report's default: the best arm's final pass@1).")

    @field_validator("seeds")
    @classmethod
    def _distinct_seeds(cls, seeds):
        if len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds must be distinct, got {seeds}")
        return seeds

    @field_validator("arms")
    @classmethod
    def _names(cls, arms):
        if not arms:
            raise ValueError("a sweep needs at least one arm")
        for name in arms:
            if not name or "/" in name or name.startswith("."):
                raise ValueError(f"arm name '{name}' is not a valid directory name")
        return arms

    @model_validator(mode="after")
    def _comparisons_name_arms(self):
        if self.comparisons is not None:
            for i, pair in enumerate(self.comparisons.principal):
                for arm in pair:
                    if arm not in self.arms:
                        raise ValueError(f"config key 'comparisons.principal.{i}': unknown arm '{arm}' "
                                         f"(the sweep's arms: {', '.join(self.arms)})")
            m = re.fullmatch(r"pass@(\d+)", self.comparisons.metric)
            if m and int(m.group(1)) > self.eval.n:
                raise ValueError(f"config key 'comparisons.metric': {self.comparisons.metric} needs k <= eval.n = "
                                 f"{self.eval.n}")
            bench = self.comparisons.benchmark
            if bench is not None and bench not in self.eval.benchmarks:
                raise ValueError(f"config key 'comparisons.benchmark': '{bench}' is not one of eval.benchmarks "
                                 f"({', '.join(self.eval.benchmarks)})")
        return self


# What an arm can add to its estimator (the estimator itself is the arm's baseline) that is not a
# registered method, in the order its variant names them: (label, dotted config key, the key's value
# when nothing is added). A label "{}" is the key's value: the entropy bonus's mode, or the policy
# loss's name (its registry record's label when it has one). The registered methods that label an
# arm follow (`variant_parts`).
CORE_PARTS: tuple[tuple[str, str, object], ...] = (
    ("budget", "algo.budget", None),
    ("entropy_{}", "algo.entropy.mode", "none"),
    ("{}", "algo.policy_loss", methods.DEFAULT_POLICY_LOSS),
)


def variant_parts() -> tuple[tuple[str, str, object], ...]:
    """`CORE_PARTS`, then each registered token mask, reward transform and sampling hook (rbctl.algo.registry)."""
    return CORE_PARTS + tuple((m.variant, m.config_key, False if m.kind == "sampling_hook" else None)
                              for m in methods.variant_methods() if m.kind != "policy_loss")


def arm_variant(algo: dict, rollout: dict | None = None) -> str:
    """An arm's variant from its config's `algo` and `rollout` sections (what `rbctl report` groups
    arms by, beside the baseline = the estimator): the labels of `variant_parts` whose key differs
    from its off value, joined by '+' (e.g. `budget+entropy_static`), or `base` when nothing is added.
    A key that is absent is off (the sections may be partial)."""
    sections = {"algo": algo or {}, "rollout": rollout or {}}
    parts = []
    for label, key, off in variant_parts():
        value = sections
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if value is not None and value != off:
            method = methods.METHODS.get(value) if key == "algo.policy_loss" else None
            parts.append(method.variant if method is not None else label.format(value))
    return "+".join(parts) or "base"
