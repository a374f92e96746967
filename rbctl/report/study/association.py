"""The rules that test runs against each other rather than read a family's calls (`rbctl.config.study`:
`AssociationRule`, `TrendRule`; docs/method.md, studies): each tests per sweep, Holm over the claim's
sweeps, and calls each sweep by the sign of a significant statistic; the claim reads those calls like
a calls rule (`rbctl.report.study.rules.decide`).

**Association.** Pearson's r of a training measure x with the final held-out level y, with the arms'
own effects taken out (arm + unit residuals, or centred within arms). A t-test of r on N − rank − 1 df
holds α only when every arm is as noisy as the others: one arm 2× noisier in x and y weighs 16× in Σxy,
and it rejected in 8–41% of null trials at α 0.05 with one arm's noise ×2 to ×5 at the shipped shapes
(tests/unit/test_association_null.py). Here r is tested by **permuting the units**: y's units are
reordered against x's (every arm's run of a unit moves with it), every ordering up to `ENUMERATED`
compared, else `PERMUTATIONS` drawn with a fixed seed. With no association the residuals' unit columns
are exchangeable whatever each arm's noise (the units' own effects are fitted out), so the test is exact;
3 units give 6 orderings (p ≥ 1/6) and 4 give 24, so it needs about 5 units to reject at 0.05. With warm
starts the unit is the warm start (`level`): per warm start the residuals of its own runs' fit (arm +
seed within it), Σ x·y one value each, a t-test over the W warm starts (W − 1 df), so an association
specific to each warm start is noise, not replication. r printed is the residuals' correlation
Σxy/√(Σx²Σy²); over warm starts its interval is the t-interval of the mean value scaled alike.

**Trend.** Per unit the least-squares slope of the members' Δ on x, a t-test of the slopes over units
(`rbctl.report.analyses.trend`); the slopes of units are identically distributed whatever each arm's
noise, so unequal noise leaves it valid. With warm starts (`level`) each warm start's mean slope over
its seeds is the unit (W − 1 df): with a slope specific to each warm start the units of one warm start
are not independent, and the test over (warm start, seed) units rejected a zero mean slope in 10–31%
of trials (tests/unit/test_association_null.py).
"""

from __future__ import annotations

import itertools
import math
from typing import NamedTuple

import numpy as np
import pandas as pd

from rbctl.config.base import flatten
from rbctl.config.study import AssociationRule, TrendRule
from rbctl.errors import UserError
from rbctl.report.analyses.trend import trend
from rbctl.report.load import Run
from rbctl.report.render.tables import pval
from rbctl.report.series import final_heldout
from rbctl.report.stats import finite, holm, paired_delta, pearson_ci, tail_mean
from rbctl.report.study.families import FamilyResult
from rbctl.report.study.sweeps import Study, did_you_mean, logged_keys


def window_mean(run: Run, key: str, window: str, fraction: float) -> float:
    """A run's mean of ``key`` over its first ``fraction`` of logged steps (early) or its last quarter (late)."""
    vals = [m.get(key) for m in run.metrics if finite(m.get(key))]
    if not vals:
        return math.nan
    if window == "late":
        return tail_mean(vals)
    return float(np.mean(vals[:max(1, math.ceil(fraction * len(vals)))]))


class Association(NamedTuple):
    """r and its test: ``units`` the units (or warm starts) tested over; ``df`` the t-test's degrees of
    freedom over warm starts or arm means (0 for a permutation test); ``orderings`` the permutations a
    permutation test compared r with (0 for a t-test)."""

    r: float
    lo: float
    hi: float
    p: float
    units: int
    df: int
    orderings: int = 0


NOT_TESTABLE = Association(math.nan, math.nan, math.nan, math.nan, 0, 0)
ENUMERATED = 10_000  # up to this many orderings every one is compared (7 units: 5,040); beyond, PERMUTATIONS drawn
PERMUTATIONS = 9_999


