"""The premature-convergence (plateau) test (docs/method.md, "Premature convergence"): its ceiling
(a ceiling file, else the one the task states; never the compared runs'), the test of one arm criterion by
criterion (`plateau_check`, on plain numbers), read from runs (`plateau_of_arm`), and the report's
plateau analysis (`plateau`): the GRPO base arm, and every plain arm (each baseline X without a variant,
or each setting of a sweep over settings). The thresholds are a `PlateauCriteria` (the sweep file's
`report.plateau`; its defaults are the reward-budgeting study's declared values).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from rbctl.config.sweep import PlateauCriteria
from rbctl.errors import UserError
from rbctl.report.load import Run, unit_label
from rbctl.report.series import final_heldout, run_series
from rbctl.store import read
from rbctl.tasks.ceilings import task_ceiling

PLATEAU_ARM = ("grpo", "base")  # (baseline, variant) of the arm the report tests

MIN_LAST_QUARTER_EVALS = 2  # evaluations at steps ≥ ¾T a seed needs for "stalled" to be measured at all


@dataclass(frozen=True)
class Criterion:
    """One criterion: ``held`` is True/False, or None when it could not be evaluated."""

    name: str
    held: bool | None
    value: float | None  # the measured quantity (points, or nats/token)
    threshold: float | None
    detail: str


@dataclass(frozen=True)
class PlateauVerdict:
    stalled: Criterion
    below_ceiling: Criterion
    entropy_collapsed: Criterion
    held: bool  # all three held, and the guard where it is on (an unevaluated criterion does not hold)
    seeds: int  # units (seeds, or warm start × seed)
    per_seed: dict = field(default_factory=dict)  # unit -> {"change", "final", "t", "t_ref", "start", "entropy_warm", "entropy_final"}
    improved: Criterion | None = None  # the divergence guard: final pass@1 above step 0's (`_improved`)

    @property
    def diverged(self) -> bool:
        """The arm ended at or below its step-0 held-out pass@1 (means over units): it diverged, or never
        learned, rather than converged prematurely."""
        return self.improved is not None and self.improved.held is False

    @property
    def criteria(self) -> tuple[Criterion, Criterion, Criterion]:
        return self.stalled, self.below_ceiling, self.entropy_collapsed


def _points(steps, values) -> tuple[np.ndarray, np.ndarray]:
    s, v = np.asarray(steps, dtype=float), np.asarray(values, dtype=float)
    ok = np.isfinite(s) & np.isfinite(v)
    order = np.argsort(s[ok], kind="stable")
    return s[ok][order], v[ok][order]


def _stalled(heldout: dict, stall_points: float, fraction: float) -> tuple[Criterion, list[float], dict]:
    """The stalled criterion of `plateau_check`, each unit's final pass@1 (points) and its numbers."""
    changes, finals, per_seed, sparse = [], [], {}, 0
    for seed, (steps, values) in sorted(heldout.items()):
        s, v = _points(steps, values)
        if len(s) == 0:
            continue
        t = s[-1]
        finals.append(v[-1] * 100)
        per_seed[seed] = {"final": finals[-1], "t": float(t)}
        if len(s) > 1 and s[0] == 0:
            per_seed[seed]["start"] = v[0] * 100
        if np.sum(s >= (1 - fraction) * t) < MIN_LAST_QUARTER_EVALS:
            sparse += 1
            continue
        earlier = s[:-1]
        j = int(np.argmin(np.abs(earlier - (1 - fraction) * t)))
        changes.append(abs(v[-1] - v[j]) * 100)
        per_seed[seed].update({"change": changes[-1], "t_ref": float(earlier[j])})
    if sparse:
        return Criterion("stalled", None, None, stall_points,
                         f"not evaluated: {sparse} of {len(finals)} unit{'s' * (len(finals) != 1)} have fewer than "
                         f"{MIN_LAST_QUARTER_EVALS} held-out evaluations in the last quarter of their steps"), finals, per_seed
    if not changes:
        return Criterion("stalled", None, None, stall_points, "no held-out evaluation"), finals, per_seed
    change = float(np.mean(changes))
    return Criterion("stalled", change < stall_points, change, stall_points,
                     f"mean over {len(changes)} unit{'s' * (len(changes) != 1)} of |pass@1(T) − pass@1(≈¾T)| = "
                     f"{change:.2f} points ({'<' if change < stall_points else '≥'} {stall_points:g})"), finals, per_seed


