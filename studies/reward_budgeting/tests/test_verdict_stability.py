"""studies/reward_budgeting/documents/stability.py: two sweeps on disjoint seeds, their principal verdicts side by side."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from studies.reward_budgeting.documents.stability import main, side_by_side
from tests.integration.report_sweeps import N, final_correct, make_sweep

DESIGN = {"principal": [["grpo_budget", "grpo"]], "mde": 5.0, "planning_sd": 5.5}


def test_side_by_side_calls():
    import pandas as pd

    key = ["arm", "ref", "benchmark", "metric"]
    row = {"arm": "b", "ref": "a", "benchmark": "x", "metric": "avg@n", "delta": 0.05, "delta_lo": 0.01,
           "delta_hi": 0.09, "p_holm": 0.01, "significant": True, "verdict": "higher"}
    a = pd.DataFrame([row]).set_index(key)
    table, same = side_by_side(a, a)
    assert same and list(table["same call"]) == ["yes"] and table["A: Δ [95% t-CI]"][0] == "+5.0 [+1.0, +9.0]"
    b = pd.DataFrame([{**row, "p_holm": 0.2, "significant": False, "verdict": "inconclusive"}]).set_index(key)
    table, same = side_by_side(a, b)
    assert not same and table["same call"][0] == "no (higher / inconclusive)"
    table, same = side_by_side(a, b.iloc[:0])
    assert not same and table["same call"][0] == "no (higher / missing)"


@pytest.mark.slow
def test_two_disjoint_seed_sets(tmp_path, capsys):
    a = make_sweep(tmp_path / "a", arms=("grpo", "grpo_budget"), seeds=range(4), comparisons=DESIGN, seed=1)
    b = make_sweep(tmp_path / "b", arms=("grpo", "grpo_budget"), seeds=range(4, 8), comparisons=DESIGN, seed=2)
    calls = []
    for sweep, seeds in ((a, range(4)), (b, range(4, 8))):  # the call recomputed from the files (m = 1: Holm p = p)
        d = [final_correct(sweep, "grpo_budget", f"seed_{s}").mean() / N - final_correct(sweep, "grpo", f"seed_{s}").mean() / N
             for s in seeds]
        p = sps.ttest_1samp(d, 0).pvalue
        calls.append("inconclusive" if p > 0.05 else ("higher" if np.mean(d) > 0 else "lower"))
    rc = main([str(a), str(b)])
    out = capsys.readouterr().out
    assert "| grpo_budget − grpo | builtin | avg@n |" in out
    assert rc == (0 if calls[0] == calls[1] else 1)
    assert ("every principal comparison gets the same call" in out) == (rc == 0)
    assert main([str(a), str(a)]) == 2  # the same seeds twice: not disjoint
    assert "share units" in capsys.readouterr().err
