"""Fault injection: SIGKILL `rbctl train` / `rbctl ablate` at random moments and resume.

`python -m scripts.faults --disk` instead injects each disk fault (RBCTL_FAULT: a checkpoint file, its
marker, a metrics line, an eval summary) once and prints one line per fault with its outcome.

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
    from rbctl.store.rundir import METRICS

    return [r["step"] for r in read_jsonl(run / METRICS)]


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


DISK_FAULTS = ("enospc:checkpoint:2", "eio:marker:2", "enospc:metrics:3", "eio:eval_summary:1")


def disk_fault(spec: str, cfg: Path, straight: Path, run: Path, steps: int) -> str:
    """One line: what `rbctl train` (or `rbctl eval` for eval_summary) did under RBCTL_FAULT=spec,
    and whether the rerun without it ended equal to the uninterrupted run."""
    from rbctl.store.rundir import MODEL, TMP_SUFFIX, checkpoint_dir

    env = {**os.environ, "RBCTL_FAULT": spec}
    kind = spec.split(":")[1]
    if kind == "eval_summary":
        cmd = [sys.executable, "-m", "rbctl", "eval", str(straight), "-b", "builtin", "--limit", "4", "-o", str(run)]
    else:
        cmd = train_cmd(cfg, run)
    first = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    errors = [x for x in first.stderr.splitlines() if x.startswith("error:")]
    torn = [p for p in run.rglob("*") if p.name.startswith(".") and TMP_SUFFIX in p.name]
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if kind == "eval_summary":
        from rbctl.store.rundir import SUMMARY

        equal = again.returncode == 0 and any(run.rglob(SUMMARY))
    else:
        final = checkpoint_dir(Path(), steps) / MODEL / "model.safetensors"
        equal = again.returncode == 0 and same_weights(straight / final, run / final) and \
            logged_steps(run) == list(range(1, steps + 1))
    ok = first.returncode == 1 and len(errors) == 1 and not torn and equal
    return (f"{spec}: exit {first.returncode}, {len(errors)} error line(s), torn files {len(torn)}, "
            f"rerun {('writes it' if kind == 'eval_summary' else 'equals the uninterrupted run') if equal else 'FAILED'}"
            f" -> {'ok' if ok else 'FAILED'}")


def main() -> None:
    import tempfile

    import yaml

    from rbctl.store.rundir import MODEL, checkpoint_dir

    ap = argparse.ArgumentParser(description="SIGKILL rbctl train repeatedly and check the resumed run.")
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--steps", type=int, default=120)  # enough that 20 kills of 1–3 new steps each all land
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--disk", action="store_true", help="Inject each disk fault (RBCTL_FAULT) once instead of SIGKILLs.")
    args = ap.parse_args()
    if args.disk:
        args.steps = min(args.steps, 6)
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
        if args.disk:
            lines = [disk_fault(spec, d / "cfg.yaml", d / "straight", d / f"fault{i}", args.steps)
                     for i, spec in enumerate(DISK_FAULTS)]
            for line in lines:
                print(line, flush=True)
            sys.exit(0 if all(x.endswith("ok") for x in lines) else 1)
        print(f"run under up to {args.kills} SIGKILLs ...", flush=True)
        run = d / "killed"
        kills, resumes_ok = kill_and_resume_training(d / "cfg.yaml", run, args.kills, args.seed)
        subprocess.run(train_cmd(d / "cfg.yaml", run), check=True, stdout=subprocess.DEVNULL)
        final = checkpoint_dir(Path(), args.steps) / MODEL / "model.safetensors"
        steps_ok = logged_steps(run) == list(range(1, args.steps + 1))
        weights_ok = same_weights(d / "straight" / final, run / final)
        print(f"kills: {kills}; resumes that continued the run: {resumes_ok}/{kills}")
        print(f"final metrics: steps 1..{args.steps} exactly once: {steps_ok}; "
              f"final weights equal the uninterrupted run's: {weights_ok}")
        sys.exit(0 if steps_ok and weights_ok and resumes_ok == kills else 1)


if __name__ == "__main__":
    raise SystemExit(main())
