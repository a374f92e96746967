"""The study document's curves (`rbctl.report.render.figures.curve_bands`): held-out metrics from the
periodic evaluations, training curves from the metrics log with the sweep report's smoothing."""

from pathlib import Path

import pytest

from rbctl.report.render.figures import curve_bands
from rbctl.report.runs import Run


def run(seed: int, kappa_eff: list[float], avg: list[float]) -> Run:
    return Run(path=Path(f"r{seed}"), arm="grpo", seed=seed, baseline="grpo", variant="base", sweep="s", status="done",
               config_steps=len(kappa_eff), final_step=None,
               metrics=[{"step": s + 1, "kappa_eff": k, "entropy": 0.5} for s, k in enumerate(kappa_eff)],
               evals=[{"step": 2 * i, "benchmark": "b", "avg@n": a} for i, a in enumerate(avg)])


def test_a_training_curve_is_read_from_the_metrics_log_with_its_rolling_window_and_banded_over_units():
    runs = {"grpo": [run(0, [1, 2, 3, 4, 5, 6], [0.1, 0.2]), run(1, [3, 4, 5, 6, 7, 8], [0.3, 0.6])]}
    b = curve_bands(runs, "kappa_eff", "b")["grpo"]
    # κ_eff: a centred rolling mean of 5 (min 1 value) per run, then the mean over the 2 units; at step 1 the
    # window holds steps 1-3: seed 0 (1+2+3)/3 = 2, seed 1 (3+4+5)/3 = 4, mean 3; at step 3, steps 1-5: 3 and 5
    assert list(b.index) == [1, 2, 3, 4, 5, 6]
    assert b.loc[1, "mean"] == pytest.approx(3.0) and b.loc[3, "mean"] == pytest.approx(4.0)
    # two units 2 apart: the t-interval's half-width is t(.975, 1) · 2/√2/√2 = 12.706
    assert b.loc[3, "hi"] - b.loc[3, "mean"] == pytest.approx(12.7062047, rel=1e-6)
    # a held-out metric reads the benchmark's periodic evaluations, unsmoothed
    h = curve_bands(runs, "avg@n", "b")["grpo"]
    assert list(h.index) == [0, 2] and list(h["mean"]) == pytest.approx([0.2, 0.4])
    assert curve_bands(runs, "avg@n", "other") == {}


def test_a_study_may_draw_every_training_curve_the_sweep_report_draws_and_no_other():
    from rbctl.config.study import CURVE_TRAINING_KEYS
    from rbctl.report.analyses.trajectories import TRAINING_CURVES

    assert CURVE_TRAINING_KEYS == tuple(c[0] for c in TRAINING_CURVES)
