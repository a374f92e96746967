"""Loading a policy and its tokenizer: a Hugging Face hub id, a local directory, a GGUF file,
an rbctl run directory (its latest checkpoint), or `builtin` (the embedded default's warm start).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from rbctl.errors import UserError
from rbctl.store.rundir import MODEL, builtin_task_record, checkpoint_dir, checkpoint_problem, is_run_dir, last_good_checkpoint



@dataclass
class LoadedPolicy:
    model: torch.nn.Module
    tokenizer: object
    source: str  # what was loaded, resolved (a path or hub id)
    builtin: str | None  # a built-in policy's task ('links', 'fixpoint', 'maze': its prompt format), else None


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"model.device is '{device}' but CUDA is not available on this machine")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" and torch.cuda.is_bf16_supported() else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]


def is_model_dir(p: Path) -> bool:
    """A saved model: full weights (config.json) or LoRA adapters (adapter_config.json)."""
    return (p / "config.json").exists() or (p / "adapter_config.json").exists()


def resolve_source(name_or_path: str, step: int | None = None) -> tuple[str, str | None]:
    """(directory or hub id, gguf file name or None). Run directories resolve to a checkpoint."""
    p = Path(name_or_path).expanduser()
    if p.is_file():
        if p.suffix != ".gguf":
            raise UserError(f"model path {p} is a file but not a .gguf file; give a model directory or a GGUF file")
        return str(p.parent), p.name
    if p.is_dir():
        if is_run_dir(p):  # only complete checkpoints whose manifest checks out are read
            if step is not None:
                ck = checkpoint_dir(p, step)
                problem = checkpoint_problem(ck) if ck.is_dir() else "missing"
                if problem is not None:
                    raise UserError(f"run directory {p} has no usable checkpoint for step {step} ({problem})")
                return str(ck / MODEL), None
            _, ck = last_good_checkpoint(p)
            if ck is None:
                raise UserError(f"run directory {p} has no complete checkpoint yet")
            return str(ck / MODEL), None
        if not is_model_dir(p):
            raise UserError(f"{p} is not a model directory (no config.json) nor an rbctl run directory")
        return str(p), None
    if name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1:
        raise UserError(f"model path {name_or_path} does not exist")
    return name_or_path, None  # a hub id


def _load_lora_merged(adapter_dir: str, torch_dtype, auto_model, auto_peft):
    """LoRA adapters merged into their base. A base that is a GGUF file (or, for adapters saved
    before the file was recorded, a folder holding exactly one GGUF file and no config.json) is
    loaded with `gguf_file=`, which peft's own loader cannot pass."""
    import json

    base = json.loads((Path(adapter_dir) / "adapter_config.json").read_text()).get("base_model_name_or_path") or ""
    p = Path(base).expanduser()
    ggufs = sorted(p.glob("*.gguf")) if p.is_dir() and not is_model_dir(p) else []
    if p.is_file() and p.suffix == ".gguf":
        ggufs = [p]
    if len(ggufs) != 1:
        return auto_peft.from_pretrained(adapter_dir, dtype=torch_dtype).merge_and_unload()
    from peft import PeftModel

    model = auto_model.from_pretrained(str(ggufs[0].parent), dtype=torch_dtype, gguf_file=ggufs[0].name)
    return PeftModel.from_pretrained(model, adapter_dir).merge_and_unload()


def load_policy(
    name_or_path: str,
    *,
    device: str = "auto",
    dtype: str = "auto",
    builtin_task=None,
    builtin_warm_start=None,
    step: int | None = None,
    log=print,
) -> LoadedPolicy:
    """Load model and tokenizer. `builtin` trains (once) and loads the cached warm-started policy."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = None
    if name_or_path == "builtin":
        from rbctl.tasks import builtin

        spec = builtin_task or builtin.task("links").TaskSpec()
        ws = builtin_warm_start or builtin.module_of(spec).WarmStartSpec()
        src = str(builtin.warm_started(spec, ws, log=log))
    else:
        src, gguf = resolve_source(name_or_path, step)
    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    kwargs = {"gguf_file": gguf} if gguf else {}
    try:
        tokenizer = AutoTokenizer.from_pretrained(src, **kwargs)
        if (Path(src) / "adapter_config.json").exists():  # a LoRA run's checkpoint: base + adapter, merged
            try:
                from peft import AutoPeftModelForCausalLM
            except ImportError:
                raise UserError(f"{src} holds LoRA adapters; loading them needs peft: pip install 'rbctl[lora]'") from None
            model = _load_lora_merged(src, torch_dtype, AutoModelForCausalLM, AutoPeftModelForCausalLM)
        else:
            model = AutoModelForCausalLM.from_pretrained(src, dtype=torch_dtype, **kwargs)
    except OSError as e:  # hub id not found / offline / not a model
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        hint = " (offline: set HF_HUB_OFFLINE=1 and use a cached model, a local path or a GGUF file)" if not os.path.exists(src) else ""
        raise UserError(f"cannot load model '{name_or_path}': {first}{hint}") from None
    if gguf:
        # GGUF weights are dequantized on load: the model trains and saves as ordinary weights.
        # Name the file itself as the model's origin, so LoRA adapters trained on it record it
        # (peft's base_model_name_or_path) and load back onto it (`_load_lora_merged`).
        model.name_or_path = model.config._name_or_path = str((Path(src) / gguf).resolve())
        model.hf_quantizer = None
        model.is_quantized = False
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.to(dev)
    record = builtin_task_record(Path(src))
    return LoadedPolicy(model=model, tokenizer=tokenizer, source=src + (f"/{gguf}" if gguf else ""),
                        builtin=None if record is None else record.get("kind", "links"))
