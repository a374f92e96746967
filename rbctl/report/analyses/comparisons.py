"""Comparing arms on their final scores (`rbctl.report.analyses.scores`), unit by unit (a unit is a
seed, or a (warm start, seed) pair: what two arms' runs share).

Which comparisons a report makes (docs/method.md, "Comparing arms"):
- **principal**: the pairs the sweep file states before running (``comparisons.principal``), on its
  principal metric and benchmark: the only Holm–Bonferroni family whose verdicts the report calls;
- **exploratory**: every stated pair (`stated_pairs`: each baseline + budget vs that baseline, each
  other arm vs its baseline + budget and vs its baseline, standalone estimators vs GRPO ± budget) on
  every benchmark, avg@n and pass@k at k = n, that is not a principal comparison: unadjusted p, and
  a Holm adjustment over the exploratory family of its own.
A sweep without ``comparisons`` has no principal family: its stated pairs form the one family that
is adjusted and called, as before. A comparison whose two arms ran the same training config
(everything but the seed equal) is flagged and kept out of every family; so is one that is not
testable (fewer than 3 common units, or every unit's Δ the same: `rbctl.report.stats.PairedDelta`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

import pandas as pd

from rbctl.errors import UserError
from rbctl.report.analyses.scores import ArmScores
from rbctl.report.load import unit_label
from rbctl.report.robust import prob_improvement, stratified_bootstrap
from rbctl.report.stats import (DELTA_BOUNDS, NOT_TESTABLE, PairedDelta, hierarchical_bootstrap_delta, holm,
                                paired_delta)

ALPHA = 0.05


PRINCIPAL, EXPLORATORY, STATED = "principal", "exploratory", "stated"


@dataclass
class Comparison:
    """One comparison: ``arm`` − ``ref`` on one benchmark and metric, paired by unit."""

    family: str  # PRINCIPAL, EXPLORATORY, or STATED (no principal comparisons declared: the one family)
    kind: str  # budget_vs_base; entropy_vs_budget / entropy_vs_base; arm_vs_budget / arm_vs_base; arm_vs_grpo(_budget); principal
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
    hb = (math.nan, math.nan)
    if d.n >= 2:
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
            kind = "entropy" if info[arm][1] in ("entropy_static", "entropy_adaptive") else "arm"
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
                    n_boot: int = 2000) -> list[Comparison]:
    """The principal comparisons of ``spec`` (a `rbctl.config.sweep.Comparisons`, or None) and every
    stated pair that has final scores on both sides, each family Holm-adjusted on its own (principal
    at ``spec.alpha``, the others at `ALPHA`). ``same_config(arm, ref)`` says whether two arms ran the
    same training config; such comparisons are flagged and adjusted in no family."""
    out, principal = [], set()
    if spec is not None:
        bench = spec.benchmark or (benchmarks[0] if benchmarks else None)
        for arm, ref in spec.principal:
            if (arm, bench) in scores and (ref, bench) in scores:
                out.append(compare(scores[arm, bench], scores[ref, bench], spec.metric, "principal", info[arm][0],
                                   PRINCIPAL, n_boot))
            principal.add((arm, ref, bench))
    family = EXPLORATORY if spec is not None else STATED
    for kind, baseline, arm, ref in stated_pairs(info):
        for bench in benchmarks:
            if (arm, bench) in scores and (ref, bench) in scores:
                for metric in ("avg@n", "pass"):
                    c = compare(scores[arm, bench], scores[ref, bench], metric, kind, baseline, family, n_boot)
                    if not ((arm, ref, bench) in principal and c.metric == spec.metric):
                        out.append(c)
    for c in out:
        c.same_config = same_config(c.arm, c.ref)
    for fam in (PRINCIPAL, EXPLORATORY, STATED):
        apply_holm([c for c in out if c.family == fam and not c.same_config],
                   spec.alpha if spec is not None and fam == PRINCIPAL else ALPHA)
    return out


def apply_holm(comps: list[Comparison], alpha: float = ALPHA) -> list[Comparison]:
    """Set ``p_holm`` and ``significant`` of every comparison of one Holm–Bonferroni family; a
    comparison that is not testable (NaN p) is not counted in it and keeps a NaN ``p_holm``."""
    adj, reject = holm([c.delta.p for c in comps], alpha)
    for c, p, r in zip(comps, adj, reject):
        c.p_holm, c.significant = float(p), bool(r)
    return comps


def verdicts(deltas: list[PairedDelta], alpha: float = ALPHA) -> list[str]:
    """The verdict per comparison of one family: "higher", "lower", "no difference" (not significant
    after Holm–Bonferroni at ``alpha``) or "not testable" (fewer than 3 common units, or sd(Δ) = 0;
    not counted in the family)."""
    _, reject = holm([d.p for d in deltas], alpha)
    return [_call(d, r) for d, r in zip(deltas, reject)]


def _call(d: PairedDelta, significant: bool) -> str:
    if not d.testable or not math.isfinite(d.p):
        return NOT_TESTABLE
    if significant:
        return "higher" if d.mean > 0 else "lower"
    return "no difference"


def call(c: Comparison) -> str:
    """`verdicts` for one comparison whose family was already adjusted (`apply_holm`); "same config"
    for a flagged one."""
    return "same config" if c.same_config else _call(c.delta, c.significant)


def in_family(c: Comparison) -> bool:
    """Whether a comparison counts in its Holm family: not flagged as the same config, and testable."""
    return not c.same_config and c.delta.testable


def untestable_note(comps: list[Comparison]) -> str:
    """A sentence naming the comparisons that are not testable and why, or ""."""
    out = [f"{c.label} ({c.metric}: {c.delta.untestable})" for c in comps if not c.same_config and not c.delta.testable]
    return ("**Not testable** (no p-value and no verdict; kept out of the Holm family): " + "; ".join(out) + ".") if out else ""


def p_improvement(scores: dict[tuple[str, str], ArmScores], c: Comparison, n_boot: int) -> dict[str, float]:
    """P(arm > ref) over the comparison's common units, with its paired bootstrap interval (units
    resampled, each unit's two runs together) and rliable's independent stratified bootstrap one."""
    a, b = scores[c.arm, c.benchmark], scores[c.ref, c.benchmark]
    kind = "avg" if c.metric == "avg@n" else "pass"
    pa, pb = a.per_unit(kind, c.k), b.per_unit(kind, c.k)
    x = np.array([[pa[u]] for u in c.delta.units])
    y = np.array([[pb[u]] for u in c.delta.units])
    out = dict.fromkeys(("p_improve", "p_improve_paired_lo", "p_improve_paired_hi", "p_improve_indep_lo",
                         "p_improve_indep_hi"), math.nan)
    if len(x):
        out["p_improve"] = prob_improvement(x, y)
        out["p_improve_paired_lo"], out["p_improve_paired_hi"] = stratified_bootstrap(
            prob_improvement, [x, y], paired=True, n_boot=n_boot)
        out["p_improve_indep_lo"], out["p_improve_indep_hi"] = stratified_bootstrap(
            prob_improvement, [x, y], paired=False, n_boot=n_boot)
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
                     "not_testable": d.untestable, "verdict": call(c), "seeds": d.n,
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
        """The comparisons whose verdicts the report calls: the principal family, or, without one, the
        stated pairs (the one family)."""
        return self.family(PRINCIPAL if self.principal_declared else STATED)


def comparisons(info: dict[str, tuple[str, str]], scores: dict[tuple[str, str], ArmScores], benchmarks: list[str],
                spec=None, same_config=lambda arm, ref: False, n_boot: int = 2000) -> ComparisonSet:
    """`compare_all` and the numbers of every comparison (with P(improvement) and its intervals)."""
    comps = compare_all(info, scores, benchmarks, spec, same_config, n_boot)
    return ComparisonSet(tuple(comps), comparison_rows(scores, comps, n_boot), spec is not None)
