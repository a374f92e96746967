"""The answer of a report in words, shared by its first screen (`rbctl.report.render.lead`), its
one-page summary (`rbctl.report.render.summary`) and the terminal (`rbctl.report.render.terminal`):
the question (the declared comparisons), each call with its Δ, interval and deciding p, the design
(units, power, margin, declaration), and what is missing, summarised by arm.

Every call is read off the comparisons as `rbctl.report.analyses.comparisons` made them (`call`,
`call_text`, `deciding_p`); nothing here decides one.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass

from rbctl.report.analyses.comparisons import (EQUIVALENT, HIGHER, INCONCLUSIVE, LOWER, PRINCIPAL, Comparison, call,
                                               call_text, deciding_p, reading_p)
from rbctl.report.data import ReportData, SweepData
from rbctl.report.render.tables import call_cell, delta, num, plural, pval
from rbctl.store.rundir import parse_run_key


@dataclass(frozen=True)
class CallRow:
    """One declared comparison as every summary prints it."""

    family: str
    comparison: str  # "arm − ref"
    metric: str
    benchmark: str
    units: int
    delta: str  # "+12.3 [+8.1, +16.5]" (points, 95% t-interval)
    p_name: str  # the p that decided the call: "Holm p" or "TOST Holm p"; "" where no p did (`deciding_test`)
    p: str  # "< 0.001", "0.012", "–"; with no p_name, the look's test ("look 1: |t| 4.67 ≥ 4.58") or "no test: interim"
    call: str  # as the comparison's row prints it ("higher", "inconclusive (Δ < 0; detectable ≥ 4.1 points)")
    sentence: str  # the call in plain words, with its evidence (Markdown)


def source_word(sw: SweepData) -> str:
    """What declared the comparisons, in the report's words: "the runs manifest" for imported runs,
    else "the sweep file"."""
    from rbctl.report.load import source_noun

    return f"the {source_noun(list(sw.runs)) or 'runs manifest'}"


def unit_word(sw: SweepData) -> str:
    return "(warm start, seed) pairs" if sw.warm_starts else "seeds"


def declared(data: ReportData) -> list[tuple[str, list[Comparison]]]:
    """The called families in reading order: (name, members): the principal one (or, with no
    declaration, the stated pairs as one family), then each further declared family."""
    out = [(data.verdict.comparisons[0].family if data.verdict.comparisons else PRINCIPAL, list(data.verdict.comparisons))]
    if data.sweep.spec is not None:
        out += [(name, data.comparisons.family(name)) for name in data.comparisons.further_families]
    return [(name, comps) for name, comps in out if comps]


def _gloss(c: Comparison) -> str:
    """The call word said as a sentence ("" for a call without one: not testable, an interim look...)."""
    word = call(c)
    if word == HIGHER:
        return f"{c.arm} scores higher than {c.ref}"
    if word == LOWER:
        return f"{c.arm} scores lower than {c.ref}"
    if word == EQUIVALENT:
        return f"{c.arm} and {c.ref} are equivalent within the margin"
    if word == INCONCLUSIVE:
        return f"these units do not separate {c.arm} from {c.ref}"
    return ""


def sequential(c: Comparison) -> bool:
    """Whether a sequential design's look made the call (or withheld it as interim): no fixed-design p
    decided it."""
    return c.sequential is not None and not c.same_config


def deciding_test(c: Comparison, missing: str = "–", word: str | None = None) -> str:
    """What decided the call, as printed beside it: "Holm p 0.012", "TOST Holm p 0.003" (`deciding_p`;
    `reading_p` of the call a rule reads, ``word``; ``missing`` for the p where no test ran), or, where
    a sequential design's look made the call or withheld it, the look's |t| against its boundary
    ("look 1: |t| 4.67 ≥ 4.58"; `SequentialCall.test`): never a fixed-design p, which decided nothing."""
    if sequential(c):
        return c.sequential.test
    name, p = reading_p(c, word) if word is not None else deciding_p(c)
    return f"{name} {pval(p, missing)}"


def call_row(c: Comparison, units: str) -> CallRow:
    p_name, p = deciding_p(c)
    d = c.delta
    shown = delta(d.mean, d.lo, d.hi)
    text = call_cell(call_text(c), c.unequal)  # "(unequal compute: steps 12 ≠ 10)" where the arms' runs differ
    gloss = _gloss(c)
    evidence = f"Δ = {shown} points over {d.n} {units}"
    if not sequential(c) and math.isfinite(p):  # a look's call states its |t| and boundary itself
        evidence += f", {p_name} {pval(p)}"
    sentence = f"**{c.label}** ({c.metric}): **{text}**" + (f": {gloss}" if gloss else "") + f". {evidence}."
    if sequential(c):
        return CallRow(c.family, c.label, c.metric, c.benchmark, d.n, shown, "", c.sequential.test, text, sentence)
    return CallRow(c.family, c.label, c.metric, c.benchmark, d.n, shown, p_name, pval(p), text, sentence)


def call_rows(data: ReportData) -> list[CallRow]:
    """Every called comparison (`declared`), one row each."""
    units = unit_word(data.sweep)
    return [call_row(c, units) for _, comps in declared(data) for c in comps]


def question(data: ReportData) -> str:
    """The question the report answers, in one paragraph: the declared comparisons, their metric and
    benchmark, and how Δ is paired."""
    sw, v = data.sweep, data.verdict
    units = unit_word(sw)
    if sw.spec is not None:
        s = sw.spec
        bench = v.comparisons[0].benchmark if v.comparisons else s.benchmark or "the first benchmark"
        pairs = "; ".join(f"{a} vs {r}" for a, r in s.principal)
        extra = ""
        if data.comparisons.further_families:
            extra = (" It also declares the families " + ", ".join(f"`{n}`" for n in data.comparisons.further_families)
                     + ", each called on its own.")
        return (f"Does each arm differ from its reference? {source_word(sw).capitalize()} declares "
                f"{plural(len(s.principal), 'principal comparison')} on held-out {s.metric} ({bench}): {pairs}. "
                f"Δ = arm − reference in points, paired by unit ({units}).{extra}")
    if v.comparisons:
        return ("Does each arm differ from its reference? No comparison was declared before the runs, so every "
                "stated pair (each arm against its baseline, and against its baseline + budget) on avg@n and pass@n "
                f"is called as one family. Δ = arm − reference in points, paired by unit ({units}).")
    return "No comparison is declared, and the runs hold no stated pair of arms: no call; everything below is exploratory."


def design(data: ReportData) -> list[str]:
    """The design in a few lines: units per arm, the power of the declared family at its planning and
    its measured SD, the equivalence margin, and when it was declared."""
    from rbctl.report.declaration import declaration_sentence
    from rbctl.config.sweep import PRINCIPAL_FAMILY

    sw, p = data.sweep, data.power
    bench = data.verdict.comparisons[0].benchmark if data.verdict.comparisons else None
    scored = sorted({len(sc.units) for (_, b), sc in sw.scores.items() if b == bench})
    span = "–".join(map(str, (scored[0], scored[-1]) if len(scored) > 1 else scored)) or "0"
    lines = [f"{plural(len(sw.arms), 'arm')}, {span} {unit_word(sw)} each scored"
             + (f" on {bench}" if bench else "") + f" ({plural(len(sw.runs), 'run')} read)."]
    if p is None:
        lines.append("No design is stated (no declared MDE, planning SD or power): the power of these calls is not "
                     "known beforehand; an inconclusive call states the smallest Δ its test could detect.")
        return lines
    s, rows = p.spec, p.rows
    line = (f"Declared: power {s.power:g} for Δ = {s.mde:g} points at planning sd(Δ) {s.planning_sd:g} (paired t-test "
            f"at α/m = {p.level:.3g})")
    if len(rows):
        pw = [x for x in rows["power_planning"] if math.isfinite(x)]
        measured = [x for x in rows["measured_sd"] if math.isfinite(x)]
        pm = [x for x in rows["power_measured"] if math.isfinite(x)]
        if pw:
            line += f"; with these units, power {_span(pw)}"
        if measured and pm:
            line += f" ({_span(pm)} at the measured sd(Δ) {_span(measured, 1)})"
    lines.append(line + ".")
    lines.append(f"Equivalence margin ±{s.margin:g} points (TOST)." if s.margin is not None else
                 "No equivalence margin, so nothing can be called equivalent.")
    lines.append(declaration_sentence([r.sweep_dir for r in sw.runs if r.sweep_dir], PRINCIPAL_FAMILY))
    return lines


def _span(values: list[float], digits: int = 2) -> str:
    lo, hi = min(values), max(values)
    return num(lo, digits) if num(lo, digits) == num(hi, digits) else f"{num(lo, digits)}–{num(hi, digits)}"


NOT_FINISHED = ("pending", "running", "interrupted", "unknown")
STATUS_WORDS = {"missing": "missing (recorded done, no metrics on disk)", "no final evaluation": "without a final evaluation"}


def missing_lines(sw: SweepData) -> list[str]:
    """What the report could not use, summarised by arm (`18 of 24 seeds not finished in each arm`),
    not run by run: runs not finished, failed (with their errors), recorded done but missing, without
    a final evaluation; then every other problem (a benchmark whose runs share no problem) by name."""
    by_status: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    totals: dict[str, set] = defaultdict(set)
    for r in sw.runs:
        totals[r.arm].add(r.unit)
    errors: Counter = Counter()
    other = []
    for i in sw.issues:
        run = next((r for r in sw.runs if r.name == i.name), None)  # a run on disk ("no final evaluation")
        rk = None if run is not None or "/" not in i.name else parse_run_key(i.name.split("/", 1)[1])  # SWEEP/KEY
        if run is None and rk is None:
            other.append(f"{i.name} ({i.status})")
            continue
        arm = run.arm if run is not None else rk.arm
        totals[arm].add(run.unit if run is not None else (rk.warm_start or "", rk.seed))
        status = "not finished" if i.status in NOT_FINISHED else i.status
        by_status[status][arm].append(i.name)
        if i.status == "failed":
            errors[(i.detail or "").split(" (its logged steps")[0] or "no error recorded"] += 1
    word = "run" if sw.warm_starts else "seed"
    out = []
    for status, arms in by_status.items():
        counts = {a: len(v) for a, v in arms.items()}
        said = STATUS_WORDS.get(status, status)
        if set(arms) == set(totals) and len(set(counts.values())) == 1 and len({len(totals[a]) for a in arms}) == 1:
            n, total = next(iter(counts.values())), len(totals[next(iter(arms))])
            line = f"{n} of {plural(total, word)} {said} in {'each arm' if len(arms) > 1 else next(iter(arms))}"
        else:
            line = "; ".join(f"{a}: {n} of {plural(len(totals[a]), word)} {said}" for a, n in sorted(counts.items()))
        if status == "failed":
            line += " (" + "; ".join(f"{e}" + (f" ×{k}" if k > 1 else "") for e, k in errors.most_common(3)) + ")"
        out.append(line)
    return out + other
