"""The rules a study's claims are called by (`rbctl.config.study`: `CallsRule`, `AssociationRule`,
`TrendRule`, `ExactRule`; docs/method.md, "Comparing arms", studies). Every rule reads members, each with a call,
and ends in one of four outcomes (`decide`):

- **not applicable**: no member applies (the applicability conditions failed everywhere, or fewer
  members apply than the rule needs);
- **contradicted**: an applicable member is called one of the rule's contradicting calls;
- **supported**: at least ``count`` applicable members (all, by default) are called the supporting
  call; members that share runs count once (`rbctl.report.study.families.mark_shared`);
- **inconclusive**: otherwise. A member called something that neither supports nor contradicts (an
  entropy bonus that lowered the level, read by "does not move the level") is named as a finding
  of its own, not counted either way; one called the opposite of the claim that the study's
  ``contradict`` leaves out is named as such.

The text of each outcome says the rule beside the call and, per member, the p-value that decided the
call the rule reads (`rbctl.report.analyses.comparisons.reading_p`). It never calls an inconclusive
result, or a test that did not reject, an absence of effect.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from rbctl.config.study import AssociationRule, CallsRule, Claim, ExactRule, TrendRule
from rbctl.errors import UserError
from rbctl.report.analyses.comparisons import EQUIVALENT, HIGHER, LOWER, NONINFERIOR, call, call_text
from rbctl.report.analyses.crossing import crossing_step
from rbctl.report.render.calls import deciding_test
from rbctl.report.render.tables import pval
from rbctl.report.series import run_series
from rbctl.report.stats import finite, paired_delta
from rbctl.report.study.association import UNIT_WORDS, association_reading, association_rows, trend_rows
from rbctl.report.study.checks import find_check
from rbctl.report.study.families import FamilyResult, Member, match_members
from rbctl.report.study.sweeps import Study, did_you_mean, logged_keys

SUPPORTED, CONTRADICTED, INCONCLUSIVE, NOT_APPLICABLE = "supported", "contradicted", "inconclusive", "not applicable"
OPPOSITE = {HIGHER: LOWER, LOWER: HIGHER, "positive": "negative", "negative": "positive"}
# the calls that say the opposite of a claim of each support (a rule's default `contradict`)
OPPOSITES = {HIGHER: [LOWER], LOWER: [HIGHER], EQUIVALENT: [HIGHER, LOWER], NONINFERIOR: [],
             "positive": ["negative"], "negative": ["positive"]}


@dataclass(frozen=True)
class Reading:
    """One member as a claim reads it: its call (None: not applicable there, ``why``) and the text
    printed for it."""

    where: str
    call: str | None
    text: str
    group: str
    why: str = ""


@dataclass
class Verdict:
    outcome: str
    reason: str
    rule: str  # the rule in words
    readings: list[Reading] = field(default_factory=list)
    table: pd.DataFrame | None = None  # an association's or an exact check's numbers


def decide(readings: list[Reading], support: str, count, contradict: list[str], what: str = "members",
           unread: tuple[str, ...] = ()) -> tuple[str, str]:
    """(outcome, one-sentence reason) of a rule over its members' readings (module docstring);
    ``unread``: why sweeps the rule names were not read (said when no member applies)."""
    live = [r for r in readings if r.call is not None]
    if not live:
        why = "; ".join([*(f"{r.where}: {r.why}" for r in readings), *unread]) or "no member has runs"
        return NOT_APPLICABLE, f"no member applies ({why})"
    groups: dict[str, list[Reading]] = {}
    for r in live:
        groups.setdefault(r.group, []).append(r)
    against = [r for r in live if r.call in contradict]
    if against:
        return CONTRADICTED, "; ".join(f"{r.where} is called {r.call}" for r in against)
    need = len(groups) if count == "all" else int(count)
    if need > len(groups):
        return NOT_APPLICABLE, f"the rule needs {need} applicable {what} (runs shared count once); {len(groups)} apply"
    yes = [g for g, rs in groups.items() if all(r.call == support for r in rs)]
    if len(yes) >= need:
        return SUPPORTED, f"{len(yes)} of {len(groups)} applicable {what} called {support} ({need} needed)"
    own = [r for r in live if r.call not in (support, "inconclusive", "not testable")]
    reason = f"{len(yes)} of the {need} needed {what} called {support}"
    for word in ("inconclusive", "not testable"):
        if any(r.call == word for r in live):
            reason += f"; {sum(r.call == word for r in live)} {word}"
    for r in own:
        if r.call in OPPOSITES.get(support, []):
            reason += (f"; {r.where} is called {r.call}, the opposite of the claim, which the study file's `contradict` "
                       "leaves out: counted neither way")
        else:
            reason += f"; {r.where} is called {r.call}: a finding of its own, neither support nor contradiction"
    return INCONCLUSIVE, reason


def _count_words(count, what: str = "member") -> str:
    return f"every applicable {what} is" if count == "all" else f"at least {count} applicable {what}s are"


def delta_format(m: Member) -> str:
    """Points and steps to a tenth; a training metric's own units to a thousandth."""
    return "{:+.1f}" if m.scale == 100.0 or m.unit == "steps" else "{:+.3f}"


