"""Decoding over each prompt's keys and values held once (rbctl.rollout.shared_prefix) against the
repeated cache and transformers' own attention."""

from __future__ import annotations

import pytest
import torch

from rbctl.rollout.base import SamplingParams
from rbctl.rollout.hf import HFEngine
from rbctl.rollout.kvcache import forward_with_cache, left_pad, new_cache, position_ids
from rbctl.rollout.shared_prefix import SharedPrefixCache, decoding_attention, shared_prefix_supported
from tests.conftest import tiny_llama

EOS = 2
PROMPTS = [[1, 5, 6, 7], [1, 3], [1, 9, 8, 4, 11, 10]]  # different lengths: left padding


def _gqa_llama(seed: int = 0):
    """4 query heads over 2 KV heads (grouped, as SmolLM2's 9 over 3)."""
    return tiny_llama(12, seed=seed, num_attention_heads=4, num_key_value_heads=2, pad_token_id=0, bos_token_id=1,
                      eos_token_id=EOS, initializer_range=0.5).eval()


class _Tok:
    pad_token_id = 0
    eos_token_id = EOS

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(map(str, ids))


def test_decoding_logits_match_the_full_forward_with_padding_and_rows_leaving():
    """n = 3 continuations of each of 3 left-padded prompts, fed one token at a time over the shared
    prompt cache; after the second token, rows 1, 4 and 8 leave. Every step's logits equal the full
    forward's over prompt + continuation (to float rounding)."""
    model, n = _gqa_llama(), 3
    ids, mask = left_pad(PROMPTS, 0)
    cont = torch.tensor([[3, 4, 5, 6], [6, 7, 8, 9], [4, 4, 3, 10]])  # row j of each prompt continues with cont[j]
    rows = torch.arange(len(PROMPTS) * n)
    full_ids = torch.cat([ids.repeat_interleave(n, 0), cont.repeat(len(PROMPTS), 1)], dim=1)
    full_mask = torch.cat([mask.repeat_interleave(n, 0), torch.ones(len(rows), cont.shape[1], dtype=torch.long)], 1)
    with torch.no_grad():
        want = model(input_ids=full_ids, attention_mask=full_mask, position_ids=position_ids(full_mask)).logits
        prefill = new_cache(model)
        forward_with_cache(model, ids, mask, position_ids(mask), prefill, logits_to_keep=1)
        cache = SharedPrefixCache(prefill, n, mask, room=cont.shape[1])
        pos = mask.sum(-1, keepdim=True).repeat_interleave(n, 0)
        for t in range(cont.shape[1]):
            if t == 2:
                keep = torch.tensor([i for i in range(len(rows)) if i not in (1, 4, 8)])
                cache.keep(keep)
                rows, pos = rows[keep], pos[keep]
            with decoding_attention(model):
                got = forward_with_cache(model, full_ids[rows, ids.shape[1] + t:][:, :1], None, pos, cache,
                                         logits_to_keep=1, shared_prefix=cache)
            cache.advance()
            pos = pos + 1
            torch.testing.assert_close(got[:, -1], want[rows, ids.shape[1] + t], rtol=1e-5, atol=1e-5)
    assert model.config._attn_implementation == "sdpa"  # switched back after each decoding forward
    assert cache.get_seq_length() == ids.shape[1] + cont.shape[1]


def test_the_engine_samples_as_the_repeated_cache_does():
    """Greedy: the same tokens; sampled with the same seed: the same draws wherever the logits agree
    (they differ by rounding only) and the same log-probs to 1e-5; rows leave at EOS."""
    engine = HFEngine(_gqa_llama(3), _Tok(), logprobs=True)
    assert engine.shared_prefix
    for params in (SamplingParams(n=3, temperature=0.0, max_new_tokens=10),
                   SamplingParams(n=4, temperature=1.0, max_new_tokens=10, seed=7)):
        shared = engine.generate(PROMPTS, params)
        engine.shared_prefix = False
        plain = engine.generate(PROMPTS, params)
        engine.shared_prefix = True
        assert [[s.token_ids for s in g] for g in shared] == [[s.token_ids for s in g] for g in plain]
        for g, h in zip(shared, plain):
            for a, b in zip(g, h):
                if a.logprobs is not None:
                    assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
        assert {s.finished for g in shared for s in g} == {True, False}


