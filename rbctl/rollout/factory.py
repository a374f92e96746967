"""The one engine factory: `hf` (transformers, CPU or one GPU) or `vllm` (an optional install: the
`vllm` extra on a GPU, vLLM's CPU build in its own venv on a CPU), used by training and evaluation alike."""

from __future__ import annotations

import importlib.util

from rbctl.errors import UserError
from rbctl.rollout.base import Engine


def engine_class(name: str) -> type:
    """The engine class for ``name`` (checked before a model is loaded, so a bad choice fails fast)."""
    if name == "hf":
        from rbctl.rollout.hf import HFEngine

        return HFEngine
    if name == "vllm":
        from rbctl.rollout.vllm import VLLMEngine

        if importlib.util.find_spec("vllm") is None:
            from rbctl.rollout.vllm import VLLM_MISSING

            raise UserError(f"{VLLM_MISSING} (or use --engine hf)")
        return VLLMEngine
    raise UserError(f"unknown engine {name!r}; valid: hf, vllm")


def build_engine(name: str, model, tokenizer, *, source: str, batch_size: int | None, max_batch_tokens: int | None = None,
                 seed: int = 0, sample_dtype: str = "auto", **vllm_options) -> Engine:
    """An engine over an in-memory policy. ``hf`` generates at most ``batch_size`` sequences and
    ``max_batch_tokens`` sequence-tokens (None: no such bound) per sub-batch; vLLM
    schedules its own batches, loads ``source`` (a hub id or folder) and then pushes the in-memory
    weights. ``sample_dtype`` "bfloat16": hf samples from a bf16 replica (`rollout.dtype`).
    ``vllm_options``: VLLMEngine's keyword arguments (gpu_memory_utilization, sleep_mode, ...).
    Sampled-token log-probs are asked for with `Engine.record_logprobs`."""
    if name != "hf" and sample_dtype != "auto":
        raise UserError("rollout.dtype: bfloat16 applies to the hf engine; vLLM samples in the model's dtype")
    cls = engine_class(name)
    if name == "hf":
        return cls(model, tokenizer, max_batch=batch_size, max_batch_tokens=max_batch_tokens, dtype=sample_dtype)
    source, extra = vllm_source(source, model, tokenizer)
    vllm_options = {**vllm_options, **extra}
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    return cls(model, tokenizer, model_name_or_path=source, dtype=dtype, seed=seed, **vllm_options)


def vllm_source(source: str, model, tokenizer) -> tuple[str, dict]:
    """(what vLLM builds its model from, VLLMEngine options) for an in-memory policy loaded from
    `source`. The policy's weights are pushed into vLLM before its first generation in every case,
    so where they are not on disk in a form vLLM reads, it starts from dummy weights:
    - a LoRA adapter folder (a LoRA run's checkpoint; the policy is base + adapter, merged): vLLM
      gets the base model the adapter names (the adapter folder has no config.json);
    - a GGUF file (vLLM would load it quantized), or an adapter over one: a folder of the policy's
      config and tokenizer (`export_for_vllm`);
    - anything else as it is (vLLM loads its weights, then the policy's are pushed)."""
    import json
    from pathlib import Path

    from rbctl.store.checkpoint import ADAPTER_CONFIG

    adapter = Path(source) / ADAPTER_CONFIG
    if adapter.is_file():
        base = json.loads(adapter.read_text()).get("base_model_name_or_path") or ""
        if not base:
            raise UserError(f"{adapter} names no base model (base_model_name_or_path): vLLM cannot be built for it; "
                            "use the hf engine")
        if not _is_gguf(Path(base).expanduser()):
            return base, {"load_format": "dummy"}
        source = base
    if _is_gguf(Path(source).expanduser()):
        from rbctl.rollout.vllm import export_for_vllm

        return export_for_vllm(model, tokenizer), {"load_format": "dummy"}
    return source, {}


def _is_gguf(p) -> bool:
    """A GGUF file, or (an adapter's base recorded before the file was) a folder of one and no config.json."""
    return p.suffix == ".gguf" or (p.is_dir() and not (p / "config.json").exists() and any(p.glob("*.gguf")))


def default_batch_size(device_type: str) -> int:
    """Sequences per generate call when not given: 256 on a GPU; 64 on CPU, where SmolLM2-135M
    ran 5x slower at 256 than at 64 (python -m scripts.bench_eval --batch-sizes 16,64,256)."""
    return 256 if device_type == "cuda" else 64


# Share of the free device memory the hf engine's KV cache may fill in evaluation. The other half
# covers what decoding allocates beside the cache: the prefill's activations, a step's logits
# [B, V] in float32, and `generate`'s cache growth by concatenation (a layer's old and new tensors
# live side by side for a moment).
KV_MEMORY_SHARE = 0.5
CPU_MEMORY_FALLBACK = 8 * 2**30  # bytes assumed free where the OS does not say (not Linux)


def kv_cache_bytes_per_token(model) -> int:
    """Bytes the KV cache takes per token: 2 (keys and values) × layers × KV heads × head dim ×
    bytes per element of the model's parameters (under bf16 autocast over float32 weights the cache
    is bf16, so this is then twice the truth: the bound errs safe). Qwen3-8B in bf16: 2 × 36 × 8 ×
    128 × 2 = 147,456 bytes."""
    c = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    heads = c.num_attention_heads
    kv_heads = getattr(c, "num_key_value_heads", None) or heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
    return 2 * c.num_hidden_layers * kv_heads * head_dim * next(model.parameters()).element_size()


def free_memory(device) -> int:
    """Bytes free for new tensors on `device`: on CUDA what the driver reports free plus what
    torch's allocator holds unused; on CPU the kernel's MemAvailable (Linux)."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return CPU_MEMORY_FALLBACK


def default_max_batch_tokens(model, device) -> int:
    """`eval.max_batch_tokens` when not given: the tokens of KV cache that `KV_MEMORY_SHARE` of the
    device's free memory holds (`free_memory` / `kv_cache_bytes_per_token`). Qwen3-8B in bf16 with
    80 GB free: 0.5 × 80e9 / 147,456 ≈ 271k tokens, i.e. 15 sequences of 1k prompt + 16k answer,
    where 256 sequences would need 0.6 TB."""
    return max(1, int(KV_MEMORY_SHARE * free_memory(device)) // kv_cache_bytes_per_token(model))
