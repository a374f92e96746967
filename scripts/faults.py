"""Fault injection: SIGKILL `rbctl train` / `rbctl ablate` at random moments and resume.

`python -m scripts.faults [--kills 20] [--steps 120] [--seed 0]` trains the embedded default (small
settings) once straight through and once under repeated SIGKILLs with resumes, then prints how
many resumes succeeded and whether the metrics and final weights equal the uninterrupted run's.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path


def train_cmd(cfg: Path, run: Path) -> list[str]:
    return [sys.executable, "-m", "rbctl", "train", str(cfg), "-o", str(run), "-q"]


def logged_steps(run: Path) -> list[int]:
    from rbctl.store.jsonl import read_jsonl

    return [r["step"] for r in read_jsonl(run / "metrics.jsonl")]


def kill_when(cmd: list[str], ready, rng: random.Random, env: dict | None = None, timeout_s: float = 300) -> str:
    """Start `cmd` in its own process group; once ready() holds, wait a random moment and SIGKILL the
    whole group (workers included, as a preemption would).

    Returns 'killed', 'finished' (it exited first, with code 0) or 'stalled' (no progress in time,
    or a non-zero exit)."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + timeout_s
    progressed = False
    while proc.poll() is None and time.time() < deadline:
        if ready():
            progressed = True
            time.sleep(rng.uniform(0.0, 0.3))  # land anywhere, a checkpoint write included
            break
        time.sleep(0.02)
    if proc.poll() is not None:
        return "finished" if proc.returncode == 0 else "stalled"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return "killed" if progressed else "stalled"


def kill_and_resume_training(cfg: Path, run: Path, kills: int, seed: int = 0, env: dict | None = None) -> tuple[int, int]:
    """Kill `rbctl train` up to `kills` times, each after 1–3 new steps, then let it finish.

    Returns (kills, successful resumes): a resume succeeds when the restarted run makes progress
    (or finishes cleanly)."""
    rng = random.Random(seed)
    kills_done, resumes_ok = 0, 0
    for _ in range(kills):
        target = len(logged_steps(run)) + rng.randint(1, 3)
        outcome = kill_when(train_cmd(cfg, run), lambda: len(logged_steps(run)) >= target, rng, env)
        if kills_done and outcome != "stalled":
            resumes_ok += 1
        if outcome != "killed":
            break
        kills_done += 1
    else:
        done = subprocess.run(train_cmd(cfg, run), env=env, timeout=600,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        resumes_ok += done.returncode == 0
    return kills_done, resumes_ok


def same_weights(a: Path, b: Path) -> bool:
    import torch
    from safetensors.torch import load_file

    wa, wb = load_file(str(a)), load_file(str(b))
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def main() -> None:
    import tempfile

    import yaml

    ap = argparse.ArgumentParser(description="SIGKILL rbctl train repeatedly and check the resumed run.")
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--steps", type=int, default=120)  # enough that 20 kills of 1–3 new steps each all land
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    cfg = {
        "seed": 0, "steps": args.steps, "threads": 1, "save_every": 2, "sample_every": 1,
        "model": {"name": "builtin", "device": "cpu"},
        "rollout": {"prompts_per_step": 8, "group_size": 4, "max_new_tokens": 20},
        "eval": {"every": 0},
    }
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        (d / "cfg.yaml").write_text(yaml.safe_dump(cfg))
        print("uninterrupted run ...", flush=True)
        subprocess.run(train_cmd(d / "cfg.yaml", d / "straight"), check=True, stdout=subprocess.DEVNULL)
        print(f"run under up to {args.kills} SIGKILLs ...", flush=True)
        run = d / "killed"
        kills, resumes_ok = kill_and_resume_training(d / "cfg.yaml", run, args.kills, args.seed)
        subprocess.run(train_cmd(d / "cfg.yaml", run), check=True, stdout=subprocess.DEVNULL)
        final = f"checkpoints/step_{args.steps:06d}/model/model.safetensors"
        steps_ok = logged_steps(run) == list(range(1, args.steps + 1))
        weights_ok = same_weights(d / "straight" / final, run / final)
        print(f"kills: {kills}; resumes that continued the run: {resumes_ok}/{kills}")
        print(f"final metrics: steps 1..{args.steps} exactly once: {steps_ok}; "
              f"final weights equal the uninterrupted run's: {weights_ok}")
        sys.exit(0 if steps_ok and weights_ok and resumes_ok == kills else 1)


if __name__ == "__main__":
    main()
