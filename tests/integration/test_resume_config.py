"""A resume is honest about its config: a run's `steps` changes only with
--extend, which keeps the schedule the first steps ran with; the learning-rate schedule never
changes; a changed config leaves the previous one beside it (config.step_N.yaml)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from rbctl.cli import run as cli
from rbctl.train.loop import train
from tests.conftest import TINY_TRAIN

QUIET = dict(progress=False, log=lambda *a: None)
COSINE = dict(optim__schedule="cosine", optim__warmup_steps=1)


def _cfg_file(tmp_path: Path, steps: int, **optim) -> Path:
    path = tmp_path / f"cfg_{steps}_{len(list(tmp_path.glob('cfg_*')))}.yaml"
    cfg = {**TINY_TRAIN, "steps": steps, "save_every": 2, "optim": {**TINY_TRAIN["optim"], **optim}}
    path.write_text(yaml.safe_dump(cfg))
    return path


def _lrs(run: Path) -> list[float]:
    return [json.loads(x)["lr"] for x in (run / "metrics.jsonl").read_text().splitlines()]


def _one_error(err: str) -> str:
    lines = [x for x in err.splitlines() if x.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_a_changed_steps_under_cosine_or_another_schedule_is_refused_in_one_line(rbctl_cache, tmp_path, capsys):
    rd = tmp_path / "run"
    assert cli(["train", str(_cfg_file(tmp_path, 2, schedule="cosine")), "-o", str(rd), "-q"]) == 0
    before = (rd / "config.yaml").read_text()
    for force in ([], ["--force"]):  # --force does not stretch a schedule either
        capsys.readouterr()
        assert cli(["train", str(_cfg_file(tmp_path, 4, schedule="cosine")), "-o", str(rd), "-q", *force]) == 2
        err = _one_error(capsys.readouterr().err)
        assert "steps=2" in err and "steps=4" in err and "--extend" in err, err
    assert cli(["train", str(_cfg_file(tmp_path, 2, schedule="cosine", lr=5e-4)), "-o", str(rd), "-q", "--force"]) == 2
    err = _one_error(capsys.readouterr().err)
    assert "optim.lr: 0.001 -> 0.0005" in err and "model.name=" in err, err
    # nothing was written by the refused runs
    assert (rd / "config.yaml").read_text() == before and not list(rd.glob("config.step_*"))
    assert len(_lrs(rd)) == 2


def test_extend_keeps_the_first_steps_schedule_and_holds_its_last_lr(tiny_config, tmp_path):
    from rbctl.train.run_setup import check_run_dir

    straight = tmp_path / "straight"
    train(tiny_config(steps=4, **COSINE), straight, **QUIET)

    ext = tmp_path / "ext"

    def stop(step, metrics):
        if step == 2:
            raise KeyboardInterrupt  # after the step-2 checkpoint of the 4-step schedule

    with pytest.raises(KeyboardInterrupt):
        train(tiny_config(steps=4, **COSINE), ext, on_step=stop, **QUIET)
    train(tiny_config(steps=6, **COSINE), ext, extend=True, **QUIET)
    a, b = _lrs(straight), _lrs(ext)
    assert len(b) == 6 and b[:4] == a  # steps 1-4: the un-extended run's lr, steps 3-4 included
    assert b[4:] == [a[3], a[3]] and a[3] > 0  # past the horizon: held at its last value
    wa, wb = load_file(str(straight / "checkpoints/step_000004/model/model.safetensors")), \
        load_file(str(ext / "checkpoints/step_000004/model/model.safetensors"))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)  # the same first 4 steps, bit for bit
    cfg = yaml.safe_load((ext / "config.yaml").read_text())
    assert (cfg["steps"], cfg["optim"]["schedule_steps"]) == (6, 4)
    assert yaml.safe_load((ext / "config.step_000002.yaml").read_text())["steps"] == 4
    # the pinned horizon carries over to a later resume with more steps (which, as any, needs --extend)
    assert check_run_dir(tiny_config(steps=8, **COSINE), ext, force=False, extend=True).optim.schedule_steps == 4


def test_lr_factor_past_the_horizon_keeps_the_last_steps_value(tiny_config):
    from rbctl.train.optim import lr_factor

    # H = 4, warm-up 1: s=0 warm-up (0+1)/1 = 1; cosine over span 3: s=1 → 1, s=2 → (1 + cos(π/3))/2 = 0.75,
    # s=3 → (1 + cos(2π/3))/2 = 0.25; s ≥ 4 (extended to 6): the value of s=3
    cfg = tiny_config(steps=6, optim__schedule_steps=4, **COSINE)
    assert [lr_factor(cfg.optim, cfg.steps, s) for s in range(6)] == pytest.approx([1.0, 1.0, 0.75, 0.25, 0.25, 0.25])
    # without a pinned horizon the same 6-step run spans 6: s=2 → (1 + cos(π/5))/2, another lr
    assert lr_factor(tiny_config(steps=6, **COSINE).optim, 6, 2) == pytest.approx((1 + math.cos(math.pi / 5)) / 2)


def test_a_constant_schedule_extends_with_extend_and_each_config_is_kept(tiny_config, tmp_path):
    from rbctl.errors import UserError

    run = tmp_path / "run"
    train(tiny_config(steps=2, optim__warmup_steps=1), run, **QUIET)
    # another `steps` alone is refused, naming it (no run is lengthened silently), and nothing is written
    with pytest.raises(UserError, match=r"made with steps=2; steps=4 would train it past its 2 steps: pass --extend"):
        train(tiny_config(steps=4, optim__warmup_steps=1), run, **QUIET)
    assert _lrs(run) == [1e-3] * 2 and not list(run.glob("config.step_*"))
    # constant after warm-up: no step's lr depends on `steps`, so --extend changes no lr
    train(tiny_config(steps=4, optim__warmup_steps=1), run, extend=True, **QUIET)
    assert _lrs(run) == [1e-3] * 4
    assert yaml.safe_load((run / "config.step_000002.yaml").read_text())["steps"] == 2
    assert yaml.safe_load((run / "config.yaml").read_text())["steps"] == 4


def test_force_keeps_the_previous_config_beside_the_new_one(rbctl_cache, tmp_path, capsys):
    rd = tmp_path / "run"
    first, changed = _cfg_file(tmp_path, 2), tmp_path / "budget.yaml"
    changed.write_text(yaml.safe_dump({**TINY_TRAIN, "steps": 4, "save_every": 2,
                                       "algo": {**TINY_TRAIN["algo"], "budget": 1.0}}))
    assert cli(["train", str(first), "-o", str(rd), "-q"]) == 0
    assert cli(["train", str(changed), "-o", str(rd), "-q"]) == 2  # another config: needs --force
    assert not list(rd.glob("config.step_*"))
    assert cli(["train", str(changed), "-o", str(rd), "-q", "--force"]) == 0
    old, new = (yaml.safe_load((rd / name).read_text()) for name in ("config.step_000002.yaml", "config.yaml"))
    assert (old["algo"]["budget"], old["steps"]) == (None, 2)  # what steps 1-2 ran with
    assert (new["algo"]["budget"], new["steps"]) == (1.0, 4)  # what steps 3-4 ran with
    assert sorted(p.name for p in rd.glob("config*.yaml")) == ["config.step_000002.yaml", "config.yaml"]


def test_a_checkpoint_whose_recorded_schedule_differs_is_refused_by_the_trainer(tiny_config, tmp_path):
    """What the run-directory check would refuse, the checkpoint refuses too (a hand-edited
    config.yaml, or the Trainer used directly)."""
    from rbctl.errors import UserError
    from rbctl.train.trainer import Trainer

    run = tmp_path / "run"
    train(tiny_config(steps=2), run, **QUIET)
    with pytest.raises(UserError, match="ran with the learning-rate schedule .*'lr': 0.001"):
        Trainer(tiny_config(steps=4, optim__lr=5e-4), run, log=lambda *a: None)


def test_a_run_lengthened_with_extend_under_a_constant_lr_equals_the_longer_run_from_the_start(tiny_config, tmp_path):
    """What a settings probe at a longer horizon rests on: a run of 2 steps (periodic evaluations every 2,
    so a held-out score at its last step) lengthened to 4 with --extend logs, evaluates and ends exactly as
    the 4-step run does: no step, evaluation or random draw depends on the horizon it first ran with."""
    straight, short = tmp_path / "straight", tmp_path / "short"
    evals = dict(eval__every=2, eval__n=2, eval__limit=4, eval__temperature=1.0)
    train(tiny_config(steps=4, **evals), straight, **QUIET)
    train(tiny_config(steps=2, **evals), short, **QUIET)
    train(tiny_config(steps=4, **evals), short, extend=True, **QUIET)

    def lines(run: Path, name: str) -> list[dict]:
        return [{k: v for k, v in json.loads(x).items() if not k.startswith(("time/", "throughput/"))}
                for x in (run / name).read_text().splitlines()]

    assert [r["step"] for r in lines(short, "metrics.jsonl")] == [1, 2, 3, 4]
    assert lines(short, "metrics.jsonl") == lines(straight, "metrics.jsonl")
    assert [e["step"] for e in lines(short, "eval.jsonl")] == [0, 2, 4]
    assert lines(short, "eval.jsonl") == lines(straight, "eval.jsonl")
    assert (short / "samples.jsonl").read_text() == (straight / "samples.jsonl").read_text()
    a, b = (load_file(str(next((r / "checkpoints" / "step_000004").rglob("*.safetensors")))) for r in (straight, short))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