def plateau_check(heldout: dict, entropy: dict, ceiling: float | None, criteria: PlateauCriteria | None = None,
                  *, fraction: float = 0.25) -> PlateauVerdict:
    """Whether ONE arm is on a plateau, criterion by criterion, with the numbers; the thresholds are
    ``criteria`` (None: `PlateauCriteria`'s defaults, the study's declared values).

    ``heldout[unit] = (steps, pass@1)``: held-out pass@1 (avg@n, fractions) at the periodic
    evaluation steps, step 0 (the warm start) included when logged. ``entropy[unit] = (steps,
    entropy)``: the training metric ``entropy`` (nats/token) per logged step. ``ceiling``: a reachable
    pass@1 (fraction), or None (unknown). A unit is a seed, or a (warm start, seed) pair.

    - **stalled**: per seed, T = its last evaluation step; the change is |pass@1(T) − pass@1(t*)| with
      t* the evaluation step nearest (1 − ``fraction``)·T = ¾T (the earlier one on a tie, never T
      itself). Held when the mean over seeds of that change is < ``stall_points`` points. Evaluated
      only when every seed has at least `MIN_LAST_QUARTER_EVALS` evaluations in its last quarter
      (steps ≥ ¾T): with one, the change would be 0 by construction, a stall no measurement showed.
    - **below_ceiling**: final pass@1 = pass@1(T) per seed, averaged over seeds; held when
      ceiling − final ≥ ``below_ceiling_points`` points. Not evaluated (``held=None``) without a ceiling.
    - **entropy_collapsed**: per seed, warm = the entropy of its first logged step, final = the mean
      of the last ``fraction`` (at least one) of its logged values; held when mean final over seeds
      < ``entropy_ratio`` × mean warm over seeds.
    - **improved** (the divergence guard, ``criteria.improved_on_start``): the mean over units of the
      final pass@1 is above the mean of their step-0 pass@1 (units with an evaluation at step 0 and a
      later one). A run that ended at or below its warm start diverged, or never learned: it "stalls"
      far below the ceiling, often at a collapsed entropy, without having converged to anything.
    - **held**: all three held, and the guard where it is on (a criterion not evaluated does not hold).
    Values are reported in points (percent) for pass@1 and nats/token for entropy.
    """
    c = criteria if criteria is not None else PlateauCriteria()
    stalled, finals, per_seed = _stalled(heldout, c.stall_points, fraction)
    below = _below_ceiling(finals, ceiling, c.below_ceiling_points)
    entropy_c = _entropy_collapsed(entropy, per_seed, c.entropy_ratio, fraction)
    improved = _improved(per_seed)
    held = all(x.held is True for x in (stalled, below, entropy_c)) and (not c.improved_on_start or improved.held is True)
    warms = sum(1 for d in per_seed.values() if "entropy_warm" in d)
    return PlateauVerdict(stalled, below, entropy_c, held, max(len(finals), warms), per_seed, improved)


def _improved(per_seed: dict) -> Criterion:
    """The divergence guard of `plateau_check`: final pass@1 above step 0's, means over the units that
    have both (points)."""
    pairs = [(d["start"], d["final"]) for d in per_seed.values() if "start" in d]
    if not pairs:
        return Criterion("improved", None, None, None, "not evaluated: no unit has a held-out evaluation at step 0 and a later one")
    start, final = (float(np.mean(x)) for x in zip(*pairs))
    ok = final > start
    return Criterion("improved", ok, final - start, 0.0,
                     f"final pass@1 {final:.1f} − step 0's {start:.1f} = {final - start:+.1f} points over "
                     f"{len(pairs)} unit{'s' * (len(pairs) != 1)} ({'> 0' if ok else '≤ 0: diverged'})")


