"""Scoring arms on their final evaluations and comparing them, unit by unit (a unit is a seed, or
a (warm start, seed) pair: what two arms' runs share).

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
from dataclasses import dataclass, field

import numpy as np

from rbctl.errors import UserError
from rbctl.report.load import Run
from rbctl.grading.metrics import pass_at_k
from rbctl.report.stats import DELTA_BOUNDS, PairedDelta, hierarchical_bootstrap_delta, holm, paired_delta
from rbctl.report.tables import NOT_TESTABLE

ALPHA = 0.05


@dataclass
class ArmScores:
    """One arm's final evaluation on one benchmark: ``correct[s, p]`` of ``n[s, p]`` samples."""

    arm: str
    benchmark: str
    units: list[tuple]  # [S] each run's unit: (warm start or "", seed)
    ids: list[str]  # [P]
    correct: np.ndarray  # [S, P] int
    n: np.ndarray  # [S, P] int
    steps: list[int]  # [S] step of each run's final evaluation
    maj: dict[tuple, float] = field(default_factory=dict)  # unit -> maj@k of its summary (all its problems)
    maj_k: int | None = None

    @property
    def accuracy(self) -> np.ndarray:
        """c/n per (seed, problem), ``[S, P]``; its mean is avg@n."""
        return self.correct / self.n

    @property
    def kmax(self) -> int:
        return int(self.n.min())

    def pass_at(self, k: int) -> np.ndarray:
        """Unbiased pass@k per (seed, problem), ``[S, P]``."""
        return pass_at_k(self.n, self.correct, k)

    def values(self, metric: str, k: int | None = None) -> np.ndarray:
        """``[S, P]`` of avg@n (``metric == "avg"``) or pass@k (default k = n)."""
        return self.accuracy if metric == "avg" else self.pass_at(k or self.kmax)

    def per_unit(self, metric: str, k: int | None = None) -> dict[tuple, float]:
        """``{unit: score}``: each run's mean over the problems."""
        return dict(zip(self.units, map(float, self.values(metric, k).mean(axis=1))))


def common_problems(runs: list[Run], benchmark: str) -> list[str]:
    """Ids present in every run's final ``benchmark`` evaluation, in the first run's order."""
    id_lists = [[str(p["id"]) for p in r.finals[benchmark].get("per_problem", [])] for r in runs]
    shared = set(id_lists[0]).intersection(*id_lists[1:])
    return [i for i in id_lists[0] if i in shared]


def _maj(summary: dict, n: int) -> tuple[int, float] | None:
    """(k, maj@k) of a summary at the largest logged k ≤ n."""
    found = []
    for key, v in (summary.get("metrics") or {}).items():
        if key.startswith("maj@") and key[4:].isdigit() and int(key[4:]) <= n:
            found.append((int(key[4:]), v.get("value") if isinstance(v, dict) else v))
    found = [(k, float(v)) for k, v in found if isinstance(v, (int, float))]
    return max(found) if found else None


def arm_scores(runs: list[Run], benchmark: str, ids: list[str]) -> ArmScores:
    """Stack one arm's seeds (``runs`` all of one arm, each with ``benchmark`` evaluated)."""
    correct, n = [], []
    for r in runs:
        by_id = {str(p["id"]): p for p in r.finals[benchmark]["per_problem"]}
        try:
            c = [int(by_id[i]["correct"]) for i in ids]
            m = [int(by_id[i].get("n", r.finals[benchmark].get("n"))) for i in ids]
        except (KeyError, TypeError, ValueError) as e:
            raise UserError(f"run {r.name} ({r.path}): final evaluation on {benchmark} has a per_problem entry "
                            f"without integer 'correct' and 'n' ({e})") from None
        bad = [i for i, ci, ni in zip(ids, c, m) if not 0 <= ci <= ni or ni < 1]
        if bad:
            raise UserError(f"run {r.name} ({r.path}): final evaluation on {benchmark}, problem {bad[0]}: need "
                            "0 <= correct <= n and n >= 1, so its score is not a number")
        correct.append(c)
        n.append(m)
    sc = ArmScores(runs[0].arm, benchmark, [r.unit for r in runs], ids, np.array(correct), np.array(n),
                   [r.final_step for r in runs])
    majs = {r.unit: _maj(r.finals[benchmark], sc.kmax) for r in runs}
    ks = {m[0] for m in majs.values() if m}
    if len(ks) == 1 and all(majs.values()):  # only when every run logged the same maj@k
        sc.maj_k = ks.pop()
        sc.maj = {s: m[1] for s, m in majs.items()}
    return sc


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


def all_comparisons(info: dict[str, tuple[str, str]], scores: dict[tuple[str, str], ArmScores],
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


def verdict(c: Comparison) -> str:
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
