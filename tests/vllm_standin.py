"""A vLLM stand-in that samples for real: it holds its own copy of the model, takes the weights the
engine pushes (through the worker's in-place reload, `collective_rpc("reload_weights", ...)`, under
the base model's names, as vLLM does) and samples from them with vLLM's interface (`LLM.generate`,
per-prompt seeds, `processed_logprobs`). Used to drive the trainer with `rollout.engine=vllm` in the
fast tests: `use_vllm_standin(monkeypatch)`. tests/vllm/ checks each of these behaviours against
vLLM's CPU build.

`logprob_shift` is added to every reported log-prob (a stand-in for the kernel-level mismatch of a
real engine), so that `rollout/logprob_diff` and the TIS weights have something to measure."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import torch

from rbctl.rollout import factory
from rbctl.rollout import vllm as vllm_mod
from rbctl.rollout.vllm import VLLMEngine


class StandInSamplingParams:  # vllm.SamplingParams: keyword arguments only
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


class StandInModel:
    """vLLM's in-process model: `load_weights(iterable of (name, tensor))` into a copy of the policy."""

    def __init__(self, net):
        self.net = net.float().eval().requires_grad_(False)
        self.params = dict(self.net.named_parameters())
        self.loaded: dict[str, torch.Tensor] = {}
        self.calls = 0

    @torch.no_grad()
    def load_weights(self, weights):
        for name, t in weights:
            self.loaded[name] = t.detach().clone()
            self.net.get_parameter(name).copy_(t.float())  # a tied lm_head.weight is the embedding
        self.calls += 1


class StandInLLM:
    def __init__(self, net, logprob_shift: float = 0.0):
        self.model = StandInModel(net)
        self.logprob_shift = logprob_shift
        self.llm_engine = SimpleNamespace(model_executor=SimpleNamespace(driver_worker=SimpleNamespace(
            model_runner=SimpleNamespace(model=self.model), reload_weights=self._reload_weights)))
        self.calls: list[tuple] = []
        self.sampling_params = []
        self.loaded_at_generate: list[dict[str, torch.Tensor]] = []  # the weights each generate sampled from

    @torch.no_grad()
    def generate(self, prompts, sampling_params=None, use_tqdm=True):
        self.calls.append(("generate",))
        self.sampling_params.append(sampling_params)
        self.loaded_at_generate.append(dict(self.model.loaded))
        outs = []
        for p, (prompt, sp) in enumerate(zip(prompts, sampling_params)):
            comps = [self._complete(list(prompt["prompt_token_ids"]), sp, i) for i in range(sp.n)]
            outs.append(SimpleNamespace(request_id=str(p), prompt=None, prompt_token_ids=prompt["prompt_token_ids"],
                                        outputs=comps, finished=True))
        return outs

    def _complete(self, prompt, sp, i):
        gen = torch.Generator().manual_seed(sp.seed + i)
        toks, lps, reason = [], [], "length"
        for _ in range(sp.max_tokens):
            logits = self.model.net(input_ids=torch.tensor([prompt + toks])).logits[0, -1].float()
            if sp.temperature > 0:
                logp = torch.log_softmax(logits / sp.temperature, -1)
                t = int(torch.multinomial(logp.exp(), 1, generator=gen))
            else:
                logp = torch.log_softmax(logits, -1)
                t = int(logits.argmax())
            toks.append(t)
            lps.append({t: SimpleNamespace(logprob=float(logp[t]) + self.logprob_shift)})
            if t in sp.stop_token_ids:
                reason = "stop"
                break
        return SimpleNamespace(index=i, text="", token_ids=toks, cumulative_logprob=None, logprobs=lps,
                               finish_reason=reason)

    def _reload_weights(self, weights_iterator=None):
        self.model.load_weights(weights_iterator)  # the whole model in one call

    def collective_rpc(self, method, kwargs=None):
        return [getattr(self.llm_engine.model_executor.driver_worker, method)(**(kwargs or {}))]

    def sleep(self, level=1):
        self.calls.append(("sleep", level))

    def wake_up(self, tags=None):
        self.calls.append(("wake_up", tuple(tags) if tags else None))

    def reset_prefix_cache(self):
        self.calls.append(("reset_prefix_cache",))


def use_vllm_standin(monkeypatch, logprob_shift: float = 0.0) -> list[VLLMEngine]:
    """`rollout.engine=vllm` builds a VLLMEngine over a StandInLLM (vLLM need not be installed).
    Returns the list that every engine built from now on is appended to."""
    built: list[VLLMEngine] = []

    class StandInEngine(VLLMEngine):
        def __init__(self, model, tokenizer, **kw):
            kw.pop("llm", None)
            super().__init__(model, tokenizer, llm=StandInLLM(copy.deepcopy(model), logprob_shift), **kw)
            built.append(self)

    real = factory.engine_class
    monkeypatch.setattr(factory, "engine_class", lambda name: StandInEngine if name == "vllm" else real(name))
    monkeypatch.setattr(vllm_mod, "_sampling_params_cls", lambda: StandInSamplingParams)
    return built
