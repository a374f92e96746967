"""The runs manifest (`rbctl report MANIFEST.yaml`): runs trained elsewhere (TRL, verl, any trainer
writing TensorBoard, W&B run folders or exports, MLflow stores, a long table) named by arm and seed,
the framework's metric names mapped to rbctl's roles, and the comparisons stated before running (the
sweep file's `comparisons` schema), so the report reads them as it reads rbctl's own sweeps
(`rbctl.report.sources`).

Mistakes caught here, before anything is read: a format, preset or variant one letter off (a
did-you-mean error: ``variant: budgett`` would silently drop the budget comparisons), and a training
metric named as the held-out score (`training_heldout`: the report's calls are on held-out scores).
"""

from __future__ import annotations

import difflib
import re
from typing import ClassVar, Literal, Optional

from pydantic import Field, field_validator, model_validator

from rbctl.config.base import Section
from rbctl.config.sweep import (Ceiling, Comparisons, Escape, ReportBlock, SequentialDesign, check_design_units,
                               distinct_seeds)
from rbctl.store.rundir import run_key

FORMATS = ("trl", "verl", "tensorboard", "table", "wandb", "mlflow")
NAME_PRESETS = ("trl", "verl", "none")
MANIFEST_KEY = "runs_from"  # the top-level key that tells a manifest from a sweep or study file


class Roles(Section):
    """The framework's metric names for what rbctl analyses (docs/metrics.md's names on the right).
    A name may hold placeholders: ``{benchmark}`` (the benchmark, e.g. verl's data source, slashes and all), ``{n}``
    (samples per problem; the largest logged wins) and any other ``{x}`` (one path segment). A role
    set to null is not read: the report says it is not logged."""

    heldout: Optional[str] = Field(None, description="Held-out score per evaluation, a fraction in [0, 1] (rbctl's avg@n: held-out pass@1).")
    benchmark: str = Field("eval", description="The benchmark's name when `heldout` holds no {benchmark}.")
    entropy: Optional[str] = Field(None, description="Token entropy of the policy, nats/token (`entropy`).")
    kappa: Optional[str] = Field(None, description="Nominal sharpness κ (`kappa`).")
    kappa_eff: Optional[str] = Field(None, description="Measured sharpness κ_eff (`kappa_eff`).")
    adv_gap: Optional[str] = Field(None, description="Advantage gap between correct and wrong rollouts (`adv/gap`).")
    reward: Optional[str] = Field(None, description="Mean training reward per rollout (`reward/mean`).")
    response_length: Optional[str] = Field(None, description="Mean response length in tokens (`response/len_mean`).")


# The frameworks' own names (read from their code: TRL's GRPOTrainer `_metrics`, rbctl's
# BudgetGRPOTrainer; verl's ray_trainer `_val_metrics_update` and metric_utils, whose val-core key is
# val-core/<data source>/<acc or reward>/mean@<n> at the largest n).
PRESETS: dict[str, dict[str, str]] = {
    "trl": {"heldout": "eval_reward", "benchmark": "eval", "entropy": "entropy", "kappa": "rbctl/kappa",
            "kappa_eff": "rbctl/kappa_eff", "adv_gap": "rbctl/adv_gap", "reward": "reward",
            "response_length": "completions/mean_length"},
    "verl": {"heldout": "val-core/{benchmark}/{var}/mean@{n}", "entropy": "actor/entropy", "kappa": "rbctl/kappa",
             "kappa_eff": "rbctl/kappa_eff", "adv_gap": "rbctl/adv_gap", "reward": "critic/score/mean",
             "response_length": "response_length/mean"},
}


# Where each framework logs its evaluation: a held-out role outside these is a training metric.
HELDOUT_PREFIXES = {"trl": ("eval_", "test_"), "verl": ("val-", "val/")}
TRAINING_PREFIXES = ("train/", "train_", "training/", "rollout/", "actor/", "critic/")


def _close(word: str, known, what: str, cutoff: float = 0.6) -> str:
    """A did-you-mean error text for ``word`` among ``known`` ("" when nothing is close)."""
    near = difflib.get_close_matches(word, list(known), n=1, cutoff=cutoff)
    return f"unknown {what} '{word}' (did you mean '{near[0]}'?)" if near else ""


def known_variants() -> list[str]:
    """Every variant label rbctl's report knows (`rbctl.algo.registry`): base, budget, the entropy
    bonus's modes and each registered method's label."""
    from rbctl.algo import registry

    return [*registry.CORE_LABELS, *(m.variant for m in registry.variant_methods())]


class ArmInfo(Section):
    """What an arm is, for the report's default pairs (each baseline + budget against that baseline)."""

    baseline: str = Field("grpo", description="The estimator the arm builds on (grpo, rloo, dr_grpo, …).")
    variant: str = Field("base", description="What the arm adds to it: base (nothing), budget, entropy_static, … ('+' joins several; a label of your own that is close to none of these is taken as written).")

    @field_validator("variant")
    @classmethod
    def _known_variant(cls, variant):
        known = known_variants()
        for part in variant.split("+"):
            if part not in known and (hint := _close(part, known, "variant", cutoff=0.75)):
                raise ValueError(f"{hint}; known: {', '.join(known)}")
        return variant


