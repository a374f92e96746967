"""Crash safety: SIGKILL a training run at random moments, resume, and get the uninterrupted result."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from scripts.faults import kill_and_resume_training, kill_when, logged_steps
from tests.conftest import TINY_TRAIN

STEPS = 40  # steps of the tiny model take ~40 ms: room for two kills after the random wait of up to 0.3 s


def _config(tmp_path: Path) -> Path:
    cfg = {**TINY_TRAIN, "steps": STEPS, "save_every": 2}
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


from scripts.faults import train_cmd as _train_cmd  # noqa: E402


_metrics_steps = logged_steps


def _final_weights(run: Path) -> dict:
    return load_file(str(run / "checkpoints" / f"step_{STEPS:06d}" / "model" / "model.safetensors"))


def _warm(rbctl_cache, tmp_path):
    """Build the warm start in-process first so the subprocesses only train."""
    from rbctl.config.train import TrainConfig
    from rbctl.rollout.models import load_policy
    from rbctl.train.training_data import base_model

    cfg = TrainConfig.model_validate(TINY_TRAIN)
    load_policy(base_model(cfg, log=lambda *a: None), log=lambda *a: None)


@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume_equals_an_uninterrupted_run(rbctl_cache, tmp_path):
    _warm(rbctl_cache, tmp_path)
    cfg = _config(tmp_path)
    env = {**os.environ, "RBCTL_CACHE": str(rbctl_cache)}
    straight = tmp_path / "straight"
    subprocess.run(_train_cmd(cfg, straight), check=True, env=env, timeout=300)

    run = tmp_path / "killed"
    kills, resumes_ok = kill_and_resume_training(cfg, run, kills=4, seed=0, env=env)
    assert kills >= 2 and resumes_ok == kills
    assert _metrics_steps(run) == list(range(1, STEPS + 1))  # no duplicated or missing step
    a, b = _final_weights(straight), _final_weights(run)
    assert all(torch.equal(a[k], b[k]) for k in a)
    sa = [json.loads(x) for x in (straight / "metrics.jsonl").read_text().splitlines()]
    sb = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["reward/mean"] for r in sa] == [r["reward/mean"] for r in sb]


def test_torn_checkpoint_and_torn_metrics_line_are_skipped_on_resume(tiny_config, tmp_path, capsys):
    from rbctl.train.loop import train

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
    messages = []
    train(cfg, run, progress=False, log=messages.append)
    assert any("skipping incomplete checkpoint" in m for m in messages)
    assert _steps(run) == [1, 2, 3, 4]
    a = load_file(str(straight / "checkpoints" / "step_000004" / "model" / "model.safetensors"))
    b = load_file(str(run / "checkpoints" / "step_000004" / "model" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_corrupted_checkpoint_fails_its_integrity_check_and_the_previous_one_is_used(tiny_config, tmp_path, capsys):
    """The flip keeps the file's size, so the checkpoint is chosen (marker and sizes only) and found
    corrupted as it is read: `rbctl eval` and the resume warn and take step 2; `--step 4` is refused."""
    import re

    from rbctl.cli import run as cli
    from rbctl.train.loop import train

    cfg = tiny_config(steps=4, save_every=2)
    run = tmp_path / "run"
    train(cfg, run, progress=False, log=lambda *a: None)
    weights = run / "checkpoints" / "step_000004" / "model" / "model.safetensors"
    straight = {k: v.clone() for k, v in load_file(str(weights)).items()}  # copied: load_file maps the file
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # one flipped bit pattern in the last byte: same size, different content
    weights.write_bytes(bytes(data))
    warning = f"warning: skipping checkpoint {run / 'checkpoints' / 'step_000004'}: fails its integrity check (model/model.safetensors)"
    capsys.readouterr()
    assert cli(["eval", str(run), "-b", "builtin", "--limit", "2", "--n", "1", "--max-new-tokens", "4"]) == 0
    squeeze = lambda text: re.sub(r"\s+", "", text)  # noqa: E731 (rich wraps long lines)
    assert squeeze(warning) in squeeze(capsys.readouterr().out)
    assert list((run / "eval" / "step_000002").glob("protocol_*/builtin/summary.json"))  # kept under its protocol
    assert not (run / "eval" / "step_000004").exists()
    assert cli(["eval", str(run), "-b", "builtin", "--limit", "2", "--step", "4"]) == 2
    err = [x for x in capsys.readouterr().err.splitlines() if x.startswith("error:")]
    assert len(err) == 1 and "step_000004 fails its integrity check (model/model.safetensors)" in err[0], err
    messages = []
    train(cfg, run, progress=False, log=messages.append)  # resumes from step 2 and redoes steps 3-4
    assert warning in messages and any("from step 2" in m for m in messages), messages
    assert _steps(run) == [1, 2, 3, 4]
    again = load_file(str(weights))
    assert all(torch.equal(straight[k], again[k]) for k in straight)


def _steps(run):
    return [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_sigkill_mid_sweep_then_rerun_does_only_the_missing_work(rbctl_cache, tmp_path):
    from rbctl.store.read import read_sweep_state

    _warm(rbctl_cache, tmp_path)
    (tmp_path / "base.yaml").write_text(yaml.safe_dump({**TINY_TRAIN, "steps": 4}))
    sweep = {"name": "k", "base": "base.yaml", "seeds": [0, 1], "arms": {"grpo": {}, "grpo_budget": {"algo.budget": 1.0}},
             "eval": {"benchmarks": ["builtin"], "n": 2, "limit": 4}, "jobs": 1}
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(sweep, sort_keys=False))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "rbctl", "ablate", str(tmp_path / "sweep.yaml"), "-o", str(out), "-q", "--no-report"]
    env = {**os.environ, "RBCTL_CACHE": str(rbctl_cache)}

    def one_done():
        return any(r["status"] == "done" for r in read_sweep_state(out).values()) if (out / "state.json").exists() else False

    assert kill_when(cmd, one_done, random.Random(1), env) == "killed"
    finished = [k for k, r in read_sweep_state(out).items() if r["status"] == "done"]
    mtimes = {k: (out / "runs" / k / "metrics.jsonl").stat().st_mtime_ns for k in finished}
    subprocess.run(cmd, check=True, env=env, timeout=600, stdout=subprocess.DEVNULL)
    state = read_sweep_state(out)
    assert all(r["status"] == "done" for r in state.values()) and len(state) == 4
    for k, m in mtimes.items():  # finished runs were not redone
        assert (out / "runs" / k / "metrics.jsonl").stat().st_mtime_ns == m


@pytest.mark.slow
def test_eval_and_report_on_a_live_run_read_only_sealed_checkpoints_and_complete_lines(tiny_config, tmp_path):
    """A run still being written: its newest checkpoint has no completion marker yet and its last
    metrics line is half written. `rbctl eval` takes the newest sealed checkpoint, `rbctl report`
    the complete lines."""
    from rbctl.cli import run as cli
    from rbctl.train.loop import train

    cfg = tiny_config(steps=4, save_every=2)
    run = tmp_path / "run"
    train(cfg, run, progress=False, log=lambda *a: None)
    (run / "checkpoints" / "step_000004" / "COMPLETE").unlink()  # as while step 4 is being written
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 5, "reward/me')
    assert cli(["eval", str(run), "-b", "builtin", "--limit", "2", "--n", "1", "--max-new-tokens", "4"]) == 0
    assert list((run / "eval" / "step_000002").glob("protocol_*/builtin/summary.json"))  # the sealed step-2 checkpoint
    assert not (run / "eval" / "step_000004").exists()
    out = tmp_path / "report"
    assert cli(["report", str(run), "-o", str(out)]) == 0
    runs_csv = (out / "tables" / "runs.csv").read_text()
    assert ",4," in runs_csv  # steps logged: the 4 complete lines, the torn 5th dropped


# --- run logs read as data ------------------------------------------------------------------------


def _cli_cfg(tmp_path: Path, name: str, **over) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({**TINY_TRAIN, "save_every": 2, **over}))
    return path


_EVAL = {"every": 2, "benchmarks": ["builtin"], "n": 2, "limit": 4}


@pytest.mark.parametrize("log_name", ["metrics.jsonl", "eval.jsonl"])
def test_a_corrupt_middle_line_of_a_run_log_is_one_line_with_its_true_line_number_and_nothing_is_rewritten(
        log_name, rbctl_cache, tmp_path, capsys):
    from rbctl.cli import run as cli

    run = tmp_path / "run"
    assert cli(["train", str(_cli_cfg(tmp_path, "a.yaml", steps=4, eval=_EVAL)), "-o", str(run), "-q"]) == 0
    path = run / log_name
    lines = path.read_text().splitlines(keepends=True)
    assert len(lines) >= 3
    col = lines[1].index(",") + 2  # one byte of the 2nd line damaged: a doubled comma
    lines[1] = lines[1].replace(",", ",,", 1)
    path.write_text("".join(lines))
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    capsys.readouterr()
    # 6 steps: a resume that got as far as the config would keep the old one as config.step_000004.yaml
    assert cli(["train", str(_cli_cfg(tmp_path, "b.yaml", steps=6, eval=_EVAL)), "-o", str(run), "--extend", "-q"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert err.startswith(f"error: {path}: line 2 is not valid JSON (") and f"column {col})" in err, err
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before  # nothing rewritten
    assert cli(["report", str(run), "-o", str(tmp_path / "report")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: line 2 is not valid JSON (") and err.count("\n") == 1, err


@pytest.mark.slow
def test_a_torn_last_line_is_dropped_with_a_notice_and_its_step_recomputed_from_the_checkpoint_before(
        rbctl_cache, tmp_path, capsys):
    """A crash cut the last metrics line short (no newline): the run is not complete, step 4 is
    recomputed from the step-2 checkpoint, and the logs and weights equal the uninterrupted run's."""
    from rbctl.cli import run as cli

    cfg = _cli_cfg(tmp_path, "a.yaml", steps=4, eval=_EVAL)
    straight, run = tmp_path / "straight", tmp_path / "run"
    assert cli(["train", str(cfg), "-o", str(straight), "-q"]) == 0
    assert cli(["train", str(cfg), "-o", str(run), "-q"]) == 0
    text = (run / "metrics.jsonl").read_text()
    cut = text.rstrip("\n").rfind("\n") + 1 + 25  # 25 bytes into the step-4 line
    (run / "metrics.jsonl").write_text(text[:cut])
    capsys.readouterr()
    assert cli(["train", str(cfg), "-o", str(run), "-q"]) == 0
    out = capsys.readouterr().out
    assert f"notice: {run / 'metrics.jsonl'}: dropping its torn last line 4" in out, out
    assert "recomputing step 4" in out and f"resuming {run} from step 2" in out and "already complete" not in out, out

    def lines(d, name, drop=("time/",)):
        return [{k: v for k, v in json.loads(x).items() if not k.startswith(drop)}
                for x in (d / name).read_text().splitlines()]

    assert _steps(run) == [1, 2, 3, 4]
    assert lines(run, "metrics.jsonl", ("time/", "throughput/")) == lines(straight, "metrics.jsonl", ("time/", "throughput/"))
    assert lines(run, "eval.jsonl") == lines(straight, "eval.jsonl")
    a, b = (load_file(str(d / "checkpoints" / "step_000004" / "model" / "model.safetensors")) for d in (straight, run))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_torn_eval_line_recomputes_the_step_its_fragment_names(rbctl_cache, tmp_path, capsys):
    from rbctl.cli import run as cli

    cfg = _cli_cfg(tmp_path, "a.yaml", steps=4, eval=_EVAL)
    run = tmp_path / "run"
    assert cli(["train", str(cfg), "-o", str(run), "-q"]) == 0
    full = (run / "eval.jsonl").read_text()
    text = full.rstrip("\n")
    (run / "eval.jsonl").write_text(text[:text.rfind("\n") + 1] + '{"step": 4, "benchmark": "buil')
    capsys.readouterr()
    assert cli(["train", str(cfg), "-o", str(run), "-q"]) == 0
    out = capsys.readouterr().out
    assert f"notice: {run / 'eval.jsonl'}: dropping its torn last line 3" in out and "recomputing step 4" in out, out
    assert [json.loads(x)["step"] for x in (run / "eval.jsonl").read_text().splitlines()] == [0, 2, 4]
    assert _steps(run) == [1, 2, 3, 4]
