"""Benchmark of the embedded default: `python -m scripts.bench_train [--steps N] [--config PATH]`.

Runs configs/quickstart.yaml (without periodic evaluation) in a temporary run directory and prints
the wall time of the whole run (warm start excluded: it is built once and cached), seconds per
step by phase, and the training reward of the first and last ten steps.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(REPO / "configs" / "quickstart.yaml"))
    ap.add_argument("--steps", type=int, default=None)
    args = ap.parse_args()
    from rbctl.console import quiet_libraries

    quiet_libraries()
    import torch

    from rbctl.tasks import builtin
    from rbctl.config.train import load_train_config
    from rbctl.train.training_data import task_spec, warm_start_spec
    from rbctl.train.loop import train

    overrides = ["eval.every=0"] + ([f"steps={args.steps}"] if args.steps else [])
    cfg = load_train_config(Path(args.config), overrides)
    if cfg.model.name == "builtin":
        builtin.warm_started(task_spec(cfg), warm_start_spec(cfg))
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        lines = train(cfg, Path(d) / "run", progress=False, log=lambda *a: None)
        wall = time.perf_counter() - t0
    first = statistics.mean(r["reward/mean"] for r in lines[:10])
    last = statistics.mean(r["reward/mean"] for r in lines[-10:])
    med = {k: statistics.median(r[k] for r in lines) for k in ("time/step_s", "time/rollout_s", "time/train_s", "time/kappa_eff_s")}
    print(f"machine: {os.cpu_count()} cores, torch {torch.__version__}, {torch.get_num_threads()} torch threads")
    print(f"config: {args.config}  steps={cfg.steps}  P={cfg.rollout.prompts_per_step}  G={cfg.rollout.group_size}  "
          f"max_new_tokens={cfg.rollout.max_new_tokens}")
    print(f"wall time of the run: {wall:.1f} s ({wall / 60:.2f} min) for {len(lines)} steps (target: <= 180 s for 100+ steps)")
    print("median seconds per step: " + "  ".join(f"{k.split('/')[1]} {v:.3f}" for k, v in med.items()))
    print(f"training reward: first 10 steps {first:.3f} -> last 10 steps {last:.3f} ({'rises' if last > first else 'does not rise'})")


if __name__ == "__main__":
    raise SystemExit(main())
