"""Scoring arms on their final evaluations and comparing them, seed by seed.

Which comparisons a report states (docs/method.md, "Comparing arms"):
- each baseline + budget vs that baseline;
- each entropy-bonus arm vs its baseline + budget and vs its baseline;
on every benchmark, for avg@n (pass@1 from n samples) and pass@k at k = n. The family of all
stated comparisons is Holm–Bonferroni adjusted (`apply_holm`), and `verdict` calls a difference
only when its adjusted p-value is at most α.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from rbctl.report.load import Run
from rbctl.report.stats import (
    PairedDelta,
    hierarchical_bootstrap_delta,
    holm,
    paired_delta,
    pass_at_k_matrix,
)

ALPHA = 0.05


@dataclass
class ArmScores:
    """One arm's final evaluation on one benchmark: ``correct[s, p]`` of ``n[s, p]`` samples."""

    arm: str
    benchmark: str
    seeds: list[int]  # [S]
    ids: list[str]  # [P]
    correct: np.ndarray  # [S, P] int
    n: np.ndarray  # [S, P] int
    steps: list[int]  # [S] step of each seed's final evaluation
    maj: dict[int, float] = field(default_factory=dict)  # seed -> maj@k of its summary (all its problems)
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
        return pass_at_k_matrix(self.n, self.correct, k)

    def values(self, metric: str, k: int | None = None) -> np.ndarray:
        """``[S, P]`` of avg@n (``metric == "avg"``) or pass@k (default k = n)."""
        return self.accuracy if metric == "avg" else self.pass_at(k or self.kmax)

    def per_seed(self, metric: str, k: int | None = None) -> dict[int, float]:
        """``{seed: score}``: each seed's mean over the problems."""
        return dict(zip(self.seeds, map(float, self.values(metric, k).mean(axis=1))))


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
        correct.append([int(by_id[i]["correct"]) for i in ids])
        n.append([int(by_id[i].get("n", r.finals[benchmark].get("n"))) for i in ids])
    sc = ArmScores(runs[0].arm, benchmark, [r.seed for r in runs], ids, np.array(correct), np.array(n),
                   [r.final_step for r in runs])
    majs = {r.seed: _maj(r.finals[benchmark], sc.kmax) for r in runs}
    ks = {m[0] for m in majs.values() if m}
    if len(ks) == 1 and all(majs.values()):  # only when every seed logged the same maj@k
        sc.maj_k = ks.pop()
        sc.maj = {s: m[1] for s, m in majs.items()}
    return sc


@dataclass
class Comparison:
    """One stated comparison: ``arm`` − ``ref`` on one benchmark and metric, paired by seed."""

    kind: str  # budget_vs_base; entropy_vs_budget / entropy_vs_base; arm_vs_budget / arm_vs_base; arm_vs_grpo(_budget)
    baseline: str
    arm: str
    ref: str
    benchmark: str
    metric: str  # "avg@n" or "pass@<k>"
    k: int
    arm_score: float  # mean over all the arm's seeds
    ref_score: float
    delta: PairedDelta  # over the common seeds: mean, t-interval, per-seed Δ, p
    hb_lo: float = math.nan  # hierarchical bootstrap interval (seeds, then problems within seeds)
    hb_hi: float = math.nan
    p_holm: float = math.nan
    significant: bool = False

    @property
    def label(self) -> str:
        return f"{self.arm} vs {self.ref}"


def compare(a: ArmScores, b: ArmScores, metric: str, kind: str, baseline: str, n_boot: int = 2000) -> Comparison:
    """Δ = a − b for ``metric`` ("avg" or "pass", pass@k at the largest common k)."""
    k = min(a.kmax, b.kmax)
    pa, pb = a.per_seed(metric, k), b.per_seed(metric, k)
    d = paired_delta(pa, pb)
    hb = (math.nan, math.nan)
    if d.n >= 2:
        va, vb = a.values(metric, k), b.values(metric, k)
        rows_a = [a.seeds.index(s) for s in d.seeds]
        rows_b = [b.seeds.index(s) for s in d.seeds]
        hb = hierarchical_bootstrap_delta(va[rows_a], vb[rows_b], n_boot=n_boot)
    name = "avg@n" if metric == "avg" else f"pass@{k}"
    return Comparison(kind, baseline, a.arm, b.arm, a.benchmark, name, k, float(np.mean(list(pa.values()))),
                      float(np.mean(list(pb.values()))), d, *hb)


