"""Scoring arms on their final evaluations: each arm's ``correct[unit, problem]`` on the problems
every run evaluated (`ArmScores`), and the final-scores analysis of a report (`final_scores`): per
arm and benchmark the mean over units with its interval, rliable's IQM, score distributions and
pass@k curves (docs/method.md, "Comparing arms").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from rbctl.errors import UserError
from rbctl.grading.metrics import bootstrap_ci, pass_at_k
from rbctl.report.load import Issue, Run, unit_label
from rbctl.report.robust import iqm, iqm_interval, score_distribution, stratified_bootstrap
from rbctl.report.stats import bounded_t_interval


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
    mean_only: bool = False  # each run logged only its mean score: correct [S, 1] holds it (a float), n = 1

    @property
    def accuracy(self) -> np.ndarray:
        """c/n per (seed, problem), ``[S, P]``; its mean is avg@n."""
        return self.correct / self.n

    @property
    def kmax(self) -> int:
        return int(self.n.min())

    def pass_at(self, k: int) -> np.ndarray:
        """Unbiased pass@k per (seed, problem), ``[S, P]``; of a logged mean only pass@1, the mean itself."""
        if self.mean_only:
            if k != 1:
                raise UserError(f"{self.arm} on {self.benchmark}: the runs logged a mean score only, so pass@{k} "
                                "(k > 1) is not known; compare avg@n")
            return self.accuracy
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
    """Stack one arm's seeds (``runs`` all of one arm, each with ``benchmark`` evaluated). A summary
    marked ``mean_only`` (a run logged its mean score per evaluation, not per problem: `rbctl.report.sources`)
    is one "problem" holding that mean; such runs are never mixed with per-problem ones."""
    kinds = {bool(r.finals[benchmark].get("mean_only")) for r in runs}
    if len(kinds) > 1:
        raise UserError(f"arm {runs[0].arm} on {benchmark}: some runs logged per-problem evaluations, others a mean "
                        "score only; report them separately")
    if kinds == {True}:
        values = [float(r.finals[benchmark]["per_problem"][0]["correct"]) for r in runs]
        return ArmScores(runs[0].arm, benchmark, [r.unit for r in runs], ids, np.array(values)[:, None],
                         np.ones((len(runs), 1), dtype=int), [r.final_step for r in runs], mean_only=True)
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


def score_arms(runs: list[Run], arms: list[str]) -> tuple[dict[tuple[str, str], ArmScores], list[str], list[Issue]]:
    """Per (arm, benchmark) the arm's scores on the problems every run with that benchmark's final
    evaluation shares; remarks on the data (shown with the final scores); and the benchmarks whose
    runs share no problem (issues)."""
    out, notes, issues = {}, [], []
    for bench in sorted({b for r in runs for b in r.finals}):
        having = [r for r in runs if bench in r.finals and r.finals[bench].get("per_problem")]
        ids = common_problems(having, bench) if having else []
        if not ids:
            issues.append(Issue(bench, "no shared problems", "the runs' final evaluations share no problem id"))
            continue
        if {len(r.finals[bench]["per_problem"]) for r in having} != {len(ids)}:
            notes.append(f"{bench} is scored on the {len(ids)} problems every run evaluated.")
        for arm in arms:
            arm_runs = [r for r in having if r.arm == arm]
            if arm_runs:
                out[arm, bench] = arm_scores(arm_runs, bench, ids)
    return out, notes, issues


T_OVER_UNITS, BOOTSTRAP_ONE_UNIT = "t over units", "bootstrap over problems (1 unit)"
PROFILE_STEP = 0.005  # τ grid of the score distributions, in fractions


def _interval(per_unit: list[float], single_problem_values=None) -> tuple[float, float, float, str]:
    """(mean, lo, hi, basis): t-interval over units clipped to the score's range [0, 1]; with one unit
    a bootstrap over its problems (inside [0, 1] by construction)."""
    if len(per_unit) >= 2 or single_problem_values is None:
        return (*bounded_t_interval(per_unit), T_OVER_UNITS)
    return (float(per_unit[0]), *bootstrap_ci(single_problem_values), BOOTSTRAP_ONE_UNIT)


def _score_row(info: dict[str, tuple[str, str]], sc: ArmScores) -> dict:
    row = {"arm": sc.arm, "baseline": info[sc.arm][0], "variant": info[sc.arm][1], "benchmark": sc.benchmark,
           "seeds": len(sc.units), "seed_list": ",".join(unit_label(u) for u in sc.units), "problems": len(sc.ids),
           "n": sc.kmax, "k": sc.kmax, "eval_steps": ",".join(map(str, sorted(set(sc.steps))))}
    for name, values in (("avg", sc.accuracy), ("pass_k", sc.pass_at(sc.kmax))):
        per_unit = list(values.mean(axis=1))
        m, lo, hi, basis = _interval(per_unit, values[0] if len(per_unit) == 1 else None)
        row.update({name: m, f"{name}_lo": lo, f"{name}_hi": hi, f"{name}_per_seed": ",".join(f"{v:.4f}" for v in per_unit)})
    row["interval"] = basis
    m, lo, hi = bounded_t_interval([sc.maj[u] for u in sc.units]) if sc.maj else (math.nan,) * 3
    row.update({"maj_k": sc.maj_k, "maj": m, "maj_lo": lo, "maj_hi": hi})
    return row


def _robust(scores: dict[tuple[str, str], ArmScores], arms: list[str], benchmarks: list[str],
            n_boot: int) -> pd.DataFrame:
    """Per arm and metric: the IQM over runs × benchmarks (rliable), its stratified bootstrap interval
    (strata = benchmarks), over the units the arm has on every benchmark."""
    rows = []
    for arm in arms:
        benches = [b for b in benchmarks if (arm, b) in scores]
        if not benches:
            continue
        units = sorted(set.intersection(*(set(scores[arm, b].units) for b in benches)))
        for metric in ("avg", "pass"):
            per = [scores[arm, b].per_unit(metric) for b in benches]
            x = np.array([[p[u] for p in per] for u in units])  # [units, benchmarks]
            lo, hi = iqm_interval(x, n_boot) if len(units) else (math.nan, math.nan)  # withheld below MIN_IQM_UNITS
            rows.append({"arm": arm, "metric": "avg@n" if metric == "avg" else "pass@n", "benchmarks": ",".join(benches),
                         "units": len(units), "iqm": iqm(x) if len(units) else math.nan, "iqm_lo": lo, "iqm_hi": hi,
                         "mean": float(x.mean()) if len(units) else math.nan})
    return pd.DataFrame(rows)


def _profiles(scores: dict[tuple[str, str], ArmScores], metric: str, bench: str,
              n_boot: int) -> dict[str, pd.DataFrame]:
    """Score distributions of ``metric`` (avg@n or pass@k) on ``bench``: per arm, over τ, the fraction
    of units scoring above τ with its bootstrap band (columns tau, value, lo, hi)."""
    taus = np.round(np.arange(0.0, 1.0 + PROFILE_STEP / 2, PROFILE_STEP), 6)
    profiles = {}
    for (arm, b), sc in sorted(scores.items()):
        if b != bench:
            continue
        k = None if metric == "avg@n" else int(metric.split("@")[1])
        if k is not None and k > sc.kmax:
            continue
        x = np.array(list(sc.per_unit("avg" if k is None else "pass", k).values()))[:, None]
        lo, hi = stratified_bootstrap(lambda s: score_distribution(s, taus), [x], n_boot=n_boot)
        profiles[arm] = pd.DataFrame({"tau": taus, "value": score_distribution(x, taus), "lo": lo, "hi": hi})
    return profiles


@dataclass(frozen=True)
class FinalScores:
    """The final-scores analysis: one row per (arm, benchmark) (`rows`: tables/final_scores.csv), the
    IQM per arm and metric (`iqm`), the score distributions of the principal metric on its benchmark
    (`profiles[arm]`, of `profile_metric` on `profile_benchmark`) and pass@k for k = 1 … n
    (`pass_at_k`: arm, benchmark, k, value, lo, hi, seeds)."""

    rows: pd.DataFrame
    iqm: pd.DataFrame
    profile_metric: str
    profile_benchmark: str
    profiles: dict[str, pd.DataFrame]
    pass_at_k: pd.DataFrame


def final_scores(scores: dict[tuple[str, str], ArmScores], info: dict[str, tuple[str, str]], arms: list[str],
                 benchmarks: list[str], spec=None, n_boot: int = 2000) -> FinalScores | None:
    """The final-scores analysis of ``scores`` (None without any); ``spec`` (the sweep's
    `rbctl.config.sweep.Comparisons`, or None) names the principal metric and benchmark of the score
    distributions (avg@n on the first benchmark without it)."""
    if not scores:
        return None
    rows = pd.DataFrame([_score_row(info, sc) for _, sc in sorted(scores.items(), key=lambda kv: (kv[0][1], kv[0][0]))])
    metric = spec.metric if spec is not None else "avg@n"
    bench = (spec.benchmark if spec is not None else None) or benchmarks[0]
    curve_rows = []
    for (arm, b), sc in sorted(scores.items()):
        for k in range(1, sc.kmax + 1):
            v, lo, hi = bounded_t_interval(list(sc.pass_at(k).mean(axis=1)))
            curve_rows.append({"arm": arm, "benchmark": b, "k": k, "value": v, "lo": lo, "hi": hi, "seeds": len(sc.units)})
    return FinalScores(rows, _robust(scores, arms, benchmarks, n_boot), metric, bench,
                       _profiles(scores, metric, bench, n_boot), pd.DataFrame(curve_rows))
