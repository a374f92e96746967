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
  of its own, not counted either way.

The text of each outcome says the rule beside the call and, per member, the p-value that decided its
call (`rbctl.report.analyses.comparisons.deciding_p`). It never calls an inconclusive result an
absence of effect.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from rbctl.config.study import AssociationRule, CallsRule, Claim, ExactRule, TrendRule
from rbctl.errors import UserError
from rbctl.report.analyses.comparisons import EQUIVALENT, HIGHER, LOWER, call, call_text, deciding_p
from rbctl.report.analyses.crossing import crossing_step
from rbctl.report.analyses.trend import trend
from rbctl.report.load import Run
from rbctl.report.render.tables import pval
from rbctl.report.series import final_heldout, run_series
from rbctl.report.stats import finite, holm, paired_delta, pearson_ci, tail_mean
from rbctl.report.study.checks import find_check
from rbctl.report.study.families import FamilyResult, Member, match_pairs
from rbctl.report.study.sweeps import Study

SUPPORTED, CONTRADICTED, INCONCLUSIVE, NOT_APPLICABLE = "supported", "contradicted", "inconclusive", "not applicable"
OPPOSITE = {HIGHER: LOWER, LOWER: HIGHER, "positive": "negative", "negative": "positive"}


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


def decide(readings: list[Reading], support: str, count, contradict: list[str], what: str = "members") -> tuple[str, str]:
    """(outcome, one-sentence reason) of a rule over its members' readings (module docstring)."""
    live = [r for r in readings if r.call is not None]
    if not live:
        why = "; ".join(f"{r.where}: {r.why}" for r in readings) or "no member has runs"
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
    if own:
        reason += "; " + "; ".join(f"{r.where} is called {r.call}: a finding of its own, neither support nor contradiction"
                                   for r in own)
    return INCONCLUSIVE, reason


def _count_words(count, what: str = "member") -> str:
    return f"every applicable {what} is" if count == "all" else f"at least {count} applicable {what}s are"


def member_text(m: Member) -> str:
    """A member's call with the p that decided it, and its population when the unit holds warm starts."""
    c = m.comparison
    text = call_text(c, m.scale, m.unit)
    name, p = deciding_p(c)
    out = f"{text} (Δ {delta_text(m)}, {name} {pval(p, 'not testable')})"
    if m.over_warm_starts is not None and call(c) in (HIGHER, LOWER, EQUIVALENT):
        # a call over (warm start, seed) units is about these warm starts; the warm start as the unit is what
        # would carry it to another warm start
        o = m.over_warm_starts
        n_ws = len({u[0] for u in c.delta.units})
        fmt = delta_format(m)
        out += (f"; holds for these {n_ws} warm starts (units: (warm start, seed)); with the warm start as the unit "
                + (f"Δ {fmt.format(m.scale * o.mean)} [{fmt.format(m.scale * o.lo)}, {fmt.format(m.scale * o.hi)}]"
                   if finite(o.lo) else "not testable"))
        if call(c) == EQUIVALENT and finite(o.lo) and max(abs(o.lo), abs(o.hi)) >= c.margin:
            out += f", wider than ±{m.scale * c.margin:g}: not shown for other warm starts"
        elif call(c) != EQUIVALENT and finite(o.lo) and o.lo <= 0 <= o.hi:
            out += ", which holds 0: not shown for other warm starts"
    if m.shares:
        out += f"; {m.shares}"
    return out


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


def _word(m: Member, support: str) -> str:
    """The call a rule reads: the call word, except that a member within the margin (TOST rejected) is
    "equivalent" for a rule whose support is equivalence (its direction stays in its text)."""
    c = m.comparison
    if support == EQUIVALENT and c.equivalent and call(c) in (HIGHER, LOWER):
        return EQUIVALENT
    return call(c)


