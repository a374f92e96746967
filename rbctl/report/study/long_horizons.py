"""A study's long horizons (`rbctl.config.study.LongHorizon`): per member of the long sweep's family, Δ
at the testbed's horizon and the final level's call, in words no stronger than the tests behind them.

"Ahead at the horizon", and "faster, same final level" beside an equivalent final level, come only
from a declared test at a declared step: the study family named by ``ahead_family`` (members at the
periodic evaluation at the horizon, Holm-adjusted, with its declaration record) calling the member
higher. Without one, Δ at the horizon is printed with its unadjusted p as exploratory and no word
is made of it: an unadjusted p at a step the study file picks, outside any family, decides nothing.
A final level over (warm start, seed) units says which warm starts it holds for.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from rbctl.report.analyses.comparisons import EQUIVALENT, HIGHER, Comparison, call, call_text
from rbctl.report.analyses.warm_starts import warm_start_level
from rbctl.report.render.calls import deciding_test
from rbctl.report.render.tables import delta, pct, pval
from rbctl.report.series import at_step, run_series
from rbctl.report.stats import DELTA_BOUNDS, paired_delta
from rbctl.report.study.families import FamilyResult
from rbctl.report.study.sweeps import Testbed


def final_caveat(c: Comparison) -> str:
    """For a final level called over (warm start, seed) units: the warm start as the unit, and whether
    it shows the call for other warm starts; "" otherwise."""
    if not any(u[0] for u in c.delta.units) or call(c) not in (EQUIVALENT, HIGHER, "lower"):
        return ""
    o = warm_start_level(c.delta).over_warm_starts
    n_ws = len({u[0] for u in c.delta.units})
    if not math.isfinite(o.lo):
        return f" (these {n_ws} warm starts; with the warm start as the unit not testable)"
    shown = (max(abs(o.lo), abs(o.hi)) < c.margin if call(c) == EQUIVALENT else not (o.lo <= 0 <= o.hi))
    return (f" (these {n_ws} warm starts; with the warm start as the unit {delta(o.mean, o.lo, o.hi)}"
            + ("" if shown else ": not shown for other warm starts") + ")")


def _ahead(c: Comparison, ahead: FamilyResult | None, sweep: str) -> tuple[bool, str]:
    """(called higher at the horizon by the declared family, its words)."""
    if ahead is None:
        return False, ""
    m = ahead.member(sweep, c.arm, c.ref)
    if m is None:
        return False, f"not a member of `{ahead.name}`"
    return call(m.comparison) == HIGHER, f"`{ahead.name}` {call_text(m.comparison)}, {deciding_test(m.comparison)}"


def long_rows(tb: Testbed, main_step: int, family: str,
              ahead: FamilyResult | None = None) -> tuple[pd.DataFrame, list[str]]:
    """Per member of the long sweep's family: Δ at the testbed's horizon (periodic evaluation), called
    only by the study family ``ahead`` where there is one, and the final level's call (the declared
    family: equivalence by TOST at its margin), with one sentence each."""
    rows, lines = [], []
    for c in tb.family(family):
        a, b = tb.data.sweep.by_arm[c.arm], tb.data.sweep.by_arm[c.ref]
        d0 = paired_delta(at_step(a, main_step, tb.benchmark), at_step(b, main_step, tb.benchmark), bounds=DELTA_BOUNDS)
        last = max((int(s) for r in a for s in run_series(r, "avg@n", tb.benchmark).index), default=math.nan)
        is_ahead, ahead_words = _ahead(c, ahead, tb.name)
        final = call_text(c) + final_caveat(c)
        at = f"{delta(d0.mean, d0.lo, d0.hi)} at step {main_step} (p {pval(d0.p, 'not testable')}, unadjusted"
        at += f"; {ahead_words})" if ahead is not None else ", exploratory: no declared family reads this step)"
        rows.append({"comparison": c.label, "units": c.delta.n,
                     f"Δ at step {main_step} (periodic)": f"{delta(d0.mean, d0.lo, d0.hi)}, p {pval(d0.p, 'not testable')}"
                     + (f" ({ahead_words})" if ahead is not None else " (unadj., exploratory)"),
                     "Δ final (declared family)": delta(c.delta.mean, c.delta.lo, c.delta.hi),
                     "p that decided the call": deciding_test(c), "call (final level)": final})
        what = ("faster, same final level" if is_ahead and call(c) == EQUIVALENT else
                f"ahead at the horizon; final level {final}" if is_ahead else f"final level {final}")
        lines.append(f"{tb.name}, {c.label}: {at}, {delta(c.delta.mean, c.delta.lo, c.delta.hi)} at the final "
                     f"evaluation{f' (step {last})' if math.isfinite(last) else ''}, {deciding_test(c)}: **{what}**.")
    return pd.DataFrame(rows), lines


def pass_at_k_lines(tb: Testbed) -> list[str]:
    """Per arm: pass@k at the largest k over the periodic evaluations (first → last), measured, not called."""
    keys = sorted({k for r in tb.runs for e in r.evals for k in e if k.startswith("pass@") and k != "pass@1"},
                  key=lambda s: int(s[5:]))
    if not keys:
        return []
    kk = keys[-1]
    out = []
    for arm, runs in sorted(tb.data.sweep.by_arm.items()):
        steps = sorted({int(s) for r in runs for s in run_series(r, kk, tb.benchmark).index})
        if not steps:
            continue
        first, last = at_step(runs, steps[0], tb.benchmark, kk), at_step(runs, steps[-1], tb.benchmark, kk)
        p1 = at_step(runs, steps[-1], tb.benchmark)
        out.append(f"{arm}: {kk} {pct(np.mean(list(first.values())))} → {pct(np.mean(list(last.values())))}, "
                   f"pass@1 {pct(np.mean(list(p1.values())) if p1 else math.nan)} at step {steps[-1]}")
    return out


def ahead_family(study, tb, fams):
    """The study family that says whether a long horizon's member is ahead at the testbed's horizon."""
    spec = study.config.long.get(tb.name.removesuffix("_long"))
    return fams.get(spec.ahead_family) if spec is not None and spec.ahead_family else None
