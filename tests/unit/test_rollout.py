"""The `hf` engine's own CPU sampling loop against `model.generate` and against the distribution it
must sample from."""

from __future__ import annotations

import pytest
import torch

from rbctl.rollout.hf import HFEngine, draw
from rbctl.rollout.base import SamplingParams

from tests.conftest import tiny_llama

EOS = 2


def _tiny_llama(seed: int = 0):
    """A random 2-layer Llama over 12 tokens. initializer_range 0.5 spreads the next-token
    distribution (entropy ≈ 1.3–1.9 nats of a possible 2.5), so temperature and top_p matter."""
    return tiny_llama(12, seed=seed, pad_token_id=0, bos_token_id=1, eos_token_id=EOS, initializer_range=0.5).eval()


class _Tok:
    pad_token_id = 0
    eos_token_id = EOS

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(map(str, ids))


def _engines(model):
    fast, slow = HFEngine(model, _Tok()), HFEngine(model, _Tok())
    slow.fast = False  # the reference: model.generate
    assert fast.fast
    return fast, slow


# Prompts of different lengths (so the batch is left-padded).
PROMPTS = [[1, 5, 6, 7], [1, 3], [1, 9, 8, 4, 11, 10], [1, 4, 4]]


def test_greedy_fast_loop_gives_the_tokens_of_generate():
    finished = set()
    for seed in range(4):
        fast, slow = _engines(_tiny_llama(seed))
        params = SamplingParams(n=1, temperature=0.0, max_new_tokens=12)
        a, b = fast.generate(PROMPTS, params), slow.generate(PROMPTS, params)
        assert [[(s.token_ids, s.finished, s.text) for s in g] for g in a] == \
               [[(s.token_ids, s.finished, s.text) for s in g] for g in b]
        finished |= {s.finished for g in a for s in g}
    assert finished == {True, False}  # some sequences end at EOS (and leave the batch), some run to the limit


def test_greedy_with_n_copies_repeats_the_single_answer():
    fast, _ = _engines(_tiny_llama(1))
    one = fast.generate(PROMPTS, SamplingParams(n=1, temperature=0.0, max_new_tokens=8))
    three = fast.generate(PROMPTS, SamplingParams(n=3, temperature=0.0, max_new_tokens=8))
    assert [[s.token_ids for s in g] for g in three] == [[g[0].token_ids] * 3 for g in one]


def test_decoding_from_the_repeated_prompt_cache_gives_the_full_forward_logits():
    from rbctl.rollout.kvcache import forward_with_cache, left_pad, new_cache, position_ids

    model = _tiny_llama(0)
    ids, mask = left_pad(PROMPTS, 0)
    cont = torch.tensor([[3, 4, 5], [6, 7, 8]])  # two continuations of each prompt
    full_ids = torch.cat([ids.repeat_interleave(2, 0), cont.repeat(len(PROMPTS), 1)], dim=1)
    full_mask = torch.cat([mask.repeat_interleave(2, 0), torch.ones(2 * len(PROMPTS), 3, dtype=torch.long)], dim=1)
    with torch.no_grad():
        want = model(input_ids=full_ids, attention_mask=full_mask, position_ids=position_ids(full_mask)).logits
        cache = new_cache(model)
        first = forward_with_cache(model, ids, mask, position_ids(mask), cache, logits_to_keep=1)
        cache.batch_repeat_interleave(2)
        got = [first.repeat_interleave(2, 0)]
        m = mask.repeat_interleave(2, 0)
        for t in range(3):  # one token at a time, as the sampling loop does
            m = torch.cat([m, torch.ones(len(m), 1, dtype=torch.long)], dim=1)
            got.append(forward_with_cache(model, full_ids[:, ids.shape[1] + t:][:, :1], m,
                                          position_ids(m)[:, -1:], cache, logits_to_keep=1))
    torch.testing.assert_close(torch.cat(got, dim=1), want[:, ids.shape[1] - 1:])


def test_reserved_cache_samples_the_same_tokens_as_a_growing_cache(monkeypatch):
    """The sampling loop writes keys and values into reserved room (`reserve_cache`); tokens and
    log-probs are bit-identical to the concatenating DynamicCache, with rows leaving at EOS."""
    import rbctl.rollout.hf as hf

    model = _tiny_llama(2)
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=10, seed=5)
    engine = HFEngine(model, _Tok(), logprobs=True)
    engine.shared_prefix = False  # the repeated cache (the shared prompt cache has its own: test_shared_prefix.py)
    reserved = engine.generate(PROMPTS, params)
    monkeypatch.setattr(hf, "reserve_cache", lambda cache, room: None)
    growing = engine.generate(PROMPTS, params)
    assert [[(s.token_ids, s.logprobs) for s in g] for g in reserved] == \
           [[(s.token_ids, s.logprobs) for s in g] for g in growing]
    assert {s.finished for g in reserved for s in g} == {True, False}  # rows left the batch at EOS


