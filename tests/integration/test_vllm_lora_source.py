"""`rbctl eval RUN --engine vllm` on a LoRA run: the run's checkpoint is an adapter folder (peft's
`save_pretrained`: no config.json), which vLLM cannot be built from. The engine factory hands vLLM
the base model the adapter names, with dummy weights, and the merged policy is pushed before the
first generation. vLLM's construction arguments are captured by a stand-in `vllm` module (vLLM is
not installed here); what the real engine does with them is tests/vllm/'s."""

from __future__ import annotations

import importlib.machinery
import json
import sys
import types
from pathlib import Path

import pytest
import torch

from tests.conftest import tiny_llama


@pytest.fixture
def built(monkeypatch) -> list[dict]:
    """The keyword arguments of every `vllm.LLM(...)` built from now on."""
    calls: list[dict] = []

    class LLM:
        def __init__(self, **kwargs):
            calls.append(kwargs)

        def sleep(self, level=1):
            pass

    vllm = types.ModuleType("vllm")
    vllm.__spec__ = importlib.machinery.ModuleSpec("vllm", None)
    vllm.LLM = LLM
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = types.SimpleNamespace(is_cpu=lambda: False, is_sleep_mode_available=lambda: True,
                                                       device_type="cuda")
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
    for k, v in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500",
                 "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_NO_USAGE_STATS": "1"}.items():
        monkeypatch.setenv(k, v)  # what the engine would set: put back after the test
    return calls


def _lora_checkpoint(tmp_path: Path) -> tuple[Path, Path]:
    """(base model folder, adapter folder of a LoRA policy over it), as a LoRA run saves it."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from rbctl.tasks.builtin import build_tokenizer
    from rbctl.tasks.links import TaskSpec

    tok = build_tokenizer(TaskSpec())
    tiny_llama(len(tok), pad_token_id=0, bos_token_id=1, eos_token_id=2).save_pretrained(tmp_path / "base")
    tok.save_pretrained(tmp_path / "base")
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tmp_path / "base"),
                           LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        model.base_model.model.model.layers[0].self_attn.q_proj.lora_B["default"].weight.fill_(0.5)
    model.save_pretrained(tmp_path / "adapter")
    tok.save_pretrained(tmp_path / "adapter")
    return tmp_path / "base", tmp_path / "adapter"


def test_a_lora_checkpoint_builds_vllm_on_its_base_and_pushes_the_merged_policy(tmp_path, built):
    from rbctl.rollout.factory import build_engine
    from rbctl.rollout.models import load_policy

    base, adapter = _lora_checkpoint(tmp_path)
    assert not (adapter / "config.json").exists()  # what vLLM was given before, and failed on
    policy = load_policy(str(adapter), device="cpu")  # what `rbctl eval` evaluates: base + adapter, merged
    assert policy.source == str(adapter)
    engine = build_engine("vllm", policy.model, policy.tokenizer, source=policy.source, batch_size=None)
    (kw,) = built
    assert Path(kw["model"]) == base and (base / "config.json").exists()
    assert kw["load_format"] == "dummy" and kw["dtype"] == "float32"
    assert engine.model is policy.model and engine._stale  # the merged weights go in before the first generation
    merged = dict(policy.model.named_parameters())["model.layers.0.self_attn.q_proj.weight"]
    plain = load_policy(str(base), device="cpu").model.model.layers[0].self_attn.q_proj.weight
    assert not torch.equal(merged, plain)  # what is pushed is the adapted policy, not the base


def test_an_adapter_over_a_gguf_file_builds_vllm_from_the_policys_config(tmp_path, built):
    from rbctl.rollout.factory import build_engine

    model = tiny_llama(40)
    from rbctl.tasks.builtin import build_tokenizer
    from rbctl.tasks.links import TaskSpec

    tok = build_tokenizer(TaskSpec())
    (tmp_path / "adapter").mkdir()
    (tmp_path / "adapter" / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "/m/x.Q4_1.gguf"}))
    build_engine("vllm", model, tok, source=str(tmp_path / "adapter"), batch_size=None)
    (kw,) = built
    assert (Path(kw["model"]) / "config.json").exists() and kw["load_format"] == "dummy"


def test_an_adapter_without_a_base_is_one_line(tmp_path, built):
    from rbctl.errors import UserError
    from rbctl.rollout.factory import build_engine

    (tmp_path / "adapter_config.json").write_text("{}")
    with pytest.raises(UserError, match="names no base model"):
        build_engine("vllm", tiny_llama(40), None, source=str(tmp_path), batch_size=None)