def applies(m: Member, rule: CallsRule, study: Study, fams: dict[str, FamilyResult], alpha: float) -> str:
    """"" when member ``m`` applies for ``rule``, else why not."""
    cond, c, tb = rule.applies_if, m.comparison, study.sweeps[m.sweep]
    if cond.plateau and not tb.plateau_held(c.ref):
        return (f"the plateau test does not hold for {c.ref}" if tb.ceiling is not None
                else "no stated ceiling, so the plateau test cannot hold")
    if cond.raised:
        d = paired_delta(tb.per_unit(c.arm, cond.raised), tb.per_unit(c.ref, cond.raised))
        if not (d.testable and d.p <= alpha and d.mean > 0):
            return (f"{cond.raised} not raised: Δ {d.mean:+.3f} (paired t-test p {pval(d.p, 'not testable')}, "
                    f"{d.n} units, unadjusted)")
    if cond.called_in:
        other = fams[cond.called_in].member(m.sweep, c.arm, c.ref)
        if other is None:
            return f"not a member of `{cond.called_in}`"
        if _word(other, cond.called) != cond.called:
            return f"called {call_text(other.comparison, other.scale, other.unit)} in `{cond.called_in}`, not {cond.called}"
    return ""


def raised_note(m: Member, key: str, study: Study) -> str:
    tb, c = study.sweeps[m.sweep], m.comparison
    d = paired_delta(tb.per_unit(c.arm, key), tb.per_unit(c.ref, key))
    return f"{key} Δ {d.mean:+.3f} (p {pval(d.p, 'not testable')}, {d.n} units, unadjusted)"


def crossing_text(m: Member, study: Study) -> str:
    """When member ``m``'s arm's mean held-out curve (its metric, over the periodic evaluations every
    unit of both arms has) rises above the reference's for good, with its 95% bootstrap interval over
    units (`rbctl.report.analyses.crossing`)."""
    c, runs = m.comparison, study.sweeps[m.sweep].data.sweep.by_arm
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


def calls_rule(claim: Claim, study: Study, fams: dict[str, FamilyResult]) -> Verdict:
    rule: CallsRule = claim.rule
    fam = fams[rule.family]
    contradict = rule.contradict if rule.contradict is not None else [OPPOSITE[rule.support]] if rule.support in OPPOSITE else []
    members = list(fam.members)
    if rule.members is not None:
        keep = set()
        for tb in study.named(fam.spec.sweeps):
            keep |= {(tb.name, a, r) for a, r, _ in match_pairs(rule.members, tb.arms)}
        members = [m for m in members if (m.sweep, m.comparison.arm, m.comparison.ref) in keep]
    readings = []
    for m in members:
        why = applies(m, rule, study, fams, fam.spec.alpha)
        text = member_text(m)
        if rule.applies_if.raised and not why:
            text += f"; {raised_note(m, rule.applies_if.raised, study)}"
        if rule.crossing:
            text += f"; {crossing_text(m, study)}"
        readings.append(Reading(m.where, None if why else _word(m, rule.support), text, m.group, why))
    outcome, reason = decide(readings, rule.support, rule.count, contradict)
    conds = [w for w, on in (("the plateau test holds for the reference on its sweep (stated ceiling)", rule.applies_if.plateau),
                             (f"the arm raised {rule.applies_if.raised} over the reference (paired t-test, unadjusted)",
                              bool(rule.applies_if.raised)),
                             (f"the member is called {rule.applies_if.called} in `{rule.applies_if.called_in}`",
                              bool(rule.applies_if.called_in))) if on]
    words = (f"family `{rule.family}`" + (f" ({', '.join(rule.members)})" if rule.members else "")
             + (f", where {' and '.join(conds)}" if conds else "")
             + f": supported when {_count_words(rule.count)} called {rule.support}"
             + (f"{' within the margin (TOST)' if rule.support == EQUIVALENT else ''}; contradicted when any is called "
                f"{' or '.join(contradict)}" if contradict else "; no call contradicts it")
             + "; else inconclusive")
    return Verdict(outcome, reason, words, readings)


# --- association ---------------------------------------------------------------------------------------


def window_mean(run: Run, key: str, window: str, fraction: float) -> float:
    """A run's mean of ``key`` over its first ``fraction`` of logged steps (early) or its last quarter (late)."""
    vals = [m.get(key) for m in run.metrics if finite(m.get(key))]
    if not vals:
        return math.nan
    if window == "late":
        return tail_mean(vals)
    return float(np.mean(vals[:max(1, math.ceil(fraction * len(vals)))]))


