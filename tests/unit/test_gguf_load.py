"""A model given as a GGUF file is laid out as the same weights from a folder: every parameter in
torch's own memory, contiguous and 64-byte aligned, the tied embedding one tensor with the LM head
(`rbctl.rollout.models.own_weights`). transformers' reader hands over numpy's dequantized arrays,
16-byte aligned (without the copy this tiny file's weights sit at offsets 0, 16, 32 and 48 mod 64)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from rbctl.rollout.models import load_policy, own_weights

V, H, I, NH, KV = 16, 8, 16, 2, 1  # vocab, hidden, intermediate, heads, KV heads; one layer


def write_tiny_gguf(path: Path) -> dict[str, np.ndarray]:
    """A one-layer llama GGUF (float32 tensors, tied embeddings: no output.weight) with a byte-level
    tokenizer transformers can rebuild; returns the tensors written."""
    from gguf import GGUFWriter

    w = GGUFWriter(str(path), "llama")
    w.add_context_length(64)
    w.add_embedding_length(H)
    w.add_block_count(1)
    w.add_feed_forward_length(I)
    w.add_head_count(NH)
    w.add_head_count_kv(KV)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(V)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(["<s>", "</s>", "ab"] + [chr(ord("a") + i) for i in range(V - 3)])
    w.add_token_types([3, 3] + [1] * (V - 2))
    w.add_token_merges(["a b"])
    w.add_token_scores([0.0] * V)
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)
    rng = np.random.default_rng(0)
    shapes = {"token_embd.weight": (V, H), "output_norm.weight": (H,), "blk.0.attn_norm.weight": (H,),
              "blk.0.ffn_norm.weight": (H,), "blk.0.attn_q.weight": (H, H), "blk.0.attn_k.weight": (KV * H // NH, H),
              "blk.0.attn_v.weight": (KV * H // NH, H), "blk.0.attn_output.weight": (H, H),
              "blk.0.ffn_gate.weight": (I, H), "blk.0.ffn_up.weight": (I, H), "blk.0.ffn_down.weight": (H, I)}
    tensors = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}
    for name, t in tensors.items():
        w.add_tensor(name, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tensors


def test_a_gguf_model_has_its_weights_contiguous_aligned_and_tied_as_from_a_folder(tmp_path):
    written = write_tiny_gguf(tmp_path / "tiny.gguf")
    model = load_policy(str(tmp_path / "tiny.gguf"), device="cpu", dtype="float32", log=lambda *a: None).model
    params = dict(model.named_parameters(remove_duplicate=False))
    assert len(params) == 12  # 11 tensors written + the LM head, tied
    for name, p in params.items():
        assert p.is_contiguous() and p.dtype == torch.float32, name
        assert p.data_ptr() % 64 == 0, (name, p.data_ptr() % 64)
        assert p.untyped_storage().nbytes() == p.numel() * 4, name  # its own storage, no view into a larger buffer
    assert model.lm_head.weight is model.model.embed_tokens.weight  # tied, as the folder's
    assert model.config.tie_word_embeddings is True
    # the same values: the copy changes where the weights live, not what they are
    assert torch.equal(model.model.embed_tokens.weight, torch.from_numpy(written["token_embd.weight"]))
    assert torch.equal(model.model.layers[0].mlp.down_proj.weight, torch.from_numpy(written["blk.0.ffn_down.weight"]))


def test_own_weights_copies_a_misaligned_tied_parameter_once_and_keeps_it_tied():
    emb = torch.nn.Embedding(4, 3)
    head = torch.nn.Linear(3, 4, bias=False)
    model = torch.nn.Sequential(emb, head)
    model.config = type("Config", (), {"tie_word_embeddings": False})()
    buffer = np.arange(13, dtype=np.float32)  # a view at element 1: 4 bytes past numpy's alignment
    emb.weight = torch.nn.Parameter(torch.from_numpy(buffer)[1:].view(4, 3))
    head.weight = emb.weight
    assert emb.weight.data_ptr() % 64 != 0
    assert own_weights(model) == 1  # the shared weight copied once
    assert head.weight is emb.weight and emb.weight.data_ptr() % 64 == 0
    assert emb.weight.untyped_storage().nbytes() == 12 * 4
    assert torch.equal(emb.weight, torch.arange(1, 13, dtype=torch.float32).view(4, 3))
    assert own_weights(model) == 0  # already its own: nothing copied


def test_lora_adapters_on_a_gguf_base_load_merged_onto_weights_laid_out_as_a_folders(tmp_path):
    from types import SimpleNamespace

    from rbctl.rollout.models import lora_policy

    write_tiny_gguf(tmp_path / "tiny.gguf")
    policy = load_policy(str(tmp_path / "tiny.gguf"), device="cpu", dtype="float32", log=lambda *a: None)
    lora = lora_policy(policy.model, SimpleNamespace(r=2, alpha=4, dropout=0.0, target_modules=["q_proj", "v_proj"]))
    lora.save_pretrained(tmp_path / "adapter")  # records the GGUF file as its base
    policy.tokenizer.save_pretrained(tmp_path / "adapter")
    merged = load_policy(str(tmp_path / "adapter"), device="cpu", dtype="float32", log=lambda *a: None).model
    for name, p in merged.named_parameters(remove_duplicate=False):
        assert p.is_contiguous() and p.data_ptr() % 64 == 0, (name, p.data_ptr() % 64)
    assert merged.lm_head.weight is merged.model.embed_tokens.weight


def test_a_folders_weights_are_laid_out_as_a_checkpoints_so_a_resume_computes_as_the_run_did(tmp_path):
    """transformers maps a folder's safetensors file and keeps its tensors there, at their offsets in the
    file (8 bytes past a 64-byte boundary for the shipped warm starts: an 8-byte length, then the JSON
    header). A run
    resumed from a checkpoint holds its weights in torch's own 64-byte aligned memory, and torch's CPU
    matmul rounds some shapes differently on the two (the first step after a resume sampled other
    log-probs on an AMD EPYC with AVX-512, tests/system/test_interrupt.py): every load lays them out alike."""
    from transformers import AutoModelForCausalLM

    folder = next(Path(__file__).resolve().parents[2].glob("rbctl/tasks/**/fixpoint-ws0"))  # a shipped warm start

    mapped = AutoModelForCausalLM.from_pretrained(folder)
    assert {p.data_ptr() % 64 for p in mapped.parameters()} != {0}  # as transformers leaves them
    model = load_policy(str(folder), device="cpu", log=lambda *a: None).model
    assert {p.data_ptr() % 64 for p in model.parameters()} == {0}
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), mapped.parameters()))