def _below_ceiling(finals: list[float], ceiling: float | None, below_points: float) -> Criterion:
    """The below-the-ceiling criterion of `plateau_check` from each unit's final pass@1 (points)."""
    final = float(np.mean(finals)) if finals else None
    if final is None or ceiling is None or not math.isfinite(ceiling):
        why = "no held-out evaluation" if final is None else "ceiling unknown"
        return Criterion("below_ceiling", None, None, below_points, f"not evaluated: {why}")
    gap = 100 * ceiling - final
    return Criterion("below_ceiling", gap >= below_points, gap, below_points,
                     f"ceiling {100 * ceiling:.1f} − final pass@1 {final:.1f} = {gap:.1f} points "
                     f"({'≥' if gap >= below_points else '<'} {below_points:g})")


def _entropy_collapsed(entropy: dict, per_seed: dict, entropy_ratio: float, fraction: float) -> Criterion:
    """The entropy criterion of `plateau_check`; each unit's warm and final entropy go into ``per_seed``."""
    warms, ends = [], []
    for seed, (steps, values) in sorted(entropy.items()):
        _, v = _points(steps, values)
        if len(v) == 0:
            continue
        warms.append(v[0])
        ends.append(float(v[-max(1, math.ceil(fraction * len(v))):].mean()))
        per_seed.setdefault(seed, {}).update({"entropy_warm": warms[-1], "entropy_final": ends[-1]})
    if not warms:
        return Criterion("entropy_collapsed", None, None, None, "no entropy logged")
    warm, end = float(np.mean(warms)), float(np.mean(ends))
    ok = end < entropy_ratio * warm
    return Criterion("entropy_collapsed", ok, end, entropy_ratio * warm,
                     f"final entropy {end:.3f} vs warm start {warm:.3f} nats/token: ratio "
                     f"{end / warm if warm else math.nan:.2f} ({'<' if ok else '≥'} {entropy_ratio:.3g})")


def per_unit_criteria(v: PlateauVerdict, ceiling: float | None, criteria: PlateauCriteria | None = None) -> list[dict]:
    """Each unit's numbers and whether each criterion holds for it alone (the verdict itself is
    over units, `plateau_check`): change (points), final pass@1 (points), gap to ``ceiling``
    (points), entropy ratio final / warm start. None where not measurable."""
    c = criteria if criteria is not None else PlateauCriteria()
    rows = []
    for unit, d in sorted(v.per_seed.items()):
        change, final = d.get("change"), d.get("final")
        gap = 100 * ceiling - final if final is not None and ceiling is not None else None
        warm, end = d.get("entropy_warm"), d.get("entropy_final")
        ratio = end / warm if warm else None
        rows.append({"unit": unit, "t_ref": d.get("t_ref"), "t": d.get("t"), "change": change, "start": d.get("start"), "final": final,
                     "gap": gap, "entropy_ratio": ratio,
                     "stalled": None if change is None else change < c.stall_points,
                     "below_ceiling": None if gap is None else gap >= c.below_ceiling_points,
                     "entropy_collapsed": None if ratio is None else ratio < c.entropy_ratio})
    return rows


def plateau_of_arm(runs: list[Run], benchmark: str, ceiling: float | None,
                   criteria: PlateauCriteria | None = None) -> PlateauVerdict:
    """`plateau_check` on one arm's runs: held-out avg@n on ``benchmark`` from the periodic
    evaluation (the final evaluation appended when it is later than the last periodic one) and the
    training metric ``entropy``."""
    heldout, entropy = {}, {}
    for r in runs:
        s = run_series(r, "avg@n", benchmark)
        if r.final_step is not None and benchmark in r.finals and (not len(s) or r.final_step > s.index.max()):
            s.loc[r.final_step] = final_heldout(r, benchmark)
        if len(s):
            heldout[r.unit] = (list(s.index), list(s.values))
        e = run_series(r, "entropy")
        if len(e):
            entropy[r.unit] = (list(e.index), list(e.values))
    return plateau_check(heldout, entropy, ceiling, criteria)


