"""Hand-made sweep directories shaped like the main job's study, for report tests (no training): arms ×
(warm starts ×) seeds, each run with its config, run.json, metrics log (entropy, κ, κ_eff, clip
fractions), periodic evaluation with label shares (the fixpoint task's walk/shortcut), a final
evaluation with per-problem counts, the sweep's state and its resolved sweep file.

Every number is drawn from a seeded generator, so a test can recompute what the report must show
from the files (`final_correct`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import yaml

PROBLEMS, N = 40, 8
EVAL_STEPS = (0, 40, 80, 120, 160)
ARMS = {  # arm -> (config overrides of algo, pass@1 shift, escape probability per evaluation)
    "grpo": ({}, 0.0, 0.05),
    "grpo_budget": ({"budget": 1.0}, 0.06, 0.35),
    "grpo_entropy_static": ({"entropy": {"mode": "static", "alpha": 0.03}}, 0.02, 0.15),
    "grpo_entropy_adaptive": ({"entropy": {"mode": "adaptive", "alpha": 0.0}}, 0.03, 0.2),
}


def _config(arm: str, seed: int, warm_start: str | None) -> dict:
    algo = {"estimator": "grpo", "budget": None, "entropy": {"mode": "none"}, "policy_loss": "clip"}
    for k, v in ARMS[arm][0].items():
        algo[k] = v
    model = {"name": "builtin", "warm_start": warm_start or "default"}
    return {"seed": seed, "steps": 160, "threads": 1, "model": model, "algo": algo, "rollout": {"group_size": 8}}


def make_sweep(root: Path, arms=tuple(ARMS), seeds=range(6), warm_starts=(None,), comparisons: dict | None = None,
               escape: dict | None = None, twin: str | None = None, seed: int = 0) -> Path:
    """Write a sweep directory; ``twin`` names an extra arm whose config equals grpo's (a sweep
    mistake the report must flag)."""
    rng = np.random.default_rng(seed)
    root = Path(root)
    difficulty = rng.beta(2, 2, size=PROBLEMS)
    state, arm_list = {}, list(arms) + ([twin] if twin else [])
    for arm in arm_list:
        base_arm = "grpo" if arm == twin else arm
        for ws_i, ws in enumerate(warm_starts):
            ws_shift = 0.03 * ws_i
            for s in seeds:
                unit_shift = rng.normal(0, 0.02) + ws_shift  # this (arm, unit)'s draw
                key = f"{arm}/{ws}/seed_{s}" if ws else f"{arm}/seed_{s}"
                d = root / "runs" / key
                d.mkdir(parents=True)
                cfg = _config(base_arm, s, ws)
                (d / "config.yaml").write_text(yaml.safe_dump(cfg))
                variant = {"grpo": "base", "grpo_budget": "budget"}.get(base_arm, base_arm.replace("grpo_", ""))
                meta = {"arm": arm, "seed": s, "sweep": "study", "baseline": "grpo", "variant": variant}
                if ws:
                    meta["warm_start"] = ws
                (d / "run.json").write_text(json.dumps(meta))
                lines = []
                for step in range(4, 161, 4):
                    frac = step / 160
                    lines.append(json.dumps({
                        "step": step, "reward/mean": float(np.clip(0.55 + 0.1 * frac + rng.normal(0, 0.05), 0, 1)),
                        "entropy": 0.36 * (1 - 0.5 * frac) + rng.normal(0, 0.01) + 0.1 * ARMS[base_arm][1],
                        "kappa": 2.0 + rng.normal(0, 0.1), "kappa_eff": 0.5 + rng.normal(0, 0.2),
                        "clip/frac_low": abs(rng.normal(0.01, 0.005)), "clip/frac_high": abs(rng.normal(0.02, 0.01))}))
                (d / "metrics.jsonl").write_text("\n".join(lines) + "\n")
                walk, evals = 0.16, []
                for step in EVAL_STEPS:
                    if step and rng.random() < ARMS[base_arm][2] * 2:
                        walk = min(0.95, walk + 0.4)
                    acc = 0.546 + 0.1 * step / 160 + ARMS[base_arm][1] * step / 160 + unit_shift
                    evals.append(json.dumps({"step": step, "benchmark": "builtin", "n": 4, "avg@n": acc,
                                             "pass@8": min(1.0, acc + 0.3), "label/strategy/walk": walk,
                                             "label/strategy/shortcut": 1 - walk}))
                (d / "eval.jsonl").write_text("\n".join(evals) + "\n")
                p = np.clip(difficulty + 0.1 + ARMS[base_arm][1] + unit_shift, 0, 1)
                correct = rng.binomial(N, p)
                bench = d / "eval" / "step_000160" / "builtin"
                bench.mkdir(parents=True)
                summary = {"benchmark": "builtin", "step": 160, "n": N, "num_problems": PROBLEMS,
                           "metrics": {"avg@n": {"value": float(correct.mean() / N)}},
                           "labels": {"strategy": {"walk": walk, "shortcut": 1 - walk}},
                           "per_problem": [{"id": f"p{i}", "n": N, "correct": int(c)} for i, c in enumerate(correct)]}
                (bench / "summary.json").write_text(json.dumps(summary))
                (d / "provenance.json").write_text(json.dumps({"git_commit": "abc1234", "rbctl": "0.1.0"}))
                state[key] = {"status": "done", "error": None}
    (root / "state.json").write_text(json.dumps({"runs": state}))
    sweep = {"name": "study", "base": "fixpoint.yaml", "seeds": list(seeds), "arms": {a: {} for a in arm_list},
             "eval": {"benchmarks": ["builtin"], "n": N}}
    if comparisons:
        sweep["comparisons"] = comparisons
    if escape:
        sweep["escape"] = escape
    (root / "sweep.yaml").write_text(yaml.safe_dump({"sweep": sweep, "configs": {}}, sort_keys=False))
    return root


def final_correct(sweep: Path, arm: str, key: str) -> np.ndarray:
    """The per-problem correct counts of one run's final evaluation (key: seed_S or WS/seed_S)."""
    s = json.loads((Path(sweep) / "runs" / arm / key / "eval" / "step_000160" / "builtin" / "summary.json").read_text())
    return np.array([p["correct"] for p in s["per_problem"]])
