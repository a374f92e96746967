"""No full-α call from part of a design (docs/method.md, "Sequential designs"): the calls a report
makes when its runs are fewer than their design's units, or when a sequential design decides them.

A report's runs come from one sweep directory or runs manifest (`DesignSource`), which states the
design's units (seeds × warm starts, or the units a manifest's ``runs`` name) and, optionally, a
sequential design (``design:``). Then each member of a declared family (or of the stated pairs'
one family) gets its call here (`Interim.attach`, through `Comparison.sequential`):

- **with a sequential design**: the call of the look that decided it, with that look's number, units
  and boundary; undecided, "interim: not decided at look k of K", never higher, lower or
  equivalent. The looks are those the sweep recorded in its state (`rbctl ablate` takes them while
  it runs) and, after them, each look whose units every undecided comparison has (a runs manifest's
  looks are all taken here, from its runs): `decide_look` on the earlier records, so a look once
  taken is never decided again;
- **without one**: a comparison with fewer units than the design's is "interim (k of n units): not a
  call" (`rbctl.report.sequential_looks.interim_note`), its estimate and interval shown as always.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from rbctl.config.base import validate
from rbctl.config.sweep import Comparisons, FamilySpec, SequentialDesign, SweepConfig
from rbctl.report import sources
from rbctl.report.sequential_looks import (CONTINUE, EQUIVALENT, FUTILE, HIGHER, INCONCLUSIVE, LOWER, Design, Key,
                                           LookRecord, Status, arm_units, decide_look, interim_note, needed_arms, status,
                                           unit_order)
from rbctl.store import read

INTERIM = "interim"  # the call word of a comparison that is not decided (yet): no call
NO_TEST = "no test: interim"  # what decided an interim label without a sequential design: nothing
Unit = tuple[str, int]  # a report's unit: (warm start or "", seed)


@dataclass(frozen=True)
class SequentialCall:
    """What `rbctl.report.analyses.comparisons.call` and `call_text` print for a comparison: ``word``
    (higher, lower, equivalent, inconclusive, or `INTERIM`) and ``text`` (the row's call cell); and
    ``test``, what decided the call (or withheld it) where a table prints the deciding test: the
    look's |t| against its boundary ("look 1: |t| 4.67 ≥ 4.58"), or that no test did ("no test:
    interim"). Never a fixed-design p: a Holm p over the units at hand decides nothing here."""

    word: str
    text: str
    test: str


@dataclass(frozen=True)
class DesignSource:
    """What one sweep directory or runs manifest states of its design: its units in run order, the
    sequential design (None: a fixed design) and the looks its state records."""

    path: Path
    order: tuple[Unit, ...]
    design: Optional[Design]
    recorded: tuple[LookRecord, ...] = ()

    @property
    def units(self) -> int:
        return len(self.order)


def look_test(k: int, e, margin: Optional[float] = None) -> str:
    """What look ``k`` found of a comparison (its `ComparisonLook` ``e``; ``margin``: its family's,
    points), as a table's cell: the boundary it crossed (|t| for superiority; for equivalence |Δ̄|
    within the margin less the TOST bound's multiple of its standard error; |t| below the futility
    bound), else its |t| short of the superiority boundary."""
    b = e.bounds
    if e.decision in (HIGHER, LOWER):
        return f"look {k}: |t| {abs(e.t):.2f} ≥ {b.t:.2f}"
    if e.decision == EQUIVALENT and margin is not None:
        return f"look {k}: TOST, |Δ̄| {abs(e.mean):.2f} ≤ {margin - b.equivalence_t * e.sd / math.sqrt(e.n):.2f}"
    if e.decision == FUTILE:
        return f"look {k}: |t| {abs(e.t):.2f} < futility {b.futility_t:.2f}"
    return f"look {k}: |t| {abs(e.t):.2f} < {b.t:.2f}" if math.isfinite(e.t) else f"look {k}: not testable"


def _report_units(units) -> tuple[Unit, ...]:
    return tuple((ws or "", int(s)) for ws, s in units)


def design_source(path: Path) -> Optional[DesignSource]:
    """The design a sweep directory's recorded sweep file, or a runs manifest, states; None for a
    directory without one (runs given on their own)."""
    path = Path(path)
    if sources.is_manifest(path):
        m = sources.read_manifest(path)
        return DesignSource(path, _report_units(m.units()), Design.of(m.design) if m.design else None)
    data = read.read_sweep_file(path)
    if not data:
        return None
    seeds, warm = list(data.get("seeds") or [0]), list(data.get("warm_starts") or [])
    order = _report_units(unit_order(seeds, warm))
    if not data.get("design"):
        return DesignSource(path, order, None)
    design = validate(SequentialDesign, data["design"], f"{path} design")
    saved = read.read_sweep_looks(path)
    recorded = ()
    if saved and saved["design"] == design.model_dump(mode="json"):  # looks of another design are not this one's
        recorded = tuple(LookRecord.from_json(r) for r in saved["looks"])
    return DesignSource(path, order, Design.of(design), recorded)


def design_of_sweep(sweep: SweepConfig) -> tuple[Optional[Design], list[FamilySpec], list]:
    """A sweep file's sequential design, its declared families and its units in the order the design
    runs them ((warm start or None, seed): `unit_order`)."""
    design = Design.of(sweep.design) if sweep.design is not None else None
    families = sweep.comparisons.families_declared() if sweep.comparisons is not None else []
    return design, families, unit_order(sweep.seeds, sweep.warm_starts)


def replay(design: Design, families: Sequence[FamilySpec], recorded: Sequence[LookRecord],
           deltas: dict[Key, dict[Unit, float]], order: Sequence[Unit]) -> list[LookRecord]:
    """``recorded`` and, after it, every look whose units (the first n_k of ``order``) each comparison
    undecided before it has: `decide_look` on ``deltas[key][unit]`` (fractions), time "" (taken by
    the report, not recorded). Stops at the first look some comparison lacks a unit of."""
    history = list(recorded)
    while len(history) < len(design.looks):
        upto = order[:design.looks[len(history)]]
        open_ = [k for k, s in status(families, history).items() if s.decision == CONTINUE]
        if not open_ or any(u not in deltas.get(k, {}) for k in open_ for u in upto):
            break
        history.append(decide_look(design, families, history, {k: [deltas[k][u] for u in upto] for k in open_},
                                   scale=100.0))
    return history


@dataclass
class Interim:
    """A report's design (`DesignSource`, or the sum of several sources' units without a design) and,
    once `attach` ran, its looks."""

    source: Optional[DesignSource]  # None: several sources (their units add up; no sequential design)
    units: int
    families: list[FamilySpec] = field(default_factory=list)
    history: list[LookRecord] = field(default_factory=list)
    arms: list[str] = field(default_factory=list)
    interim: list[str] = field(default_factory=list)  # comparisons labelled interim without a design

    @property
    def design(self) -> Optional[Design]:
        return self.source.design if self.source is not None else None

    def attach(self, comps: list) -> None:
        """Give each called comparison of ``comps`` (a declared family's member, or the stated pairs'
        when no family is declared) its call under the design (`SequentialCall`), and its
        ``significant``/``equivalent`` flags to match."""
        members = [c for c in comps if c.family != "exploratory" and not c.same_config]
        if self.design is None:
            for c in members:
                note = interim_note(c.delta.n, self.units)
                if note is not None and c.delta.testable:
                    c.sequential, c.significant, c.equivalent = SequentialCall(INTERIM, note, NO_TEST), False, False
                    self.interim.append(c.label)
            return
        deltas = {(c.family, c.arm, c.ref): dict(zip(c.delta.units, c.delta.deltas)) for c in members}
        self.history = replay(self.design, self.families, self.source.recorded, deltas, self.source.order)
        st = status(self.families, self.history)
        for c in members:
            key = (c.family, c.arm, c.ref)
            s = st.get(key)
            if s is None or (s.decision == CONTINUE and not c.delta.testable):
                continue
            c.sequential = self.call(key, s, c.delta.n)
            c.significant = s.decision in (HIGHER, LOWER)
            c.equivalent = s.decision != CONTINUE and s.entry is not None and s.entry.equivalent

    def call(self, key: Key, s: Status, n: int) -> SequentialCall:
        """The call of comparison ``key`` standing at ``s`` (``n``: its units in the report)."""
        d, e = self.design, s.entry
        looks = len(d.looks)
        if s.decision == CONTINUE:
            last = next((c for c in self.history[-1].comparisons if c.key == key), None) if self.history else None
            if last is None:  # no look yet (or none that tested it)
                return SequentialCall(INTERIM, f"interim ({n} of {d.units} units): not a call; "
                                               f"{'next' if self.history else 'first'} look at "
                                               f"{d.looks[len(self.history)] if len(self.history) < looks else d.units} units",
                                      "no test: no look yet")
            k = len(self.history)
            return SequentialCall(INTERIM, f"interim: not decided at look {k} of {looks} ({last.n} units, |t| = "
                                           f"{abs(last.t):.2f} < {last.bounds.t:.2f}); next look at "
                                           f"{d.looks[k] if k < looks else d.units} units", look_test(k, last))
        where = f"at look {s.look} of {looks} ({e.n} units; {e.crossed})" if e.crossed else \
            f"at look {s.look} of {looks} ({e.n} units; no boundary crossed)"
        sign = "Δ > 0" if e.mean > 0 else "Δ < 0" if e.mean < 0 else "Δ = 0"
        margin = next((f.margin for f in self.families if f.name == e.family), None)
        test = look_test(s.look, e, margin)
        if s.decision in (HIGHER, LOWER):
            return SequentialCall(s.decision, f"{s.decision} {where}", test)
        if s.decision == EQUIVALENT:
            return SequentialCall(EQUIVALENT, f"equivalent within ±{margin:g} {where}", test)
        if s.decision == FUTILE:
            return SequentialCall(INCONCLUSIVE, f"inconclusive ({sign}): stopped for futility {where}", test)
        return SequentialCall(INCONCLUSIVE, f"inconclusive ({sign}) {where}", test)

    def status(self) -> dict[Key, Status]:
        return status(self.families, self.history)

    def decided(self) -> bool:
        return self.design is not None and not needed_arms(self.families, self.history)

    def runs(self) -> tuple[int, int]:
        """(runs under the design once every comparison is decided, or at most while some is not; the
        fixed design's runs), over the report's arms."""
        per_arm = arm_units(self.design, self.families, self.history, self.arms)
        return sum(per_arm.values()), self.design.units * len(self.arms)

    def next_units(self, have: dict[str, set]) -> tuple[int, dict[str, list[Unit]]]:
        """The next look's units (its number, and per arm that an undecided comparison needs, the
        units of looks 1..k it lacks; ``have[arm]``: the units it has); (0, {}) when all are decided."""
        need = needed_arms(self.families, self.history)
        k = len(self.history)
        if not need or k >= len(self.design.looks):
            return 0, {}
        upto = self.source.order[:self.design.looks[k]]
        return k + 1, {a: [u for u in upto if u not in have.get(a, set())] for a in self.arms if a in need}


def interim_for(dirs: Sequence[Path], spec: Optional[Comparisons], arms: Sequence[str]) -> Optional[Interim]:
    """The design of a report's sources (``dirs``: the sweep directories and runs manifests its runs
    come from): one source gives its own; several add their units up, without a sequential design;
    none (runs on their own) gives None."""
    found = [s for s in (design_source(Path(d)) for d in dict.fromkeys(dirs)) if s is not None]
    if not found:
        return None
    families = spec.families_declared() if spec is not None else []
    if len(found) == 1:
        return Interim(found[0], found[0].units, families, arms=list(arms))
    return Interim(None, sum(s.units for s in found), families, arms=list(arms))


def unit_text(units: Sequence[Unit]) -> str:
    """``seeds 6, 7, 8`` or ``ws_a/6, ws_b/6`` (a unit with a warm start)."""
    if all(not ws for ws, _ in units):
        return ("seed " if len(units) == 1 else "seeds ") + ", ".join(str(s) for _, s in units)
    return ", ".join(f"{ws}/{s}" if ws else str(s) for ws, s in units)


def mark_interim(pairs: Sequence[tuple]) -> None:
    """A study family's members (``(comparison, the sweep directory or manifest it reads)``) read from
    fewer units than their sweep's design: "interim (k of n units): not a call", as a report labels
    them (a study family is no family of the sweep's sequential design, so no look of it calls them)."""
    units: dict = {}
    for c, path in pairs:
        if path not in units:
            src = design_source(Path(path))
            units[path] = src.units if src is not None else None
        note = interim_note(c.delta.n, units[path]) if units[path] else None
        if note is not None and c.delta.testable and not c.same_config:
            c.sequential, c.significant, c.equivalent = SequentialCall(INTERIM, note, NO_TEST), False, False


SPENDING_WORDS = {"obrien_fleming": "O'Brien–Fleming-type", "pocock": "Pocock-type"}


def family_note(study, fam) -> str:
    """For a study's claims document: a sentence saying that a family's members were decided under
    their sweep's sequential design (its looks, and the runs it used against the fixed design's);
    "" when none was. ``study``: `rbctl.report.study.sweeps.Study`; ``fam``: its `FamilyResult`."""
    if not fam.spec.declared or not any(m.comparison.sequential is not None for m in fam.members):
        return ""
    parts = []
    for tb in study.named(fam.spec.sweeps):
        s = tb.data.sequential
        if s is None or s.design is None:
            continue
        used, fixed = s.runs()
        done = (f"{used} runs of the fixed design's {fixed}, {fixed - used} saved" if s.decided() else
                f"not every comparison decided after look {len(s.history)} of {len(s.design.looks)}")
        parts.append(f"`{tb.name}`: looks at {', '.join(map(str, s.design.looks))} units, "
                     f"{SPENDING_WORDS[s.design.spending]} α-spending; {done}")
    return ("Decided sequentially (" + "; ".join(parts) + "): each member's call is that of the look that decided it, "
            "with the look's units and the boundary it crossed, not a fixed-design test of every unit "
            "(docs/method.md, \"Sequential designs\").") if parts else ""

