"""A run is validated before it touches the disk: `--dry-run` makes the checks the run makes (benchmarks,
model path, data file, engine and device on this machine), and a run that fails before its first
step leaves no directory and no lock behind. Nothing here trains a step or builds a warm start."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from rbctl.cli import run

REPO = Path(__file__).resolve().parents[2]
FIXPOINT = str(REPO / "configs" / "fixpoint.yaml")
no_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")


def _err_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("dry", [True, False])
def test_an_unknown_benchmark_exits_2_and_leaves_no_directory(dry, tmp_path, capsys):
    out = tmp_path / "runs" / "first"
    argv = ["train", FIXPOINT, "-o", str(out), "--set", "eval.benchmarks=[gsm8kk]"] + (["--dry-run"] if dry else [])
    assert run(argv) == 2
    line = _err_line(capsys)
    assert line.startswith("error: eval.benchmarks: unknown benchmark 'gsm8kk'") and "gsm8k" in line
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("override, expected", [
    ("model.name=./no/such/model", "error: model.name: model path ./no/such/model does not exist"),
    ("data.source=missing.jsonl", "error: data.source: data file missing.jsonl does not exist"),
    ("eval.benchmarks=[file:nope.jsonl]", "error: eval.benchmarks: benchmark file nope.jsonl does not exist"),
])
def test_a_dry_run_refuses_what_the_run_would_fail_on(override, expected, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run(["train", FIXPOINT, "-o", "r", "--set", override, "--dry-run"]) == 2
    assert _err_line(capsys).startswith(expected)
    assert list(tmp_path.iterdir()) == []


@no_vllm
def test_the_vllm_engine_without_vllm_is_refused_before_the_run_directory_with_an_option_train_has(tmp_path, capsys):
    out = tmp_path / "run"
    assert run(["train", FIXPOINT, "-o", str(out), "--set", "rollout.engine=vllm"]) == 2
    line = _err_line(capsys)
    assert "pip install 'rbctl[vllm]'" in line and "--set rollout.engine=hf" in line and "--engine hf" not in line
    assert not out.exists()
    # the dry run plans it and says this machine cannot run it, with the same fix
    assert run(["train", FIXPOINT, "-o", str(out), "--set", "rollout.engine=vllm", "--dry-run"]) == 0
    plan = capsys.readouterr().out
    assert "cannot run it (plan only): rollout.engine vllm needs vLLM" in plan and "--set rollout.engine=hf" in plan
    assert not out.exists()


@no_cuda
def test_a_cpu_plan_says_it_trains_on_the_cpu(tmp_path, capsys):
    assert run(["train", FIXPOINT, "-o", str(tmp_path / "r"), "--set", "model.device=auto", "--dry-run"]) == 0
    plan = capsys.readouterr().out
    assert "trains on the CPU (model.device auto: CUDA is not available), engine hf" in plan
    assert "plan only" not in plan and "cannot run" not in plan
    assert run(["train", FIXPOINT, "-o", str(tmp_path / "r"), "--set", "model.device=cuda", "--dry-run"]) == 0
    assert "cannot run it (plan only): model.device is 'cuda' but CUDA is not available here" in capsys.readouterr().out


def test_a_run_that_fails_before_its_first_step_leaves_nothing_and_a_resumed_one_is_kept(tmp_path, tiny_config,
                                                                                        monkeypatch):
    from rbctl.errors import UserError
    from rbctl.train import loop

    class Broken:  # fails where the trainer loads the model, after the run directory and its lock exist
        def __init__(self, cfg, run_dir, **k):
            assert (Path(run_dir) / ".lock").exists()
            raise UserError("cannot load model")

    monkeypatch.setattr(loop, "Trainer", Broken)
    out = tmp_path / "a" / "b" / "run"
    with pytest.raises(UserError):
        loop.train(tiny_config(), out, progress=False, log=lambda *a: None)
    assert not (tmp_path / "a").exists()  # the folders it made, parents included
    # a directory that was there before (a run being resumed, a sweep's run) is never removed
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "metrics.jsonl").write_text('{"step": 1}\n')
    with pytest.raises(UserError):
        loop.train(tiny_config(), kept, progress=False, log=lambda *a: None)
    assert (kept / "metrics.jsonl").exists()


@no_vllm
def test_a_sweep_that_cannot_run_is_refused_before_its_directory_naming_the_arm(tmp_path, capsys):
    sweep = str(REPO / "configs" / "ablate_quickstart.yaml")
    out = tmp_path / "sweep"
    assert run(["ablate", sweep, "-o", str(out), "--set", "rollout.engine=vllm", "--no-report"]) == 2
    line = _err_line(capsys)
    assert line.startswith("error: arm 'grpo': rollout.engine vllm needs vLLM") and "--set rollout.engine=hf" in line
    assert not out.exists()
    assert run(["ablate", sweep, "-o", str(out), "--set", "eval.benchmarks=[nope]", "--no-report"]) == 2
    assert _err_line(capsys).startswith("error: arm 'grpo': eval.benchmarks: unknown benchmark 'nope'")  # periodic
    assert not out.exists()


def test_a_run_whose_first_evaluation_finds_no_data_leaves_no_directory(tmp_path, capsys, monkeypatch):
    """The check of a benchmark's data is the run's own (a dry run downloads nothing): the run sets up,
    fails at its step-0 evaluation, and removes the folders it made, lock included."""
    from rbctl.tasks import benchmarks as registry

    monkeypatch.delenv("RBCTL_DATA_DIR", raising=False)
    monkeypatch.setattr(registry, "_hub_records_or_reason", lambda *a: (None, "offline"))
    out = tmp_path / "runs" / "first"
    assert run(["train", FIXPOINT, "-o", str(out), "--set", "eval.benchmarks=[amc23]", "-q"]) == 2
    assert "no data for benchmark 'amc23'" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