def _grid(x, y, arms, units) -> tuple[np.ndarray, np.ndarray, list]:
    """The runs as ``[arms, units]`` matrices of x and y over the units every arm has (finite x and y),
    units in their order (warm start, then seed)."""
    cells = {(a, u): (float(xi), float(yi)) for xi, yi, a, u in zip(x, y, arms, units) if finite(xi) and finite(yi)}
    names = sorted(set(arms), key=str)
    complete = [u for u in sorted(set(units)) if all((a, u) in cells for a in names)]
    grid = np.array([[cells[a, u] for u in complete] for a in names], dtype=float).reshape(len(names), len(complete), 2)
    return grid[..., 0], grid[..., 1], complete


def _residual(m: np.ndarray, unit: str) -> np.ndarray:
    """Residual of the additive fit arm + unit (balanced: centred by row, then by column), or of the arm
    alone (``within_arm``: centred by row)."""
    m = m - m.mean(axis=1, keepdims=True)
    return m - m.mean(axis=0, keepdims=True) if unit == "arm_and_unit" else m


def permutation_p(g: np.ndarray, seed: int = 0) -> tuple[float, int]:
    """(two-sided p, orderings) of the permutation test over units of Σ_u g[u, u], ``g[u, v]`` = Σ over
    arms of x's residual at unit u times y's at unit v: every ordering of y's units against x's (all of
    them up to `ENUMERATED`, the identity included; else `PERMUTATIONS` drawn with ``seed``, p =
    (1 + as extreme) / (draws + 1)). Exact under no association: the residuals' columns are exchangeable
    whatever each arm's noise."""
    n = g.shape[0]
    obs = float(np.trace(g))
    tol = 1e-9 * max(1.0, float(np.abs(g).sum()))
    if math.factorial(n) <= ENUMERATED:
        perms = np.array(list(itertools.permutations(range(n))))
        null = g[np.arange(n), perms].sum(axis=1)
        return float(np.mean(np.abs(null) >= abs(obs) - tol)), len(perms)
    perms = np.random.default_rng(seed).permuted(np.tile(np.arange(n), (PERMUTATIONS, 1)), axis=1)
    null = g[np.arange(n), perms].sum(axis=1)
    return float((1 + np.sum(np.abs(null) >= abs(obs) - tol)) / (PERMUTATIONS + 1)), PERMUTATIONS


def _within_arms_alone(x, y, arms) -> Association:
    """No unit shared across arms: y permuted within each arm (every combination up to `ENUMERATED`)."""
    ok = np.isfinite(x) & np.isfinite(y)
    groups = [(x[ok][arms[ok] == a], y[ok][arms[ok] == a]) for a in sorted(set(arms[ok]), key=str)]
    groups = [(xa - xa.mean(), ya - ya.mean()) for xa, ya in groups if len(xa) >= 2]
    norm = math.sqrt(sum(float((xa ** 2).sum()) for xa, _ in groups) * sum(float((ya ** 2).sum()) for _, ya in groups))
    if not groups or not norm > 0:
        return NOT_TESTABLE
    obs = sum(float(xa @ ya) for xa, ya in groups)
    total = math.prod(math.factorial(len(xa)) for xa, _ in groups)
    if total <= ENUMERATED:
        parts = [np.array([xa @ ya[list(p)] for p in itertools.permutations(range(len(ya)))]) for xa, ya in groups]
        null = sum(np.meshgrid(*parts, indexing="ij")).ravel()
        p, orderings = float(np.mean(np.abs(null) >= abs(obs) - 1e-9 * max(1.0, abs(obs)))), total
    else:
        rng = np.random.default_rng(0)
        null = sum(np.array([xa @ ya[rng.permutation(len(ya))] for _ in range(PERMUTATIONS)]) for xa, ya in groups)
        p, orderings = float((1 + np.sum(np.abs(null) >= abs(obs) - 1e-9 * max(1.0, abs(obs)))) / (PERMUTATIONS + 1)), PERMUTATIONS
    return Association(float(np.clip(obs / norm, -1, 1)), math.nan, math.nan, p, sum(len(xa) for xa, _ in groups), 0, orderings)


