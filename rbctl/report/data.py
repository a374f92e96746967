"""The report's data: the runs as loaded (`SweepData`) and the shared analyses' results
(`ReportData`), built once (`report_data`) and read by the report's sections
(`rbctl.report.sections`) and by a study's document generators. An optional section's analysis (the
plateau test) is computed when first read, by the thresholds the sweep file declares.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from rbctl.config.sweep import Comparisons, Escape, ReportBlock
from rbctl.errors import UserError
from rbctl.report.analyses.comparisons import ComparisonSet, comparisons, stated_pairs
from rbctl.report.analyses.design import DesignPower, design_power
from rbctl.report.analyses.entropy import EntropyKappa, entropy_kappa
from rbctl.report.analyses.escape_time import EscapeTimes, escape_times
from rbctl.report.analyses.plateau import Ceiling, Plateau, eval_benchmark, plateau, reachable_ceiling
from rbctl.report.analyses.scores import ArmScores, FinalScores, final_scores, score_arms
from rbctl.report.analyses.trajectories import Trajectories, trajectories
from rbctl.report.analyses.verdict import Verdict, verdict
from rbctl.report.analyses.warm_starts import WarmStarts, warm_starts
from rbctl.report.load import Issue, ReportAsk, Run, data_remarks, find_runs, report_ask, sweep_settings
from rbctl.report.sequential_calls import Interim, interim_for
from rbctl.store.rundir import EVAL_DIR, STEP_PREFIX


@dataclass(frozen=True)
class SweepData:
    """The runs of a report's input directories, grouped by arm, with the sweep file's settings and
    each arm's final scores per benchmark."""

    dirs: tuple[Path, ...]
    runs: tuple[Run, ...]
    issues: tuple[Issue, ...]  # runs (and benchmarks) the report cannot fully use
    notes: tuple[str, ...]  # remarks on the data, shown with the final scores
    by_arm: dict[str, list[Run]]  # sorted by arm
    info: dict[str, tuple[str, str]]  # arm -> (baseline, variant)
    spec: Comparisons | None  # the sweep file's principal comparisons and design
    escape: Escape | None  # the sweep file's escape-time setting
    warm_starts: tuple[str, ...]
    scores: dict[tuple[str, str], ArmScores]  # (arm, benchmark) -> its final scores
    n_boot: int
    remarks: tuple[str, ...] = ()  # what the runs do not log or do unlike each other (a runs manifest's)
    ask: ReportAsk = field(default_factory=ReportAsk)  # the sweep file's `report` block: optional sections, thresholds

    @property
    def report(self) -> ReportBlock:
        """The sweep file's (or runs manifest's) `report` block, its defaults where it has none."""
        return self.ask.block if self.ask.block is not None else ReportBlock()

    @property
    def arms(self) -> list[str]:
        return list(self.by_arm)

    @property
    def benchmarks(self) -> list[str]:
        """The benchmarks with final scores, sorted."""
        return sorted({b for _, b in self.scores})

    def same_config(self, arm: str, ref: str) -> bool:
        """Whether two arms ran the same training config: every pair of runs of one unit has equal
        configs but for the seed (`Run.training_config`). False when a run has no saved config."""
        a = {r.unit: r for r in self.by_arm[arm]}
        b = {r.unit: r for r in self.by_arm[ref]}
        common = sorted(set(a) & set(b))
        if not common or any(not a[u].config or not b[u].config for u in common):
            return False
        return all(a[u].training_config() == b[u].training_config() for u in common)


    def compute_difference(self, arm: str, ref: str) -> str:
        """The compute keys (`rbctl.config.sweep.COMPUTE_KEYS`) on which two arms' runs of a common unit
        differ, as ``steps 120 ≠ 100`` (the arm's value first); "" when they agree (or no run of a unit
        has a saved config). A comparison of unequal compute is no like-for-like comparison: its row says
        so (a run extended to 120 steps against a 100-step one)."""
        from rbctl.config.base import flatten
        from rbctl.config.sweep import COMPUTE_KEYS

        a = {r.unit: r for r in self.by_arm[arm]}
        b = {r.unit: r for r in self.by_arm[ref]}
        differ: dict[str, tuple] = {}
        for u in sorted(set(a) & set(b)):
            if a[u].config and b[u].config:
                fa, fb = flatten(a[u].config), flatten(b[u].config)
                for k in COMPUTE_KEYS:
                    if fa.get(k) != fb.get(k):
                        differ.setdefault(k, (fa.get(k), fb.get(k)))
        return "; ".join(f"{k} {x} ≠ {y}" for k, (x, y) in differ.items())


