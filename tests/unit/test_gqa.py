"""`rbctl.rollout.gqa.kv_heads_once`: on the CPU, transformers' sdpa attention with a padding mask keeps a
grouped-query model's KV heads unrepeated, with the same outputs bit for bit, gradients equal up to float
rounding and fewer bytes kept for backward; the training forward (`response_logits`) runs inside it."""

from __future__ import annotations

import os

import torch

from rbctl.rollout.gqa import VAR, kv_heads_once
from rbctl.rollout.kvcache import left_pad, position_ids
from rbctl.train import batch as tb

from tests.conftest import tiny_llama

HEADS, KV_HEADS = 4, 2


def _model():
    model = tiny_llama(12, seed=0, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                       initializer_range=0.5, attn_implementation="sdpa")
    assert model.config._attn_implementation == "sdpa"
    return model


def _batch():
    """Two prompts of different lengths (left padding: the forward needs a mask) × 2 rows each."""
    ids, mask = left_pad([[1, 5, 6, 7, 8], [1, 9, 4]], pad_id=0)
    resp = torch.tensor([[3, 4, 2], [5, 2, 0], [6, 7, 2], [8, 2, 0]])
    rmask = (resp != 0).long()
    return (torch.cat([ids.repeat_interleave(2, 0), resp], 1), torch.cat([mask.repeat_interleave(2, 0), rmask], 1),
            ids.shape[1])


def _forward(model, ids, mask):
    """Logits, parameter gradients and the bytes autograd keeps for backward."""
    kept = {}

    def pack(t):
        kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    model.zero_grad(set_to_none=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
    logits.pow(2).mean().backward()
    weights = sum(p.untyped_storage().nbytes() for p in model.parameters() if p.untyped_storage().data_ptr() in kept)
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}, sum(kept.values()) - weights


def test_kv_heads_kept_once_give_the_same_logits_close_gradients_and_less_kept_for_backward():
    model = _model()
    ids, mask, _ = _batch()
    base_logits, base_grads, base_kept = _forward(model, ids, mask)
    with kv_heads_once("cpu"):
        assert os.environ[VAR] == "1"
        logits, grads, kept = _forward(model, ids, mask)
    assert VAR not in os.environ  # restored
    assert torch.equal(logits, base_logits)
    for name, g in grads.items():
        assert torch.allclose(g, base_grads[name], rtol=1e-5, atol=1e-6 * base_grads[name].abs().max().item()), name
    # per layer, keys and values [4, 2 KV heads, 8, 4] instead of [4, 4 heads, 8, 4]: 2 × 256 floats less
    assert base_kept - kept == 2 * 2 * 4 * (HEADS - KV_HEADS) * 8 * 4 * 4


def test_only_on_the_cpu_and_never_over_the_users_own_setting(monkeypatch):
    with kv_heads_once("cuda"):
        assert VAR not in os.environ
    monkeypatch.setenv(VAR, "0")
    with kv_heads_once("cpu"):
        assert os.environ[VAR] == "0"
    assert os.environ[VAR] == "0"


def test_the_training_forward_passes_the_kv_heads_unrepeated(monkeypatch):
    model = _model()
    ids, mask, width = _batch()
    seen = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, *a, **kw):
        seen.append((q.shape[1], k.shape[1], kw.get("enable_gqa", False)))
        return sdpa(q, k, v, *a, **kw)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    plain = tb.response_logits(model, ids, mask, width, group_size=1)
    assert seen and all(s == (HEADS, KV_HEADS, True) for s in seen)
    seen.clear()
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, position_ids=position_ids(mask),
                    use_cache=False).logits[:, width - 1:-1]
    assert seen and all(s == (HEADS, HEADS, False) for s in seen)  # outside it, transformers repeats them
    assert torch.equal(plain, out)
    assert VAR not in os.environ