def association(x, y, arms, unit: str, units=None):
    """Pearson r of ``x`` with ``y`` on the ``unit`` of docs/method.md (studies):

    - "within_arm": each value minus its arm's mean (rmcorr with the arm as the subject; N − k − 1 df);
    - "arm_and_unit": each value's residual from the additive fit arm + unit (least squares on arm and
      unit indicators; ``units`` names each run's unit), so neither the arms' effects nor those of the
      units the arms share (a warm start, a seed) enter: N − rank − 1 df. Where the arms' runs share
      units, "within_arm" keeps the units' own effects on x and y in and rejects too often;
    - "arm_means": over the k arm means (k − 2 df).

    Never centred within units alone: that leaves the arms' own effects on x and y in the data. A
    `rbctl.report.stats.Correlation`."""
    x, y, arms = np.asarray(x, dtype=float), np.asarray(y, dtype=float), np.asarray(arms)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y, arms = x[ok], y[ok], arms[ok]
    if not len(x):
        return pearson_ci([], [])
    _, code = np.unique(arms, return_inverse=True)
    n = np.bincount(code)
    mx, my = np.bincount(code, x) / n, np.bincount(code, y) / n
    if unit == "arm_means":
        return pearson_ci(mx, my)
    if unit == "within_arm":
        return pearson_ci(x - mx[code], y - my[code], groups=len(n))
    _, ucode = np.unique(np.asarray([str(u) for u in np.asarray(units, dtype=object)[ok]]), return_inverse=True)
    design = np.concatenate([np.eye(len(n))[code], np.eye(ucode.max() + 1)[ucode][:, 1:]], axis=1)
    fit = np.linalg.lstsq(design, np.stack([x, y], 1), rcond=None)
    resid = np.stack([x, y], 1) - design @ fit[0]
    return pearson_ci(resid[:, 0], resid[:, 1], groups=int(fit[2]))


def association_rows(rule: AssociationRule, study: Study) -> pd.DataFrame:
    rows = []
    for tb in study.named(rule.sweeps):
        bench = rule.benchmark or tb.benchmark
        x = [window_mean(r, rule.predictor, rule.window, rule.fraction) for r in tb.runs]
        y = [final_heldout(r, bench) for r in tb.runs]
        arms, units = [r.arm for r in tb.runs], [r.unit for r in tb.runs]
        mine = association(x, y, arms, rule.unit, units)
        other = association(x, y, arms, "arm_means" if rule.unit != "arm_means" else "arm_and_unit", units)
        rows.append({"sweep": tb.name, "runs": int(np.sum(np.isfinite(x) & np.isfinite(y))), "arms": len(set(arms)),
                     "df": mine.df, "r": mine.r, "r_lo": mine.lo, "r_hi": mine.hi, "p": mine.p,
                     "other_r": other.r, "other_p": other.p, "other_df": other.df})
    df = pd.DataFrame(rows, columns=["sweep", "runs", "arms", "df", "r", "r_lo", "r_hi", "p", "other_r", "other_p",
                                     "other_df"])
    testable = df["p"].apply(finite) if len(df) else pd.Series(dtype=bool)
    df["p_holm"] = math.nan
    if testable.any():
        adj, _ = holm(df.loc[testable, "p"].to_numpy(), rule.alpha)
        df.loc[testable, "p_holm"] = adj
    return df


def association_rule(claim: Claim, study: Study) -> Verdict:
    rule: AssociationRule = claim.rule
    df = association_rows(rule, study)
    readings, separable = [], []
    unit_words = {"within_arm": "within arms (rmcorr: each run minus its arm's means)",
                  "arm_and_unit": "within arms and units (each run's residual from arm + unit)",
                  "arm_means": "over the arm means"}[rule.unit]
    other_words = "arm means" if rule.unit != "arm_means" else "within arms and units"
    for row in df.itertuples(index=False):
        if not finite(row.p):
            readings.append(Reading(row.sweep, "not testable", f"not testable ({row.runs} runs, {row.arms} arms)", row.sweep))
            continue
        sig = row.p_holm <= rule.alpha
        word = ("positive" if row.r > 0 else "negative") if sig else "inconclusive"
        text = (f"r {row.r:+.2f}" + (f" [{row.r_lo:+.2f}, {row.r_hi:+.2f}]" if finite(row.r_lo) else "")
                + f" {unit_words}, {row.df} df, Holm p {pval(row.p_holm)}; {other_words}: r "
                + (f"{row.other_r:+.2f}, p {pval(row.other_p)} (unadjusted)" if finite(row.other_r) else "not testable"))
        if not sig and rule.unit != "arm_means" and finite(row.other_p) and row.other_p <= rule.alpha:
            text += (" — not separable from the arms' effects: the association is across arms, whose own effects on "
                     "both it carries; within arms it is inconclusive")
            separable.append(row.sweep)
        if sig and rule.unit == "arm_means":
            text += " (across arms: the arms' own effects on both are part of it)"
        readings.append(Reading(row.sweep, word, text, row.sweep))
    outcome, reason = decide(readings, rule.sign, rule.count, [OPPOSITE[rule.sign]], "sweeps")
    if outcome == INCONCLUSIVE and separable:
        reason += f"; on {', '.join(separable)} not separable from the arms' effects"
    window = (f"the first {rule.fraction:g} of logged steps (lagged)" if rule.window == "early" else "the last quarter (same time)")
    words = (f"`{rule.predictor}` over {window} against the final held-out {rule.outcome}, r {unit_words}, Holm over "
             f"the sweeps at α {rule.alpha:g}: supported when {_count_words(rule.count, 'sweep')} significant "
             f"with the expected {rule.sign} sign; contradicted when any shows the opposite; else inconclusive")
    return Verdict(outcome, reason, words, readings, df)


