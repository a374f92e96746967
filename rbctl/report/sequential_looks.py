"""Interim calls of a sequential design: each look's decisions, recorded so that a resumed sweep or a
later report never decides an earlier look again (docs/method.md, "Sequential designs").

A design (`Design`: the units at each look, the spending function, futility on or off) covers every
declared family. At look k each comparison not yet decided is tested on the paired Δ of the units of
looks 1..k (Δ in points, the unit of the family's margin and MDE):
- **higher / lower**: the paired t statistic T = Δ̄/(sd/√n) crosses its two-sided boundary |T| ≥ b_k
  (`rbctl.report.sequential.efficacy_bounds` at the comparison's current level, as a t-boundary by
  `t_bound`), by the sign of Δ̄;
- **equivalent** (families with a margin δ): both one-sided TOST statistics cross their one-sided
  boundary e_k at this look, (Δ̄ + δ)/se ≥ e_k and (Δ̄ − δ)/se ≤ −e_k, i.e. |Δ̄| ≤ δ − e_k·se;
- **futile** (with `futility`, looks before the last): |T| < a_k, the non-binding β-spending bound under
  the family's MDE and planning SD (`futility_bounds`), and, in a family with a margin, |Δ̄| ≥ δ (an
  estimate within the margin can still become an equivalence);
- **inconclusive**: none of these by the last look; **continue**: none yet.

Multiplicity: each family's superiority hypotheses form one graphical Holm procedure for
group-sequential tests (Maurer and Bretz 2013, "Multiple testing in group sequential trials using
graphical approaches", with Holm's graph: equal weights, a rejected hypothesis's level passed on
equally), and its equivalence hypotheses another. With r of the family's m hypotheses not yet
rejected, each is tested at α/r, its boundaries computed by the spending function at α/r from its
first look (each side spending α/(2r) for superiority; each one-sided TOST test at α/r). A rejection
at a look re-tests the others at that look with the raised level. A comparison stopped as equivalent,
futile or inconclusive keeps its share (only a rejection frees α). Each procedure holds its family's
error at α, so the two together at 2α, as the fixed design's separate adjustment (docs/method.md,
"Comparing arms"). The simulation in tests/unit/test_sequential_sim.py checks both.

Everything here is a pure function of the design, the families, the earlier look records and the
Δ values: the sweep's launcher and the manifest report call the same ones.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Mapping, Optional, Protocol, Sequence

import numpy as np

from rbctl.report.sequential import SPENDING, efficacy_bounds, futility_bounds, t_bound

HIGHER, LOWER, EQUIVALENT, FUTILE, INCONCLUSIVE, CONTINUE = (
    "higher", "lower", "equivalent", "futile", "inconclusive", "continue")
DECIDED = (HIGHER, LOWER, EQUIVALENT, FUTILE, INCONCLUSIVE)  # the comparison runs no more units
MIN_LOOK_UNITS = 3  # a paired t-test needs 3 units (rbctl.report.stats.MIN_UNITS): the first look's least

Key = tuple[str, str, str]  # (family, arm, reference)


class FamilyLike(Protocol):
    """What a design reads of a declared family (`rbctl.config.sweep.FamilySpec`)."""

    name: str
    pairs: Sequence[tuple[str, str]]
    alpha: float
    margin: Optional[float]
    mde: float
    planning_sd: float


@dataclass(frozen=True)
class Design:
    """A sequential design: ``looks`` the units at each look (increasing; the last is the design's
    units), ``spending`` the α-spending function, ``futility`` whether to stop for futility."""

    looks: tuple[int, ...]
    spending: str = "obrien_fleming"
    futility: bool = False

    def __post_init__(self):
        looks = tuple(int(n) for n in self.looks)
        object.__setattr__(self, "looks", looks)
        if not looks or looks[0] < MIN_LOOK_UNITS or any(b <= a for a, b in zip(looks, looks[1:])):
            raise ValueError(f"looks must increase from at least {MIN_LOOK_UNITS} units, got {list(looks)}")
        if self.spending not in SPENDING:
            raise ValueError(f"spending must be one of {', '.join(SPENDING)}, got '{self.spending}'")

    @property
    def units(self) -> int:
        return self.looks[-1]

    @classmethod
    def of(cls, cfg) -> "Design":
        """From a config section (or dict) with looks, spending and futility."""
        get = cfg.get if isinstance(cfg, Mapping) else lambda k, d=None: getattr(cfg, k, d)
        return cls(tuple(get("looks")), get("spending", "obrien_fleming"), bool(get("futility", False)))


@dataclass(frozen=True)
class Bounds:
    """One comparison's boundaries at one look, on the paired t statistic (and the z they come from)."""

    level: float  # two-sided superiority level α/r
    z: float  # |Z| ≥ z rejects Δ = 0
    t: float  # |T| ≥ t rejects Δ = 0 (NEVER: no rejection possible at this look)
    equivalence_level: Optional[float] = None  # each one-sided TOST test's level α/r; None: no margin
    equivalence_t: Optional[float] = None  # both TOST statistics beyond ±this: equivalent
    futility_t: Optional[float] = None  # |T| < this: futile; None: no futility at this look