def test_reserved_cache_layer_grows_as_usual_once_its_room_is_used():
    from rbctl.rollout.kvcache import forward_with_cache, left_pad, new_cache, position_ids, reserve_cache

    model = _tiny_llama(0)
    ids, mask = left_pad(PROMPTS, 0)
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask, position_ids=position_ids(mask)).logits
        cache = new_cache(model)
        width = 2
        forward_with_cache(model, ids[:, :width], mask[:, :width], position_ids(mask)[:, :width], cache)
        reserve_cache(cache, 1)  # room for one token; the prompt needs more
        assert type(cache.layers[0]).__name__ == "ReservedLayer"
        got = [forward_with_cache(model, ids[:, t:t + 1], mask[:, :t + 1], position_ids(mask)[:, t:t + 1], cache)
               for t in range(width, ids.shape[1])]
    assert cache.get_seq_length() == ids.shape[1]
    torch.testing.assert_close(torch.cat(got, dim=1), want[:, width:])


def test_bfloat16_prefill_keeps_the_last_logits_exactly():
    """In bf16 the kept positions are gathered (a tensor `logits_to_keep`): same logits as slicing
    the full forward's."""
    from rbctl.rollout.kvcache import forward_with_cache, left_pad, new_cache, position_ids

    model = _tiny_llama(1).to(torch.bfloat16)
    ids, mask = left_pad(PROMPTS, 0)
    with torch.no_grad():
        full = model(input_ids=ids, attention_mask=mask, position_ids=position_ids(mask)).logits
        last = forward_with_cache(model, ids, mask, position_ids(mask), new_cache(model), logits_to_keep=1)
    assert last.shape == (len(PROMPTS), 1, full.shape[-1]) and last.dtype == torch.bfloat16
    torch.testing.assert_close(last, full[:, -1:], rtol=0, atol=0)


def _nucleus_probs(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """Slow reference: softmax(z/T) restricted to the smallest set of top tokens whose mass reaches top_p."""
    p = torch.softmax(logits.double() / temperature, dim=-1)
    order = torch.argsort(p, descending=True)
    keep = torch.zeros_like(p, dtype=torch.bool)
    mass = 0.0
    for i in order.tolist():
        keep[i] = True
        mass += p[i].item()
        if mass >= top_p:
            break
    q = torch.where(keep, p, torch.zeros_like(p))
    return q / q.sum()


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 0.8)])
def test_fast_loop_samples_the_tempered_nucleus_distribution(temperature, top_p):
    model = _tiny_llama(3)
    fast, _ = _engines(model)
    prompt = [1, 5, 6]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt])).logits[0, -1]
    want = _nucleus_probs(logits, temperature, top_p)
    n = 4000
    out = fast.generate([prompt], SamplingParams(n=n, temperature=temperature, top_p=top_p, max_new_tokens=1, seed=0))
    counts = torch.bincount(torch.tensor([s.token_ids[0] for s in out[0]]), minlength=len(want)).double()
    got = counts / n
    assert got[want == 0].sum() == 0  # never a token outside the nucleus
    # Total variation of n = 4000 draws from 12 outcomes: its standard deviation is below 0.01.
    assert 0.5 * (got - want).abs().sum() < 0.04
    if top_p < 1.0:
        assert (want == 0).sum() >= 2  # the filter removed tokens: the check above is not vacuous


def test_draw_by_inverse_cdf_follows_the_weights_and_never_picks_a_zero():
    weights = torch.tensor([0.0, 3.0, 0.0, 1.0, 0.5, 0.5, 0.0, 0.0])  # unnormalised, zeros at both ends
    want = weights.double() / weights.sum()
    torch.manual_seed(0)
    got = torch.bincount(draw(weights.expand(200_000, -1)), minlength=8).double() / 200_000
    assert got[want == 0].sum() == 0
    # 200k draws from 4 outcomes: total variation's standard deviation is below 0.002
    assert 0.5 * (got - want).abs().sum() < 0.006


