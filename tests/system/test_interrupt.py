"""Ctrl-C keeps the work: the first SIGINT ends the step in progress and writes its checkpoint, so a
resume redoes nothing and equals the uninterrupted run (rbctl.train.interrupt)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from scripts.faults import logged_steps, train_cmd
from tests.conftest import TINY_TRAIN

STEPS, SAVE_EVERY = 40, 30  # an interrupt at step 2-29 lands on no save step (room for the launcher's forward, polled every 0.2 s)
# the fields of a metrics line that are wall-clock times (or rates over them), not results
TIMES = re.compile(r'"(time/[^"]+|throughput/[^"]+)": [^,}]+')


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump({**TINY_TRAIN, "steps": STEPS, "save_every": SAVE_EVERY}))
    return path


def _warm() -> None:
    """The warm start built in-process first, so that the subprocesses only train."""
    from rbctl.config.train import TrainConfig
    from rbctl.rollout.models import load_policy
    from rbctl.train.training_data import base_model

    load_policy(base_model(TrainConfig.model_validate(TINY_TRAIN), log=lambda *a: None), log=lambda *a: None)


def _interruptible() -> None:
    """SIGINT as a terminal delivers it (a child of a non-interactive shell inherits it ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait_for(cond, proc, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while not cond():
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.02)


def _weights(run: Path) -> dict:
    return load_file(str(run / "checkpoints" / f"step_{STEPS:06d}" / "model" / "model.safetensors"))


@pytest.mark.slow
def test_sigint_at_a_step_that_is_no_save_step_saves_it_and_the_resume_equals_the_uninterrupted_run(rbctl_cache, tmp_path):
    _warm()
    cfg, straight, run = _config(tmp_path), tmp_path / "straight", tmp_path / "interrupted"
    env = {**os.environ, "RBCTL_CACHE": str(rbctl_cache)}
    subprocess.run(train_cmd(cfg, straight), check=True, env=env, timeout=300, capture_output=True)

    proc = subprocess.Popen(train_cmd(cfg, run), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_interruptible)
    _wait_for(lambda: (run / "metrics.jsonl").exists() and len(logged_steps(run)) >= 2, proc)
    os.kill(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    stopped = logged_steps(run)[-1]
    assert 2 <= stopped < SAVE_EVERY, stopped  # no save step: the checkpoint below is the interrupt's own
    assert f"interrupted: the last checkpoint is step {stopped}; resume with:" in err
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [f"step_{stopped:06d}"]

    again = subprocess.run(train_cmd(cfg, run), env=env, timeout=300, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert f"resuming {run} from step {stopped}" in again.stdout
    # byte for byte, the wall-clock fields aside
    a, b = (TIMES.sub(r'"\1": T', (d / "metrics.jsonl").read_text()) for d in (straight, run))
    assert a == b and a.count("\n") == STEPS
    wa, wb = _weights(straight), _weights(run)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.mark.slow
def test_sigint_to_a_sweep_saves_each_running_run_at_its_step_and_the_rerun_redoes_nothing(rbctl_cache, tmp_path):
    """The launcher forwards the Ctrl-C to its workers (a terminal's reaches them too: merged,
    rbctl.train.interrupt.MERGE_S); each ends its step, saves it, and the rerun resumes there."""
    _warm()
    (tmp_path / "base.yaml").write_text(yaml.safe_dump({**TINY_TRAIN, "steps": STEPS, "save_every": SAVE_EVERY}))
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump({
        "name": "s", "base": "base.yaml", "seeds": [0], "arms": {"grpo": {}}, "jobs": 1,
        "eval": {"benchmarks": ["builtin"], "n": 2, "limit": 4}}, sort_keys=False))
    out, env = tmp_path / "out", {**os.environ, "RBCTL_CACHE": str(rbctl_cache)}
    cmd = [sys.executable, "-m", "rbctl", "ablate", str(tmp_path / "sweep.yaml"), "-o", str(out), "--no-report", "-q"]
    run = out / "runs" / "grpo" / "seed_0"
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_interruptible)
    _wait_for(lambda: (run / "metrics.jsonl").exists() and len(logged_steps(run)) >= 2, proc)
    proc.send_signal(signal.SIGINT)  # to the launcher alone: its forward reaches the worker
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    stopped = logged_steps(run)[-1]
    assert 2 <= stopped < SAVE_EVERY and sorted(p.name for p in (run / "checkpoints").iterdir()) == [f"step_{stopped:06d}"]
    before = (run / "metrics.jsonl").read_text()
    again = subprocess.run(cmd, env=env, timeout=300, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    after = (run / "metrics.jsonl").read_text()
    assert after.startswith(before) and logged_steps(run) == list(range(1, STEPS + 1))  # nothing redone, nothing lost
