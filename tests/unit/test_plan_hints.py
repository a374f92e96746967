"""The dry run's honest parts: a GGUF file's parameter count from its header, gated models flagged,
and the hints naming options that exist. Offline, as `dry_run` is."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from rbctl.config.train import load_train_config
from rbctl.train.dry_run import dry_run
from rbctl.train.plan_inputs import gguf_parameter_count
from tests.conftest import cli_options

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def _write_gguf(path: Path, shapes: dict[str, tuple[int, ...]]) -> None:
    """A GGUF file with string, array and scalar metadata and float32 tensors of `shapes`."""
    from gguf import GGUFWriter

    w = GGUFWriter(str(path), "llama")
    w.add_block_count(2)
    w.add_token_list(["<s>", "a", "bb"])  # an array of strings: skipped by its lengths
    w.add_token_scores([0.0, -1.0, -2.0])  # an array of float32
    w.add_string("general.name", "tiny")
    for name, shape in shapes.items():
        w.add_tensor(name, np.zeros(shape, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_a_gguf_parameter_count_is_the_sum_of_its_tensor_shapes(tmp_path):
    path = tmp_path / "tiny.gguf"
    _write_gguf(path, {"token_embd.weight": (10, 4), "blk.0.attn_q.weight": (4, 4), "output_norm.weight": (4,)})
    assert gguf_parameter_count(path) == 10 * 4 + 4 * 4 + 4  # 60
    (tmp_path / "bad.gguf").write_bytes(b"GGML" + b"\0" * 20)
    with pytest.raises(ValueError, match="not a GGUF file"):
        gguf_parameter_count(tmp_path / "bad.gguf")


def test_the_plan_of_a_gguf_model_names_the_file_and_counts_its_parameters(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = tmp_path / "m.gguf"
    _write_gguf(path, {"token_embd.weight": (32, 8), "output.weight": (32, 8)})
    cfg = load_train_config(CONFIGS / "smollm2_add1.yaml", [f"model.name={path}"])
    plan = dry_run(cfg, cache_dir=tmp_path / "hub")
    assert f"local GGUF file {path}" in plan
    assert "N ≈ 5.12e+02 parameters (counted from the GGUF file's tensor headers)" in plan  # 2 · 32 · 8
    assert "unknown (no parameter count)" not in plan


def test_gated_models_are_flagged_and_others_not(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    llama = dry_run(load_train_config(CONFIGS / "paper_llama32_3b.yaml"), cache_dir=tmp_path / "hub")
    assert ("'meta-llama/Llama-3.2-3B-Instruct' is gated on the Hugging Face Hub: accept its license on "
            "https://huggingface.co/meta-llama/Llama-3.2-3B-Instruct") in llama
    qwen = dry_run(load_train_config(CONFIGS / "paper_qwen3_8b.yaml"), cache_dir=tmp_path / "hub")
    assert "gated" not in qwen


def test_every_option_a_train_hint_names_exists():
    """The refusals `rbctl train` and its dry run print name only options `rbctl train` has."""
    from rbctl.train import preflight

    options = cli_options()["train"]
    for text in (preflight.NO_VLLM, preflight.VLLM_NO_CUDA):
        for opt in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", text):
            assert opt in options, (opt, text)


def test_the_missing_benchmark_data_hint_names_options_each_command_has(tmp_path, monkeypatch):
    from rbctl.errors import UserError
    from rbctl.tasks import benchmarks as registry

    monkeypatch.setattr(registry, "_hub_records_or_reason", lambda *a: (None, "offline"))
    with pytest.raises(UserError) as err:
        registry.load_benchmark("amc23", data_dir=str(tmp_path))
    text, options = str(err.value), cli_options()
    named = re.findall(r"`rbctl (\w+) ([^`]*)`", text)
    assert {c for c, _ in named} == {"eval", "train"} and "RBCTL_DATA_DIR" in text
    for command, args in named:
        for opt in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", args):
            assert opt in options[command], (command, opt)
    assert "eval.data_dir" in text  # the key a training config sets it with

