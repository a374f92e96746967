"""The study file (`rbctl report STUDY.yaml`): a researcher's claims, declared as data and checked by
rules the library applies (docs/method.md, "Comparing arms", studies).

A study file names
- its **sweeps**, each by the name the study gives it: testbeds (claims sweeps), optional long horizons
  of a testbed, a settings sweep per testbed and the rule that chose its setting, and the main job;
- its **families**: members as ``"arm − reference"`` pairs (``{X}`` a wildcard bound to the same text on
  both sides, so ``"{X}_budget − {X}"`` is every baseline with its budgeted arm) on named sweeps, what
  each member compares (the final held-out metric, a training metric's last quarter, or the
  restricted escape step) and how the family is adjusted and called (α, margin, power). A family may
  instead be a family the sweep file declares (``declared``): its members then carry the sweep
  report's own Holm p and calls;
- its **claims**: a hypothesis and a rule (`CallsRule`, `AssociationRule`, `TrendRule`, `ExactRule`) that the
  library applies and prints beside the call (`rbctl.report.study.rules`).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal, Optional, Union

from pydantic import Field, field_validator, model_validator

from rbctl.config.base import Section
from rbctl.config.sweep import Escape

Call = Literal["higher", "lower", "equivalent", "non-inferior"]
# a member pattern: "arm − reference" (U+2212 or an ASCII hyphen between spaces)
PAIR = re.compile(r"^\s*(\S+)\s+[−-]\s+(\S+)\s*$")
# an interaction: "(arm − reference) − (arm − reference)", the difference of two members' Δ per unit
INTERACTION = re.compile(r"^\s*\(\s*(\S+)\s+[−-]\s+(\S+)\s*\)\s+[−-]\s+\(\s*(\S+)\s+[−-]\s+(\S+)\s*\)\s*$")
_FINAL = re.compile(r"avg@n|pass@[1-9][0-9]*|pass@n")
_LAST = re.compile(r"last_quarter:\S+")


def split_pair(text: str) -> tuple[str, str]:
    """("arm", "reference") of ``"arm − reference"``; ValueError naming the text otherwise."""
    m = PAIR.match(text)
    if not m:
        raise ValueError(f"member '{text}' is not 'arm − reference' (arm names, ' − ' between them)")
    return m.group(1), m.group(2)


def split_member(text: str) -> tuple[str, ...]:
    """The names of a member: ("arm", "reference") of a pair, or the four names of an interaction
    ``"(a − b) − (c − d)"``; ValueError naming the text otherwise."""
    m = INTERACTION.match(text)
    return m.groups() if m else split_pair(text)


def _pairs(members: list[str]) -> list[str]:
    for m in members:
        if not INTERACTION.match(m):
            try:
                split_pair(m)
            except ValueError:
                raise ValueError(f"member '{m}' is neither 'arm − reference' nor '(arm − reference) − (arm − reference)'") from None
    return members


# the unit a test counts (docs/method.md, studies): "unit" is each (warm start, seed) pair or seed; "warm_start"
# each warm start (its statistic over its seeds; t over warm starts); "auto" the warm start when the runs carry them
Level = Literal["auto", "unit", "warm_start"]


class LongHorizon(Section):
    """A long-horizon sweep: the same arms as a testbed, run past the testbed's horizon."""

    name: str = Field(..., min_length=1, description="The sweep's name in the study (families and claims read it by this name).")
    dir: str = Field(..., description="The sweep directory (relative to the current directory).")
    main_step: int = Field(..., ge=0, description="The testbed's horizon: the periodic evaluation at this step is read beside the final one.")
    family: str = Field("principal", description="The family of the long sweep's file whose calls are the final level (its margin makes 'same final level' an equivalence call).")
    ahead_family: Optional[str] = Field(None, description="A study family on this long sweep whose `step` is main_step: a member is 'ahead at the horizon' (and 'faster' beside an equivalent final level) only when this family calls it higher; without one, Δ at main_step is printed as exploratory, no call.")