def association(x, y, arms, unit: str, units=None, level: str = "unit") -> Association:
    """Pearson r of ``x`` with ``y`` on the ``unit`` of docs/method.md (studies), tested at ``level``
    (module docstring): "arm_and_unit" (each run's residual from arm + unit) or "within_arm" (each run
    minus its arm's mean), tested by permuting the units (``level`` "unit": y's units reordered against
    x's, every arm alike) or over warm starts (``level`` "warm_start": each warm start's own fit, a
    t-test on W − 1 df; a unit is then (warm start, seed)); or "arm_means" (Pearson r over the k arm
    means, k − 2 df: it holds α only where the arms' means are about equally noisy). Without ``units``
    every run is its own unit, and y is permuted within each arm. Runs are never centred on their unit
    alone (across arms): that leaves the arms' own effects on x and y in the data."""
    x, y, arms = np.asarray(x, dtype=float), np.asarray(y, dtype=float), np.asarray(arms, dtype=object)
    if unit == "arm_means":
        ok = np.isfinite(x) & np.isfinite(y)
        names = sorted(set(arms[ok]), key=str)
        c = pearson_ci([x[ok][arms[ok] == a].mean() for a in names], [y[ok][arms[ok] == a].mean() for a in names])
        return Association(c.r, c.lo, c.hi, c.p, c.units, c.df)
    if units is None:
        return _within_arms_alone(x, y, arms)
    units = [tuple(u) if isinstance(u, (list, tuple)) else u for u in units]
    if level == "warm_start":
        return _by_warm_start(x, y, arms, units, unit)
    mx, my, _ = _grid(x, y, arms, units)
    ex, ey = _residual(mx, unit), _residual(my, unit)
    norm = math.sqrt(float((ex ** 2).sum() * (ey ** 2).sum()))
    if mx.shape[1] < 3 or mx.shape[0] < (2 if unit == "arm_and_unit" else 1) or not norm > 0:
        return NOT_TESTABLE._replace(units=mx.shape[1])
    p, orderings = permutation_p(ex.T @ ey)
    return Association(float(np.clip((ex * ey).sum() / norm, -1, 1)), math.nan, math.nan, p, mx.shape[1], 0, orderings)


def _by_warm_start(x, y, arms, units, unit: str) -> Association:
    """One value per warm start: Σ x·y of the residuals of its own runs' fit (arm + seed within it); r
    their sum over the residuals' norms, tested by a t-test of the values over warm starts (W − 1 df),
    its interval that t-interval scaled to r."""
    s, nx, ny = [], 0.0, 0.0
    for ws in sorted({u[0] for u in units}, key=str):
        mine = np.array([u[0] == ws for u in units])
        mx, my, _ = _grid(x[mine], y[mine], arms[mine], [u for u, k in zip(units, mine) if k])
        if mx.shape[1] < 2 or mx.shape[0] < (2 if unit == "arm_and_unit" else 1):
            continue
        ex, ey = _residual(mx, unit), _residual(my, unit)
        s.append(float((ex * ey).sum()))
        nx, ny = nx + float((ex ** 2).sum()), ny + float((ey ** 2).sum())
    s, norm, n = np.array(s), math.sqrt(nx * ny), len(s)
    if n < 3 or not norm > 0:
        return NOT_TESTABLE._replace(units=n)
    r = float(np.clip(s.sum() / norm, -1.0, 1.0))
    d = paired_delta(dict(enumerate(s)), dict.fromkeys(range(n), 0.0))
    if not d.testable:
        return Association(r, math.nan, math.nan, math.nan, n, n - 1)
    return Association(r, max(-1.0, n * d.lo / norm), min(1.0, n * d.hi / norm), d.p, n, n - 1)


def resolved_level(level: str, runs: list[Run]) -> str:
    """``auto``: the warm start when the runs carry warm starts, else the unit."""
    if level != "auto":
        return level
    return "warm_start" if any(r.unit[0] for r in runs) else "unit"