def setting_value(run: Run, key: str):
    """The value at dotted ``key`` of a run's saved config (None when absent)."""
    v = run.config or {}
    for part in key.split("."):
        v = v.get(part) if isinstance(v, dict) else None
    return v


def trend_rule(claim: Claim, study: Study, fams: dict[str, FamilyResult]) -> Verdict:
    rule: TrendRule = claim.rule
    rows, readings = [], []
    for sweep in dict.fromkeys(m.sweep for m in fams[rule.family].members):
        members = [m for m in fams[rule.family].members if m.sweep == sweep]
        runs = study.sweeps[sweep].data.sweep.by_arm
        levels = [setting_value(runs[m.comparison.arm][0], rule.over) for m in members]
        if len(members) < 2 or any(not isinstance(v, (int, float)) or (rule.x == "log2" and v <= 0) for v in levels):
            readings.append(Reading(sweep, "not testable", f"not testable: `{rule.over}` of the members' arms is "
                                    f"{levels} (needs two or more numeric levels)", sweep))
            continue
        x = [math.log2(v) if rule.x == "log2" else float(v) for v in levels]
        common = set.intersection(*(set(m.comparison.delta.units) for m in members))
        per_unit = {u: [dict(zip(m.comparison.delta.units, m.comparison.delta.deltas))[u] for m in members]
                    for u in sorted(common)}
        t = trend(x, per_unit, rule.alpha)
        rows.append({"sweep": sweep, "levels": ", ".join(f"{v:g}" for v in levels), "units": t.test.n,
                     "slope": t.test.mean, "lo": t.test.lo, "hi": t.test.hi, "p": t.test.p})
    df = pd.DataFrame(rows, columns=["sweep", "levels", "units", "slope", "lo", "hi", "p"])
    testable = df["p"].apply(finite) if len(df) else pd.Series(dtype=bool)
    df["p_holm"] = math.nan
    if testable.any():
        df.loc[testable, "p_holm"] = holm(df.loc[testable, "p"].to_numpy(), rule.alpha)[0]
    per = "per doubling" if rule.x == "log2" else "per unit of the setting"
    for row in df.itertuples(index=False):
        scale = fams[rule.family].members[0].scale
        if not finite(row.p):
            readings.append(Reading(row.sweep, "not testable", f"slope not testable ({row.units} units)", row.sweep))
            continue
        word = ("positive" if row.slope > 0 else "negative") if row.p_holm <= rule.alpha else "inconclusive"
        readings.append(Reading(row.sweep, word, f"{word}: slope of Δ on {rule.x} `{rule.over}` ({row.levels}) "
                                f"{scale * row.slope:+.2f} [{scale * row.lo:+.2f}, {scale * row.hi:+.2f}] {per}, "
                                f"{row.units} units, Holm p {pval(row.p_holm)}", row.sweep))
    outcome, reason = decide(readings, rule.sign, rule.count, [OPPOSITE[rule.sign]], "sweeps")
    words = (f"family `{rule.family}`'s members as levels of `{rule.over}` (x = {rule.x}): per unit the least-squares "
             f"slope of Δ on x, a t-test of the slopes over units, Holm over the sweeps at α {rule.alpha:g}: supported "
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
