"""Exact checks a claim may name (`rbctl.config.study.ExactRule`): computations, not tests, each
returning (what was measured, whether it passed, its table or None). The first line of each
docstring is printed as the rule."""

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


def finite_g_gradient() -> tuple[str, bool, None]:
    """The unclipped budgeted GRPO estimator's expected weight on ∇p equals J_G'(p) = B(1 − (1−p)^{G−1})/p exactly (over all 2^8 outcomes; relative error < 1e-6), and plain GRPO's does not (> 1e-3)."""
    from rbctl.algo.sharpness import finite_g_check

    worst, best = finite_g_check()
    return (f"largest relative error of GRPO + budget {worst:.1e}; GRPO's smallest {best:.2f} (not the gradient)",
            worst < 1e-6 and best > 1e-3, None)


CHECKS = {"kappa_falls_with_k": kappa_falls_with_k, "finite_g_gradient": finite_g_gradient}
