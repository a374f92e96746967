"""The trainer with `rollout.engine=vllm`, driven against a vLLM stand-in that samples for real from
the weights the engine pushes (tests/vllm_standin.py): weight sync after every step (LoRA merged out
of place), `rollout/logprob_diff`, TIS, resume, and the paper recipes with a tiny model swapped in."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import torch

from rbctl.config.train import load_train_config
from rbctl.train.loop import train
from rbctl.train.trainer import Trainer
from rbctl.train.step import rollout_batch
from rbctl.train.update import update
from tests.vllm_standin import use_vllm_standin

QUIET = dict(progress=False, log=lambda *a: None)
CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def _lines(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _policy_weights(model) -> dict[str, torch.Tensor]:
    """What vLLM should hold: the policy's weights under base names, LoRA merged (on a copy), and a
    tied output embedding under its own name too."""
    if hasattr(model, "peft_config"):
        model = copy.deepcopy(model).merge_and_unload()
    held = {k: v.detach() for k, v in model.named_parameters()}
    if model.get_output_embeddings().weight is model.get_input_embeddings().weight:
        held["lm_head.weight"] = model.get_input_embeddings().weight.detach()
    return held


def _check_engine_holds_policy(tr: Trainer) -> None:
    held = tr.engine.llm.model.loaded
    want = _policy_weights(tr.model)
    assert set(held) == set(want)
    for k, v in want.items():
        # a bf16 base: the engine's merge (W + ΔW in bf16) and peft's may round differently by an ulp
        tol = dict(rtol=0, atol=1e-6) if v.dtype == torch.float32 else dict(rtol=2 ** -7, atol=1e-5)
        torch.testing.assert_close(held[k].float(), v.float(), msg=k, **tol)


@pytest.mark.parametrize("lora", [False, True])
def test_vllm_training_syncs_weights_logs_mismatch_and_resumes(tiny_config, tmp_path, monkeypatch, trainers, lora):
    engines = use_vllm_standin(monkeypatch, logprob_shift=-0.05)
    extra = {"model__lora": "{r: 4, alpha: 8, dropout: 0.0}"} if lora else {}
    cfg = tiny_config(steps=3, save_every=2, rollout__engine="vllm", algo__tis_cap=2.0, **extra)
    run = tmp_path / "run"
    checks = []

    def after_step(step, metrics):
        tr = trainers[-1]
        _check_engine_holds_policy(tr)  # the next rollout samples from the updated policy
        checks.append(step)
        if step == 2:
            raise KeyboardInterrupt  # killed after the step-2 checkpoint

    with pytest.raises(KeyboardInterrupt):
        train(cfg, run, on_step=after_step, **QUIET)
    first = trainers[0]
    start = first.engine.llm.loaded_at_generate[0]
    if lora:  # the first generation pushed the LoRA-wrapped policy under base names, merged
        assert not any("lora" in k or "base_layer" in k for k in start)
    train(cfg, run, on_step=after_step, **QUIET)  # resume: a fresh trainer continues from step 2
    assert checks == [1, 2, 3]
    assert trainers[-1].resume_step == 2
    lines = _lines(run)
    assert [r["step"] for r in lines] == [1, 2, 3]
    for r in lines:
        # the stand-in samples from exactly the pushed weights, then reports log-probs shifted by −0.05:
        # 0.05 at every step, step 3 included (the resumed engine first pushed the step-2 policy, not the base)
        assert r["rollout/logprob_diff"] == pytest.approx(0.05, abs=1e-4)
    assert len(engines) == 2


def test_tis_weights_scale_the_loss_on_the_same_batch(tiny_config, tmp_path, monkeypatch):
    use_vllm_standin(monkeypatch, logprob_shift=-0.3)  # engine log π lower by 0.3: w = exp(0.3) < cap 2
    with_tis = Trainer(tiny_config(rollout__engine="vllm", algo__tis_cap=2.0), tmp_path / "a", log=lambda *a: None)
    without = Trainer(tiny_config(rollout__engine="vllm"), tmp_path / "b", log=lambda *a: None)
    batch = rollout_batch(with_tis.state, with_tis.sampler, 1)
    assert batch.engine_logp is not None and batch.advantages.abs().sum() > 0
    a, b = update(with_tis.state, batch, with_tis.alpha).metrics, update(without.state, batch, without.alpha).metrics
    # same weights, same batch, no KL or entropy term: every token's policy-gradient term is scaled by
    # w = exp(0.3), so is the gradient (its norm is taken before clipping)
    assert b["grad_norm"] > 0
    assert a["grad_norm"] == pytest.approx(math.exp(0.3) * b["grad_norm"], rel=1e-4)
    assert a["rollout/logprob_diff"] == pytest.approx(0.3, abs=1e-4)


# What a paper recipe needs changed to train on CPU in a test: the model and data (a tiny built-in
# policy and task), the device, and sizes; everything else (engine vllm, tis_cap, lr, clip, micro
# batches, gradient checkpointing, KL logging, LoRA, dtype bf16 and bf16-mixed precision, here with
# CPU autocast) is the recipe's own.
TINY_RECIPE = [
    "model.name=builtin", "model.device=cpu",
    "data.source=builtin", "data.template=auto",
    "data.builtin={num_keys: 4, min_hops: 1, max_hops: 2, train_size: 256, test_size: 32, warm_start_steps: 300}",
    "steps=3", "threads=1", "kappa_eff_every=1", "save_every=2", "sample_every=1",
    "rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=8", "rollout.vllm.max_model_len=64",
    "eval.every=0",
]


@pytest.mark.parametrize("recipe", ["paper_qwen3_8b.yaml", "paper_llama32_3b.yaml"])
def test_paper_recipe_with_a_tiny_model_trains_on_the_vllm_standin(recipe, rbctl_cache, tmp_path, monkeypatch, trainers):
    use_vllm_standin(monkeypatch)
    cfg = load_train_config(CONFIGS / recipe, TINY_RECIPE)
    assert cfg.rollout.engine == "vllm" and cfg.algo.tis_cap == 2.0 and cfg.model.precision == "bf16-mixed"
    train(cfg, tmp_path / "run", **QUIET)
    lines = _lines(tmp_path / "run")
    assert [r["step"] for r in lines] == [1, 2, 3]
    for r in lines:
        assert r["nonfinite/skipped"] == 0
        # the stand-in samples in float32, the trainer's forward runs under bf16 autocast: measured
        assert 0.0 < r["rollout/logprob_diff"] < 0.5
    _check_engine_holds_policy(trainers[-1])
