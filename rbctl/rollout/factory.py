"""The one engine factory: `hf` (transformers, CPU or one GPU) or `vllm` (GPU, optional extra),
used by training and evaluation alike."""

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
            raise UserError("the vllm engine needs vLLM and a GPU: pip install 'rbctl[vllm]' (or use --engine hf)")
        return VLLMEngine
    raise UserError(f"unknown engine {name!r}; valid: hf, vllm")


def build_engine(name: str, model, tokenizer, *, source: str, batch_size: int, seed: int = 0,
                 sample_dtype: str = "auto", **vllm_options) -> Engine:
    """An engine over an in-memory policy. ``hf`` generates ``batch_size`` sequences per call; vLLM
    schedules its own batches, loads ``source`` (a hub id or folder) and then pushes the in-memory
    weights. ``sample_dtype`` "bfloat16": hf samples from a bf16 replica (`rollout.dtype`).
    ``vllm_options``: VLLMEngine's keyword arguments (gpu_memory_utilization, sleep_mode, ...).
    Sampled-token log-probs are asked for with `Engine.record_logprobs`."""
    if name != "hf" and sample_dtype != "auto":
        raise UserError("rollout.dtype: bfloat16 applies to the hf engine; vLLM samples in the model's dtype")
    cls = engine_class(name)
    if name == "hf":
        return cls(model, tokenizer, max_batch=batch_size, dtype=sample_dtype)
    if source.endswith(".gguf"):
        raise UserError("the vllm engine cannot load a GGUF file here; use the model's Hugging Face id or directory")
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    return cls(model, tokenizer, model_name_or_path=source, dtype=dtype, seed=seed, **vllm_options)


def default_batch_size(device_type: str) -> int:
    """Sequences per generate call when not given: 256 on a GPU; 64 on CPU, where SmolLM2-135M
    ran 5x slower at 256 than at 64 (python -m scripts.bench_eval --batch-sizes 16,64,256)."""
    return 256 if device_type == "cuda" else 64