def bounds_at(design: Design, family: FamilyLike, ns: Sequence[int], rejected: int = 0,
              rejected_equivalent: int = 0) -> Bounds:
    """The boundaries of a comparison of ``family`` at its look len(ns), ``ns`` its units at each of its
    looks so far; ``rejected`` (``rejected_equivalent``): the family's superiority (equivalence)
    hypotheses rejected before, which raise the level to α/(m − rejected) (graphical Holm)."""
    m, k = len(family.pairs), len(ns)
    fractions = [n / design.units for n in ns]
    final = k == len(design.looks)
    level = family.alpha / max(1, m - rejected)  # all rejected: nothing is left to test at any level
    z = efficacy_bounds(fractions, level / 2, design.spending, final=final)[-1]
    out = dict(level=level, z=z, t=t_bound(z, ns[-1]))
    if family.margin is not None:
        level_e = family.alpha / max(1, m - rejected_equivalent)
        e = efficacy_bounds(fractions, level_e, design.spending, two_sided=False, final=final)[-1]
        out.update(equivalence_level=level_e, equivalence_t=t_bound(e, ns[-1]))
    if design.futility and not final:
        # β is spent over the looks taken and those still planned (the design's power needs them all)
        planned = fractions + [n / design.units for n in design.looks[k:] if n / design.units > fractions[-1]]
        theta = family.mde / family.planning_sd * math.sqrt(design.units)
        a = futility_bounds(planned, family.alpha / m / 2, design.spending, theta)[k - 1]
        out.update(futility_t=t_bound(a, ns[-1]))
    return Bounds(**out)


@dataclass(frozen=True)
class ComparisonLook:
    """One comparison at one look: its data, boundaries and decision."""

    family: str
    arm: str
    reference: str
    n: int  # units used
    mean: float  # Δ̄, points
    sd: float  # sd(Δ), points
    t: float  # Δ̄ / (sd/√n); NaN: not testable (sd 0)
    bounds: Bounds
    decision: str
    equivalent: bool = False  # TOST rejected at this look (the decision, or "within ±δ" of a higher/lower)
    crossed: str = ""  # the boundary crossed, in words ("" for continue)

    @property
    def key(self) -> Key:
        return (self.family, self.arm, self.reference)


@dataclass(frozen=True)
class LookRecord:
    """A look: its number (1-based), the design's units there, when it was taken, and each comparison
    undecided before it. Stored as JSON (`to_json`) in the sweep's state and log."""

    look: int
    units: int
    time: str
    comparisons: tuple[ComparisonLook, ...] = field(default_factory=tuple)

    def to_json(self) -> dict:
        """Strict JSON: an infinite boundary or a NaN statistic as the string "inf", "-inf" or "nan"."""
        return _strict(asdict(self))

    @classmethod
    def from_json(cls, d: Mapping) -> "LookRecord":
        d = _loose(d)
        comps = tuple(ComparisonLook(**{**c, "bounds": Bounds(**c["bounds"])}) for c in d["comparisons"])
        return cls(int(d["look"]), int(d["units"]), str(d["time"]), comps)


