"""What a sequential design does, by simulation: the probability of each call, the units each
comparison uses and the runs a sweep saves against the fixed design (docs/method.md, "Sequential
designs"); and the design as `rbctl ablate --dry-run` prints it.

`simulate` runs the procedure of `rbctl.report.sequential_looks.decide_look` vectorised over trials
(numpy): per-unit Δ drawn N(effect, sd²) independently per comparison, paired t statistics at the
planned looks, each family's graphical Holm over superiority and over equivalence, non-binding
futility. tests/unit/test_sequential_sim.py checks that it decides as `decide_look` does, trial by
trial. Comparisons that share an arm are correlated in a real sweep; Holm's error bound holds under
any dependence, and the runs figures here take them as independent (said where printed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from rbctl.report.sequential_looks import (CONTINUE, DECIDED, EQUIVALENT, FUTILE, HIGHER, INCONCLUSIVE, LOWER,
                                           Design, FamilyLike, Key, bounds_at, keys)

CODES = (CONTINUE,) + DECIDED  # a decision's code is its index here
_C = {name: i for i, name in enumerate(CODES)}


@dataclass(frozen=True)
class Simulated:
    """``decision[trial, c]`` (an index into `CODES`) and ``units[trial, c]`` (units when decided, the
    last look's otherwise) of each comparison ``keys[c]``."""

    keys: tuple[Key, ...]
    decision: np.ndarray
    units: np.ndarray

    def share(self, *names: str, comparisons: Sequence[int] | None = None) -> float:
        """The share of trials in which any of the comparisons (all by default) got one of ``names``."""
        cols = list(range(len(self.keys))) if comparisons is None else list(comparisons)
        hit = np.isin(self.decision[:, cols], [_C[n] for n in names])
        return float(hit.any(axis=1).mean())

    def rate(self, c: int, *names: str) -> float:
        """The share of trials in which comparison ``c`` got one of ``names``."""
        return float(np.isin(self.decision[:, c], [_C[n] for n in names]).mean())

    def runs(self, arms: Sequence[str], units: int) -> np.ndarray:
        """Runs per trial of a sweep over ``arms``: each arm runs the units of the last of its
        comparisons to be decided; an arm in no comparison runs with the sweep, to the last decision
        of all (`rbctl.report.sequential_looks.arm_units`); ``units``: the design's, without comparisons."""
        out = np.zeros(len(self.units))
        every = self.units.max(axis=1) if self.keys else np.full(len(self.units), units)
        for arm in arms:
            cols = [i for i, (_, a, r) in enumerate(self.keys) if arm in (a, r)]
            out += self.units[:, cols].max(axis=1) if cols else every
        return out


def _tables(design: Design, fam: FamilyLike) -> dict[str, np.ndarray]:
    """The family's t-boundaries at the planned looks: [rejected so far, look] for superiority and
    equivalence (inf where none), [look] for futility (0 where none)."""
    m, k = len(fam.pairs), len(design.looks)
    sup, eq, fut = np.full((m, k), np.inf), np.full((m, k), np.inf), np.zeros(k)
    for r in range(m):
        for j in range(k):
            b = bounds_at(design, fam, design.looks[:j + 1], r, r)
            sup[r, j] = b.t
            eq[r, j] = b.equivalence_t if b.equivalence_t is not None else np.inf
            if r == 0 and b.futility_t is not None:
                fut[j] = b.futility_t
    return {"sup": sup, "eq": eq, "fut": fut}


def decide_trials(design: Design, fam: FamilyLike, delta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`decide_look` at every planned look, vectorised: ``delta[trial, comparison, unit]`` (points, the
    family's pairs in order, the design's units in run order) -> decision codes and units [trial, m]."""
    trials, m, _ = delta.shape
    looks, tab = design.looks, _tables(design, fam)
    decision = np.zeros((trials, m), dtype=int)
    units = np.full((trials, m), looks[-1])
    rej_s, rej_e = np.zeros(trials, dtype=int), np.zeros(trials, dtype=int)
    margin = fam.margin
    for j, n in enumerate(looks):
        x = delta[:, :, :n]
        mean, sd = x.mean(axis=2), x.std(axis=2, ddof=1)
        se = sd / math.sqrt(n)
        t = mean / se
        open_ = decision == _C[CONTINUE]
        sup_now, eq_now = np.zeros_like(open_), np.zeros_like(open_)
        for _ in range(m + 1):  # Holm: re-test at the raised level until nothing crosses
            b = tab["sup"][np.minimum(rej_s, m - 1), j][:, None]
            new_s = open_ & ~sup_now & (np.abs(t) >= b)
            new_e = np.zeros_like(new_s)
            if margin is not None:
                e = tab["eq"][np.minimum(rej_e, m - 1), j][:, None]
                new_e = open_ & ~eq_now & (np.abs(mean) <= margin - e * se)
            if not (new_s.any() or new_e.any()):
                break
            sup_now |= new_s
            eq_now |= new_e
            rej_s += new_s.sum(axis=1)
            rej_e += new_e.sum(axis=1)
        futile = open_ & ~sup_now & ~eq_now & (np.abs(t) < tab["fut"][j])
        if margin is not None:
            futile &= np.abs(mean) >= margin
        last = j == len(looks) - 1
        decided = np.where(sup_now, np.where(mean > 0, _C[HIGHER], _C[LOWER]),
                           np.where(eq_now, _C[EQUIVALENT], np.where(futile, _C[FUTILE],
                                                                     _C[INCONCLUSIVE] if last else _C[CONTINUE])))
        decision = np.where(open_, decided, decision)
        units = np.where(open_ & (decided != _C[CONTINUE]), n, units)
    return decision, units


def simulate(design: Design, families: Sequence[FamilyLike], effects: Mapping[Key, float],
             sds: Mapping[Key, float], trials: int = 2000, seed: int = 0) -> Simulated:
    """``trials`` simulated runs of the design over every comparison of ``families`` (true mean Δ
    ``effects[key]`` and per-unit SD ``sds[key]``, in points), the comparisons independent."""
    rng = np.random.default_rng(seed)
    decisions, units = [], []
    for fam in families:
        ks = [(fam.name, a, r) for a, r in fam.pairs]
        mu, sd = (np.array([v[k] for k in ks], dtype=float)[None, :, None] for v in (effects, sds))
        d, u = decide_trials(design, fam, rng.normal(mu, sd, size=(trials, len(ks), design.units)))
        decisions.append(d)
        units.append(u)
    return Simulated(tuple(keys(families)), np.concatenate(decisions, axis=1), np.concatenate(units, axis=1))


def characteristics(design: Design, families: Sequence[FamilyLike], arms: Sequence[str], planned: bool,
                    trials: int = 2000, seed: int = 0) -> dict:
    """What the design does at the planned effect (``planned``: Δ = each family's MDE in every
    comparison) or at Δ = 0, sd(Δ) = the planning SD, comparisons independent: the mean ``runs`` of a
    sweep over ``arms`` (against ``fixed_runs``), the mean ``units`` per comparison, the share of
    sweeps with any false ``higher``/``lower`` (at Δ = 0), and each call's rate per comparison."""
    effects = {(f.name, a, r): (f.mde if planned else 0.0) for f in families for a, r in f.pairs}
    sds = {(f.name, a, r): f.planning_sd for f in families for a, r in f.pairs}
    sim = simulate(design, families, effects, sds, trials=trials, seed=seed)
    return {"runs": float(sim.runs(arms, design.units).mean()), "fixed_runs": design.units * len(arms),
            "units": float(sim.units.mean()), "any_difference": sim.share(HIGHER, LOWER),
            "calls": {name: float((sim.decision == _C[name]).mean()) for name in DECIDED}}


def _cell(design: Design, fam: FamilyLike, j: int, rejected: int) -> str:
    b = bounds_at(design, fam, design.looks[:j + 1], rejected, rejected)
    return "never" if not math.isfinite(b.t) else f"{b.t:.2f} ({b.z:.2f})"


def boundary_lines(design: Design, fam: FamilyLike) -> list[str]:
    """The family's boundaries per look, on |t| with the z they come from, at each Holm level."""
    m = len(fam.pairs)
    head = "  look units" + "".join(f"  |t| at α/{m - r}".ljust(16) for r in range(m))
    if fam.margin is not None:
        head += "  TOST at α/" + str(m)
    if design.futility:
        head += "  futility |t| <"
    out = [head]
    for j, n in enumerate(design.looks):
        row = f"  {j + 1:>4} {n:>5}" + "".join(f"  {_cell(design, fam, j, r):<14}" for r in range(m))
        b = bounds_at(design, fam, design.looks[:j + 1])
        if fam.margin is not None:
            e = b.equivalence_t
            row += f"  {'never' if not math.isfinite(e) else f'{e:.2f}':<13}"
        if design.futility:
            row += f"  {b.futility_t:.2f}" if b.futility_t is not None else "  -"
        out.append(row)
    return out


def design_lines(design: Design, families: Sequence[FamilyLike], arms: Sequence[str], trials: int = 2000,
                 seed: int = 0) -> list[str]:
    """The design as `rbctl ablate --dry-run` prints it: the looks, each family's boundaries, and the
    expected runs at the planned effect (Δ = each family's MDE) and at Δ = 0, against the fixed design's."""
    spend = {"obrien_fleming": "O'Brien–Fleming-type", "pocock": "Pocock-type"}[design.spending]
    out = [f"sequential    looks at {', '.join(map(str, design.looks))} units; {spend} α-spending "
           f"(Lan–DeMets); futility {'stop, non-binding' if design.futility else 'off'}; each family's calls "
           f"by graphical Holm (superiority and equivalence each at the family's α)"]
    for fam in families:
        out.append(f"              {fam.name}: boundaries on the paired |t| (z), by the family's hypotheses "
                   f"not yet rejected")
        out += ["              " + line for line in boundary_lines(design, fam)]
    fixed = design.units * len(arms)
    out.append(f"              expected runs ({trials} simulated sweeps, comparisons independent, sd(Δ) = "
               f"planning SD), fixed design {fixed} ({design.units} units × {len(arms)} arms):")
    for planned in (True, False):
        c = characteristics(design, families, arms, planned, trials, seed)
        calls = ", ".join(f"{name} {share:.2f}" for name, share in c["calls"].items())
        what = "the planned effect (Δ = each family's MDE)" if planned else "Δ = 0 everywhere"
        out.append(f"                at {what}: {c['runs']:.1f} runs ({c['runs'] / fixed:.0%}), {c['units']:.1f} units "
                   f"per comparison; calls per comparison: {calls}")
    return out

