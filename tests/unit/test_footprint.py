"""The memory budget per GPU and the time per step of a training config (rbctl.train.footprint), by
hand on the paper recipes' architectures, and the paper configs against the cards they name."""

from __future__ import annotations

from pathlib import Path

import pytest

from rbctl.config.train import load_train_config
from rbctl.train.footprint import (CARDS, CUDA_RESERVE, GiB, HBM_EFFICIENCY, KNOWN_ARCHITECTURES, STEP_OVERHEAD_S,
                                   TRAIN_MFU, VLLM_ALLOWANCE, Architecture, memory_budget, plan_rows, step_time)

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
PROMPT = 200  # tokens per prompt (the dry run's assumption without cached data)


def _arch(name: str):
    """(Architecture, exact parameter count on the meta device) of a shipped architecture."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(**KNOWN_ARCHITECTURES[name])
    with torch.device("meta"):
        n = sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters())
    return Architecture.of(config), n


def test_the_shipped_architectures_give_the_published_sizes():
    qwen, n_qwen = _arch("Qwen/Qwen3-8B")
    # embeddings 151,936·4096 twice (untied) + 36 layers · (q 4096² + k, v 4096·1024 each + o 4096² + MLP 3·4096·12,288
    # + norms 2·4096 + q/k norms 2·128) + the final norm
    assert n_qwen == 2 * 151_936 * 4096 + 36 * (2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 12_288 + 2 * 4096 + 256) + 4096
    assert n_qwen == 8_190_735_360
    llama, n_llama = _arch("meta-llama/Llama-3.2-3B-Instruct")
    assert n_llama == 128_256 * 3072 + 28 * (2 * 3072**2 + 2 * 3072 * 1024 + 3 * 3072 * 8192 + 2 * 3072) + 3072
    assert qwen.kv_bytes_per_token(2) == 2 * 36 * 8 * 128 * 2 == 147_456
    # LoRA r 64 on the seven projections: 64 · (in + out) each, 36 layers
    per_layer = 64 * ((4096 + 4096) + 2 * (4096 + 1024) + (4096 + 4096) + 3 * (4096 + 12_288))
    assert qwen.lora_parameters(64, "all-linear") == 36 * per_layer == 174_587_904
    assert qwen.lora_parameters(64, ["q_proj", "v_proj"]) == 36 * 64 * (8192 + 5120)


def test_the_qwen3_recipes_budget_by_hand():
    cfg = load_train_config(CONFIGS / "paper_qwen3_8b.yaml")
    arch, n = _arch("Qwen/Qwen3-8B")
    b = memory_budget(cfg, n, arch, PROMPT)
    a = 174_587_904
    assert b.parts["weights"][0] == n * 2 + a * 4  # the bf16 base and the float32 adapters
    assert (b.parts["gradients"][0], b.parts["AdamW"][0], b.parts["reference"][0]) == (a * 4, a * 8, 0.0)
    # one micro-batch of 1 × 8392 tokens, checkpointed: 36 layer inputs of 4096 bf16 (the base's dtype) + one
    # layer recomputed, 2·(7·4096 + 2·1024 + 4·12,288) + 2·2·4096 = 176,128 B a token; fused logits 2·2 B
    t = 8392
    assert b.parts["activations"][0] == 36 * t * 4096 * 2 + t * 176_128 + t * 151_936 * 4
    share = 0.6 * CARDS["H100-80GB"].memory
    assert b.parts["engine"][0] == share
    assert b.kv_tokens == pytest.approx((share - n * 2 - VLLM_ALLOWANCE) / 147_456)
    state = n * 2 + a * 16
    assert b.sampling == state + share  # vLLM holds its share while sampling; the policy stays resident
    assert b.training == pytest.approx(state + b.parts["activations"][0] + GiB)  # vLLM asleep keeps 1 GiB
    assert b.peak < CARDS["H100-80GB"].memory - CUDA_RESERVE


def test_the_step_time_by_hand():
    cfg = load_train_config(CONFIGS / "paper_qwen3_8b.yaml")
    arch, n = _arch("Qwen/Qwen3-8B")
    card = CARDS["H100-80GB"]
    kv_tokens = 222_000.0
    t = step_time(cfg, n, arch, PROMPT, kv_tokens, extra_flops=1e15)
    # 256 sequences of 8392 tokens; 26 fit the KV cache at once: 10 waves of 8192 decoding steps; each generated
    # token reads the weights over 26 sequences and a mean context of 200 + 4096 tokens of KV cache
    per_token = n * 2 / 26 + 4296 * 147_456
    rollout = 256 * 8192 * per_token / (card.hbm * HBM_EFFICIENCY) + 10 * 8192 * STEP_OVERHEAD_S["vllm"]
    assert t.rollout_s == pytest.approx(rollout)
    # LoRA with checkpointing: 2 forward + 2 input gradients + 2 recomputed forward = 6·N·T
    flops = 6 * n * 256 * 8392 + 1e15
    assert t.update_s == pytest.approx(flops / (card.bf16_flops * TRAIN_MFU))
    assert "26 at once (10 waves of 8192 decoding steps)" in t.rollout_how


def test_what_exceeds_the_card_or_the_time_limit_is_warned():
    arch, n = _arch("meta-llama/Llama-3.2-3B-Instruct")
    # full-parameter 3B (54 GiB of training state) beside 0.4 of an 80 GB card for vLLM
    cfg = load_train_config(CONFIGS / "paper_llama32_3b.yaml", ["hardware.gpu=A100-80GB",
                                                               "rollout.vllm.gpu_memory_utilization=0.4"])
    rows, warnings = plan_rows(cfg, n, arch, PROMPT, extra_flops=0.0)
    assert any(w.startswith("memory: the estimated peak of") and "exceeds the A100-80GB's usable" in w for w in warnings)
    assert any(label == "  peak" and "EXCEEDS the A100-80GB's" in text for label, text in rows)
    # a job shorter than the steps between two checkpoints never gets past its first checkpoint
    cfg = load_train_config(CONFIGS / "paper_llama32_3b.yaml", ["hardware.time_limit_min=30"])
    _, warnings = plan_rows(cfg, n, arch, PROMPT, extra_flops=0.0)
    assert any(w.startswith("time: save_every 25 steps") and "never gets anywhere" in w for w in warnings)
    # vLLM's share that does not hold its own weights leaves no KV cache at all
    cfg = load_train_config(CONFIGS / "paper_llama32_3b.yaml", ["rollout.vllm.gpu_memory_utilization=0.05"])
    _, warnings = plan_rows(cfg, n, arch, PROMPT, extra_flops=0.0)
    assert any("leaves vLLM a KV cache of 0 tokens, less than one sequence of 2248" in w for w in warnings)


@pytest.mark.parametrize("name, model", [("paper_qwen3_8b", "Qwen/Qwen3-8B"),
                                         ("paper_llama32_3b", "meta-llama/Llama-3.2-3B-Instruct")])
def test_each_paper_config_fits_the_card_and_the_time_limit_it_names(name, model):
    from rbctl.config.base import read_yaml

    cfg = load_train_config(CONFIGS / f"{name}.yaml")
    assert cfg.hardware.gpu in CARDS and cfg.hardware.gpus == 1 and cfg.hardware.time_limit_min
    arch, n = _arch(model)
    rows, warnings = plan_rows(cfg, n, arch, PROMPT, extra_flops=0.0)
    assert not [w for w in warnings if w.startswith("memory")], warnings
    assert not [w for w in warnings if "never gets anywhere" in w], warnings
    # the sweep's Slurm jobs are the time limit the config is planned for
    assert read_yaml(CONFIGS / f"{name}_sweep.yaml")["launcher"]["timeout_min"] == cfg.hardware.time_limit_min
    # and a requeue loses at most an hour and a half of steps
    t = step_time(cfg, n, arch, PROMPT, memory_budget(cfg, n, arch, PROMPT).kv_tokens, 0.0)
    assert t.step_s * cfg.save_every < 1.5 * 3600
