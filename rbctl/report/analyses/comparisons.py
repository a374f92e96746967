"""Comparing arms on their final scores (`rbctl.report.analyses.scores`), unit by unit (a unit is a
seed, or a (warm start, seed) pair: what two arms' runs share), and calling them (docs/method.md,
"Comparing arms").

Which comparisons a report makes:
- **declared families**: the principal comparisons the sweep file states before running
  (``comparisons.principal``, on its metric and benchmark) and each further named family
  (``comparisons.families``): Holm–Bonferroni within each family, and each member called (`call`);
- **exploratory**: every stated pair (`stated_pairs`: each baseline + budget vs that baseline, each
  other arm vs its baseline + budget and vs its baseline, standalone estimators vs GRPO ± budget) on
  every benchmark, avg@n and pass@k at k = n, that is in no declared family: its interval and an
  unadjusted p, no adjustment and no call.
A sweep without ``comparisons`` declares no family: its stated pairs form the one family that is
adjusted and called (``stated``; it has no margin, so nothing in it is called equivalent). A
comparison whose two arms ran the same training config (everything but the seed equal) is flagged
and kept out of every family; so is one that is not testable (fewer than 3 common units, or every
unit's Δ the same: `rbctl.report.stats.PairedDelta`).

The call of a family's member is one of four (`call`): **higher** or **lower** (the paired t-test,
Holm-adjusted, rejects Δ = 0), **equivalent within ±δ** (two one-sided tests, Holm-adjusted alike,
reject |Δ| ≥ δ, δ the margin the sweep file states), or **inconclusive**, printed with its direction
and the smallest |Δ| the design could have detected (`detectable`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

import pandas as pd

from rbctl.algo.registry import is_entropy_bonus
from rbctl.errors import UserError
from rbctl.report.analyses.scores import ArmScores
from rbctl.report.load import unit_label
from rbctl.report.robust import prob_improvement, stratified_bootstrap
from rbctl.report.power import mde_paired
from rbctl.report.stats import (DELTA_BOUNDS, MIN_HIERARCHICAL_UNITS, NOT_TESTABLE, PairedDelta,
                                hierarchical_bootstrap_delta, holm, noninferiority_paired, paired_delta, tost_paired)

ALPHA = 0.05
POWER = 0.8  # the power at which an inconclusive row's detectable effect is stated (a family may state its own)


PRINCIPAL, EXPLORATORY, STATED = "principal", "exploratory", "stated"
HIGHER, LOWER, EQUIVALENT, INCONCLUSIVE = "higher", "lower", "equivalent", "inconclusive"
NONINFERIOR = "non-inferior"  # a non-inferiority family's call (a study's `test: noninferiority`)
NO_CALL = "exploratory: no call"  # the call cell of an exploratory comparison
SAME_CONFIG = "same config"


@dataclass
class Comparison:
    """One comparison: ``arm`` − ``ref`` on one benchmark and metric, paired by unit."""

    family: str  # PRINCIPAL or a declared family's name; EXPLORATORY; or STATED (no family declared: the one family)
    kind: str  # budget_vs_base; entropy_vs_budget / entropy_vs_base; arm_vs_budget / arm_vs_base; arm_vs_grpo(_budget); declared
    baseline: str
    arm: str
    ref: str
    benchmark: str
    metric: str  # "avg@n" or "pass@<k>"
    k: int
    arm_score: float  # mean over all the arm's units
    ref_score: float
    delta: PairedDelta  # over the common units: mean, t-interval (clipped to [−1, 1]), per-unit Δ, p
    hb_lo: float = math.nan  # hierarchical bootstrap interval (units, then problems within units)
    hb_hi: float = math.nan
    same_config: bool = False  # both arms ran the same training config: flagged, in no family
    p_holm: float = math.nan  # Holm-adjusted within its family; NaN when not in one
    significant: bool = False
    margin: float = math.nan  # the family's equivalence margin δ (a fraction); NaN: none stated
    p_tost: float = math.nan  # TOST p of |Δ| < δ, unadjusted; NaN without a margin or a test
    p_tost_holm: float = math.nan  # Holm-adjusted over the family's TOST p-values
    equivalent: bool = False
    detectable: float = math.nan  # smallest |Δ| (fraction) the family's test detects at its power with these units
    unequal: str = ""  # the compute keys on which the two arms' runs differ ("steps 120 ≠ 100"); "": equal compute
    test: str = "two_sided"  # or "noninferiority": p_tost is then the one-sided test against the margin, `better` its side
    better: str = "higher"
    sequential: object = None  # the call of a look, or an interim label (rbctl.report.sequential_calls.SequentialCall)

    @property
    def label(self) -> str:
        return f"{self.arm} − {self.ref}"


def compare(a: ArmScores, b: ArmScores, metric: str, kind: str, baseline: str, family: str,
            n_boot: int = 2000) -> Comparison:
    """Δ = a − b for ``metric``: "avg@n", "pass@k", or "pass" (pass@k at the largest common k). The
    scores are finite: `arm_scores` refuses counts that are not."""
    k = min(a.kmax, b.kmax) if metric in ("pass", "avg@n") else int(metric.split("@")[1])
    if k > min(a.kmax, b.kmax):
        raise UserError(f"{metric} of {a.arm} − {b.arm} on {a.benchmark}: the final evaluations have only "
                        f"n = {min(a.kmax, b.kmax)} samples per problem")
    kind_of = "avg" if metric == "avg@n" else "pass"
    pa, pb = a.per_unit(kind_of, k), b.per_unit(kind_of, k)
    d = paired_delta(pa, pb, bounds=DELTA_BOUNDS)
    hb = (math.nan, math.nan)  # withheld below the units where it covers (`MIN_HIERARCHICAL_UNITS`)
    if d.n >= MIN_HIERARCHICAL_UNITS:
        va, vb = a.values(kind_of, k), b.values(kind_of, k)
        hb = hierarchical_bootstrap_delta(va[[a.units.index(u) for u in d.units]],
                                          vb[[b.units.index(u) for u in d.units]], n_boot=n_boot)
    name = "avg@n" if kind_of == "avg" else f"pass@{k}"
    return Comparison(family, kind, baseline, a.arm, b.arm, a.benchmark, name, k, float(np.mean(list(pa.values()))),
                      float(np.mean(list(pb.values()))), d, *hb)


def stated_pairs(info: dict[str, tuple[str, str]]) -> list[tuple[str, str, str, str]]:
    """(kind, baseline, arm, ref) for every pair a report compares by default, from ``info[arm] =
    (baseline, variant)``."""
    out = []
    by_baseline = lambda baseline, v: sorted(a for a, (b, x) in info.items() if b == baseline and v(x))  # noqa: E731
    for baseline in sorted({b for b, _ in info.values()}):
        bases = by_baseline(baseline, lambda x: x == "base")
        budgets = by_baseline(baseline, lambda x: x == "budget")
        out += [("budget_vs_base", baseline, y, x) for x in bases for y in budgets]
        for arm in by_baseline(baseline, lambda x: x not in ("base", "budget")):
            kind = "entropy" if is_entropy_bonus(info[arm][1]) else "arm"
            out += [(f"{kind}_vs_budget", baseline, arm, y) for y in budgets]
            out += [(f"{kind}_vs_base", baseline, arm, x) for x in bases]
        if not budgets and baseline != "grpo":
            # an estimator that is itself the arm (an estimator arm such as MaxRL): against plain GRPO and GRPO + budget
            for arm in bases:
                out += [("arm_vs_grpo", baseline, arm, x) for x in by_baseline("grpo", lambda x: x == "base")]
                out += [("arm_vs_grpo_budget", baseline, arm, y) for y in by_baseline("grpo", lambda x: x == "budget")]
    return out


def compare_all(info: dict[str, tuple[str, str]], scores: dict[tuple[str, str], ArmScores],
                benchmarks: list[str], spec=None, same_config=lambda arm, ref: False,
                n_boot: int = 2000, unequal=lambda arm, ref: "") -> list[Comparison]:
    """The comparisons of every family ``spec`` declares (a `rbctl.config.sweep.Comparisons`, or None)
    and every stated pair that has final scores on both sides and is in no declared family. Each
    declared family is adjusted and called on its own (`apply_family`); the stated pairs are
    exploratory (no adjustment), or, without a ``spec``, the one family ``stated``.
    ``same_config(arm, ref)`` says whether two arms ran the same training config; such comparisons are
    flagged and adjusted in no family. ``unequal(arm, ref)`` names the compute keys on which their runs
    differ (`rbctl.config.sweep.COMPUTE_KEYS`, "" for none): kept on the comparison and said on its row."""
    out, declared, families = [], set(), []
    for fam in (spec.families_declared() if spec is not None else []):
        bench = fam.benchmark or (benchmarks[0] if benchmarks else None)
        members = [compare(scores[arm, bench], scores[ref, bench], fam.metric, "declared", info[arm][0], fam.name, n_boot)
                   for arm, ref in fam.pairs if (arm, bench) in scores and (ref, bench) in scores]
        declared |= {(arm, ref, bench, fam.metric) for arm, ref in fam.pairs}
        out += members
        families.append((fam, members))
    stated_family = EXPLORATORY if spec is not None else STATED
    stated = []
    for kind, baseline, arm, ref in stated_pairs(info):
        for bench in benchmarks:
            if (arm, bench) in scores and (ref, bench) in scores:
                mean_only = scores[arm, bench].mean_only or scores[ref, bench].mean_only
                for metric in ("avg@n",) if mean_only else ("avg@n", "pass"):  # a mean's pass@1 is itself
                    c = compare(scores[arm, bench], scores[ref, bench], metric, kind, baseline, stated_family, n_boot)
                    if (arm, ref, bench, c.metric) not in declared:
                        stated.append(c)
    out += stated
    for c in out:
        c.same_config = same_config(c.arm, c.ref)
        c.unequal = unequal(c.arm, c.ref)
    for fam, members in families:
        apply_family(members, fam.alpha, None if fam.margin is None else fam.margin / 100, fam.power)
    if spec is None:
        apply_family(stated, ALPHA)
    return out


def apply_family(comps: list[Comparison], alpha: float = ALPHA, margin: float | None = None,
                 power: float = POWER) -> list[Comparison]:
    """Adjust and prepare the calls of one declared family (docs/method.md, "Comparing arms"): Holm–
    Bonferroni at ``alpha`` over the superiority p-values of its members counted in it (`in_family`),
    and, with an equivalence ``margin`` δ (a fraction), over their TOST p-values alike; each member's
    detectable effect is the |Δ| its t-test detects with probability ``power`` at level α/m (m the
    members counted; Holm's first step) with its own units and measured sd(Δ)."""
    counted = [c for c in comps if in_family(c)]
    m = max(1, len(counted))
    adj, reject = holm([c.delta.p for c in counted], alpha)
    for c, p, r in zip(counted, adj, reject):
        c.p_holm, c.significant = float(p), bool(r)
        c.detectable = mde_paired(c.delta.sd, c.delta.n, alpha / m, power)
    if margin is not None:
        for c in comps:
            c.margin = margin
        p_tost = [tost_paired(c.delta, margin) for c in counted]
        adj, reject = holm(p_tost, alpha)
        for c, p0, p, r in zip(counted, p_tost, adj, reject):
            c.p_tost, c.p_tost_holm, c.equivalent = p0, float(p), bool(r)
    return comps


def apply_noninferiority(comps: list[Comparison], alpha: float, margin: float, better: str = "higher") -> None:
    """A non-inferiority family (docs/method.md, studies): per counted member the one-sided test that Δ
    is not worse than ``margin`` (a fraction; `rbctl.report.stats.noninferiority_paired`), Holm over the
    members at ``alpha``; held in ``p_tost``/``p_tost_holm``/``equivalent`` with ``test`` set, so that
    `call` says "non-inferior" or "inconclusive" (`apply_family` ran first: its superiority p stays,
    unused by the call)."""
    counted = [c for c in comps if in_family(c)]
    for c in comps:
        c.margin, c.test, c.better = margin, "noninferiority", better
    ps = [noninferiority_paired(c.delta, margin, better) for c in counted]
    adj, reject = holm(ps, alpha)
    for c, p0, p, r in zip(counted, ps, adj, reject):
        c.p_tost, c.p_tost_holm, c.equivalent = p0, float(p), bool(r)


def call_word(d: PairedDelta, significant: bool, equivalent: bool = False) -> str:
    """The call of a family's member from its test results: "higher" / "lower" (superiority rejected,
    by the sign of Δ), "equivalent" (TOST rejected, superiority not), "inconclusive" (neither), or
    "not testable". A member both significant and equivalent (a difference smaller than the margin)
    is called by its direction; its row shows the equivalence too."""
    if not d.testable or not math.isfinite(d.p):
        return NOT_TESTABLE
    if significant:
        return HIGHER if d.mean > 0 else LOWER
    return EQUIVALENT if equivalent else INCONCLUSIVE


def verdicts(deltas: list[PairedDelta], alpha: float = ALPHA, margin: float | None = None) -> list[str]:
    """The call of each comparison of one family (`call_word`), Holm-adjusted at ``alpha``; with an
    equivalence ``margin`` (a fraction) the TOST p-values are adjusted alike."""
    _, reject = holm([d.p for d in deltas], alpha)
    eq = [False] * len(deltas)
    if margin is not None:
        _, eq = holm([tost_paired(d, margin) for d in deltas], alpha)
    return [call_word(d, r, e) for d, r, e in zip(deltas, reject, eq)]


def call(c: Comparison) -> str:
    """The call word of one comparison (`call_word`) once its family was adjusted (`apply_family`):
    "same config" for a flagged one, `NO_CALL` for an exploratory one."""
    if c.same_config:
        return SAME_CONFIG
    if c.sequential is not None:  # fewer units than the design's, or a sequential design's look
        return c.sequential.word
    if c.family == EXPLORATORY:
        return NOT_TESTABLE if not c.delta.testable else NO_CALL
    if c.test == "noninferiority":
        return NOT_TESTABLE if not c.delta.testable else NONINFERIOR if c.equivalent else INCONCLUSIVE
    return call_word(c.delta, c.significant, c.equivalent)


def call_text(c: Comparison, scale: float = 100.0, unit: str = "points") -> str:
    """The call as a row prints it: "higher", "lower", "equivalent within ±5" (points), or
    "inconclusive (Δ < 0; detectable ≥ 16.3 points)": the direction of the observed Δ and the smallest
    |Δ| the design detects with these units (`Comparison.detectable`); a significant member that is
    also equivalent adds "(within ±δ)". Δ, margin and detectable effect are printed × ``scale`` in
    ``unit`` (points of a fraction by default; a comparison of steps passes 1 and "steps")."""
    word = call(c)
    if c.sequential is not None and word != SAME_CONFIG:
        return c.sequential.text
    margin = f"±{scale * c.margin:g}" if math.isfinite(c.margin) else ""
    if c.test == "noninferiority" and word in (NONINFERIOR, INCONCLUSIVE):
        bound = f"Δ {'>' if c.better == 'higher' else '<'} {'−' if c.better == 'higher' else '+'}{scale * c.margin:g} {unit}"
        return f"non-inferior ({bound})" if word == NONINFERIOR else f"inconclusive (not shown {bound})"
    if word == EQUIVALENT:
        return f"equivalent within {margin}"
    if word in (HIGHER, LOWER) and c.equivalent:
        return f"{word} (within {margin})"
    if word == INCONCLUSIVE:
        sign = "Δ > 0" if c.delta.mean > 0 else "Δ < 0" if c.delta.mean < 0 else "Δ = 0"
        places = 1 if unit in ("points", "steps") else 3  # a training metric in its own units: to a thousandth
        det = (f"detectable ≥ {scale * c.detectable:.{places}f} {unit}" if math.isfinite(c.detectable)
               else "detectable effect unknown")
        return f"inconclusive ({sign}; {det})"
    return word


def deciding_p(c: Comparison) -> tuple[str, float]:
    """The p-value that decided the call, and its name: the Holm-adjusted TOST p for "equivalent"
    (the test that rejected |Δ| ≥ δ), the Holm-adjusted superiority p otherwise (the test that rejected
    Δ = 0 for "higher"/"lower", or did not, for "inconclusive")."""
    if c.test == "noninferiority" and c.family != EXPLORATORY:
        return "non-inferiority Holm p", c.p_tost_holm
    if call(c) == EQUIVALENT:
        return "TOST Holm p", c.p_tost_holm
    return "Holm p", c.p_holm


def reading_p(c: Comparison, word: str) -> tuple[str, float]:
    """The p that decided the call a rule reads, ``word``: the TOST Holm p where an equivalence rule
    reads a member within the margin as "equivalent" (even one called by its direction, "lower (within
    ±5)"), else `deciding_p`."""
    if word == EQUIVALENT and c.equivalent and c.test == "two_sided":
        return "TOST Holm p", c.p_tost_holm
    return deciding_p(c)


def in_family(c: Comparison) -> bool:
    """Whether a comparison counts in its Holm family: not flagged as the same config, and testable."""
    return not c.same_config and c.delta.testable


def untestable_note(comps: list[Comparison]) -> str:
    """A sentence naming the comparisons that are not testable and why, or ""."""
    out = [f"{c.label} ({c.metric}: {c.delta.untestable})" for c in comps if not c.same_config and not c.delta.testable]
    return ("**Not testable** (no p-value and no verdict; kept out of the Holm family): " + "; ".join(out) + ".") if out else ""


# The fewest units P(improvement)'s bootstrap intervals are shown with. n units have C(2n − 1, n)
# distinct resamples: 10 at n = 3, 35 at n = 4, 126 at n = 5. Below 5 the percentile interval is
# a quantile of a handful of values and lands on the estimate itself ("0.67 [0.67, 1.00]" at 3
# seeds: no uncertainty shown on one side); the estimate is then shown alone (docs/method.md).
MIN_BOOTSTRAP_UNITS = 5


def p_improvement(scores: dict[tuple[str, str], ArmScores], c: Comparison, n_boot: int) -> dict[str, float]:
    """P(arm > ref) over the comparison's common units, with its paired bootstrap interval (units
    resampled, each unit's two runs together) and rliable's independent stratified bootstrap one;
    the intervals are NaN (withheld) with fewer than `MIN_BOOTSTRAP_UNITS` units, and each one that
    does not contain the estimate."""
    a, b = scores[c.arm, c.benchmark], scores[c.ref, c.benchmark]
    kind = "avg" if c.metric == "avg@n" else "pass"
    pa, pb = a.per_unit(kind, c.k), b.per_unit(kind, c.k)
    return improvement_intervals(np.array([[pa[u]] for u in c.delta.units]),
                                 np.array([[pb[u]] for u in c.delta.units]), n_boot)


def improvement_intervals(x: np.ndarray, y: np.ndarray, n_boot: int) -> dict[str, float]:
    """`p_improvement` of the units' scores ``x``, ``y`` (``[units, 1]``, row i of each the same unit)."""
    out = dict.fromkeys(("p_improve", "p_improve_paired_lo", "p_improve_paired_hi", "p_improve_indep_lo",
                         "p_improve_indep_hi"), math.nan)
    if len(x):
        out["p_improve"] = est = prob_improvement(x, y)
    if len(x) >= MIN_BOOTSTRAP_UNITS:
        for name, paired in (("paired", True), ("indep", False)):
            lo, hi = stratified_bootstrap(prob_improvement, [x, y], paired=paired, n_boot=n_boot)
            if lo <= est <= hi:
                out[f"p_improve_{name}_lo"], out[f"p_improve_{name}_hi"] = lo, hi
    return out


def comparison_rows(scores: dict[tuple[str, str], ArmScores], comps: list[Comparison], n_boot: int) -> pd.DataFrame:
    """The numbers of each comparison (one row each; fractions): what comparisons.csv holds."""
    rows = []
    for c in comps:
        d = c.delta
        rows.append({"family": c.family, "kind": c.kind, "baseline": c.baseline, "arm": c.arm, "ref": c.ref,
                     "benchmark": c.benchmark, "metric": c.metric, "k": c.k, "arm_score": c.arm_score,
                     "ref_score": c.ref_score, "delta": d.mean, "delta_lo": d.lo, "delta_hi": d.hi, "sd": d.sd,
                     "p": d.p, "p_holm": c.p_holm, "significant": c.significant, "same_config": c.same_config,
                     "not_testable": d.untestable, "verdict": call(c), "call": call_text(c),
                     # what decided a sequential design's call (its look's test), "" for a fixed design's
                     "look_test": c.sequential.test if c.sequential is not None and not c.same_config else "",
                     "margin": c.margin, "p_tost": c.p_tost, "p_tost_holm": c.p_tost_holm, "equivalent": c.equivalent,
                     "detectable": c.detectable, "unequal_compute": c.unequal, "seeds": d.n,
                     "seed_list": ",".join(unit_label(u) for u in d.units),
                     "per_seed_delta": ",".join(f"{x:.4f}" for x in d.deltas), "hb_lo": c.hb_lo, "hb_hi": c.hb_hi,
                     **p_improvement(scores, c, n_boot)})
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class ComparisonSet:
    """Every comparison of a report (principal, exploratory or stated; `compare_all`) and their
    numbers, one row each (`comparison_rows`)."""

    comparisons: tuple[Comparison, ...]
    rows: pd.DataFrame
    principal_declared: bool  # the sweep file states principal comparisons

    def family(self, name: str) -> list[Comparison]:
        return [c for c in self.comparisons if c.family == name]

    @property
    def headline(self) -> list[Comparison]:
        """The comparisons whose verdicts the report's answer calls: the principal family, or, without
        one, the stated pairs (the one family)."""
        return self.family(PRINCIPAL if self.principal_declared else STATED)

    @property
    def further_families(self) -> list[str]:
        """The names of the declared families beside the principal one, in the sweep file's order."""
        names = []
        for c in self.comparisons:
            if c.family not in (PRINCIPAL, EXPLORATORY, STATED) and c.family not in names:
                names.append(c.family)
        return names


def comparisons(info: dict[str, tuple[str, str]], scores: dict[tuple[str, str], ArmScores], benchmarks: list[str],
                spec=None, same_config=lambda arm, ref: False, n_boot: int = 2000,
                unequal=lambda arm, ref: "", calls=None) -> ComparisonSet:
    """`compare_all` and the numbers of every comparison (with P(improvement) and its intervals);
    ``calls(comparisons)``, when given, sets the calls of a design's looks or its interim labels
    (`rbctl.report.sequential_calls.Interim.attach`) before the numbers are taken."""
    comps = compare_all(info, scores, benchmarks, spec, same_config, n_boot, unequal)
    if calls is not None:
        calls(comps)
    return ComparisonSet(tuple(comps), comparison_rows(scores, comps, n_boot), spec is not None)
