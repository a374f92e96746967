"""rbctl's VLLMEngine over vLLM's CPU build (one LLM for the module, a tiny tied Llama in float32):
seeded sampling (repeatable, and no crash when a batch's prefill exceeds one scheduler step), the
sampled tokens' log-probs against the trainer's forward pass, the weight sync through vLLM's in-place
reload after optimizer steps (tied embedding included), LoRA merged, greedy decoding, stopping, and
the CPU's refusals and no-ops."""

from __future__ import annotations

import copy

import pytest
import torch

from rbctl.errors import UserError
from rbctl.rollout import vllm as vllm_engine
from rbctl.rollout.base import SamplingParams
from rbctl.rollout.logprobs import logprob_mismatch, tis_weights
from tests.vllm.conftest import EOS, REAL_VLLM, save_tiny

pytestmark = REAL_VLLM

T = 0.7
GAP = 1e-4  # float32 on both sides: rounding only (measured below 1e-6); a stale weight gives ~0.1–2 nats


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny_vllm")
    model, tok = save_tiny(folder)
    torch.set_num_threads(2)
    eng = vllm_engine.VLLMEngine(model, tok, model_name_or_path=str(folder), dtype="float32", seed=0, max_model_len=512)
    assert torch.get_num_threads() == 2  # building vLLM lowered it to 1 and pinned it; the engine gave it back
    return eng, model, tok


def _prompts(tok, k: int, length: int = 12) -> list[list[int]]:
    """k distinct prompts of `length` ids drawn from the tokenizer's letters (no special ids)."""
    g = torch.Generator().manual_seed(k * 1000 + length)
    return [torch.randint(3, len(tok), (length,), generator=g).tolist() for _ in range(k)]


