"""The study's own exact checks, named by its study file as `checks.py:NAME` (an `exact` rule;
`rbctl.report.study.checks.find_check` loads them): computations, not tests, each returning (what was
measured, whether it passed, its table or None). The first line of each docstring is printed as the rule."""

from __future__ import annotations

import pandas as pd


def kappa_falls_with_k() -> tuple[str, bool, pd.DataFrame]:
    """κ of the budgeted GRPO advantage falls with every added correct rollout K (binary rewards, one group of G = 8, B = 1), while plain GRPO's κ rises from K = G/2 to K = G − 1."""
    from rbctl.algo.sharpness import kappa_by_k  # torch: imported where the check runs

    k = kappa_by_k()
    budgeted, plain = [x["grpo + budget"] for x in k], [x["grpo"] for x in k]
    falls = all(a > b for a, b in zip(budgeted, budgeted[1:]))
    rises = plain[-1] > plain[len(plain) // 2]
    measured = ("GRPO + budget κ: " + ", ".join(f"{v:.3f}" for v in budgeted) + "; GRPO κ: "
                + ", ".join(f"{v:.2f}" for v in plain))
    table = pd.DataFrame([{kk: (f"{vv:.3f}" if isinstance(vv, float) else vv) for kk, vv in r.items()} for r in k])
    return measured, falls and rises, table
