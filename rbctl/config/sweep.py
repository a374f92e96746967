"""The sweep file (`rbctl ablate`): a base training config, arms of overrides, seeds, the final
evaluation of every run and the launcher settings."""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Optional

from pydantic import Field, field_validator, model_validator

from rbctl.algo import registry as methods
from rbctl.config.base import Section
from rbctl.config.eval import EvalSection
from rbctl.config.launcher import LauncherCfg


# Arms must get equal compute: these keys may differ between a sweep's arms only when the sweep says
# so (`allow_unequal_compute`), and a report's comparison of runs that differ in one says so on its row.
COMPUTE_KEYS = ("steps", "rollout.prompts_per_step", "rollout.group_size", "rollout.max_new_tokens", "algo.ppo_epochs",
                "algo.ppo_mini_batch_size")


def distinct_seeds(seeds: list[int]) -> list[int]:
    """`seeds` itself, or a ValueError naming them when one repeats (a unit counted twice)."""
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct, got {seeds}")
    return seeds

class SweepEval(EvalSection):
    """Each run's final evaluation: an `EvalSection` (rbctl.config.eval); what it leaves open comes
    from the run's training config (`rbctl.config.eval.for_run`)."""

    benchmarks: list[str] = Field(default_factory=lambda: ["builtin"], min_length=1, description="Benchmarks of each run's final evaluation.")
    n: int = Field(8, ge=1, description="Samples per problem (n >= 8 gives pass@k curves up to k = 8).")
    temperature: float = Field(1.0, ge=0.0, description="Sampling temperature (0 = greedy).")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling threshold.")
    max_new_tokens: Optional[int] = Field(None, ge=1, description="Null = the training config's rollout.max_new_tokens.")


_METRIC = re.compile(r"avg@n|pass@[1-9][0-9]*")


def _check_pairs(pairs):
    for i, (arm, ref) in enumerate(pairs):
        if arm == ref:
            raise ValueError(f"pair {i} compares arm '{arm}' with itself")
    dup = [p for i, p in enumerate(pairs) if p in pairs[:i]]
    if dup:
        raise ValueError(f"pair [{dup[0][0]}, {dup[0][1]}] is listed twice")
    return pairs


def _check_metric(v):
    if v is not None and not _METRIC.fullmatch(v):
        raise ValueError("must be avg@n or pass@k (k >= 1)")
    return v


class Family(Section):
    """A further family of comparisons, declared before running beside the principal one (docs/method.md,
    "Comparing arms"): Holm–Bonferroni over its own members, called like the principal family. A key
    left null takes the principal family's value; the margin does not (null = no equivalence call)."""

    pairs: list[tuple[str, str]] = Field(..., min_length=1, description="The family's comparisons as [arm, reference] pairs (Δ = arm − reference).")
    metric: Optional[str] = Field(None, description="Metric: avg@n or pass@k (null = comparisons.metric).")
    benchmark: Optional[str] = Field(None, description="Benchmark (null = comparisons.benchmark).")
    alpha: Optional[float] = Field(None, gt=0.0, lt=1.0, description="Family-wise error rate (null = comparisons.alpha).")
    margin: Optional[float] = Field(None, gt=0.0, description="Equivalence margin δ in points: a comparison is called equivalent when TOST rejects |Δ| ≥ δ (null = never equivalent).")
    mde: Optional[float] = Field(None, gt=0.0, description="Effect the design must detect, in points (null = comparisons.mde).")
    planning_sd: Optional[float] = Field(None, gt=0.0, description="Per-unit SD of Δ (points) the units were chosen from (null = comparisons.planning_sd).")
    power: Optional[float] = Field(None, gt=0.0, lt=1.0, description="Power the design was chosen for (null = comparisons.power).")

    _metric = field_validator("metric")(classmethod(lambda cls, v: _check_metric(v)))
    _pairs = field_validator("pairs")(classmethod(lambda cls, v: _check_pairs(v)))


PRINCIPAL_FAMILY = "principal"
RESERVED_FAMILIES = (PRINCIPAL_FAMILY, "exploratory", "stated")  # names the report gives its own rows