def delta_text(m: Member) -> str:
    d = m.comparison.delta
    fmt = delta_format(m)
    if not finite(d.mean):
        return "–"
    return (fmt.format(m.scale * d.mean) + (f" [{fmt.format(m.scale * d.lo)}, {fmt.format(m.scale * d.hi)}]"
                                            if finite(d.lo) else ""))


def warm_start_caveat(m: Member) -> str:
    """For a call over (warm start, seed) units: the population it holds for, the interval with the warm
    start as the unit, and whether that interval shows the call for another warm start; "" otherwise."""
    c, o = m.comparison, m.over_warm_starts
    if o is None or call(c) not in (HIGHER, LOWER, EQUIVALENT, NONINFERIOR):
        return ""
    fmt = delta_format(m)
    n_ws = len({u[0] for u in c.delta.units})
    out = (f"holds for these {n_ws} warm starts (units: (warm start, seed)); with the warm start as the unit "
           + (f"Δ {fmt.format(m.scale * o.mean)} [{fmt.format(m.scale * o.lo)}, {fmt.format(m.scale * o.hi)}]"
              if finite(o.lo) else "not testable"))
    if call(c) in (EQUIVALENT, NONINFERIOR) and finite(o.lo) and max(abs(o.lo), abs(o.hi)) >= c.margin:
        out += f", wider than ±{m.scale * c.margin:g}: not shown for other warm starts"
    elif call(c) in (HIGHER, LOWER) and finite(o.lo) and o.lo <= 0 <= o.hi:
        out += ", which holds 0: not shown for other warm starts"
    return out


def member_text(m: Member, word: str | None = None) -> str:
    """A member's call with the p that decided the call the rule reads (``word``; default its own
    call), the population its units stand for, and the runs it shares."""
    c = m.comparison
    test = deciding_test(c, "not testable", word or call(c))  # a sequential look's call: the look's test
    out = f"{call_text(c, m.scale, m.unit)} (Δ {delta_text(m)}, {test})"
    if m.level == "warm_start":
        out += f"; units: the {c.delta.n} warm starts (each its seeds' mean Δ)"
    caveat = warm_start_caveat(m)
    if caveat:
        out += f"; {caveat}"
    if m.shares:
        out += f"; {m.shares}"
    return out


def _word(m: Member, support: str) -> str:
    """The call a rule reads: the call word, except that a member within the margin (TOST rejected) is
    "equivalent" for a rule whose support is equivalence (its direction stays in its text)."""
    c = m.comparison
    if support == EQUIVALENT and c.equivalent and call(c) in (HIGHER, LOWER):
        return EQUIVALENT
    return call(c)