def _strict(v):
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)  # 'inf', '-inf', 'nan'
    if isinstance(v, dict):
        return {k: _strict(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_strict(x) for x in v]
    return v


_NUMBERS = {"mean", "sd", "t", "level", "z", "equivalence_level", "equivalence_t", "futility_t"}


def _loose(v, key: str = ""):
    """`_strict` undone: only numeric fields are read back as numbers (an arm may be named 'nan')."""
    if key in _NUMBERS and isinstance(v, str):
        return float(v)
    if isinstance(v, dict):
        return {k: _loose(x, k) for k, x in v.items()}
    if isinstance(v, list):
        return [_loose(x) for x in v]
    return v


@dataclass(frozen=True)
class Status:
    """Where a comparison stands after the looks so far: its decision (`CONTINUE` when undecided), the
    look that decided it (None), its units then, and that look's entry."""

    decision: str
    look: Optional[int]
    n: int
    entry: Optional[ComparisonLook]


def keys(families: Sequence[FamilyLike]) -> list[Key]:
    return [(f.name, a, r) for f in families for a, r in f.pairs]


def status(families: Sequence[FamilyLike], history: Sequence[LookRecord]) -> dict[Key, Status]:
    """Each comparison's standing after ``history`` (the look records in order)."""
    out = {k: Status(CONTINUE, None, 0, None) for k in keys(families)}
    for rec in history:
        for c in rec.comparisons:
            if out.get(c.key, Status(CONTINUE, None, 0, None)).decision == CONTINUE:
                out[c.key] = Status(c.decision, rec.look if c.decision != CONTINUE else None, c.n, c)
    return out


def _rejections(history: Sequence[LookRecord], family: str) -> tuple[int, int]:
    sup = sum(c.decision in (HIGHER, LOWER) for r in history for c in r.comparisons if c.family == family)
    eq = sum(c.equivalent for r in history for c in r.comparisons if c.family == family)
    return sup, eq


def _summary(values: Sequence[float]) -> tuple[int, float, float, float]:
    v = np.asarray(values, dtype=float)
    if len(v) < MIN_LOOK_UNITS or not np.all(np.isfinite(v)):
        raise ValueError(f"a look needs at least {MIN_LOOK_UNITS} finite Δ values, got {list(values)}")
    mean, sd = float(v.mean()), float(v.std(ddof=1))
    zero = sd <= 1e-12 * max(1.0, float(np.abs(v).max()))  # rbctl.report.stats.ZERO_SD: equal Δs
    return len(v), mean, sd, (math.nan if zero else mean / (sd / math.sqrt(len(v))))


def _family_look(design: Design, family: FamilyLike, history: Sequence[LookRecord], k: int,
                 data: dict[Key, tuple[int, float, float, float]]) -> list[ComparisonLook]:
    """One family's decisions at look k over its undecided comparisons ``data`` (n, mean, sd, t)."""
    past = {key: [c.n for r in history for c in r.comparisons if c.key == key] for key in data}
    sup, eq = _rejections(history, family.name)
    rej_s, rej_e, held_s, held_e = set(), set(), {}, {}  # each comparison's boundaries when it was rejected
    while True:  # Holm: re-test the others at the raised level until none crosses
        bounds = {key: bounds_at(design, family, past[key] + [n], sup + len(rej_s), eq + len(rej_e))
                  for key, (n, _, _, _) in data.items()}
        new_s = {key for key, (n, m, sd, t) in data.items() if key not in rej_s and abs(t) >= bounds[key].t}
        new_e = {key for key, (n, m, sd, t) in data.items() if key not in rej_e and
                 _equivalent(m, sd, n, family.margin, bounds[key].equivalence_t)}
        if not new_s and not new_e:
            break
        held_s.update({key: bounds[key] for key in new_s})
        held_e.update({key: bounds[key] for key in new_e})
        rej_s |= new_s
        rej_e |= new_e
    final = k == len(design.looks)
    out = []
    for key in data:
        b = held_s.get(key, bounds[key])
        if key in held_e:  # the equivalence boundary it crossed, which a later Holm step may have lowered
            b = replace(b, equivalence_level=held_e[key].equivalence_level, equivalence_t=held_e[key].equivalence_t)
        out.append(_entry(key, data[key], b, key in rej_s, key in rej_e, family.margin, final))
    return out


def _equivalent(mean: float, sd: float, n: int, margin: Optional[float], e: Optional[float]) -> bool:
    if margin is None or e is None or not math.isfinite(e) or not sd > 0:
        return False
    return abs(mean) <= margin - e * sd / math.sqrt(n)


def _entry(key: Key, d, b: Bounds, sup: bool, eq: bool, margin, final: bool) -> ComparisonLook:
    n, mean, sd, t = d
    within = f" (within ±{margin:g})" if sup and eq else ""
    if sup:
        decision = HIGHER if mean > 0 else LOWER
        crossed = f"superiority at α = {b.level:.4g}: |t| = {abs(t):.2f} ≥ {b.t:.2f}{within}"
    elif eq:
        decision = EQUIVALENT
        crossed = (f"equivalence at α = {b.equivalence_level:.4g}: |Δ̄| = {abs(mean):.2f} ≤ ±{margin:g} − "
                   f"{b.equivalence_t:.2f}·se = {margin - b.equivalence_t * sd / math.sqrt(n):.2f}")
    elif (b.futility_t is not None and math.isfinite(t) and abs(t) < b.futility_t
          and (margin is None or abs(mean) >= margin)):
        decision, crossed = FUTILE, f"futility: |t| = {abs(t):.2f} < {b.futility_t:.2f}"
    else:
        decision, crossed = (INCONCLUSIVE if final else CONTINUE), ""
    return ComparisonLook(*key, n=n, mean=mean, sd=sd, t=t, bounds=b, decision=decision, equivalent=eq,
                          crossed=crossed)


def decide_look(design: Design, families: Sequence[FamilyLike], history: Sequence[LookRecord],
                deltas: Mapping[Key, Sequence[float]], time: str = "", scale: float = 1.0) -> LookRecord:
    """The next look (number len(history) + 1): every comparison undecided after ``history`` is tested
    on ``deltas[(family, arm, reference)]``, its per-unit Δ over the units of looks 1..k (Δ × ``scale``
    in points: 100 for fractions). The earlier records are read, never changed: a resumed sweep passes
    them back and gets the same next look. ``time`` is stored as given (UTC, ISO 8601)."""
    k = len(history) + 1
    if k > len(design.looks):
        raise ValueError(f"the design has {len(design.looks)} looks; all have been taken")
    st = status(families, history)
    open_ = {key for key, s in st.items() if s.decision == CONTINUE}
    entries = []
    for fam in families:
        data = {}
        for a, r in fam.pairs:
            key = (fam.name, a, r)
            if key not in open_:
                continue
            if key not in deltas:
                raise ValueError(f"look {k}: no Δ for {a} − {r} in family '{fam.name}'")
            data[key] = _summary([scale * x for x in deltas[key]])
            if not st[key].n < data[key][0] <= design.units:
                raise ValueError(f"look {k}: {a} − {r} in family '{fam.name}' has {data[key][0]} units; a look needs "
                                 f"more than its previous look's {st[key].n} and at most the design's {design.units}")
        entries += _family_look(design, fam, history, k, data)
    return LookRecord(k, design.looks[k - 1], time, tuple(entries))


def arm_units(design: Design, families: Sequence[FamilyLike], history: Sequence[LookRecord],
              arms: Sequence[str]) -> dict[str, int]:
    """The units each arm runs under the design after ``history``: those of the look that decided the
    last of its comparisons; the design's units while any of them is undecided. An arm in no
    comparison runs with the sweep: to the look that decided the last comparison of all. The runs
    saved against the fixed design: design.units × len(arms) − their sum."""
    st = status(families, history)
    every = max(s.n for s in st.values()) if st and all(s.decision != CONTINUE for s in st.values()) else design.units
    out = {}
    for arm in arms:
        mine = [s for (_, a, r), s in st.items() if arm in (a, r)]
        done = mine and all(s.decision != CONTINUE for s in mine)
        out[arm] = max(s.n for s in mine) if done else design.units if mine else every
    return out


def needed_arms(families: Sequence[FamilyLike], history: Sequence[LookRecord]) -> set[str]:
    """The arms some undecided comparison still needs runs of."""
    return {arm for (fam, a, r), s in status(families, history).items() if s.decision == CONTINUE for arm in (a, r)}


def next_units(design: Design, families: Sequence[FamilyLike], history: Sequence[LookRecord],
               order: Sequence) -> list:
    """The units to run for the next look (``order``: the design's units in the order they are run,
    e.g. seeds); [] when every comparison is decided or every look taken."""
    k = len(history)
    if k >= len(design.looks) or not needed_arms(families, history):
        return []
    if len(order) < design.units:
        raise ValueError(f"the design needs {design.units} units; {len(order)} are named")
    return list(order[(design.looks[k - 1] if k else 0):design.looks[k]])


def unit_order(seeds: Sequence[int], warm_starts: Sequence[str] = ()) -> list[tuple[Optional[str], int]]:
    """The order a sequential design runs a sweep's (warm start, seed) units in: seed by seed, each
    seed's warm starts together, so that every look holds the warm starts equally (up to one seed)."""
    return [(ws, s) for s in seeds for ws in (list(warm_starts) or [None])]


def interim_note(n: int, units: int) -> Optional[str]:
    """Without a sequential design a call needs all of its design's units: None when ``n`` ≥ ``units``,
    else the label a report prints instead of a call (reading a full-α call after every unit finds a
    false difference several times as often as α: tests/unit/test_sequential_sim.py)."""
    return None if n >= units else f"interim ({n} of {units} units): not a call"