class RunEntry(Section):
    """One run named by hand (instead of the `path` pattern)."""

    arm: str = Field(..., description="Its arm (a key of `arms`).")
    seed: int = Field(..., description="Its seed: what pairs it with the other arms' runs.")
    path: str = Field(..., description="Its output folder (or, for format table, its name in the run column), relative to `root`.")
    warm_start: Optional[str] = Field(None, description="Its warm start (a level crossed with the seeds), or null.")


class RunsManifest(Section):
    """Runs trained outside rbctl, read as one sweep: which runs there are (arms × seeds × warm
    starts through `path`, or `runs` by hand), how they were logged (`runs_from`), whose metric
    names they use, and what the report compares."""

    # added after manifests began recording their versions (`rbctl.config.sweep.version_content`);
    # `design` is not among them: a manifest's recorded versions hold it, null, from the first
    LATE_KEYS: ClassVar[tuple[str, ...]] = ("report",)

    runs_from: Literal["trl", "verl", "tensorboard", "table", "wandb", "mlflow"] = Field(..., description="How the runs were logged: trl (an output folder's trainer_state.json), verl (its file logger's JSON lines), tensorboard (event files, from any trainer), wandb (run folders the wandb SDK wrote, or history exports), mlflow (a tracking store or server), table (one CSV or JSON-lines file of run, step, key, value rows).")
    names: Optional[Literal["trl", "verl", "none"]] = Field(None, description="Whose metric names the `roles` preset takes: trl, verl or none (null = runs_from's for trl and verl, else none).")
    name: str = Field("imported", description="The name of this set of runs (shown in reports).")
    root: str = Field(".", description="The folder run paths and `table` are relative to (relative to the current directory); for mlflow the tracking store: an mlruns/ folder, a .db file or a URI (http://host:port, sqlite:///…).")
    arms: dict[str, ArmInfo] = Field(..., min_length=1, description="Arm name -> what it is (baseline, variant).")
    seeds: list[int] = Field(default_factory=lambda: [0], description="Seeds every arm ran (with `path`).")
    warm_starts: list[str] = Field(default_factory=list, description="Warm starts crossed with the seeds (with `path`; empty = one).")
    path: Optional[str] = Field(None, description="Where each run is below `root`, a pattern of {arm}, {seed} and {warm_start} (null = {arm}/seed_{seed}, or {arm}/{warm_start}/seed_{seed} with warm starts); for wandb a run folder, an export file or the run's name or id; for mlflow and table the run's name.")
    runs: list[RunEntry] = Field(default_factory=list, description="Runs named one by one (then arms × seeds through `path` is not used).")
    table: Optional[str] = Field(None, description="runs_from table: the CSV or JSON-lines file, relative to `root`.")
    experiment: Optional[str] = Field(None, description="runs_from mlflow: the experiment's name (null = every experiment of the store).")
    checkpoints: Optional[str] = Field(None, description="Where each run's checkpoints are below `root`, a pattern like `path` (TRL's checkpoint-N/, verl's global_step_N/): `rbctl eval` of a checkpoint writes its held-out score there, and the report reads it (null = the run's own folder for trl, else none).")
    protocol: Optional[str] = Field(None, description="The `rbctl eval` protocol folder (protocol_XXXXXXXXXX) to read where the checkpoints were evaluated under several (null = the only one).")
    steps: Optional[int] = Field(None, ge=1, description="The steps each run was meant to train (null = what the runs record, TRL's max_steps).")
    roles: Roles = Field(default_factory=Roles, description="The runs' metric names for rbctl's roles: the preset's (`names`; docs/your_runs.md lists them), a key given here, null included, replacing its own.")
    comparisons: Optional[Comparisons] = Field(None, description="Principal comparisons and further families, stated before running (a sweep file's `comparisons`).")
    design: Optional[SequentialDesign] = Field(None, description="A sequential design over the manifest's units (a sweep file's `design`): its last look is the manifest's units (seeds × warm starts, or the units `runs` names), taken in that order.")
    escape: Optional[Escape] = Field(None, description="Escape-time analysis (a sweep file's `escape`; its metric is a name the runs log).")
    ceiling: Optional[Ceiling] = Field(None, description="A reachable held-out score for the plateau test (null = unknown).")
    report: Optional[ReportBlock] = Field(None, description="The report's optional sections and their thresholds (a sweep file's `report`; null = none of the optional sections: docs/method.md, \"Report sections\").")

    @field_validator("runs_from", "names", mode="before")
    @classmethod
    def _known_name(cls, value, info):
        known = FORMATS if info.field_name == "runs_from" else NAME_PRESETS
        if isinstance(value, str) and value not in known and (hint := _close(value, known, info.field_name)):
            raise ValueError(hint)
        return value

    @field_validator("arms")
    @classmethod
    def _arm_names(cls, arms):
        for name in arms:
            if not name or "/" in name or name.startswith("."):
                raise ValueError(f"arm name '{name}' is not a plain name")
        return arms

    @field_validator("seeds")
    @classmethod
    def _distinct_seeds(cls, seeds):
        return distinct_seeds(seeds)

    @field_validator("path", "checkpoints")
    @classmethod
    def _pattern(cls, path):
        if path is not None:
            unknown = set(re.findall(r"{(\w*)}", path)) - {"arm", "seed", "warm_start"}
            if unknown:
                raise ValueError(f"unknown placeholder {{{sorted(unknown)[0]}}} (use {{arm}}, {{seed}}, {{warm_start}})")
        return path

    @model_validator(mode="after")
    def _consistent(self):
        for i, r in enumerate(self.runs):
            if r.arm not in self.arms:
                raise ValueError(f"config key 'runs.{i}.arm': unknown arm '{r.arm}' (arms: {', '.join(self.arms)})")
        if (self.runs_from == "table") != (self.table is not None):
            raise ValueError("config key 'table': required with runs_from table, and only then")
        if self.experiment is not None and self.runs_from != "mlflow":
            raise ValueError("config key 'experiment': only with runs_from mlflow")
        problem = training_heldout(self)
        if problem:
            raise ValueError(f"config key 'roles.heldout': {problem}")
        if self.comparisons is not None:
            for fam in self.comparisons.families_declared():
                for pair in fam.pairs:
                    for arm in pair:
                        if arm not in self.arms:
                            raise ValueError(f"config key 'comparisons': unknown arm '{arm}' (arms: {', '.join(self.arms)})")
        units = self.units()
        check_design_units(self.design, self.comparisons, len(units),
                           "the units `runs` names" if self.runs else
                           f"{max(1, len(self.warm_starts))} warm starts × {len(self.seeds)} seeds" if self.warm_starts
                           else f"{len(self.seeds)} seeds")
        return self

    def units(self) -> list[tuple[Optional[str], int]]:
        """The manifest's units of replication, (warm start, seed), in the order a sequential design
        runs them: seed by seed, each seed's warm starts together (`runs`: in the order it names them)."""
        if self.runs:
            return list(dict.fromkeys((r.warm_start, r.seed) for r in self.runs))
        return [(ws, s) for s in self.seeds for ws in (self.warm_starts or [None])]

    def preset(self) -> str:
        """The name of the roles preset in use ("none": none)."""
        return self.names or (self.runs_from if self.runs_from in PRESETS else "none")

    def resolved_roles(self) -> Roles:
        """The preset's names with every role this manifest sets replacing its own."""
        given = {k: getattr(self.roles, k) for k in self.roles.model_fields_set}
        return Roles(**{**PRESETS.get(self.preset(), {}), **given})

    def pattern(self) -> str:
        """`path`, else a sweep's layout of run folders (`rbctl.store.rundir.run_key`)."""
        if self.path is not None:
            return self.path
        return run_key("{arm}", "{seed}", "{warm_start}" if self.warm_starts else None)

    def checkpoints_of(self, entry: RunEntry) -> str | None:
        """The folder of ``entry``'s checkpoints below `root` (`checkpoints`; a TRL run's own folder)."""
        if self.checkpoints is not None:
            return self.checkpoints.format(arm=entry.arm, seed=entry.seed, warm_start=entry.warm_start or "")
        return entry.path if self.runs_from == "trl" else None

    def entries(self) -> list[RunEntry]:
        """Every run the manifest names: `runs`, else each arm × warm start × seed through `pattern`."""
        if self.runs:
            return list(self.runs)
        out = []
        for arm in self.arms:
            for ws in (self.warm_starts or [None]):
                for seed in self.seeds:
                    out.append(RunEntry(arm=arm, seed=seed, warm_start=ws,
                                        path=self.pattern().format(arm=arm, seed=seed, warm_start=ws or "")))
        return out