def sweep_data(dirs: list[Path], n_boot: int = 2000) -> SweepData:
    """Read every run under ``dirs`` and score each arm on the final evaluations of its runs that are
    done (a sweep's state says so, or no state records them); no runs is an error."""
    dirs = [Path(d) for d in dirs]
    runs, issues = find_runs(dirs)
    if not runs:
        raise UserError("no run with metrics under " + ", ".join(map(str, dirs)))
    arms = sorted({r.arm for r in runs})
    by_arm = {a: [r for r in runs if r.arm == a] for a in arms}
    spec, escape, _ = sweep_settings(runs)
    named = {i.name for i in issues}
    issues = issues + [Issue(r.name, "no final evaluation", f"nothing under {r.path}/{EVAL_DIR}/{STEP_PREFIX}*")
                       for r in runs if not r.finals and r.finished and r.name not in named]
    # a run its sweep records as not done (failed, interrupted, pending) is never scored, whatever final
    # evaluation its directory holds: one left by an earlier config (`rbctl ablate --force`) or attempt
    # is not this sweep's result; its logged steps are still drawn
    scores, notes, unscored = score_arms([r for r in runs if r.finished], arms)
    return SweepData(tuple(dirs), tuple(runs), tuple(issues + unscored), tuple(notes), by_arm,
                     {a: (rs[0].baseline, rs[0].variant) for a, rs in by_arm.items()}, spec, escape,
                     tuple(sorted({r.warm_start for r in runs if r.warm_start})), scores, n_boot,
                     tuple(data_remarks(runs)), report_ask(runs))


@dataclass(frozen=True)
class ReportData:
    """The analyses the report's sections share, by question: the answer (`verdict`), the design's
    power, the warm starts, escape times, final scores, every comparison, entropy and κ_eff, the
    training trajectories, the plateau test's ceiling, and the plateau test (computed when first read,
    by the sweep file's `report.plateau`). An analysis that does not apply to the runs is None."""

    sweep: SweepData
    comparisons: ComparisonSet
    verdict: Verdict
    power: DesignPower | None  # without principal comparisons
    warm_starts: WarmStarts | None  # without warm starts
    escape: EscapeTimes | None  # off: no setting and no run logs the default metric
    final_scores: FinalScores | None  # without final evaluations
    entropy: EntropyKappa
    trajectories: Trajectories
    ceiling: Ceiling  # the plateau test's, also drawn on the held-out trajectories
    sequential: Interim | None = None  # the runs' design: interim labels, a sequential design's looks (None: no sweep)

    @cached_property
    def plateau(self) -> Plateau:
        """The plateau test (`rbctl.report.analyses.plateau.plateau`) by the declared thresholds, of the
        finished runs only: a run still going has not reached its last evaluation, which the test reads
        as its final one."""
        sw = self.sweep
        done = {a: kept for a, rs in sw.by_arm.items() if (kept := [r for r in rs if r.finished])}
        return plateau(done, sw.info, eval_benchmark(list(sw.runs), sw.benchmarks), self.ceiling,
                       sw.report.plateau)


def analyse(sw: SweepData) -> ReportData:
    """Every analysis of ``sw``."""
    seq = interim_for([r.sweep_dir for r in sw.runs if r.sweep_dir], sw.spec, sw.arms)  # no full-α call from part of a design
    compared = comparisons(sw.info, sw.scores, sw.benchmarks, sw.spec, sw.same_config, sw.n_boot, sw.compute_difference,
                           calls=seq.attach if seq is not None else None)
    answer = verdict(compared, sw.spec)
    bench = eval_benchmark(list(sw.runs), sw.benchmarks)
    pairs = list(sw.spec.principal) if sw.spec is not None else [(a, r) for _, _, a, r in stated_pairs(sw.info)]
    esc = escape_times(sw.escape, list(sw.runs), bench, pairs, sw.spec is not None)
    ent = entropy_kappa(sw.by_arm, list(sw.runs), sw.benchmarks)
    return ReportData(
        sweep=sw, comparisons=compared, verdict=answer,
        power=design_power(sw.spec, compared.headline),
        warm_starts=warm_starts(list(sw.warm_starts), compared.headline, sw.spec is not None, answer.alpha),
        escape=esc,
        final_scores=final_scores(sw.scores, sw.info, sw.arms, sw.benchmarks, sw.spec, sw.n_boot),
        entropy=ent,
        trajectories=trajectories(list(sw.runs), sw.by_arm, esc.setting if esc is not None else None,
                                  bool(ent.kappa_eff_note)),
        ceiling=reachable_ceiling(sw.by_arm, list(sw.dirs), bench),
        sequential=seq)


def report_data(dirs: list[Path], n_boot: int = 2000) -> ReportData:
    """The report's data of the runs under ``dirs`` (run or sweep directories): what `rbctl report`
    renders, for scripts that print parts of it."""
    return analyse(sweep_data(dirs, n_boot))