def association_rows(rule: AssociationRule, study: Study) -> pd.DataFrame:
    beds = study.named(rule.sweeps)
    keys = logged_keys(beds)
    if beds and rule.predictor not in keys:
        raise UserError(f"association: predictor '{rule.predictor}': no run of {', '.join(tb.name for tb in beds)} "
                        "logs it" + did_you_mean(rule.predictor, sorted(keys)))
    rows = []
    for tb in beds:
        bench = rule.benchmark or tb.benchmark
        x = [window_mean(r, rule.predictor, rule.window, rule.fraction) for r in tb.runs]
        y = [final_heldout(r, bench) for r in tb.runs]
        arms, units = [r.arm for r in tb.runs], [r.unit for r in tb.runs]
        level = resolved_level(rule.level, tb.runs)
        mine = association(x, y, arms, rule.unit, units, level)
        other = (association(x, y, arms, "arm_means") if rule.unit != "arm_means"
                 else association(x, y, arms, "arm_and_unit", units, level))
        rows.append({"sweep": tb.name, "runs": int(np.sum(np.isfinite(x) & np.isfinite(y))), "arms": len(set(arms)),
                     "level": level if rule.unit != "arm_means" else "arm_means", "blocks": mine.units, "df": mine.df,
                     "orderings": mine.orderings, "r": mine.r, "r_lo": mine.lo, "r_hi": mine.hi,
                     # a permutation test over so few units that no ordering can reach α is no test (3 units: 1/6)
                     "p": mine.p if not (mine.orderings and 1 / mine.orderings > rule.alpha) else math.nan,
                     "other_r": other.r, "other_p": other.p, "other_df": other.df})
    df = pd.DataFrame(rows, columns=["sweep", "runs", "arms", "level", "blocks", "df", "orderings", "r", "r_lo", "r_hi",
                                     "p", "other_r", "other_p", "other_df"])
    return _holm_column(df, rule.alpha)


def _holm_column(df: pd.DataFrame, alpha: float) -> pd.DataFrame:
    testable = df["p"].apply(finite) if len(df) else pd.Series(dtype=bool)
    df["p_holm"] = math.nan
    if testable.any():
        df.loc[testable, "p_holm"] = holm(df.loc[testable, "p"].to_numpy(), alpha)[0]
    return df


UNIT_WORDS = {"within_arm": "within arms (each run minus its arm's means)",
              "arm_and_unit": "within arms and units (each run's residual from arm + unit)",
              "arm_means": "over the arm means"}


def association_reading(row, rule: AssociationRule):
    """(call word, text, not separable) of one sweep's row."""
    if not finite(row.p) and row.orderings and 1 / row.orderings > rule.alpha:
        return "not testable", (f"not testable: r {row.r:+.2f} over {row.blocks} units, whose {row.orderings} "
                                f"orderings cannot give a p below {1 / row.orderings:.2f} > α {rule.alpha:g}"), False
    if not finite(row.p):
        what = {"warm_start": "warm starts", "unit": "units every arm has", "arm_means": "arms"}[row.level]
        few = row.blocks < 3
        why = f"a test needs 3 {what}" if few else "x or y does not vary once the arms' and units' effects are out"
        return "not testable", f"not testable ({row.runs} runs, {row.arms} arms, {row.blocks} {what}: {why})", False
    sig = row.p_holm <= rule.alpha
    word = ("positive" if row.r > 0 else "negative") if sig else "inconclusive"
    how = {"arm_means": f"Pearson's t over the arm means, {row.df} df",
           "unit": f"a permutation test over {row.blocks} units ({row.orderings:,} orderings)",
           "warm_start": f"a t-test over {row.blocks} warm starts (each its own runs' fit), {row.df} df"}[row.level]
    other = "arm means" if rule.unit != "arm_means" else "within arms and units"
    text = (f"r {row.r:+.2f}" + (f" [{row.r_lo:+.2f}, {row.r_hi:+.2f}]" if finite(row.r_lo) else "")
            + f" {UNIT_WORDS[rule.unit]}, {how}, Holm p {pval(row.p_holm)}; {other}: r "
            + (f"{row.other_r:+.2f}, p {pval(row.other_p)} (unadjusted)" if finite(row.other_r) else "not testable"))
    apart = not sig and rule.unit != "arm_means" and finite(row.other_p) and row.other_p <= rule.alpha
    if apart:
        text += (" — across the arms' means only (unadjusted, and that test holds α only where the arms' means are "
                 "about equally noisy): within arms it is inconclusive")
    if sig and rule.unit == "arm_means":
        text += " (across arms: the arms' own effects on both are part of it)"
    return word, text, apart