class Selection(Section):
    """How a testbed's setting was chosen: a sweep over settings of plain X alone, run before any other
    arm ran there, and the rule that keeps one setting."""

    dir: str = Field(..., description="The settings sweep directory (relative to the current directory).")
    rule: Literal["plateau"] = Field(..., description="The rule that keeps a setting: plateau, the rule of docs/method.md (\"Premature convergence\"): the setting whose plain arm passes all three plateau criteria, the smallest last-quarter change among several; if none passes, the most criteria passed, then the smallest change.")
    kept: str = Field(..., description="The arm (setting) the testbed's claims sweep runs, as stated before that sweep ran; the document checks it against the rule.")


class StudyFamily(Section):
    """A family of the study: its members on each sweep it reads, what each member compares, and the
    adjustment (Holm–Bonferroni over the members at α) and calls (`rbctl.report.analyses.comparisons`)."""

    members: list[str] = Field(..., min_length=1, description="Members as 'arm − reference' (Δ = arm − reference); {X} is a wildcard bound to the same text in both arm names.")
    sweeps: Optional[list[str]] = Field(None, description="The study's sweeps the family reads (testbed names, <testbed>_long, main); null = every testbed.")
    declared: Optional[str] = Field(None, description="A family the sweep files declare (principal or a comparisons.families name): members are its members and carry its Holm p and calls; metric, benchmark, alpha, margin and power are then the sweep file's.")
    metric: str = Field("avg@n", description="What each member compares per unit: avg@n or pass@k (pass@n: the largest common k) of the final held-out evaluation; last_quarter:KEY (the mean of metrics.jsonl KEY over the last quarter of steps); or escape (the restricted escape step, `escape`).")
    benchmark: Optional[str] = Field(None, description="Benchmark of a final or escape metric (null = the sweep's first).")
    escape: Optional[Escape] = Field(None, description="The escape signal, threshold and hold of metric escape, applied to every sweep's runs (a crossing not held for `hold` more points is censored, not an event).")
    alpha: float = Field(0.05, gt=0.0, lt=1.0, description="Family-wise error rate of the superiority tests (Holm–Bonferroni over the members); the TOST p-values are adjusted alike.")
    margin: Optional[float] = Field(None, gt=0.0, description="Equivalence margin δ: points for a final metric, steps for escape, the key's own units for last_quarter (null = never equivalent).")
    power: float = Field(0.8, gt=0.0, lt=1.0, description="Power at which an inconclusive member's detectable effect is stated.")
    adjust: Literal["separate", "joint"] = Field("separate", description="separate: Holm over the superiority p-values and, apart, over the TOST p-values, each at alpha (family-wise error over both kinds of call at most 2·alpha); joint: one Holm over both sets together (at most alpha).")
    unit: Literal["unit", "warm_start"] = Field("unit", description="What a member's test counts: unit (each (warm start, seed) pair or seed; a call over (warm start, seed) units holds for these warm starts and says so) or warm_start (each warm start's mean Δ over its seeds, a t-test over the W warm starts on W − 1 df: what generalises to another warm start; at least 3 warm starts).")
    step: Optional[int] = Field(None, ge=0, description="A held-out metric (avg@n, pass@k) read at the periodic evaluation at this step instead of the final evaluation (each unit of both arms needs one there).")
    test: Literal["two_sided", "noninferiority"] = Field("two_sided", description="two_sided: superiority (higher, lower) and, with a margin, equivalence by TOST; noninferiority: one one-sided test per member that Δ is not worse than the margin (Δ > −margin, or Δ < +margin where lower is better), Holm over the members: 'non-inferior' or 'inconclusive'.")
    better: Literal["higher", "lower"] = Field("higher", description="Which direction of Δ is better (a non-inferiority test's side): higher for a score, lower for escape steps.")

    _members = field_validator("members")(classmethod(lambda cls, v: _pairs(v)))

    @model_validator(mode="after")
    def _metric_known(self):
        if self.declared is not None:
            set_here = [k for k in ("benchmark", "escape", "margin", "step") if getattr(self, k) is not None]
            set_here += [k for k, v in (("adjust", "separate"), ("unit", "unit"), ("test", "two_sided")) if getattr(self, k) != v]
            if set_here or self.metric != "avg@n" or any(INTERACTION.match(m) for m in self.members):
                raise ValueError(f"a declared family's members, metric, benchmark, escape, margin, step, unit, test and "
                                 f"adjustment are its sweep file's (remove {', '.join(set_here) or 'metric'})")
        elif self.metric == "escape":
            if self.escape is None:
                raise ValueError("metric escape needs an `escape` setting")
        elif not (_FINAL.fullmatch(self.metric) or _LAST.fullmatch(self.metric)):
            raise ValueError(f"metric '{self.metric}' is none of avg@n, pass@k, pass@n, last_quarter:KEY, escape")
        if self.step is not None and not re.fullmatch(r"avg@n|pass@[1-9][0-9]*", self.metric):
            raise ValueError(f"step: a metric at a stated step is a held-out avg@n or pass@k (not {self.metric})")
        if self.test == "noninferiority" and (self.margin is None or self.adjust != "separate"):
            raise ValueError("test noninferiority needs a margin (how much worse is still non-inferior) and no adjust")
        return self