@dataclass(frozen=True)
class FamilySpec:
    """One declared family with every value resolved (`Comparisons.families_declared`); ``benchmark``
    None = the first of the sweep's eval.benchmarks; ``margin`` None = no equivalence call."""

    name: str
    pairs: tuple[tuple[str, str], ...]
    metric: str
    benchmark: Optional[str]
    alpha: float
    margin: Optional[float]
    mde: float
    planning_sd: float
    power: float


class Comparisons(Section):
    """The comparisons stated before running (docs/method.md, "Comparing arms"): the principal family
    and any further named ones (`families`), each a Holm–Bonferroni family whose members the report
    calls; every other comparison it shows is exploratory (interval and unadjusted p, no call)."""

    principal: list[tuple[str, str]] = Field(..., min_length=1, description="Principal comparisons as [arm, reference] pairs (Δ = arm − reference).")
    metric: str = Field("avg@n", description="Principal metric: avg@n (pass@1 from n samples) or pass@k with k <= eval.n.")
    benchmark: Optional[str] = Field(None, description="Benchmark of the principal metric (null = the first of eval.benchmarks).")
    alpha: float = Field(0.05, gt=0.0, lt=1.0, description="Family-wise error rate of the principal family (Holm–Bonferroni).")
    mde: float = Field(..., gt=0.0, description="Minimum detectable effect the design must detect, in points of the metric.")
    planning_sd: float = Field(..., gt=0.0, description="Per-unit SD of Δ (points) the number of units was chosen from.")
    power: float = Field(0.8, gt=0.0, lt=1.0, description="Power at mde the design was chosen for (paired two-sided t-test at alpha/m).")
    margin: Optional[float] = Field(None, gt=0.0, description="Equivalence margin δ of the principal family in points: a comparison is called equivalent when TOST rejects |Δ| ≥ δ (null = never equivalent).")
    families: dict[str, Family] = Field(default_factory=dict, description="Further families declared before running, by name: each Holm-adjusted on its own and called; a comparison belongs to one family at most.")

    _metric = field_validator("metric")(classmethod(lambda cls, v: _check_metric(v)))
    _pairs = field_validator("principal")(classmethod(lambda cls, v: _check_pairs(v)))

    @field_validator("families")
    @classmethod
    def _family_names(cls, families):
        for name in families:
            if name in RESERVED_FAMILIES or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
                raise ValueError(f"family name '{name}' is reserved or not a plain name (letters, digits, _ . -; "
                                 f"not {', '.join(RESERVED_FAMILIES)})")
        return families

    def families_declared(self) -> list[FamilySpec]:
        """The principal family, then each named one, with the principal family's values where a
        family leaves a key null (the margin excepted)."""
        out = [FamilySpec(PRINCIPAL_FAMILY, tuple(map(tuple, self.principal)), self.metric, self.benchmark, self.alpha,
                          self.margin, self.mde, self.planning_sd, self.power)]
        for name, f in self.families.items():
            pick = lambda v, d: d if v is None else v  # noqa: E731
            out.append(FamilySpec(name, tuple(map(tuple, f.pairs)), pick(f.metric, self.metric),
                                  pick(f.benchmark, self.benchmark), pick(f.alpha, self.alpha), f.margin,
                                  pick(f.mde, self.mde), pick(f.planning_sd, self.planning_sd),
                                  pick(f.power, self.power)))
        return out


class SequentialDesign(Section):
    """A group-sequential design over the declared families (docs/method.md, "Sequential designs"):
    each comparison is tested at every look by α-spending boundaries and stops once decided."""

    looks: list[int] = Field(..., min_length=1, description="Units at each look, increasing from at least 3; the last is the design's units (seeds × warm starts).")
    spending: Literal["obrien_fleming", "pocock"] = Field("obrien_fleming", description="Lan–DeMets α-spending: obrien_fleming (little α at early looks; gsDesign's sfLDOF) or pocock (about equal α at each look; sfLDPocock).")
    futility: bool = Field(False, description="Stop a comparison whose superiority test falls below its non-binding β-spending bound at the family's MDE (never inflates α).")

    @field_validator("looks")
    @classmethod
    def _increasing(cls, looks):
        return check_looks(looks)


