"""Tiny random models built in code (nothing downloaded), their problems and training configs.

The tokenizer is word-level over every id: token I decodes to `aI\\boxed{I mod 2}`, so a random
sample ends in a boxed 0 or 1, and the answers are 0 and 1: a random policy is right half the time,
groups are mixed, advantages and gradients are real, and rewards go through rbctl's own grader."""

from __future__ import annotations

import json
from pathlib import Path

EOS = "<|endoftext|>"
# Head dim 64: one every attention backend of vLLM's GPU build takes; 2 KV heads: grouped-query, as
# both recipes' models.
TINY = dict(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=64, max_position_embeddings=2048)
# Qwen3-0.6B's config.json (huggingface.co/Qwen/Qwen3-0.6B): sizes where memory is worth estimating.
QWEN3_0_6B = dict(vocab_size=151_936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                  num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=40_960,
                  tie_word_embeddings=True)


def tokenizer(vocab_size: int):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, EOS: 1}
    vocab.update({f"a{i}\\boxed{{{i % 2}}}": i for i in range(2, vocab_size)})
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", eos_token=EOS, pad_token=EOS)


def build_model(kind: str, sizes: dict, seed: int = 0, device: str = "cpu"):
    """A random `kind` ("qwen3" or "llama") model of `sizes`, in float32 on `device`."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    config_cls, model_cls = {"qwen3": (Qwen3Config, Qwen3ForCausalLM), "llama": (LlamaConfig, LlamaForCausalLM)}[kind]
    torch.manual_seed(seed)
    with torch.device(device):  # initialised where it runs: seconds, not minutes, for 0.6B on a GPU
        model = model_cls(config_cls(**sizes, bos_token_id=1, eos_token_id=1, pad_token_id=1))
    model.generation_config = GenerationConfig(bos_token_id=1, eos_token_id=1, pad_token_id=1)
    return model


def save_model(path: Path, kind: str, sizes: dict = TINY, dtype: str = "bfloat16", seed: int = 0,
               device: str = "cpu") -> int:
    """A random model folder with its tokenizer at `path` (initialised on `device`); its parameter count."""
    import torch

    model = build_model(kind, sizes, seed, device).to(getattr(torch, dtype))
    model.save_pretrained(path)
    tokenizer(sizes["vocab_size"]).save_pretrained(path)
    return sum(p.numel() for p in model.parameters())


def write_problems(path: Path, train: int, heldout: int, words: int = 12) -> tuple[Path, Path]:
    """Training and held-out problems: `words` unknown words each, answers 0 and 1 alternating."""
    path.mkdir(parents=True, exist_ok=True)
    prompt = " ".join(f"w{j}" for j in range(words))

    def write(name: str, count: int) -> Path:
        rows = [{"id": f"{name}-{i}", "problem": f"{prompt} q{i}", "answer": str(i % 2)} for i in range(count)]
        (path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        return path / f"{name}.jsonl"

    return write("train", train), write("heldout", heldout)


def train_config(model_dir: Path, train_file: Path, eval_file: Path, device: str, steps: int = 3, **over) -> dict:
    """A small run: 4 prompts × 4 rollouts of 16 tokens, bf16-mixed on a GPU (fp32 on the CPU), a periodic
    evaluation every 2 steps, checkpoints every step; `over`: top-level sections merged in."""
    cfg = {
        "seed": 0, "steps": steps, "kappa_eff_every": 2, "save_every": 1, "keep_checkpoints": 3,
        "sample_every": 1, "samples_per_log": 2,
        "model": {"name": str(model_dir), "device": device, "dtype": "bfloat16" if device != "cpu" else "float32"},
        "data": {"source": str(train_file), "template": "plain"},
        "rollout": {"engine": "hf", "prompts_per_step": 4, "group_size": 4, "max_new_tokens": 16, "max_batch": 16},
        "algo": {"estimator": "grpo", "log_kl": True},
        "optim": {"lr": 1e-4, "weight_decay": 0.01},
        "eval": {"every": 2, "benchmarks": [f"file:{eval_file}"], "n": 2, "limit": None, "max_new_tokens": 16},
    }
    for section, values in over.items():
        cfg[section] = {**cfg[section], **values} if isinstance(values, dict) and section in cfg else values
    return cfg


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