class Applies(Section):
    """When a member counts for a claim at all (else it is "not applicable" there, with the reason)."""

    plateau: bool = Field(False, description="Only members whose reference arm passes the plateau test on its sweep against a stated ceiling (docs/method.md, 'Premature convergence').")
    raised: Optional[str] = Field(None, description="Only members whose arm raised this metrics.jsonl key (last-quarter mean) over its reference: paired t-test, one-sided direction by Δ, at the claim's alpha, unadjusted.")
    called_in: Optional[str] = Field(None, description="Only members whose same pair on the same sweep is called `called` in this study family.")
    called: Optional[Call] = Field(None, description="The call the member must have in `called_in`.")
    # "raised" reads an unadjusted test: a member where it does not reject is "not shown to rise", not "not raised"

    @model_validator(mode="after")
    def _both(self):
        if (self.called_in is None) != (self.called is None):
            raise ValueError("called_in and called go together")
        return self


class CallsRule(Section):
    """A claim read off the calls of a family's members: supported when `count` members are called
    `support`; contradicted when any member is called one of `contradict`; not applicable when no
    member applies; else inconclusive."""

    kind: Literal["calls"] = Field(..., description="calls")
    family: str = Field(..., description="The study family the claim reads.")
    members: Optional[list[str]] = Field(None, description="A subset of the family's members by 'arm − reference' pattern (null = all).")
    support: Call = Field(..., description="The call each supporting member has.")
    count: Union[Literal["all"], int] = Field("all", description="How many applicable members must be called `support` (all, or at least k; members sharing runs count once).")
    contradict: Optional[list[Call]] = Field(None, description="Calls that contradict the claim when any applicable member has one (null = the opposite direction of support; higher and lower for equivalent; lower for non-inferior). A significant opposite call left out is named as such wherever a member has it.")
    applies_if: Applies = Field(default_factory=Applies, description="When a member counts for the claim.")
    crossing: bool = Field(False, description="Also report, per member, the step from which the arm's mean held-out curve stays above the reference's, with a bootstrap-over-units interval (reported whatever the call; it decides nothing).")

    _members = field_validator("members")(classmethod(lambda cls, v: v if v is None else _pairs(v)))

    @field_validator("count")
    @classmethod
    def _count(cls, v):
        if isinstance(v, int) and v < 1:
            raise ValueError("count must be 'all' or at least 1")
        return v