# --- the ceiling --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ceiling:
    """A pass@1 level for the plateau test (docs/method.md, "Premature convergence")."""

    value: float | None  # fraction; None: unknown
    source: str
    declared: bool = False  # stated before the comparison (a ceiling file); False: read off the compared runs


def ceiling_file(runs: list[Run], dirs: list[Path]) -> Ceiling | None:
    """The ceiling file (``{"value": float, "source": "text"}``) of the runs' sweep directory or of
    an input directory, or None."""
    places = list(dict.fromkeys([*(r.sweep_dir for r in runs if r.sweep_dir), *map(Path, dirs)]))
    for d in places:
        found = read.read_ceiling_file(d)
        if found is not None:
            c, f = found
            v = c.get("value")
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise UserError(f"{f}: 'value' must be a number (a fraction of problems solved)")
            return Ceiling(float(v), str(c.get("source") or f"{f}"), declared=True)
    return None


def reachable_ceiling(by_arm: dict[str, list[Run]], dirs: list[Path], bench: str | None) -> Ceiling:
    """The plateau test's ceiling, in order: the ceiling file (of the runs' sweep directory or of one
    of ``dirs``); the ceiling the runs' built-in task states (`rbctl.tasks.ceilings`, when every run is
    of one such task); unknown. Never a level read off the compared runs: the plateau test asks how far
    below a level shown reachable elsewhere the arm sits. (``bench`` is kept for callers' symmetry.)"""
    runs = [r for rs in by_arm.values() for r in rs]
    found = ceiling_file(runs, dirs)
    if found is not None:
        return found
    kinds = {str((((r.config or {}).get("data") or {}).get("builtin") or {}).get("task")) for r in runs}
    stated = task_ceiling(kinds.pop()) if len(kinds) == 1 else None
    if stated is not None:
        return Ceiling(stated[0], stated[1], declared=True)
    return Ceiling(None, "no ceiling file, and the task states none")


# --- the report's analysis ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plateau:
    """The plateau test of the report's GRPO base arm (`PLATEAU_ARM`) on the periodic evaluation's
    benchmark: its verdict, one row per criterion and the verdict (`criteria`: tables/plateau.csv), and
    per unit (`units`: tables/plateau_units.csv). ``arm`` is None when there is no such arm or no
    benchmark (then the frames are empty and ``verdict`` is None). ``plain`` holds the verdict of every
    plain arm (variant "base": each baseline X, or each setting of a sweep over settings), the GRPO arm
    included; `plain_table` is its one-row-per-arm summary (tables/plateau_arms.csv)."""

    arm: str | None
    benchmark: str | None
    ceiling: Ceiling  # also drawn on the held-out trajectories
    verdict: PlateauVerdict | None
    criteria: pd.DataFrame
    units: pd.DataFrame
    plain: dict[str, PlateauVerdict] = field(default_factory=dict)
    thresholds: PlateauCriteria = field(default_factory=PlateauCriteria)  # the criteria it was tested by

    def held_for(self, arm: str) -> bool:
        """The plateau test holds for the plain arm ``arm`` against a stated ceiling."""
        v = self.plain.get(arm)
        return bool(v is not None and v.held and self.ceiling.value is not None and self.ceiling.declared)


def criteria_table(arm: str, v: PlateauVerdict, criteria: PlateauCriteria | None = None) -> pd.DataFrame:
    """One row per criterion, the divergence guard where it is on, and the overall verdict."""
    guarded = (criteria if criteria is not None else PlateauCriteria()).improved_on_start and v.improved is not None
    rows = [{"arm": arm, "criterion": c.name, "held": c.held, "value": c.value, "threshold": c.threshold,
             "detail": c.detail} for c in (*v.criteria, *((v.improved,) if guarded else ()))]
    rows.append({"arm": arm, "criterion": "plateau", "held": v.held, "value": None, "threshold": None,
                 "detail": (f"all three criteria held over {v.seeds} units" + (", and it improved on step 0" if guarded else ""))
                 if v.held else "at least one criterion did not hold or was not evaluated"})
    return pd.DataFrame(rows)


