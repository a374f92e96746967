"""scripts/claims.py and scripts/maze_setting.py on hand-made sweep directories (4 problems × n = 4,
3 seeds): every number below is worked out by hand from the counts."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import scipy.stats as sps
import yaml

from scripts import claims, maze_setting

N = 4
# arm -> (estimator, budget, entropy mode, variant); correct of n = 4 on problems p0..p3 per seed 0, 1, 2
FIX_ARMS = {
    "grpo": ("grpo", None, "none", "base"),
    "grpo_budget": ("grpo", 1.0, "none", "budget"),
    "grpo_entropy": ("grpo", None, "static", "entropy_static"),
    "rloo": ("rloo", None, "none", "base"),
    "rloo_budget": ("rloo", 1.0, "none", "budget"),
}
# avg@4 per seed:                        Δ budget − base per seed
#   grpo         .25   .3125 .375
#   grpo_budget  .5    .5625 .6875        .25, .25, .3125  -> mean .2708, sd .0361, t 13.0, 2 df
#   grpo_entropy .3125 .3125 .3125        (− grpo_budget: −.1875, −.25, −.375)
#   rloo         .375  .4375 .4375
#   rloo_budget  .375  .4375 .5           0, 0, .0625      -> mean .0208, sd .0361, t 1.0
FIX_CORRECT = {
    "grpo": ([4, 0, 0, 0], [4, 1, 0, 0], [4, 2, 0, 0]),
    "grpo_budget": ([4, 4, 0, 0], [4, 4, 1, 0], [4, 4, 2, 1]),
    "grpo_entropy": ([4, 1, 0, 0], [4, 1, 0, 0], [4, 1, 0, 0]),
    "rloo": ([4, 2, 0, 0], [4, 2, 1, 0], [4, 3, 0, 0]),
    "rloo_budget": ([4, 2, 0, 0], [4, 2, 1, 0], [4, 2, 1, 1]),
}
# entropy logged at steps 1..4: the last quarter (step 4) is each run's final entropy
ENTROPY = {"grpo": 0.10, "grpo_budget": 0.05, "grpo_entropy": 0.20, "rloo": 0.12, "rloo_budget": 0.06}


def make_sweep(root: Path, arms: dict, correct: dict, steps: int = 4, periodic: dict | None = None,
               configs: dict | None = None, principal: list | None = None) -> Path:
    state = {}
    for arm, per_seed in correct.items():
        estimator, budget, mode, variant = arms[arm]
        for seed, c in enumerate(per_seed):
            d = root / "runs" / arm / f"seed_{seed}"
            (d / "eval" / f"step_{steps:06d}" / "builtin").mkdir(parents=True)
            cfg = {"seed": seed, "steps": steps, "rollout": {"group_size": 8},
                   "algo": {"estimator": estimator, "budget": budget, "entropy": {"mode": mode}}}
            for k, v in ((configs or {}).get(arm) or {}).items():
                cfg.setdefault(k, {}).update(v) if isinstance(v, dict) else cfg.__setitem__(k, v)
            (d / "config.yaml").write_text(yaml.safe_dump(cfg))
            (d / "run.json").write_text(json.dumps({"arm": arm, "seed": seed, "sweep": "s", "baseline": estimator,
                                                    "variant": variant}))
            (d / "provenance.json").write_text(json.dumps({"git_commit": "0123abc"}))
            e = ENTROPY.get(arm, 0.1)
            (d / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "entropy": (0.3 if s == 1 else e)}) + "\n"
                                                     for s in range(1, steps + 1)))
            lines = (periodic or {}).get((arm, seed), [])
            (d / "eval.jsonl").write_text("".join(json.dumps({"benchmark": "builtin", "n": N, **x}) + "\n" for x in lines))
            summary = {"benchmark": "builtin", "step": steps, "n": N, "num_problems": 4,
                       "per_problem": [{"id": f"p{i}", "n": N, "correct": k} for i, k in enumerate(c)]}
            (d / "eval" / f"step_{steps:06d}" / "builtin" / "summary.json").write_text(json.dumps(summary))
            state[f"{arm}/seed_{seed}"] = {"status": "done"}
    (root / "state.json").write_text(json.dumps({"runs": state}))
    sweep = {"name": "s", "seeds": [0, 1, 2], "arms": {a: {} for a in correct}, "eval": {"benchmarks": ["builtin"], "n": N}}
    if principal:
        sweep["comparisons"] = {"principal": principal, "metric": "avg@n", "mde": 5.0, "planning_sd": 3.5}
    (root / "sweep.yaml").write_text(yaml.safe_dump({"sweep": sweep, "configs": {}}, sort_keys=False))
    return root


def p_two_sided(deltas) -> float:
    return float(sps.ttest_1samp(deltas, 0.0).pvalue)


def test_budget_family_is_holm_adjusted_over_baselines(tmp_path: Path) -> None:
    tb = claims.Testbed.load("fixpoint", make_sweep(tmp_path / "fix", FIX_ARMS, FIX_CORRECT))
    rows = claims.family([tb], "budget", "base")
    assert [(r.baseline, r.d.n) for r in rows] == [("grpo", 3), ("rloo", 3)]
    p_grpo, p_rloo = p_two_sided([0.25, 0.25, 0.3125]), p_two_sided([0.0, 0.0, 0.0625])
    assert p_rloo == pytest.approx(0.4226, abs=1e-4)  # t = 1 on 2 df
    assert rows[0].d.mean == pytest.approx(0.2708333)
    assert rows[0].p_holm == pytest.approx(2 * p_grpo)  # the smaller p times m = 2
    assert rows[1].p_holm == pytest.approx(p_rloo)  # max(2 p_grpo, 1 · p_rloo)
    assert [r.call for r in rows] == ["improves", "no difference"]
    assert rows[0].without[0] == pytest.approx((0.25 + 0.3125 + 0.375) / 3)
    lines = claims.baseline_lines(rows)
    assert lines[0].startswith("- **GRPO + budget vs GRPO: improves** — fixpoint improves (+27.1 [")
    assert lines[1].startswith("- **RLOO + budget vs RLOO: no difference**")


def test_entropy_family_and_the_document(tmp_path: Path) -> None:
    fix = claims.Testbed.load("fixpoint", make_sweep(tmp_path / "fix", FIX_ARMS, FIX_CORRECT))
    rows = claims.family([fix], claims.ENTROPY, "budget")
    assert [r.baseline for r in rows] == ["grpo"]  # RLOO has no entropy arm: its row would be one-sided
    assert rows[0].d.mean == pytest.approx(-(0.1875 + 0.25 + 0.375) / 3)
    assert rows[0].call == ("worse" if rows[0].p_holm <= 0.05 else "no difference")
    assert rows[0].p_holm == pytest.approx(p_two_sided([-0.1875, -0.25, -0.375]))
    assert fix.entropy(("grpo", "budget"))[0] == pytest.approx(0.05)
    doc = claims.claims_markdown(fix, None, None, None, None, command="rbctl ablate x")
    assert "| GRPO | fixpoint | 3 | 31.2 [" in doc
    assert "| (a) The budget improves several RL baselines |" in doc
    assert "improves: GRPO; worse: none; 1 of 2 no difference | fails: only GRPO improves |" in doc


def test_kappa_falls_with_k_under_the_budget_and_the_finite_g_identity() -> None:
    k = claims.kappa_by_k(g=8)
    assert [r["grpo + budget"] for r in k] == pytest.approx([1 / K for K in range(1, 8)], rel=1e-6)
    assert [r["dr_grpo"] for r in k] == pytest.approx([1.0] * 7, rel=1e-6)
    assert [r["rloo + budget"] for r in k] == pytest.approx([8 / 7 / K for K in range(1, 8)], rel=1e-6)
    # GRPO: 1/σ̂ with the unbiased std, K = 4 of 8: sqrt(8/7 · 1/4) = 0.5345 -> 1.8708
    assert k[3]["grpo"] == pytest.approx(1 / math.sqrt(8 / 7 * 0.25), rel=1e-5)
    worst, best = claims.finite_g_check(g=6)
    assert worst < 1e-6 < 1e-3 < best


MAZE_ARMS = {a: (a.split("_")[0], None, "none", "base") for a in ("grpo_a", "maxrl_a", "grpo_b", "maxrl_b")}
# setting a: MaxRL − GRPO on final avg@4 = −1/16 each seed; setting b: +2/16, +1/16, +3/16
MAZE_CORRECT = {
    "grpo_a": ([4, 2, 0, 0], [4, 2, 1, 0], [4, 1, 0, 0]), "maxrl_a": ([4, 1, 0, 0], [4, 2, 0, 0], [4, 0, 0, 0]),
    "grpo_b": ([4, 0, 0, 0], [4, 1, 0, 0], [4, 0, 0, 0]), "maxrl_b": ([4, 2, 0, 0], [4, 2, 0, 0], [4, 3, 0, 0]),
}


def test_maze_setting_keeps_the_largest_maxrl_gap(tmp_path: Path) -> None:
    periodic = {(a, s): [{"step": 0, "avg@n": 0.1, "pass@4": 0.5}, {"step": 4, "avg@n": 0.1 + 0.05 * a.startswith("maxrl"),
                                                                     "pass@4": 0.4}]
                for a in MAZE_CORRECT for s in range(3)}
    mb = {"rollout": {"prompts_per_step": 16}, "algo": {"ppo_mini_batch_size": 4}, "optim": {"lr": 2.5e-5}}
    one = {"rollout": {"prompts_per_step": 16}, "algo": {"ppo_mini_batch_size": 16}, "optim": {"lr": 1e-4}}
    sweep = make_sweep(tmp_path / "maze", MAZE_ARMS, MAZE_CORRECT, periodic=periodic,
                       configs={"grpo_a": mb, "maxrl_a": mb, "grpo_b": one, "maxrl_b": one})
    doc = maze_setting.markdown(sweep)
    assert "The largest final pass@1 gap MaxRL − GRPO is at **b** (+12.5 points; MaxRL above GRPO" in doc
    assert "| a | P 16 × G 8, 4 updates per rollout step, lr 2.5e-05, 4 steps | final pass@1 | 3 |" in doc
    assert "| b | P 16 × G 8, 1 update per rollout step, lr 0.0001, 4 steps | final pass@1 | 3 |" in doc
    # setting a: the same Δ (−6.25) in every seed: not testable, so Holm counts only b
    assert "| −" not in doc and "-6.2 [n/a]" in doc
    assert "| b | pass@1 | 4 | 3 | 10.0 | 15.0 | +5.0 [n/a] | – |" in doc


def test_long_horizon_line_says_faster_same_final_level(tmp_path: Path) -> None:
    arms = {k: FIX_ARMS[k] for k in ("grpo", "grpo_budget")}
    # periodic avg@n at step 100: Δ .30, .27, .30 (t ≈ 29 on 2 df); final (step 400): Δ +1/16, −1/16, +1/16
    at100 = {"grpo": (0.5, 0.55, 0.6), "grpo_budget": (0.8, 0.82, 0.9)}
    periodic = {(a, s): [{"step": 0, "avg@n": 0.4}, {"step": 100, "avg@n": at100[a][s]}, {"step": 400, "avg@n": 0.95}]
                for a in arms for s in range(3)}
    correct = {"grpo": ([4, 4, 4, 3], [4, 4, 4, 4], [4, 4, 3, 4]), "grpo_budget": ([4, 4, 4, 4], [4, 4, 4, 3], [4, 4, 4, 4])}
    tb = claims.Testbed.load("fixpoint (long)", make_sweep(tmp_path / "long", arms, correct, steps=400, periodic=periodic))
    line = claims.long_line(tb, 100)
    assert line.startswith("fixpoint (long), GRPO + budget − GRPO: +29.0 [")
    assert "at step 100, +2.1 [" in line and "at step 400 (3 units): **faster, same final level**." in line
    rows = claims.horizon_rows(tb, [(("grpo", "budget"), ("grpo", "base"))], [100, 400])
    assert [(r["step"], r["reference %"], r["arm %"]) for r in rows] == [(100, "55.0", "84.0"), (400, "95.0", "95.0")]