def training_heldout(m: RunsManifest) -> str | None:
    """Why the manifest's held-out role names a training metric, else None: it is also the name of
    a training role, or it is outside where its framework logs evaluations (TRL: ``eval_*``; verl:
    ``val-*``), or it carries a training prefix (``train/`` …). The report's calls are on held-out
    scores; a training reward in their place would be called as one."""
    roles = m.resolved_roles()
    name = roles.heldout
    if name is None:
        return None
    for role in ("reward", "entropy", "kappa", "kappa_eff", "adv_gap", "response_length"):
        if getattr(roles, role) == name:
            return (f"`{name}` is also roles.{role}, a training metric, not held out; a held-out score comes "
                    "from an evaluation on problems the run does not train on (docs/your_runs.md)")
    prefixes = HELDOUT_PREFIXES.get(m.preset())
    if prefixes is not None and not name.startswith(prefixes):
        return (f"`{name}` is a training metric, not held out: {m.preset()} logs its evaluation as "
                f"{' or '.join(p + '…' for p in prefixes)}; runs without one get held-out scores from `rbctl eval` "
                "on their checkpoints (docs/your_runs.md)")
    if name.startswith(TRAINING_PREFIXES):
        return (f"`{name}` is a training metric, not held out (its prefix says so); runs without an evaluation "
                "get held-out scores from `rbctl eval` on their checkpoints (docs/your_runs.md)")
    return None