def test_draw_at_either_end_of_the_uniform_range_picks_a_nonzero_weight(monkeypatch):
    weights = torch.tensor([[0.0, 0.1, 0.2, 0.3, 0.0, 0.0], [0.0, 1e-30, 0.0, 0.7, 0.0, 0.0]])
    top = 1.0 - 2.0 ** -53  # torch.rand's largest float64
    monkeypatch.setattr(torch, "rand", lambda shape, generator=None, **kw: torch.full(shape, top, **kw))
    assert draw(weights).tolist() == [3, 3]  # the last nonzero weight, not a trailing zero
    monkeypatch.setattr(torch, "rand", lambda shape, generator=None, **kw: torch.zeros(shape, **kw))
    assert draw(weights).tolist() == [1, 1]  # the first nonzero weight, not a leading zero


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 0.0])
def test_draw_refuses_weights_without_a_distribution(bad):
    weights = torch.tensor([[0.5, 0.5, 0.0], [bad, 0.0, 0.0]])
    with pytest.raises(RuntimeError, match="inf or nan"):
        draw(weights)


def test_a_generation_config_with_its_own_processors_falls_back_to_generate():
    model = _tiny_llama(0)
    model.generation_config.repetition_penalty = 1.3
    assert not HFEngine(model, _Tok()).fast
    model.generation_config.repetition_penalty = 1.0
    assert HFEngine(model, _Tok()).fast


def test_bfloat16_sampling_replica_follows_the_policy_and_keeps_buffers_and_ties():
    model = tiny_llama(12, seed=0, pad_token_id=0, bos_token_id=1, eos_token_id=EOS, initializer_range=0.5,
                       tie_word_embeddings=True)
    engine = HFEngine(model, _Tok(), dtype="bfloat16", logprobs=True)
    replica = engine.sampling_model()
    assert replica is not model and engine.sampling_model() is replica  # built once, then refreshed
    assert {p.dtype for p in replica.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in model.parameters()} == {torch.float32}  # the policy is left as it is
    assert all(b.dtype == a.dtype for a, b in zip(model.buffers(), replica.buffers()))  # rotary freqs stay float32
    assert replica.lm_head.weight is replica.model.embed_tokens.weight  # tied weights stay tied
    for a, b in zip(model.parameters(), replica.parameters()):
        assert torch.equal(b, a.detach().to(torch.bfloat16))
    with torch.no_grad():  # an optimizer step on the policy reaches the replica at the next generation
        model.model.embed_tokens.weight.add_(1.0)
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=6, seed=0)
    out = engine.generate(PROMPTS, params)
    assert torch.equal(replica.model.embed_tokens.weight, model.model.embed_tokens.weight.detach().to(torch.bfloat16))
    assert [len(g) for g in out] == [2] * len(PROMPTS)
    assert all(s.logprobs is not None and len(s.logprobs) == len(s.token_ids) for g in out for s in g)
    assert HFEngine(model, _Tok()).sampling_model() is model  # dtype auto: the policy itself


@pytest.mark.parametrize("fast", [True, False])
def test_seeded_draws_are_those_of_the_global_rng_seeded_alike_and_the_global_rng_is_left_alone(fast, monkeypatch):
    """The engine's own generator gives, bit for bit, the samples of the engine before it had one
    (`torch.manual_seed(seed)`, then torch's global RNG), over two sub-batches of one call, on both
    sampling paths; the caller's global stream is not touched."""
    import contextlib

    import rbctl.rollout.hf as hf

    engine = HFEngine(_tiny_llama(2), _Tok(), max_batch=6, logprobs=True)  # 2 prompts × n=3 per sub-batch
    engine.fast = fast
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=9, seed=11)
    torch.manual_seed(123)
    caller = torch.get_rng_state()
    got = engine.generate(PROMPTS, params)
    assert torch.equal(torch.get_rng_state(), caller)

    real_draw = hf.draw
    monkeypatch.setattr(hf, "draw", lambda probs, generator=None: real_draw(probs))  # the global RNG
    monkeypatch.setattr(hf, "lent_to_global_rng", lambda generator: contextlib.nullcontext())
    torch.manual_seed(11)
    old = engine.generate(PROMPTS, SamplingParams(n=3, temperature=1.0, max_new_tokens=9, seed=None))
    assert [[(s.token_ids, s.logprobs) for s in g] for g in got] == [[(s.token_ids, s.logprobs) for s in g] for g in old]
    assert len({tuple(s.token_ids) for g in got for s in g}) > 3  # the draws differ between samples


