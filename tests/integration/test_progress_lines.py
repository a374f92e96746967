"""Output that is not a terminal (a log file, a Slurm job) gets plain progress lines, flushed as they
are printed: `rbctl train`, `rbctl eval` and the warm-start build; `rbctl train` and `rbctl ablate`
end with the final held-out score."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import TINY_TRAIN

STAMP = r"\[\d\d:\d\d:\d\d\] "


def test_train_display_prints_plain_lines_when_output_is_not_a_terminal():
    from rbctl.train.progress import ProgressDisplay as _Display

    out = io.StringIO()  # not a terminal
    d = _Display(total=3, start=0, enabled=True, every=0.0, out=out)
    with d:
        for step, keff in ((1, 0.5), (2, None), (3, 0.25)):
            d.update(step, {"reward/mean": step / 4, "entropy": 1.0, "kappa_eff": keff})
    lines = out.getvalue().splitlines()
    assert [re.sub(STAMP, "", x).rsplit("  (", 1)[0] for x in lines] == [
        "train step 1/3  reward 0.250  entropy 1.000  κ_eff 0.5",
        "train step 2/3  reward 0.500  entropy 1.000  κ_eff 0.5",  # the last κ_eff measured
        "train step 3/3  reward 0.750  entropy 1.000  κ_eff 0.25",
    ]
    assert all(re.match(STAMP, x) and x.endswith(" min)") for x in lines)
    # a long period: only the last step is printed
    out = io.StringIO()
    with _Display(total=3, start=0, enabled=True, every=3600.0, out=out) as d:
        for step in (1, 2, 3):
            d.update(step, {"reward/mean": 0.0, "entropy": 0.0, "kappa_eff": None})
    assert [re.sub(STAMP, "", x).split("  ")[0] for x in out.getvalue().splitlines()] == ["train step 3/3"]


def test_plain_progress_reports_each_task_at_its_period_and_when_it_completes():
    from rbctl.console import PlainProgress

    out = io.StringIO()
    p = PlainProgress(every=3600.0, out=out)
    gen = p.add_task("builtin: generating", total=40, completed=10, detail="1/4 samples")
    p.advance(gen, 10)  # within the period: nothing
    p.update(gen, detail="2/4 samples")
    p.advance(gen, 20)  # complete: said at the update that follows, with its detail up to date, once
    assert out.getvalue() == ""
    p.update(gen, detail="4/4 samples")
    p.update(gen, detail="4/4 samples")
    p.advance(gen, 0)
    assert [re.sub(STAMP, "", x) for x in out.getvalue().splitlines()] == ["builtin: generating 100% (4/4 samples)"]
    p.every = 0.0  # every call past the period prints
    grade = p.add_task("builtin: grading", total=4, detail="0/4 samples")
    p.advance(grade, 1)
    assert re.sub(STAMP, "", out.getvalue().splitlines()[-1]) == "builtin: grading 25% (0/4 samples)"


def test_the_warm_start_build_reports_its_steps_through_the_build_log(tmp_path, monkeypatch):
    from rbctl.tasks import links, tiny

    monkeypatch.setattr(tiny, "REPORT_EVERY_S", 0.0)
    monkeypatch.setenv("RBCTL_CACHE", str(tmp_path))
    spec = links.TaskSpec(num_keys=4, min_hops=1, max_hops=1)
    ws = links.WarmStartSpec(steps=3, batch_size=2, hidden_size=8, layers=1, heads=2)
    said: list[str] = []
    tiny.warm_started("links", spec, ws, lambda: links.sft_warm_start(spec, ws), log=said.append)
    assert said[0].startswith("warm-starting the built-in links policy (3 SFT steps")
    assert [re.sub(r" \(\d+ s\)$", "", x) for x in said[1:]] == [f"warm start: step {k}/3" for k in (1, 2, 3)]
    # at the default period a build of a few steps says only its end
    monkeypatch.setattr(tiny, "REPORT_EVERY_S", 3600.0)
    said.clear()
    tiny.sft_warm_start(ws, links.alphabet(spec), lambda v: links.model_config(spec, ws, v),
                        lambda rng, step: ("A", "B"), links.format_problem, log=said.append)
    assert [re.sub(r" \(\d+ s\)$", "", x) for x in said] == ["warm start: step 3/3"]


def _cfg(tmp_path: Path, **over) -> Path:
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump({**TINY_TRAIN, **over}))
    return path


@pytest.mark.slow
def test_train_to_a_log_file_prints_progress_lines_and_ends_with_the_final_held_out_score(rbctl_cache, tmp_path):
    cfg = _cfg(tmp_path, steps=4, eval={"every": 2, "benchmarks": ["builtin"], "n": 2, "limit": 4})
    run = tmp_path / "run"
    log = tmp_path / "log.txt"
    with open(log, "w") as f:  # not a terminal
        res = subprocess.run([sys.executable, "-m", "rbctl", "train", str(cfg), "-o", str(run)], stdout=f,
                             stderr=subprocess.PIPE, text=True, env={**os.environ, "RBCTL_CACHE": str(rbctl_cache)},
                             timeout=600)
    assert res.returncode == 0, res.stderr
    text = log.read_text()
    assert "\x1b[" not in text  # no Rich display in a log file
    assert re.search(STAMP + r"train step 4/4  reward \d\.\d{3}  entropy \d\.\d{3}  κ_eff ", text), text
    last = [json.loads(x) for x in (run / "eval.jsonl").read_text().splitlines()][-1]
    assert last["step"] == 4
    assert text.splitlines()[-1] == f"final held-out builtin avg@2 {100 * last['avg@n']:.1f}% (step 4)"


def test_final_held_out_lines_of_a_run_and_of_a_sweep_by_hand(tmp_path):
    from rbctl.sweep.ablate import arm_final_lines
    from rbctl.train.evaluation import final_heldout_lines

    run = tmp_path / "run"
    run.mkdir()
    (run / "eval.jsonl").write_text("".join(json.dumps(x) + "\n" for x in (
        {"step": 0, "benchmark": "builtin", "avg@n": 0.1, "n": 8},
        {"step": 100, "benchmark": "builtin", "avg@n": 0.51249, "n": 8},
        {"step": 100, "benchmark": "gsm8k", "avg@n": 0.25, "n": 8})))
    assert final_heldout_lines(run) == ["final held-out builtin avg@8 51.2% (step 100)",
                                        "final held-out gsm8k avg@8 25.0% (step 100)"]
    assert final_heldout_lines(tmp_path / "none") == []

    sweep = tmp_path / "sweep"
    state = {"runs": {}}
    for arm, values in (("grpo", (0.5, 0.7, 0.6)), ("budget", (0.2, 0.4, None))):
        for seed, v in enumerate(values):
            key = f"{arm}/seed_{seed}"
            state["runs"][key] = {"status": "done" if v is not None else "failed", "error": None}
            if v is None:
                continue
            d = sweep / "runs" / key / "eval" / "step_000010" / "builtin"
            d.mkdir(parents=True)
            (d / "summary.json").write_text(json.dumps({"benchmark": "builtin", "n": 4,
                                                        "metrics": {"avg@n": {"value": v}}}))
    assert arm_final_lines(sweep, state) == [
        "final held-out builtin avg@4 grpo 60.0% (mean over 3 seeds, step 10)",  # (0.5 + 0.7 + 0.6) / 3
        "final held-out builtin avg@4 budget 30.0% (mean over 2 seeds, step 10)",  # the failed run has no score
    ]


@pytest.mark.slow
def test_eval_to_a_log_file_prints_plain_progress_lines(tmp_path):
    from tests.integration.test_evaluate import _run_dir_with_checkpoint

    run = _run_dir_with_checkpoint(tmp_path, config=None)
    log = tmp_path / "log.txt"
    with open(log, "w") as f:
        res = subprocess.run([sys.executable, "-m", "rbctl", "eval", str(run), "-b", "builtin", "--limit", "4", "--n", "2",
                              "--max-new-tokens", "4", "--device", "cpu"], stdout=f, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "RBCTL_CACHE": str(tmp_path / "cache")}, timeout=600)
    assert res.returncode == 0, res.stderr
    text = log.read_text()
    lines = [re.sub(STAMP, "", x) for x in text.splitlines() if re.match(STAMP, x)]
    assert lines == ["builtin: generating 100% (8/8 samples)", "builtin: grading 100% (8/8 samples)"], text


@pytest.mark.slow  # one step of the main job's task and two evaluations
def test_the_step0_evaluation_says_it_runs_and_what_it_gave(tmp_path):
    """A real model's step-0 evaluation can take minutes: train says it is running and prints its score."""
    from rbctl.config.train import load_train_config
    from rbctl.train.loop import train

    lines = []
    cfg = load_train_config("configs/fixpoint.yaml", ["steps=1", "eval.every=1", "threads=1"])
    train(cfg, tmp_path / "run", log=lines.append)
    assert lines[0] == f"step 0: evaluating the starting policy on {', '.join(cfg.eval.benchmarks)} before training …"
    assert lines[1].startswith("step-0 held-out ") and lines[1].endswith(" s)") and "%" in lines[1]