class AssociationRule(Section):
    """A claim that a training measure predicts the final held-out level, tested per sweep on a unit
    that keeps the arms' own effects out of the test (docs/method.md, studies): within arms and units
    (residuals of arm + unit), within arms (rmcorr with the arm as the subject), or over the arm means.
    Runs are never centred on their unit alone (across arms). A member per sweep is called by the sign of a significant r (Holm over the
    claim's sweeps at α); the claim reads those calls like `CallsRule`."""

    kind: Literal["association"] = Field(..., description="association")
    predictor: str = Field(..., description="The metrics.jsonl key (e.g. kappa_eff, entropy).")
    window: Literal["early", "late"] = Field("early", description="early: the mean over the first `fraction` of logged steps (lagged, predicting the final level); late: over the last quarter (same time).")
    fraction: float = Field(0.25, gt=0.0, lt=1.0, description="The early window: the first fraction of each run's logged steps.")
    outcome: str = Field("avg@n", description="The outcome: avg@n (held-out pass@1) of each run's final evaluation.")
    benchmark: Optional[str] = Field(None, description="The outcome's benchmark (null = the sweep's first).")
    sign: Literal["negative", "positive"] = Field(..., description="The sign the claim expects.")
    unit: Literal["within_arm", "arm_and_unit", "arm_means"] = Field("arm_and_unit", description="arm_and_unit: each run's residual from the additive fit arm + unit (the arms' and the shared units' effects both out); within_arm: runs centred on their arm's means (the shared units' effects stay in, as noise); both tested over units (`level`), which holds α when arms differ in noise; arm_means: Pearson r over the k arm means (k − 2 df; holds α only where the arms' means are about equally noisy).")
    level: Level = Field("auto", description="What the test of r counts (arm_and_unit, within_arm): unit (the residuals' products summed per contrast between units, a t-test over the U − 1 contrasts; at least 3 units), warm_start (per warm start, the residuals of its own runs' fit, a t-test over the W warm starts; at least 3), auto (warm_start when the runs carry warm starts).")
    sweeps: Optional[list[str]] = Field(None, description="The study's sweeps to test on (null = every testbed).")
    count: Union[Literal["all"], int] = Field("all", description="How many tested sweeps must show the expected sign.")
    alpha: float = Field(0.05, gt=0.0, lt=1.0, description="Family-wise error over the claim's sweeps (Holm–Bonferroni).")

    @field_validator("outcome")
    @classmethod
    def _outcome(cls, v):
        if v != "avg@n":
            raise ValueError("the outcome is avg@n (held-out pass@1 of the final evaluation)")
        return v


class TrendRule(Section):
    """A claim that a family's Δ grows (or shrinks) with a setting its members differ in (the group size,
    say): per sweep and unit, the least-squares slope of the members' Δs on x, tested over units
    (`rbctl.report.analyses.trend`); each sweep is called by the sign of a significant slope (Holm over
    the claim's sweeps) and the claim reads those calls like `CallsRule`."""

    kind: Literal["trend"] = Field(..., description="trend")
    family: str = Field(..., description="The study family whose members are the levels of the setting (one member per level on a sweep).")
    over: str = Field(..., description="The dotted config key the members' arms differ in (e.g. rollout.group_size), read from each arm's saved run config.")
    x: Literal["linear", "log2"] = Field("linear", description="x = the key's value, or its log2 (a slope per doubling).")
    sign: Literal["negative", "positive"] = Field(..., description="The sign of the slope the claim expects.")
    count: Union[Literal["all"], int] = Field("all", description="How many tested sweeps must show the expected sign.")
    alpha: float = Field(0.05, gt=0.0, lt=1.0, description="Family-wise error over the claim's sweeps (Holm–Bonferroni).")
    level: Level = Field("auto", description="What the t-test of the slopes counts: unit (each unit's slope), warm_start (each warm start's mean slope over its seeds, W − 1 df: a warm-start-specific slope is then noise, not replication; at least 3), auto (warm_start when the runs carry warm starts).")