def stated_pairs(info: dict[str, tuple[str, str]]) -> list[tuple[str, str, str, str]]:
    """(kind, baseline, arm, ref) for every comparison a report states, from ``info[arm] = (baseline,
    variant)``."""
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
            # an estimator that is itself the arm (e.g. maxrl, passk): against plain GRPO and GRPO + budget
            for arm in bases:
                out += [("arm_vs_grpo", baseline, arm, x) for x in by_baseline("grpo", lambda x: x == "base")]
                out += [("arm_vs_grpo_budget", baseline, arm, y) for y in by_baseline("grpo", lambda x: x == "budget")]
    return out


def all_comparisons(info: dict[str, tuple[str, str]], scores: dict[tuple[str, str], ArmScores],
                    benchmarks: list[str], n_boot: int = 2000, alpha: float = ALPHA) -> list[Comparison]:
    """Every stated comparison that has final scores on both sides, Holm-adjusted as one family."""
    out = []
    for kind, baseline, arm, ref in stated_pairs(info):
        for bench in benchmarks:
            if (arm, bench) in scores and (ref, bench) in scores:
                for metric in ("avg", "pass"):
                    out.append(compare(scores[arm, bench], scores[ref, bench], metric, kind, baseline, n_boot))
    return apply_holm(out, alpha)


def apply_holm(comps: list[Comparison], alpha: float = ALPHA) -> list[Comparison]:
    """Set ``p_holm`` and ``significant`` of every comparison (one Holm–Bonferroni family)."""
    adj, reject = holm([c.delta.p for c in comps], alpha)
    for c, p, r in zip(comps, adj, reject):
        c.p_holm, c.significant = float(p), bool(r)
    return comps


def verdicts(deltas: list[PairedDelta], alpha: float = ALPHA) -> list[str]:
    """The summary's verdict per comparison of one family: "higher", "lower", "no difference" (not
    significant after Holm–Bonferroni at ``alpha``) or "untestable" (fewer than 2 common seeds)."""
    _, reject = holm([d.p for d in deltas], alpha)
    out = []
    for d, r in zip(deltas, reject):
        if d.n < 2 or not math.isfinite(d.p):
            out.append("untestable")
        elif r:
            out.append("higher" if d.mean > 0 else "lower")
        else:
            out.append("no difference")
    return out


def verdict(c: Comparison) -> str:
    """`verdicts` for one comparison whose family was already adjusted (`apply_holm`)."""
    if c.delta.n < 2 or not math.isfinite(c.delta.p):
        return "untestable"
    if c.significant:
        return "higher" if c.delta.mean > 0 else "lower"
    return "no difference"


def _pts(v: float) -> str:
    return f"{100 * v:+.1f}"


def sentence(c: Comparison, family: int) -> str:
    """The summary's line for one comparison: verdict, Δ, t-interval (unadjusted), per-seed Δ, seeds,
    Holm-adjusted p."""
    d = c.delta
    seeds = ", ".join(f"{_pts(x)}" for x in d.deltas)
    basis = f"paired by seed, n = {d.n} seed{'s' * (d.n != 1)}; per-seed Δ: {seeds}"
    v = verdict(c)
    head = f"{c.label} on {c.benchmark}, {c.metric}"
    if v == "untestable":
        return (f"{head}: Δ {_pts(d.mean)} points; not tested ({basis}; a t-interval needs at least 2 common "
                "seeds).")
    ci = f"[{_pts(d.lo)}, {_pts(d.hi)}] (95% t-interval over seeds, unadjusted)"
    p = f"Holm-adjusted p = {c.p_holm:.3g} over {family} comparisons"
    if v == "no difference":
        return f"{head}: no significant difference, Δ {_pts(d.mean)} points {ci}; {p}; {basis}."
    word = "higher" if v == "higher" else "lower"
    return f"{head}: {word}, Δ {_pts(d.mean)} points {ci}; {p}; {basis}."
