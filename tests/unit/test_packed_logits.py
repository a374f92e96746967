"""`rbctl.train.batch.packed_response_logits`: rows run packed (no padding token computed on) score
every response token as the padded batch does, up to float rounding, gradients included; chunks of
`PACK_TOKENS` change nothing; and the packed path is taken only where it applies."""

from __future__ import annotations

import copy

import pytest
import torch

from rbctl.rollout import lean_forward as lf
from rbctl.rollout.kvcache import left_pad
from rbctl.train import batch as tb

from tests.conftest import tiny_llama


def _lean(kv_heads: int = 2):
    model = tiny_llama(12, seed=0, pad_token_id=0, bos_token_id=1, eos_token_id=2, initializer_range=0.5,
                       tie_word_embeddings=True, num_key_value_heads=kv_heads)
    assert lf.use_lean_forward(model)
    return model


def _groups(lengths: list[list[int]], seed: int = 0):
    """Rows of prompts of different lengths (left-padded) × G responses of the given lengths
    (right-padded with 0, then EOS = 2 at the end of each): (ids, mask, prompt width, lengths)."""
    g = torch.Generator().manual_seed(seed)
    prompts = [[1] + torch.randint(3, 12, (n,), generator=g).tolist() for n in (5, 2, 7)[:len(lengths)]]
    ids_p, mask_p = left_pad(prompts, pad_id=0)
    lr = max(max(x) for x in lengths)
    rows, masks, lens = [], [], []
    for p, group in enumerate(lengths):
        for n in group:
            resp = torch.randint(3, 12, (n,), generator=g).tolist()[:-1] + [2]
            rows.append(torch.cat([ids_p[p], torch.tensor(resp + [0] * (lr - n))]))
            masks.append(torch.cat([mask_p[p], torch.tensor([1] * n + [0] * (lr - n))]))
            lens.append(n)
    return torch.stack(rows), torch.stack(masks), ids_p.shape[1], torch.tensor(lens)


LENGTHS = [[1, 3, 3, 6], [2, 2, 5, 1], [4, 3, 3, 3]]  # 3 prompts × G 4; the longest response 6


def _valid(x: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
    return x[torch.arange(x.shape[1])[None] < lens[:, None]]


@pytest.mark.parametrize("kv_heads", [2, 1])
def test_packed_rows_score_every_response_token_as_the_padded_batch(kv_heads):
    model = _lean(kv_heads).eval()
    ids, mask, lp, lens = _groups(LENGTHS)
    padded = tb.response_logits(model, ids, mask, lp, group_size=4)
    assert tb._can_pack(model, ids, mask, lp, 4)
    packed = tb.response_logits(model, ids, mask, lp, group_size=4, lengths=lens)
    assert packed.shape == padded.shape == (12, 6, 12)
    a, b = _valid(padded, lens), _valid(packed, lens)
    assert a.shape == (int(lens.sum()), 12)
    torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
    assert torch.isfinite(packed).all()  # past a row's length: another position's logits, finite


def test_packed_gradients_match_the_padded_batch():
    model = _lean()
    ids, mask, lp, lens = _groups(LENGTHS, seed=3)
    tokens = ids[:, lp:]
    weights = mask[:, lp:].float() * torch.linspace(0.5, 1.5, tokens.shape[1])
    grads = []
    for lengths in (None, lens):
        model.zero_grad()
        logits = tb.response_logits(model, ids, mask, lp, group_size=4, lengths=lengths)
        logp = logits.log_softmax(-1).gather(-1, tokens[..., None]).squeeze(-1)
        (logp * weights).sum().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    for name, g in grads[0].items():  # float rounding: ~1e-6 of each gradient's norm (summation order)
        assert g.norm() > 0
        assert (grads[1][name] - g).norm() <= 1e-5 * g.norm(), name


def test_chunks_of_pack_tokens_give_the_same_logits(monkeypatch):
    model = _lean().eval()
    ids, mask, lp, lens = _groups(LENGTHS, seed=5)
    whole = tb.response_logits(model, ids, mask, lp, group_size=4, lengths=lens)
    calls = []
    forward = model.forward
    monkeypatch.setattr(model, "forward", lambda **kw: calls.append(kw["input_ids"].shape[1]) or forward(**kw))
    monkeypatch.setattr(tb, "PACK_TOKENS", 12)  # each group alone: 3 forward passes
    monkeypatch.setattr(lf, "uses_lean_forward", lambda m: True)
    split = tb.response_logits(model, ids, mask, lp, group_size=4, lengths=lens)
    assert len(calls) == 3
    torch.testing.assert_close(_valid(split, lens), _valid(whole, lens), rtol=1e-5, atol=1e-5)


def test_packing_applies_only_where_it_is_exact():
    model = _lean()
    ids, mask, lp, lens = _groups(LENGTHS)
    assert tb._can_pack(model, ids, mask, lp, 4)
    assert not tb._can_pack(model, ids, mask, lp, 3)  # rows 0-2 and 3-5 do not each hold one prompt
    plain = tiny_llama(12, seed=0, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    assert not tb._can_pack(plain, ids, mask, lp, 4)  # the module tree's forward: padded rows
    eager = copy.deepcopy(model)
    eager.config._attn_implementation = "eager"  # an additive mask: the boolean block mask is sdpa's
    assert not tb._can_pack(eager, ids, mask, lp, 4)