class ExactRule(Section):
    """A claim checked exactly, not statistically: a named function of the study's own checks file
    (`checks`) or of `rbctl.report.study.checks.CHECKS`
    (supported when it passes, contradicted when it does not)."""

    kind: Literal["exact"] = Field(..., description="exact")
    check: str = Field(..., description="The check's name: a function of the study's checks file, else of rbctl.report.study.checks.CHECKS.")


Rule = Annotated[Union[CallsRule, AssociationRule, TrendRule, ExactRule], Field(discriminator="kind")]


class Claim(Section):
    """One claim: the hypothesis in words and the rule that calls it."""

    hypothesis: str = Field(..., min_length=1, description="The claim in words (printed beside its rule and call).")
    rule: Rule = Field(..., description="The rule the library applies (kind: calls, association, trend or exact).")


# The metrics-log keys a study's curves may draw: the sweep report's training curves
# (`rbctl.report.analyses.trajectories.TRAINING_CURVES`, which draws them; a test keeps the two equal).
CURVE_TRAINING_KEYS = ("reward/mean", "entropy", "kappa", "kappa_eff", "clip/frac_low", "clip/frac_high")


class Curves(Section):
    """Figures of a sweep's curves over steps: held-out metrics of its periodic evaluations, or training
    curves of its metrics log; per metric, one line per arm (the mean over units) with its 95% t-band over
    units (`rbctl report STUDY.yaml -o OUT` writes them to OUT/figures/ and the document shows them)."""

    sweep: str = Field(..., description="The study's sweep (a testbed name, <testbed>_long, or main).")
    metrics: list[str] = Field(default_factory=lambda: ["avg@n"], min_length=1, description="One figure each: a held-out metric of the periodic evaluations (avg@n, pass@k), or a training curve of the metrics log (reward/mean, entropy, kappa, kappa_eff, clip/frac_low, clip/frac_high; kappa_eff as a rolling mean, as the sweep report draws it).")
    arms: Optional[list[str]] = Field(None, description="The arms drawn (null = every arm of the sweep).")

    @field_validator("metrics")
    @classmethod
    def _metrics(cls, v):
        for m in v:
            if not re.fullmatch(r"avg@n|pass@[1-9][0-9]*", m) and m not in CURVE_TRAINING_KEYS:
                raise ValueError(f"curve metric '{m}' is none of avg@n, pass@k, {', '.join(CURVE_TRAINING_KEYS)}")
        return v


class Previous(Section):
    """The claims document this one replaces: the document prints every change of call since it."""

    file: str = Field(..., description="The previous claims document (a path from the repository's root when `commit` is given, else relative to the current directory).")
    commit: Optional[str] = Field(None, pattern=r"^[0-9a-fA-F]{4,40}$", description="The git commit to read `file` at (`git show COMMIT:FILE` in the repository that holds the study file); null = the file on disk as it is. A document that cannot be read is said in the section, not an error.")
    note: Optional[str] = Field(None, description="The author's words on why calls changed (new rules, new runs), printed with the changes as theirs, not a record.")


class MainJob(Section):
    """The main job's sweep, read beside the testbeds (its commits are listed apart in the provenance)."""

    name: str = Field(..., min_length=1, description="The sweep's name in the study (families and claims read it by this name).")
    dir: str = Field(..., description="The sweep directory (relative to the current directory).")