def raised_words(m: Member, key: str, study: Study, alpha: float) -> tuple[bool, str]:
    """(whether the arm is shown to raise ``key`` over its reference, the words): a paired t-test of the
    last-quarter means at ``alpha``, unadjusted; a test that does not reject says "not shown to rise",
    never that it did not rise."""
    tb, c = study.sweeps[m.sweep], m.comparison
    d = paired_delta(tb.per_unit(c.arm, key), tb.per_unit(c.ref, key))
    shown = d.testable and d.p <= alpha and d.mean > 0
    test = (f"paired t-test p {pval(d.p)}, {d.n} units, unadjusted" if d.testable else f"not testable: {d.untestable}")
    return shown, f"{key} Δ {d.mean:+.3f} ({test})" if finite(d.mean) else f"{key}: no common unit"


def applies(m: Member, rule: CallsRule, study: Study, fams: dict[str, FamilyResult], alpha: float) -> str:
    """"" when member ``m`` applies for ``rule``, else why not."""
    cond, c, tb = rule.applies_if, m.comparison, study.sweeps[m.sweep]
    if m.interaction and (cond.plateau or cond.raised):
        return "an interaction has no one arm and reference to test the plateau or a raised metric on"
    if cond.plateau and not tb.plateau_held(c.ref):
        return (f"the plateau test does not hold for {c.ref}" if tb.ceiling is not None
                else "no stated ceiling, so the plateau test cannot hold")
    if cond.raised:
        shown, words = raised_words(m, cond.raised, study, alpha)
        if not shown:
            return f"{cond.raised} not shown to rise: {words}"
    if cond.called_in:
        other = fams[cond.called_in].member(m.sweep, c.arm, c.ref)
        if other is None:
            return f"not a member of `{cond.called_in}`"
        if _word(other, cond.called) != cond.called:
            return f"called {call_text(other.comparison, other.scale, other.unit)} in `{cond.called_in}`, not {cond.called}"
    return ""


def crossing_text(m: Member, study: Study) -> str:
    """When member ``m``'s arm's mean held-out curve (its metric, over the periodic evaluations every
    unit of both arms has) rises above the reference's for good, with its 95% bootstrap interval over
    units (`rbctl.report.analyses.crossing`). Only where the family's test says the arm ends higher:
    without that the curves are not shown to differ, and a crossing step of two equal curves is noise."""
    c = m.comparison
    if m.interaction:
        return "crossing step: not defined for an interaction"
    if call(c) != HIGHER:
        return f"crossing step: not reported (the arm is not shown to end higher: {call(c)})"
    runs = study.sweeps[m.sweep].data.sweep.by_arm
    metric = "avg@n" if c.metric == "avg@n" else f"pass@{c.k}"
    curves = {arm: {r.unit: run_series(r, metric, c.benchmark) for r in runs.get(arm, [])} for arm in (c.arm, c.ref)}
    units = sorted(set(curves[c.arm]) & set(curves[c.ref]), key=str)
    steps = sorted(set.intersection(*(set(curves[a][u].index) for a in curves for u in units))) if units else []
    if len(units) < 2 or len(steps) < 2:
        return f"crossing step: not measurable ({len(units)} paired units, {len(steps)} common evaluation steps)"
    x = crossing_step(steps, *([[curves[a][u].loc[steps].to_numpy() for u in units] for a in (c.arm, c.ref)]))
    show = lambda s: "none within the horizon" if not math.isfinite(s) else f"step {s:g}"  # noqa: E731
    how = "every resample" if x.exact else f"{x.resamples:,} resamples"
    return (f"crossing of the mean {metric} curves: {show(x.step)} (95% bootstrap interval over {x.units} units, {how}: "
            f"{show(x.lo)} to {show(x.hi)}; {100 * x.crossed:.0f}% of resamples cross by step {steps[-1]:g})")


