"""studies/reward_budgeting/documents/maze_setting.py on hand-made sweep directories (4 problems × n = 4, 3 seeds): every number
below is worked out by hand from the counts."""

from __future__ import annotations

from pathlib import Path

from studies.reward_budgeting.documents import maze_setting
from tests.integration.hand_runs import write_run, write_sweep_files

N = 4
# entropy logged at steps 1..4: the last quarter (step 4) is each run's final entropy
ENTROPY = {"grpo": 0.10, "grpo_budget": 0.05, "grpo_entropy": 0.20, "rloo": 0.12, "rloo_budget": 0.06}


def make_sweep(root: Path, arms: dict, correct: dict, steps: int = 4, periodic: dict | None = None,
               configs: dict | None = None, principal: list | None = None) -> Path:
    keys = []
    for arm, per_seed in correct.items():
        estimator, budget, mode, variant = arms[arm]
        for seed, c in enumerate(per_seed):
            cfg = {"seed": seed, "steps": steps, "rollout": {"group_size": 8},
                   "algo": {"estimator": estimator, "budget": budget, "entropy": {"mode": mode}}}
            for k, v in ((configs or {}).get(arm) or {}).items():
                cfg.setdefault(k, {}).update(v) if isinstance(v, dict) else cfg.__setitem__(k, v)
            e = ENTROPY.get(arm, 0.1)
            write_run(root / "runs" / arm / f"seed_{seed}", cfg=cfg, steps=steps, correct=c, n=N,
                      meta={"arm": arm, "seed": seed, "sweep": "s", "baseline": estimator, "variant": variant},
                      metrics=[{"step": s, "entropy": (0.3 if s == 1 else e)} for s in range(1, steps + 1)],
                      evals=(periodic or {}).get((arm, seed), []))
            keys.append(f"{arm}/seed_{seed}")
    sweep = {"name": "s", "seeds": [0, 1, 2], "arms": {a: {} for a in correct}, "eval": {"benchmarks": ["builtin"], "n": N}}
    if principal:
        sweep["comparisons"] = {"principal": principal, "metric": "avg@n", "mde": 5.0, "planning_sd": 3.5}
    write_sweep_files(root, keys, sweep)
    return root


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
