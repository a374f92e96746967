"""Crash safety: SIGKILL a training run at random moments, resume, and get the uninterrupted result."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from tests.conftest import TINY_TRAIN

STEPS = 10


def _config(tmp_path: Path) -> Path:
    cfg = {**TINY_TRAIN, "steps": STEPS, "save_every": 2}
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _train_cmd(cfg: Path, run: Path) -> list[str]:
    return [sys.executable, "-m", "rbctl", "train", str(cfg), "-o", str(run), "-q"]


def _metrics_steps(run: Path) -> list[int]:
    from rbctl.tracking import read_jsonl

    return [r["step"] for r in read_jsonl(run / "metrics.jsonl")]


def _final_weights(run: Path) -> dict:
    return load_file(str(run / "checkpoints" / f"step_{STEPS:06d}" / "model" / "model.safetensors"))


def _warm(rbctl_cache, tmp_path):
    """Build the warm start in-process first so the subprocesses only train."""
    from rbctl.config import TrainConfig
    from rbctl.models import load_policy
    from rbctl.trainer import task_spec, warm_start_spec

    cfg = TrainConfig.model_validate(TINY_TRAIN)
    load_policy("builtin", builtin_task=task_spec(cfg), builtin_warm_start=warm_start_spec(cfg), log=lambda *a: None)


@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume_equals_an_uninterrupted_run(rbctl_cache, tmp_path):
    _warm(rbctl_cache, tmp_path)
    cfg = _config(tmp_path)
    env = {**os.environ, "RBCTL_CACHE": str(rbctl_cache)}
    straight = tmp_path / "straight"
    subprocess.run(_train_cmd(cfg, straight), check=True, env=env, timeout=300)

    run = tmp_path / "killed"
    rng = random.Random(0)
    kills = 0
    for attempt in range(12):
        proc = subprocess.Popen(_train_cmd(cfg, run), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # Kill once some progress exists: after a random number of new metric lines.
        target = len(_metrics_steps(run)) + rng.randint(1, 3)
        deadline = time.time() + 120
        while proc.poll() is None and time.time() < deadline:
            if len(_metrics_steps(run)) >= target:
                time.sleep(rng.uniform(0.0, 0.3))  # land anywhere, a checkpoint write included
                break
            time.sleep(0.02)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
        else:
            break
    subprocess.run(_train_cmd(cfg, run), check=True, env=env, timeout=300)  # finish whatever is left
    assert kills >= 2
    assert _metrics_steps(run) == list(range(1, STEPS + 1))  # no duplicated or missing step
    a, b = _final_weights(straight), _final_weights(run)
    assert all(torch.equal(a[k], b[k]) for k in a)
    sa = [json.loads(x) for x in (straight / "metrics.jsonl").read_text().splitlines()]
    sb = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["reward/mean"] for r in sa] == [r["reward/mean"] for r in sb]


def test_torn_checkpoint_and_torn_metrics_line_are_skipped_on_resume(tiny_config, tmp_path, capsys):
    from rbctl.trainer import train

    cfg = tiny_config(steps=4, save_every=2)
    straight = tmp_path / "straight"
    train(cfg, straight, progress=False, log=lambda *a: None)

    run = tmp_path / "run"

    def stop(step, metrics):
        if step == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(cfg, run, progress=False, log=lambda *a: None, on_step=stop)
    # Simulate a crash in the middle of writing the step-4 checkpoint and of a metrics line.
    ck4 = run / "checkpoints" / "step_000004"
    if ck4.exists():
        (ck4 / "COMPLETE").unlink()
        (ck4 / "trainer_state.pt").write_bytes(b"torn")
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 5, "reward/me')
    train(cfg, run, progress=False, log=lambda *a: None)
    assert "skipping incomplete checkpoint" in capsys.readouterr().out
    assert _steps(run) == [1, 2, 3, 4]
    a = load_file(str(straight / "checkpoints" / "step_000004" / "model" / "model.safetensors"))
    b = load_file(str(run / "checkpoints" / "step_000004" / "model" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)


def _steps(run):
    return [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()]