def _selected(rule: CallsRule, fam: FamilyResult, study: Study) -> list[Member]:
    if rule.members is None:
        return list(fam.members)
    keep = set()
    for tb in study.named(fam.spec.sweeps):
        keep |= {(tb.name, names) for names, _ in match_members(rule.members, tb.arms)}
    key = lambda m: (m.comparison.arm.strip("()").split(" − ") + m.comparison.ref.strip("()").split(" − ")  # noqa: E731
                     if m.interaction else [m.comparison.arm, m.comparison.ref])
    return [m for m in fam.members if (m.sweep, tuple(key(m))) in keep]


def calls_rule(claim: Claim, study: Study, fams: dict[str, FamilyResult]) -> Verdict:
    rule: CallsRule = claim.rule
    fam = fams[rule.family]
    contradict = rule.contradict if rule.contradict is not None else OPPOSITES[rule.support]
    if rule.applies_if.raised:
        _check_key(rule.applies_if.raised, study.named(fam.spec.sweeps), "applies_if.raised")
    readings = []
    for m in _selected(rule, fam, study):
        why = applies(m, rule, study, fams, fam.spec.alpha)
        word = _word(m, rule.support)
        text = member_text(m, word)
        if rule.applies_if.raised and not why:
            text += f"; {raised_words(m, rule.applies_if.raised, study, fam.spec.alpha)[1]}"
        if rule.crossing:
            text += f"; {crossing_text(m, study)}"
        readings.append(Reading(m.where, None if why else word, text, m.group, why))
    outcome, reason = decide(readings, rule.support, rule.count, contradict, unread=fam.notes)
    return Verdict(outcome, reason, calls_words(rule, contradict), readings)


def calls_words(rule: CallsRule, contradict: list[str]) -> str:
    cond = rule.applies_if
    conds = [w for w, on in (("the plateau test holds for the reference on its sweep (stated ceiling)", cond.plateau),
                             (f"the arm is shown to raise {cond.raised} over the reference (paired t-test, unadjusted)",
                              bool(cond.raised)),
                             (f"the member is called {cond.called} in `{cond.called_in}`", bool(cond.called_in))) if on]
    left_out = [w for w in OPPOSITES[rule.support] if w not in contradict]
    return (f"family `{rule.family}`" + (f" ({', '.join(rule.members)})" if rule.members else "")
            + (f", where {' and '.join(conds)}" if conds else "")
            + f": supported when {_count_words(rule.count)} called {rule.support}"
            + (f"{' within the margin (TOST)' if rule.support == EQUIVALENT else ''}; contradicted when any is called "
               f"{' or '.join(contradict)}" if contradict else "; no call contradicts it")
            + (f"; a member called {' or '.join(left_out)} (the opposite of the claim) is counted neither way: the "
               "study file's `contradict` leaves it out" if left_out else "")
            + "; else inconclusive")


def _check_key(key: str, beds, what: str) -> None:
    keys = logged_keys(beds)
    if beds and key not in keys:
        raise UserError(f"{what} '{key}': no run of {', '.join(tb.name for tb in beds)} logs it"
                        + did_you_mean(key, sorted(keys)))