def check_looks(looks: list[int]) -> list[int]:
    """``looks`` itself, or a ValueError: each at least 3 units (a paired t-test's least), increasing."""
    if looks[0] < 3:
        raise ValueError(f"the first look needs at least 3 units (a paired t-test's least), got {looks[0]}")
    bad = next((i for i in range(1, len(looks)) if looks[i] <= looks[i - 1]), None)
    if bad is not None:
        raise ValueError(f"looks must increase: look {bad + 1} ({looks[bad]}) is not after look {bad} ({looks[bad - 1]})")
    return looks


def check_design_units(design: Optional[SequentialDesign], comparisons, units: int, what: str) -> None:
    """A design needs declared comparisons, and its last look must be the ``units`` (``what`` says of what)."""
    if design is None:
        return
    if comparisons is None:
        raise ValueError("config key 'design': a sequential design decides declared comparisons: state `comparisons`")
    if design.looks[-1] != units:
        raise ValueError(f"config key 'design.looks': the last look ({design.looks[-1]}) must be the design's units, "
                         f"{units} ({what})")


class Escape(Section):
    """When a run leaves the plateau's shortcut: the first point of a signal (the periodic evaluation's
    eval.jsonl, or the training batch's metrics.jsonl) at which it crosses a threshold and stays across
    it (docs/method.md, "Premature convergence", escape time)."""

    metric: str = Field("label/strategy/walk", description="Key of the signal, e.g. label/strategy/walk (share of samples that walk).")
    threshold: float = Field(0.5, description="The run has escaped at the first point where metric crosses this value (and holds).")
    direction: Literal["above", "below"] = Field("above", description="Escaped when metric >= threshold (above) or <= threshold (below).")
    benchmark: Optional[str] = Field(None, description="Benchmark of the periodic evaluation (null = the first of eval.benchmarks); unused with signal train.")
    signal: Literal["eval", "train"] = Field("eval", description="eval: the periodic held-out evaluation (every eval.every steps); train: the training batch's value, logged every step.")
    hold: int = Field(2, ge=0, description="A crossing counts as an escape only if the next `hold` points stay across (a lasting escape; the run's last points count when fewer remain).")


class Ceiling(Section):
    """A pass@1 shown reachable on the sweep's task (docs/method.md, "Premature convergence"), for
    the plateau test; written to SWEEP_DIR/ceiling.json."""

    value: float = Field(..., gt=0.0, le=1.0, description="The reachable held-out pass@1, a fraction.")
    source: str = Field(..., min_length=1, description="Where it was shown reachable (a longer run, a policy trained on correct solutions).")


class PlateauCriteria(Section):
    """The plateau test's thresholds (docs/method.md, "Premature convergence"); each default is the
    reward-budgeting study's declared value."""

    stall_points: float = Field(2.0, gt=0.0, description="Stalled: held-out pass@1 changes by less than this many points over the last quarter of training.")
    below_ceiling_points: float = Field(15.0, ge=0.0, description="Below the ceiling: final held-out pass@1 at least this many points below the reachable ceiling.")
    entropy_ratio: float = Field(1 / 3, gt=0.0, lt=1.0, description="Entropy collapsed: final token entropy below this fraction of the warm start's.")
    improved_on_start: bool = Field(True, description="The divergence guard: premature convergence needs the arm to have improved on its warm start (final held-out pass@1 above step 0's, means over units); an arm that ended at or below it diverged, its plateau test does not hold and a settings sweep does not keep it. false: the three criteria alone.")


# The optional report sections rbctl ships (`rbctl.report.sections` registers them; a test keeps the two
# equal); a plug-in's name is accepted where the environment variable names the module that registers it.
OPTIONAL_SECTIONS = ("plateau", "entropy_cause")
SECTIONS_ENV = "RBCTL_SECTIONS"