def test_only_plain_full_attention_models_take_it():
    from transformers import MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM

    small = dict(vocab_size=12, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                 num_key_value_heads=2)
    assert shared_prefix_supported(_gqa_llama())
    assert shared_prefix_supported(MistralForCausalLM(MistralConfig(**small, sliding_window=None)))
    assert not shared_prefix_supported(MistralForCausalLM(MistralConfig(**small, sliding_window=4)))
    qwen_sliding = Qwen2Config(**small, use_sliding_window=True, sliding_window=4, max_window_layers=1)
    assert not shared_prefix_supported(Qwen2ForCausalLM(qwen_sliding))
    eager = _gqa_llama()
    eager.config._attn_implementation = "flex_attention"  # an implementation it does not stand in for
    assert not shared_prefix_supported(eager)


def test_the_engine_keeps_the_repeated_cache_for_other_models_and_single_samples():
    from transformers import MistralConfig, MistralForCausalLM

    cfg = MistralConfig(vocab_size=12, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                        num_key_value_heads=2, sliding_window=4, pad_token_id=0, eos_token_id=EOS)
    engine = HFEngine(MistralForCausalLM(cfg).eval(), _Tok())
    assert engine.fast and not engine.shared_prefix
    out = engine.generate(PROMPTS, SamplingParams(n=2, temperature=1.0, max_new_tokens=6, seed=0))
    assert [len(g) for g in out] == [2, 2, 2]


def test_a_bfloat16_sampler_keeps_the_repeated_cache(monkeypatch):
    """In bf16 transformers' sdpa accumulates in float32 and the shared attention would not: not taken."""
    import rbctl.rollout.shared_prefix as sp

    called = []
    monkeypatch.setattr(sp.SharedPrefixCache, "advance", lambda self: called.append(1))
    engine = HFEngine(_gqa_llama(1), _Tok(), dtype="bfloat16")
    assert engine.shared_prefix
    engine.generate(PROMPTS, SamplingParams(n=2, temperature=1.0, max_new_tokens=5, seed=0))
    assert called == []
    HFEngine(_gqa_llama(1), _Tok()).generate(PROMPTS, SamplingParams(n=2, temperature=1.0, max_new_tokens=5, seed=0))
    assert called  # the float32 one takes it


@pytest.mark.parametrize("kind", ["qwen2", "qwen3", "mistral"])
def test_the_other_plain_attention_models_decode_as_with_the_repeated_cache(kind):
    """Each listed model type hands the forward's `shared_prefix` argument down to its attention:
    greedy tokens and sampled log-probs equal the repeated cache's."""
    import transformers

    name = {"qwen2": "Qwen2", "qwen3": "Qwen3", "mistral": "Mistral"}[kind]
    cfg = getattr(transformers, f"{name}Config")(
        vocab_size=12, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=4, pad_token_id=0, bos_token_id=1, eos_token_id=EOS, initializer_range=0.5,
        **({"sliding_window": None} if kind == "mistral" else {}))
    torch.manual_seed(0)
    engine = HFEngine(getattr(transformers, f"{name}ForCausalLM")(cfg).eval(), _Tok(), logprobs=True)
    assert engine.shared_prefix
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=8, seed=2)
    shared = engine.generate(PROMPTS, params)
    engine.shared_prefix = False
    plain = engine.generate(PROMPTS, params)
    assert [[s.token_ids for s in g] for g in shared] == [[s.token_ids for s in g] for g in plain]
    assert [x for g in shared for s in g for x in s.logprobs] == \
        pytest.approx([x for g in plain for s in g for x in s.logprobs], abs=1e-5)


def test_older_transformers_keep_the_repeated_cache(monkeypatch):
    import transformers

    import rbctl.rollout.shared_prefix as sp

    sp._transformers_new_enough.cache_clear()
    monkeypatch.setattr(transformers, "__version__", "4.57.1")
    try:
        assert not shared_prefix_supported(_gqa_llama())
    finally:
        sp._transformers_new_enough.cache_clear()
    monkeypatch.undo()
    assert shared_prefix_supported(_gqa_llama())