def association_rule(claim: Claim, study: Study) -> Verdict:
    rule: AssociationRule = claim.rule
    df = association_rows(rule, study)
    readings = [Reading(name, None, "", name, f"not read: {why}") for name, why in study.unread(rule.sweeps)]
    apart = []
    for row in df.itertuples(index=False):
        word, text, alone = association_reading(row, rule)
        readings.append(Reading(row.sweep, word, text, row.sweep))
        if alone:
            apart.append(row.sweep)
    outcome, reason = decide(readings, rule.sign, rule.count, [OPPOSITE[rule.sign]], "sweeps")
    if outcome == INCONCLUSIVE and apart:
        reason += f"; on {', '.join(apart)} shown across the arms' means only, not within arms"
    window = (f"the first {rule.fraction:g} of logged steps (lagged)" if rule.window == "early" else "the last quarter (same time)")
    test = ("Pearson's t over the arm means" if rule.unit == "arm_means" else
            {"auto": "a t-test over warm starts where the runs carry them, else a permutation test over units",
             "unit": "a permutation test over units", "warm_start": "a t-test over warm starts"}[rule.level])
    words = (f"`{rule.predictor}` over {window} against the final held-out {rule.outcome}, r "
             f"{UNIT_WORDS[rule.unit]} by {test}, Holm over the sweeps at α {rule.alpha:g}: supported when "
             f"{_count_words(rule.count, 'sweep')} significant with the expected {rule.sign} sign; contradicted when "
             "any shows the opposite; else inconclusive")
    return Verdict(outcome, reason, words, readings, df)


def trend_rule(claim: Claim, study: Study, fams: dict[str, FamilyResult]) -> Verdict:
    rule: TrendRule = claim.rule
    df, skipped = trend_rows(rule, study, fams)
    readings = [Reading(s, "not testable", why, s) for s, why in skipped]
    per = "per doubling" if rule.x == "log2" else "per unit of the setting"
    scale = fams[rule.family].members[0].scale if fams[rule.family].members else 100.0
    for row in df.itertuples(index=False):
        units = f"{row.units} {'warm starts (each its seeds’ mean slope)' if row.level == 'warm_start' else 'units'}"
        if not finite(row.p):
            readings.append(Reading(row.sweep, "not testable", f"slope not testable ({units})", row.sweep))
            continue
        word = ("positive" if row.slope > 0 else "negative") if row.p_holm <= rule.alpha else "inconclusive"
        readings.append(Reading(row.sweep, word, f"{word}: slope of Δ on {rule.x} `{rule.over}` ({row.levels}) "
                                f"{scale * row.slope:+.2f} [{scale * row.lo:+.2f}, {scale * row.hi:+.2f}] {per}, "
                                f"{units}, Holm p {pval(row.p_holm)}", row.sweep))
    outcome, reason = decide(readings, rule.sign, rule.count, [OPPOSITE[rule.sign]], "sweeps",
                             unread=fams[rule.family].notes)
    over = {"auto": "over warm starts where the runs carry them (each its seeds' mean slope), else over units",
            "unit": "over units", "warm_start": "over warm starts (each its seeds' mean slope)"}[rule.level]
    words = (f"family `{rule.family}`'s members as levels of `{rule.over}` (x = {rule.x}): per unit the least-squares "
             f"slope of Δ on x, a t-test of the slopes {over}, Holm over the sweeps at α {rule.alpha:g}: supported "
             f"when {_count_words(rule.count, 'sweep')} significant with the expected {rule.sign} slope; contradicted "
             "when any shows the opposite; else inconclusive")
    return Verdict(outcome, reason, words, readings)


def exact_rule(claim: Claim, study: Study) -> Verdict:
    rule: ExactRule = claim.rule
    own = study.source.parent / study.config.checks if study.config.checks else None
    check = find_check(rule.check, own)
    measured, passed, table = check()
    return Verdict(SUPPORTED if passed else CONTRADICTED, measured,
                   f"exact check `{rule.check}`: {check.__doc__.strip().splitlines()[0].rstrip('.')}", [], table)


def apply_rule(claim: Claim, study: Study, fams: dict[str, FamilyResult]) -> Verdict:
    """The claim's verdict by its rule's kind."""
    if isinstance(claim.rule, CallsRule):
        return calls_rule(claim, study, fams)
    if isinstance(claim.rule, AssociationRule):
        return association_rule(claim, study)
    if isinstance(claim.rule, TrendRule):
        return trend_rule(claim, study, fams)
    return exact_rule(claim, study)