class StudyConfig(Section):
    """A study: its sweeps, its families and its claims."""

    name: str = Field("study", description="The study's name (the document's title).")
    note: Optional[str] = Field(None, description="The author's note printed under the document's header, in their words (e.g. what was seen before the claims were written); it declares nothing.")
    testbeds: dict[str, str] = Field(..., min_length=1, description="Testbed name -> its claims sweep directory (relative to the current directory).")
    long: dict[str, LongHorizon] = Field(default_factory=dict, description="Testbed name -> its long-horizon sweep (read by the name it gives).")
    selection: dict[str, Selection] = Field(default_factory=dict, description="Testbed name -> the settings sweep its setting was chosen from.")
    main: Optional[MainJob] = Field(None, description="The main job's sweep (its name in the study and its directory), or null.")
    families: dict[str, StudyFamily] = Field(default_factory=dict, description="Family name -> its members, metric and adjustment.")
    claims: dict[str, Claim] = Field(default_factory=dict, description="Claim id -> its hypothesis and rule (printed in this order).")
    readme: Optional[str] = Field(None, description="The family `rbctl.report.study.readme_block` summarises, one line per member (its call on each sweep with the test that decided it), with the long horizons and what is pending: the block a study's own document generator writes into the study's README; null = none.")
    written_after_results: list[str] = Field(default_factory=list, description="Claim ids and families (families.NAME) first written after results of the same design had been seen (an earlier run set, a pilot): each prints 'declared after an earlier run set's results', whatever this directory's records show.")
    curves: list[Curves] = Field(default_factory=list, description="Figures of held-out curves over a sweep's evaluations (one line per arm, bands over units).")
    previous: Optional[Previous] = Field(None, description="The claims document this one replaces: a section lists each claim and member whose call changed since it (read from its own tables).")
    checks: Optional[str] = Field(None, description="A Python file of the study's own exact checks (relative to the study file): each a function returning (what was measured, whether it passed, a table or None), its docstring's first line printed as the rule; an exact rule's check names one.")

    @field_validator("long", "selection")
    @classmethod
    def _long_names(cls, named, info):
        beds = (info.data or {}).get("testbeds") or {}
        for name in named:
            if name not in beds:
                raise ValueError(f"{info.field_name} '{name}' names no testbed (testbeds: {', '.join(beds)})")
        return named

    def sweep_names(self) -> list[str]:
        """Every sweep name a family or claim may read."""
        return [*self.testbeds, *(h.name for h in self.long.values()), *([self.main.name] if self.main else [])]

    @model_validator(mode="after")
    def _references(self):
        sweeps = self.sweep_names()
        twice = sorted({s for s in sweeps if sweeps.count(s) > 1})
        if twice:
            raise ValueError(f"sweep name {', '.join(twice)} given to more than one sweep (testbeds, long, main)")
        for fname, fam in self.families.items():
            for s in fam.sweeps or []:
                if s not in sweeps:
                    raise ValueError(f"family '{fname}': sweep '{s}' is not one of the study's ({', '.join(sweeps)})")
        for cid, c in self.claims.items():
            r = c.rule
            if isinstance(r, (CallsRule, TrendRule)):
                for f in (r.family, getattr(getattr(r, "applies_if", None), "called_in", None)):
                    if f is not None and f not in self.families:
                        raise ValueError(f"claim '{cid}': family '{f}' is not one of the study's ({', '.join(self.families) or 'none'})")
            if isinstance(r, AssociationRule):
                for s in r.sweeps or []:
                    if s not in sweeps:
                        raise ValueError(f"claim '{cid}': sweep '{s}' is not one of the study's ({', '.join(sweeps)})")
        for c in self.curves:
            if c.sweep not in sweeps:
                raise ValueError(f"curves: sweep '{c.sweep}' is not one of the study's ({', '.join(sweeps)})")
        if self.readme is not None and self.readme not in self.families:
            raise ValueError(f"readme: family '{self.readme}' is not one of the study's")
        for name in self.written_after_results:
            if name not in self.claims and name.removeprefix("families.") not in self.families:
                raise ValueError(f"written_after_results: '{name}' is no claim id and no families.NAME of the study")
        for bed, lh in self.long.items():
            fam = self.families.get(lh.ahead_family) if lh.ahead_family else None
            if lh.ahead_family and (fam is None or fam.step != lh.main_step or f"{bed}_long" not in (fam.sweeps or [])):
                raise ValueError(f"long '{bed}': ahead_family '{lh.ahead_family}' must be a study family on {bed}_long "
                                 f"whose step is {lh.main_step}")
        return self