def units_table(v: PlateauVerdict, ceiling: float | None, criteria: PlateauCriteria | None = None) -> pd.DataFrame:
    """Per unit: the numbers behind each criterion and whether it holds for that unit alone."""
    rows = per_unit_criteria(v, ceiling, criteria)
    return pd.DataFrame([{**r, "unit": unit_label(r["unit"])} for r in rows])


def eval_benchmark(runs: list[Run], benchmarks: list[str]) -> str | None:
    """The benchmark of the periodic evaluation (the first logged), else the first of ``benchmarks``
    (those with final scores)."""
    return next((b for b in dict.fromkeys(e.get("benchmark") for r in runs for e in r.evals) if b),
                benchmarks[0] if benchmarks else None)


def plain_table(plain: dict[str, PlateauVerdict]) -> pd.DataFrame:
    """One row per plain arm: each criterion's measured value and whether it held, and the verdict."""
    rows = []
    for arm, v in plain.items():
        row: dict = {"arm": arm, "units": v.seeds}
        for key, c in (("stalled", v.stalled), ("below_ceiling", v.below_ceiling),
                       ("entropy_collapsed", v.entropy_collapsed), ("improved", v.improved)):
            row[f"{key}_value"], row[f"{key}_held"] = (c.value, c.held) if c is not None else (None, None)
        row["plateau"] = v.held
        rows.append(row)
    return pd.DataFrame(rows)


def setting_by_rule(plain: dict[str, PlateauVerdict], criteria: PlateauCriteria | None = None) -> str | None:
    """The setting a testbed keeps (docs/method.md, "Premature convergence"): among the plain arms whose
    plateau test holds, the smallest last-quarter change; if none holds, the most criteria held, then
    the smallest change. Under the divergence guard (``criteria.improved_on_start``, the default) an arm
    that diverged (`PlateauVerdict.diverged`) is never kept. None without arms, or when every arm diverged."""
    guard = (criteria if criteria is not None else PlateauCriteria()).improved_on_start
    def key(item):
        arm, v = item
        held = sum(bool(c.held) for c in v.criteria)
        change = v.stalled.value if v.stalled.value is not None and math.isfinite(v.stalled.value) else math.inf
        return (not v.held, -held, change, arm)
    eligible = {a: v for a, v in plain.items() if not (guard and v.diverged)}
    return min(eligible.items(), key=key)[0] if eligible else None


def plateau(by_arm: dict[str, list[Run]], info: dict[str, tuple[str, str]], benchmark: str | None,
            ceiling: Ceiling, criteria: PlateauCriteria | None = None) -> Plateau:
    """The plateau analysis of a report against ``ceiling`` (`reachable_ceiling`) by ``criteria``
    (None: the declared defaults): the test of the arm whose (baseline, variant) is `PLATEAU_ARM` on
    ``benchmark`` (`eval_benchmark`), and the test of every plain arm (variant "base")."""
    c = criteria if criteria is not None else PlateauCriteria()
    arm = next((a for a in sorted(by_arm) if info[a] == PLATEAU_ARM), None)
    if benchmark is None:
        return Plateau(arm, benchmark, ceiling, None, pd.DataFrame(), pd.DataFrame(), thresholds=c)
    plain = {a: plateau_of_arm(by_arm[a], benchmark, ceiling.value, c)
             for a in sorted(by_arm) if info[a][1] == PLATEAU_ARM[1]}
    if arm is None:
        return Plateau(arm, benchmark, ceiling, None, pd.DataFrame(), pd.DataFrame(), plain, c)
    v = plain[arm]
    return Plateau(arm, benchmark, ceiling, v, criteria_table(arm, v, c), units_table(v, ceiling.value, c), plain, c)