def test_sub_batches_hold_at_most_max_batch_sequences_and_max_batch_tokens(monkeypatch):
    engine = HFEngine(_tiny_llama(0), _Tok(), max_batch=64, max_batch_tokens=100)
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=15, seed=0)
    # the KV cache of one sequence: 10 prompt + 15 new = 25 tokens; 100 // 25 = 4 sequences = 2 prompts of n=2
    assert engine.prompts_per_call(10, params) == 2
    assert engine.prompts_per_call(10, SamplingParams(n=8, max_new_tokens=15)) == 1  # never less than one prompt
    assert HFEngine(_tiny_llama(0), _Tok(), max_batch=6).prompts_per_call(10_000, params) == 3  # no token bound: 6 // 2
    calls = []
    real = engine._sample
    monkeypatch.setattr(engine, "_sample", lambda model, chunk, *a: calls.append(len(chunk)) or real(model, chunk, *a))
    prompts = [[1] + [4] * 9] * 5  # 10 tokens each
    out = engine.generate(prompts, params)
    assert calls == [2, 2, 1] and [len(g) for g in out] == [2] * 5


def test_the_kv_cache_budget_is_half_the_free_memory_over_the_bytes_of_one_token(monkeypatch):
    from types import SimpleNamespace

    from transformers import Qwen3Config

    from rbctl.rollout import factory

    # Qwen3-8B's published sizes: 36 layers, 32 query heads, 8 KV heads, head dim 128; bf16
    qwen3_8b = SimpleNamespace(config=Qwen3Config(num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8,
                                                  head_dim=128, hidden_size=4096),
                               parameters=lambda: iter([torch.empty(1, dtype=torch.bfloat16)]))
    assert factory.kv_cache_bytes_per_token(qwen3_8b) == 2 * 36 * 8 * 128 * 2 == 147_456
    monkeypatch.setattr(factory, "free_memory", lambda device: 80 * 10**9)
    assert factory.default_max_batch_tokens(qwen3_8b, "cuda") == 40 * 10**9 // 147_456 == 271_267
    # the tiny test Llama in float32: 2 layers × 2 KV heads × head dim 8 × 2 × 4 bytes
    assert factory.kv_cache_bytes_per_token(_tiny_llama(0)) == 2 * 2 * 2 * 8 * 4
    assert factory.free_memory("cpu") > 0


@pytest.mark.parametrize("fast", [True, False])
def test_progress_is_reported_every_few_decoding_steps_and_adds_up_to_every_token_slot(fast, monkeypatch):
    """`progress(k)` from both sampling paths: every PROGRESS_EVERY steps (here 2) the slots done so
    far, a sample with t tokens counting t and a finished one max_new_tokens, then the rest at the
    end of each sub-batch: the cumulative reports follow the returned samples' lengths exactly."""
    import rbctl.rollout.hf as hf

    monkeypatch.setattr(hf, "PROGRESS_EVERY", 2)
    engine = HFEngine(_tiny_llama(3), _Tok(), max_batch=4)  # two sub-batches of 2 prompts × n=2
    engine.fast = fast
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=9, seed=1)
    calls = []
    out = engine.generate(PROMPTS, params, progress=calls.append)
    assert all(k > 0 for k in calls) and sum(calls) == len(PROMPTS) * 2 * 9
    assert len(calls) > 2  # reports within the sub-batches, not only at their ends

    def reports(samples):  # what one sub-batch reports: slots done at steps 2, 4, ... while it decodes, then the rest
        longest = max(len(x.token_ids) for x in samples)
        marks = [sum(9 if x.finished and len(x.token_ids) <= step else step for x in samples)
                 for step in range(2, min(longest, 9), 2)] + [len(samples) * 9]
        return [b - a for a, b in zip([0] + marks, marks) if b > a]

    assert calls == reports([x for g in out[:2] for x in g]) + reports([x for g in out[2:] for x in g])
    assert {s.finished for g in out for s in g} == {True, False}  # some samples stopped early: they count 9


def test_a_call_without_progress_reports_nothing_and_samples_the_same(monkeypatch):
    engine = HFEngine(_tiny_llama(3), _Tok(), max_batch=4)
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=9, seed=1)
    calls = []
    a = engine.generate(PROMPTS, params, progress=calls.append)
    b = engine.generate(PROMPTS, params)
    assert calls and [[s.token_ids for s in g] for g in a] == [[s.token_ids for s in g] for g in b]
