"""The study file (`rbctl report STUDY.yaml`): several sweeps that answer one question together —
testbeds, long horizons, the main job — which of their sweep files' declared families holds each
question, and what the claims expect, stated before the runs (docs/method.md, "Comparing arms",
studies). Every comparison of the final level it prints is a member of a family its sweep file
declares, so each row has the same Holm p in the sweep's report and in the study's document. The one
family the study declares itself is escape (`EscapeFamily`): how soon each X + budget leaves the
shortcut against X, a measure no sweep report calls.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, field_validator

from rbctl.config.base import Section
from rbctl.config.sweep import Escape


class LongHorizon(Section):
    """A long-horizon sweep: the same arms as a testbed, run past the testbed's horizon."""

    dir: str = Field(..., description="The sweep directory (relative to the current directory).")
    main_step: int = Field(..., ge=0, description="The testbed's horizon: the periodic evaluation at this step is read beside the final one.")
    family: str = Field("principal", description="The family of the long sweep's file whose calls are the final level (its margin makes 'same final level' an equivalence call).")


class StudyFamilies(Section):
    """Which declared family of each testbed's sweep file holds each of the study's questions (a
    family a testbed's sweep file does not declare is read as missing there)."""

    budget: str = Field("principal", description="X + budget − X, per baseline X.")
    entropy_vs_budget: Optional[str] = Field(None, description="X + entropy bonus − X + budget (null = not asked).")
    entropy_vs_base: Optional[str] = Field(None, description="X + entropy bonus − X (null = not asked; claim (b) then reads nothing).")


class Expect(Section):
    """The signs the claims expect, stated before running: the association of each sharpening
    measure with the final held-out pass@1 (claim (e))."""

    kappa_eff: Literal["negative", "positive"] = Field("negative", description="Sign expected of κ_eff's association with final pass@1 (sharper updates, a lower final level).")
    entropy: Literal["negative", "positive"] = Field("positive", description="Sign 'entropy collapse stalls progress' predicts for entropy's association with final pass@1.")
    early_fraction: float = Field(0.25, gt=0.0, lt=1.0, description="The early window of the lagged test: the first fraction of each run's logged steps.")


class Selection(Section):
    """How a testbed's setting was chosen: a sweep over settings of plain X alone, run before any other
    arm ran there, and the rule of docs/method.md ("Premature convergence"): the setting whose plain arm
    passes all three plateau criteria, the smallest last-quarter change among several; if none passes,
    the most criteria passed, then the smallest change."""

    dir: str = Field(..., description="The settings sweep directory (relative to the current directory).")
    kept: str = Field(..., description="The arm (setting) the testbed's claims sweep runs, as stated before that sweep ran; the document checks it against the rule.")


class EscapeFamily(Section):
    """Escape (speed) as the study's own family, beside the final level (docs/method.md, "Premature
    convergence", escape time): on every testbed and long sweep whose runs log the setting's signal,
    X + budget − X in the restricted escape step min(T, τ) per unit (τ: the last step every run of that
    sweep reached; a run that never escapes counts τ), paired by unit, Holm-adjusted over all members and
    called like a final level (lower = sooner), with the log-rank test stratified by warm start beside it."""

    setting: Escape = Field(default_factory=Escape, description="The escape signal, threshold and hold, applied to every sweep's runs (the sweeps' own `escape` settings are not read).")
    margin: Optional[float] = Field(None, gt=0.0, description="Equivalence margin in steps: a member is called equivalent when TOST rejects |Δ| ≥ margin (null = never equivalent).")
    alpha: float = Field(0.05, gt=0.0, lt=1.0, description="Family-wise error rate (Holm–Bonferroni over the members).")
    power: float = Field(0.8, gt=0.0, lt=1.0, description="Power at which an inconclusive member's detectable effect is stated.")


class StudyConfig(Section):
    """A study: testbeds (sweep directories), optional long horizons and the main job, the families
    that answer its questions, and its expectations."""

    name: str = Field("study", description="The study's name (the document's title).")
    testbeds: dict[str, str] = Field(..., min_length=1, description="Testbed name -> its claims sweep directory (relative to the current directory).")
    long: dict[str, LongHorizon] = Field(default_factory=dict, description="Testbed name -> its long-horizon sweep.")
    selection: dict[str, Selection] = Field(default_factory=dict, description="Testbed name -> the settings sweep its setting was chosen from.")
    main: Optional[str] = Field(None, description="The main job's sweep directory (its runs join claim (e)'s association), or null.")
    families: StudyFamilies = Field(default_factory=StudyFamilies, description="Which declared family holds each question.")
    expect: Expect = Field(default_factory=Expect, description="What the claims expect, stated before running.")
    escape: Optional[EscapeFamily] = Field(None, description="Escape as the study's own declared family (null = not asked).")

    @field_validator("long", "selection")
    @classmethod
    def _long_names(cls, named, info):
        beds = (info.data or {}).get("testbeds") or {}
        for name in named:
            if name not in beds:
                raise ValueError(f"{info.field_name} '{name}' names no testbed (testbeds: {', '.join(beds)})")
        return named