def _trainer_logprobs(model, prompt: list[int], response: list[int]) -> torch.Tensor:
    """log softmax(z/T) of the response tokens under `model`'s forward pass: what the trainer computes."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + response])).logits[0, len(prompt) - 1: -1].float() / T
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(response)[:, None]).squeeze(-1)


def _gap(eng, model, prompts, seed=1) -> float:
    """Largest |vLLM − trainer| log-prob over the sampled tokens of 2 samples per prompt."""
    out = eng.generate(prompts, SamplingParams(n=2, temperature=T, top_p=1.0, max_new_tokens=16, seed=seed))
    return max((torch.tensor(s.logprobs) - _trainer_logprobs(model, prompts[p], s.token_ids)).abs().max().item()
               for p, group in enumerate(out) for s in group)


def test_generate_keeps_prompt_order_the_stop_token_and_one_logprob_per_token(real):
    eng, _, tok = real
    prompts = _prompts(tok, 3)
    out = eng.generate(prompts, SamplingParams(n=8, temperature=1.0, max_new_tokens=40, seed=3))
    assert [len(g) for g in out] == [8, 8, 8]
    finished = 0
    for p, group in enumerate(out):
        for s in group:
            assert s.prompt_index == p and 0 < len(s.token_ids) <= 40
            assert len(s.logprobs) == len(s.token_ids) and all(lp <= 0 for lp in s.logprobs)
            assert s.text == tok.decode(s.token_ids, skip_special_tokens=True)
            if s.finished:
                finished += 1
                assert s.token_ids[-1] == EOS and EOS not in s.token_ids[:-1]  # kept, and cut at the first
            else:
                assert len(s.token_ids) == 40
    # a random model over 32 ids ends a 40-token sample with EOS about 7 times in 10
    assert 0 < finished < 24


def test_seeded_sampling_repeats_and_a_batch_beyond_one_prefill_step_does_not_crash(real):
    """20 prompts of 250 tokens (5,000 prompt tokens) exceed the CPU build's 4,096 tokens per
    scheduler step: with chunked prefill on, the last prompt's prefill would be split and the seeded
    request would crash the sampler ("CPU Generator does not use offset")."""
    eng, _, tok = real
    prompts = _prompts(tok, 20, length=250)
    params = SamplingParams(n=4, temperature=1.0, max_new_tokens=12, seed=7)
    a = [[s.token_ids for s in g] for g in eng.generate(prompts, params)]
    b = [[s.token_ids for s in g] for g in eng.generate(prompts, params)]
    assert a == b  # same seed, same samples
    assert all(len({tuple(x) for x in g}) > 1 for g in a)  # the n samples of a prompt differ
    c = [[s.token_ids for s in g] for g in eng.generate(prompts, SamplingParams(n=4, temperature=1.0, max_new_tokens=12, seed=8))]
    assert c != a


def test_logprobs_are_the_trainers_at_the_temperature_and_tis_weights_are_one(real):
    eng, model, tok = real
    prompts = _prompts(tok, 4)
    out = eng.generate(prompts, SamplingParams(n=2, temperature=T, top_p=1.0, max_new_tokens=16, seed=3))
    for p, group in enumerate(out):
        for s in group:
            trainer, engine = _trainer_logprobs(model, prompts[p], s.token_ids), torch.tensor(s.logprobs)
            assert logprob_mismatch(engine, trainer, torch.ones_like(engine)) < GAP
            assert tis_weights(trainer, engine, cap=2.0).sub(1).abs().max().item() < 2 * GAP


def test_greedy_decoding_is_the_trainers_argmax(real):
    eng, model, tok = real
    prompt = _prompts(tok, 1)[0]
    got = eng.generate([prompt], SamplingParams(n=1, temperature=0.0, max_new_tokens=10))[0][0].token_ids
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(len(got)):
            ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    assert got == ids[len(prompt):]


def test_sync_after_optimizer_steps_keeps_the_gap_below_1e4_tied_embedding_included(real):
    """Three AdamW steps on every weight (the tied embedding too), a sync after each: the sampler's
    log-probs stay the trainer's. The sync goes through vLLM's in-place reload; the CPU build's old
    per-tensor `load_weights` path raises AttributeError here, and a sync that left the tied output
    layer behind is off by ~1 nat. The same prompts every step: a stale prefix cache would show too."""
    eng, model, tok = real
    assert vllm_engine.has_inplace_reload(eng.llm)
    prompts = _prompts(tok, 4)
    saved = copy.deepcopy(model.state_dict())
    embed0 = model.model.embed_tokens.weight.detach().clone()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-2)
    try:
        for step in range(3):
            out = eng.generate(prompts, SamplingParams(n=2, temperature=T, max_new_tokens=16, seed=step))
            loss = -sum(_logprob_sum(model, prompts[p], s.token_ids) for p, g in enumerate(out) for s in g)
            opt.zero_grad()
            loss.backward()
            opt.step()
            pushed = eng.sync_weights(model)
            assert _gap(eng, model, prompts, seed=step) < GAP
            assert pushed == len(list(model.parameters())) + 1  # + lm_head.weight (tied)
        assert model.lm_head.weight is model.model.embed_tokens.weight
        assert (model.model.embed_tokens.weight - embed0).abs().max() > 0.05  # the tied embedding moved
    finally:
        with torch.no_grad():
            model.load_state_dict(saved)
        eng.sync_weights(model)


def _logprob_sum(model, prompt, response):
    logits = model(input_ids=torch.tensor([prompt + response])).logits[0, len(prompt) - 1: -1] / T
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(response)[:, None]).sum()


def test_a_moved_tied_embedding_alone_reaches_the_output_layer(real):
    eng, model, tok = real
    prompts = _prompts(tok, 4)
    saved = model.model.embed_tokens.weight.detach().clone()
    try:
        with torch.no_grad():
            model.model.embed_tokens.weight.add_(torch.randn(saved.shape, generator=torch.Generator().manual_seed(0)))
        eng.sync_weights(model)
        assert _gap(eng, model, prompts) < GAP
    finally:
        with torch.no_grad():
            model.model.embed_tokens.weight.copy_(saved)
        eng.sync_weights(model)


def test_lora_adapters_are_merged_into_vllm_and_the_base_is_untouched(real):
    from peft import LoraConfig, get_peft_model

    eng, model, tok = real
    prompts = _prompts(tok, 4)
    peft = get_peft_model(copy.deepcopy(model), LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_B" in name:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))  # B = 0 at init would make the merge a no-op
    base = {n: p.detach().clone() for n, p in peft.named_parameters() if "base_layer" in n}
    try:
        eng.sync_weights(peft)
        assert _gap(eng, peft, prompts) < GAP
        before = _gap(eng, model, prompts)
        assert before > 100 * GAP  # vLLM now samples the adapted policy, not the base
        for n, p in peft.named_parameters():
            if n in base:
                assert torch.equal(p, base[n])  # merged out of place
    finally:
        eng.sync_weights(model)
    assert _gap(eng, model, prompts) < GAP


def test_sleep_mode_is_refused_in_one_line_on_the_cpu_build(real):
    _, model, tok = real
    with pytest.raises(UserError, match=r"^rollout.vllm.sleep_mode: vLLM's cpu build has no sleep mode \(set it to false"):
        vllm_engine.VLLMEngine(model, tok, model_name_or_path="unused", dtype="float32", sleep_mode=True)


def test_the_cpu_build_runs_without_chunked_prefill_on_a_fixed_kv_cache(real):
    eng, _, _ = real
    config = eng.llm.llm_engine.vllm_config
    assert config.scheduler_config.enable_chunked_prefill is False
    assert config.cache_config.kv_cache_memory_bytes == vllm_engine.CPU_KV_CACHE_BYTES
    assert config.device_config.device.type == "cpu"
