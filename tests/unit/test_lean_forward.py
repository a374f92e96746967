"""`rbctl.rollout.lean_forward`: the built-in policies' forward without the module tree gives the
module tree's logits and gradients bit for bit, in every way rbctl calls a model, and steps aside
wherever it would not."""

from __future__ import annotations

import copy

import pytest
import torch

from rbctl.rollout import lean_forward as lf
from rbctl.rollout.base import SamplingParams
from rbctl.rollout.hf import HFEngine
from rbctl.rollout.kvcache import forward_with_cache, left_pad, new_cache, position_ids
from rbctl.train.batch import response_logits

from tests.conftest import tiny_llama
from tests.unit.test_rollout import _Tok


def _pair(**config):
    """(the module tree, the same weights with the lean forward installed)."""
    plain = tiny_llama(12, seed=0, pad_token_id=0, bos_token_id=1, eos_token_id=2, initializer_range=0.5,
                       tie_word_embeddings=True, **config)
    lean = copy.deepcopy(plain)
    assert lf.use_lean_forward(lean) and "forward" in vars(lean) and "forward" not in vars(plain)
    return plain, lean


def _batch():
    ids, mask = left_pad([[1, 5, 6, 7, 3, 9], [1, 3, 4], [1, 9, 8, 4, 11, 10, 2, 5], [1, 4]], pad_id=0)
    return ids, mask


@pytest.mark.parametrize("kv_heads", [2, 1])  # plain attention and grouped queries (2 heads over 1)
def test_training_forward_gives_the_same_logits_and_gradients_bit_for_bit(kv_heads):
    plain, lean = _pair(num_key_value_heads=kv_heads)
    ids, mask = _batch()
    grads = []
    for model in (plain, lean):
        model.train()
        logits = model(input_ids=ids, attention_mask=mask, position_ids=position_ids(mask), use_cache=False,
                       logits_to_keep=5).logits
        (logits.log_softmax(-1)[..., 3] * mask[:, -5:]).sum().backward()
        grads.append((logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (a, ga), (b, gb) = grads
    assert a.shape == (4, 5, 12) and torch.equal(a, b)
    assert ga.keys() == gb.keys() and all(torch.equal(ga[n], gb[n]) for n in ga)


def test_shared_prompt_scoring_through_a_cache_is_the_same():
    plain, lean = _pair()
    prompts = torch.tensor([[1, 5, 6, 7], [1, 9, 8, 4]]).repeat_interleave(3, 0)  # 2 prompts × G 3
    ids = torch.cat([prompts, torch.randint(3, 12, (6, 5), generator=torch.Generator().manual_seed(1))], 1)
    mask = torch.ones_like(ids)
    mask[1, -2:] = 0
    a, b = (response_logits(m.eval(), ids, mask, prompt_width=4, group_size=3) for m in (plain, lean))
    assert a.shape == (6, 5, 12) and torch.equal(a, b)


def test_prefill_and_decoding_over_a_cache_are_the_same():
    plain, lean = _pair()
    ids, mask = _batch()
    out = []
    for model in (plain.eval(), lean.eval()):
        cache, m, steps = new_cache(model), mask, []
        with torch.no_grad():
            logits = forward_with_cache(model, ids, m, position_ids(m), cache, logits_to_keep=1)
            pos = m.sum(-1, keepdim=True)
            for t in range(4):
                m = torch.cat([m, m.new_ones(len(m), 1)], 1)
                nxt = logits[:, -1].argmax(-1, keepdim=True)
                steps.append(logits)
                logits = forward_with_cache(model, nxt, m, pos + t, cache)
        out.append(steps)
    assert all(torch.equal(x, y) for x, y in zip(*out))


def test_the_sampling_loop_draws_the_same_samples():
    plain, lean = _pair()
    params = SamplingParams(n=4, temperature=1.0, max_new_tokens=8, seed=3)
    prompts = [[1, 5, 6, 7], [1, 3], [1, 9, 8, 4, 11, 10]]
    a, b = (HFEngine(m, _Tok(), logprobs=True).generate(prompts, params) for m in (plain, lean))
    assert HFEngine(lean, _Tok()).shared_prefix  # decoding through rbctl's shared-prefix attention
    key = lambda out: [[(s.token_ids, s.logprobs) for s in g] for g in out]  # noqa: E731
    assert key(a) == key(b)


def test_it_steps_aside_for_hooks_wrappers_checkpointing_and_other_arguments(monkeypatch):
    plain, lean = _pair()
    ids, mask = _batch()
    calls = []
    real = lf.lean_forward
    monkeypatch.setattr(lf, "lean_forward", lambda *a, **k: calls.append(1) or real(*a, **k))
    lean(input_ids=ids, attention_mask=mask)
    assert calls == [1]
    hidden = lean(input_ids=ids, attention_mask=mask, output_hidden_states=True)  # an argument it does not take
    assert calls == [1] and len(hidden.hidden_states) == 3
    handle = lean.model.layers[0].register_forward_pre_hook(lambda mod, args: None)  # as FSDP's
    lean(input_ids=ids, attention_mask=mask)
    handle.remove()
    lean.model.layers[1].mlp.up_proj = torch.nn.Sequential(lean.model.layers[1].mlp.up_proj)  # a wrapped projection (LoRA)
    lean(input_ids=ids, attention_mask=mask)
    assert calls == [1]


def test_it_is_installed_only_where_it_is_exact(monkeypatch):
    assert not lf.use_lean_forward(tiny_llama(12).to(torch.bfloat16))
    assert not lf.use_lean_forward(tiny_llama(12, mlp_bias=True))
    monkeypatch.setattr(lf, "LEAN_MAX_PARAMS", 10)
    assert not lf.use_lean_forward(tiny_llama(12))


def test_an_older_transformers_keeps_the_module_tree(monkeypatch):
    # transformers 5.19 (vLLM 0.32's CPU build pins it) names the cache `past_key_values` in
    # create_causal_mask and the Llama forward: the lean forward would call them wrongly, so it is not installed
    import transformers.masking_utils as masking

    def old_create_causal_mask(config, inputs_embeds, attention_mask, cache_position=None, past_key_values=None,
                               position_ids=None):
        raise AssertionError("not called")

    model = tiny_llama(12, seed=0, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    lf._mirrors_installed_transformers.cache_clear()
    monkeypatch.setattr(masking, "create_causal_mask", old_create_causal_mask)
    try:
        assert not lf.lean_forward_supported(model) and not lf.use_lean_forward(model)
        assert "forward" not in vars(model)
    finally:
        lf._mirrors_installed_transformers.cache_clear()
    monkeypatch.undo()
    assert lf.lean_forward_supported(model)  # the installed transformers (5.2x) has the interfaces it calls