def trend_rows(rule: TrendRule, study: Study, fams: dict[str, FamilyResult]) -> tuple[pd.DataFrame, list[tuple]]:
    """Per sweep the slope test of the family's Δs over the setting, and (sweep, why) of the sweeps not
    testable; a setting no run's config has, or one that is not a number, is refused."""
    fam = fams[rule.family]
    if any(m.interaction for m in fam.members):
        raise UserError(f"trend over family '{rule.family}': its members are levels of one setting, not interactions")
    rows, skipped = [], []
    for sweep in dict.fromkeys(m.sweep for m in fam.members):
        members = [m for m in fam.members if m.sweep == sweep]
        runs = study.sweeps[sweep].data.sweep.by_arm
        levels = [setting_level(runs[m.comparison.arm], rule.over, sweep) for m in members]
        if len(set(levels)) < 2 or (rule.x == "log2" and min(levels) <= 0):
            skipped.append((sweep, f"not testable: `{rule.over}` of the members' arms is {levels} (needs two or more "
                                   "distinct levels" + (", all positive for log2)" if rule.x == "log2" else ")")))
            continue
        x = [math.log2(v) if rule.x == "log2" else float(v) for v in levels]
        per = [dict(zip(m.comparison.delta.units, m.comparison.delta.deltas)) for m in members]
        common = sorted(set.intersection(*(set(p) for p in per)), key=str)
        t = trend(x, {u: [p[u] for p in per] for u in common}, rule.alpha)
        level = resolved_level(rule.level, study.sweeps[sweep].runs)
        test = t.test if level == "unit" else _over_warm_starts(t.slopes)
        rows.append({"sweep": sweep, "levels": ", ".join(f"{v:g}" for v in levels), "level": level, "units": test.n,
                     "slope": test.mean, "lo": test.lo, "hi": test.hi, "p": test.p})
    df = pd.DataFrame(rows, columns=["sweep", "levels", "level", "units", "slope", "lo", "hi", "p"])
    return _holm_column(df, rule.alpha), skipped


def _over_warm_starts(slopes: dict):
    """The warm start as the unit: each warm start's mean slope over its seeds, tested over the W means."""
    groups: dict = {}
    for u, b in slopes.items():
        groups.setdefault(u[0], []).append(b)
    means = {ws: float(np.mean(v)) for ws, v in groups.items()}
    return paired_delta(means, dict.fromkeys(means, 0.0))


def setting_level(runs: list[Run], key: str, sweep: str) -> float:
    """The value at dotted ``key`` of an arm's saved run config, a number; one line naming the key and
    the nearest one the configs have otherwise."""
    config = (runs[0].config or {}) if runs else {}
    flat = flatten(config)
    if key not in flat:
        raise UserError(f"trend over '{key}': the runs' configs on {sweep} have no such key" + did_you_mean(key, sorted(flat)))
    v = flat[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise UserError(f"trend over '{key}': its value on {sweep} is {v!r}, not a number (a trend needs numeric levels)")
    return float(v)


def setting_value(run: Run, key: str):
    """The value at dotted ``key`` of a run's saved config (None when absent)."""
    v = run.config or {}
    for part in key.split("."):
        v = v.get(part) if isinstance(v, dict) else None
    return v