class ReportBlock(Section):
    """Which optional sections the report adds to its generic ones, and their settings
    (docs/method.md, "Report sections")."""

    sections: Optional[list[str]] = Field(None, description="The optional sections the report adds, by name: plateau (the plateau test), entropy_cause (entropy and κ_eff against held-out pass@1) or a plug-in's; [] = none; null = the defaults (a sweep file: plateau and entropy_cause; a runs manifest: none).")
    plateau: PlateauCriteria = Field(default_factory=PlateauCriteria, description="The plateau test's thresholds.")
    settings: dict[str, dict[str, Any]] = Field(default_factory=dict, description="A plug-in section's settings, by section name (checked against the section's own schema when the report is made).")

    @field_validator("sections")
    @classmethod
    def _names(cls, sections):
        if sections is None:
            return sections
        for name in sections:
            if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
                raise ValueError(f"section name '{name}' is not a plain name (lower-case letters, digits, _)")
            if name not in OPTIONAL_SECTIONS and not os.environ.get(SECTIONS_ENV):
                close = difflib.get_close_matches(name, OPTIONAL_SECTIONS, n=1, cutoff=0.6)
                raise ValueError(f"unknown section '{name}'" + (f" (did you mean '{close[0]}'?)" if close else "")
                                 + f"; the optional sections: {', '.join(OPTIONAL_SECTIONS)}, or a plug-in's where "
                                 f"{SECTIONS_ENV} names its module")
        if dup := [n for i, n in enumerate(sections) if n in sections[:i]]:
            raise ValueError(f"section '{dup[0]}' is listed twice")
        return sections


def version_content(content: dict, late: tuple[str, ...]) -> dict:
    """A file's data as its version record keeps it (`rbctl.store.history`): `content` without each key
    of `late` whose value is null. `late`: optional blocks added to the schema after files of its kind
    were first recorded, so that a file that does not use one keeps the version (and hash) it was
    recorded under before the key existed (`SweepConfig.LATE_KEYS`, `RunsManifest.LATE_KEYS`)."""
    return {k: v for k, v in content.items() if not (k in late and v is None)}


class SweepConfig(Section):
    # added after sweep directories began recording their sweep file's versions (`version_content`)
    LATE_KEYS: ClassVar[tuple[str, ...]] = ("design", "report")

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
    design: Optional[SequentialDesign] = Field(None, description="A sequential design (docs/method.md, \"Sequential designs\"): the looks at which each declared comparison may be called, by α-spending boundaries (null = none).")
    escape: Optional[Escape] = Field(None, description="Escape-time analysis of the report (null = off).")
    ceiling: Optional[Ceiling] = Field(None, description="A reachable pass@1 for the plateau test, written to SWEEP_DIR/ceiling.json (null = the ceiling the built-in task states, else unknown).")
    report: Optional[ReportBlock] = Field(None, description="The report's optional sections and their thresholds (null = the defaults: docs/method.md, \"Report sections\").")

    @field_validator("seeds")
    @classmethod
    def _distinct_seeds(cls, seeds):
        return distinct_seeds(seeds)

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
    def _design_units(self):
        n_ws = max(1, len(self.warm_starts))
        what = f"{n_ws} warm starts × {len(self.seeds)} seeds" if self.warm_starts else f"{len(self.seeds)} seeds"
        check_design_units(self.design, self.comparisons, n_ws * len(self.seeds), what)
        return self

    @model_validator(mode="after")
    def _comparisons_name_arms(self):
        if self.comparisons is None:
            return self
        seen = {}
        for fam in self.comparisons.families_declared():
            # the keys a message names: comparisons.principal / .metric, or comparisons.families.NAME.pairs / .metric
            prefix = "comparisons" if fam.name == PRINCIPAL_FAMILY else f"comparisons.families.{fam.name}"
            pairs_key = "comparisons.principal" if fam.name == PRINCIPAL_FAMILY else f"{prefix}.pairs"
            for i, pair in enumerate(fam.pairs):
                for arm in pair:
                    if arm not in self.arms:
                        raise ValueError(f"config key '{pairs_key}.{i}': unknown arm '{arm}' "
                                         f"(the sweep's arms: {', '.join(self.arms)})")
                key = (*pair, fam.metric, fam.benchmark or self.eval.benchmarks[0])
                if key in seen:
                    raise ValueError(f"config key '{pairs_key}.{i}': [{pair[0]}, {pair[1]}] on {fam.metric} is already "
                                     f"in family '{seen[key]}' (a comparison belongs to one family, so it has one Holm p)")
                seen[key] = fam.name
            m = re.fullmatch(r"pass@(\d+)", fam.metric)
            if m and int(m.group(1)) > self.eval.n:
                raise ValueError(f"config key '{prefix}.metric': {fam.metric} needs k <= eval.n = {self.eval.n}")
            if fam.benchmark is not None and fam.benchmark not in self.eval.benchmarks:
                raise ValueError(f"config key '{prefix}.benchmark': '{fam.benchmark}' is not one of eval.benchmarks "
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
