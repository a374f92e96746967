"""What every rollout engine shares: sampling parameters, one completion (`Sample`), the `Engine`
interface, and EOS handling (so every engine cuts a completion the same way)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Callable, Iterator, Protocol, runtime_checkable


@dataclass(frozen=True)
class SamplingParams:
    n: int = 1  # completions per prompt
    temperature: float = 1.0  # 0 means greedy
    top_p: float = 1.0
    max_new_tokens: int = 256
    seed: int | None = None


@dataclass
class Sample:
    """One completion: its token ids (up to and including EOS when it ended) and its text."""

    prompt_index: int
    token_ids: list[int]
    text: str
    finished: bool  # True when the model emitted EOS within max_new_tokens
    logprobs: list[float] | None = field(default=None)  # engine log-probs of the sampled tokens, if it gives them


def _eos_ids(model, tokenizer) -> list[int]:
    eos = getattr(model.generation_config, "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    ids = eos if isinstance(eos, (list, tuple)) else [eos]
    return [int(i) for i in ids if i is not None]


@runtime_checkable
class Engine(Protocol):
    """What training and evaluation use of an engine, and all they use: the trainer and the
    evaluation pipeline call these and never look at an engine's type or other attributes.

    Randomness: an engine draws from its own `torch.Generator`, seeded at every `generate` call
    from `params.seed` (unseeded calls continue its stream); torch's global RNG is left as it was,
    so a seed gives the same samples whatever else the process drew."""

    name: str  # recorded in evaluation summaries (protocol.engine)
    pad_id: int  # the token id that pads batches built from this engine's samples

    def generate(self, prompts: list[list[int]], params: SamplingParams,
                 progress: Callable[[int], None] | None = None) -> list[list[Sample]]:
        """For each prompt (token ids), `params.n` samples, in prompt order. `progress(k)`: k more of
        the call's len(prompts) × n × max_new_tokens sample-token slots are done (a sample that has
        t tokens has done t, a finished one all max_new_tokens); the reports of a call add up to
        exactly that total, at whatever pace the engine can tell (hf: every few decoding steps)."""
        ...

    def generate_calls(self, calls: list[tuple[list[list[int]], SamplingParams]],
                       progress: Callable[[int], None] | None = None) -> Iterator[list[list[Sample]]]:
        """The result of each `generate(prompts, params, progress)` of `calls`, in order, as each is
        ready: the same samples as those calls one after another (an engine may sample several as
        one batch; `generate_each` is the plain loop)."""
        ...

    def prompts_per_call(self, prompt_tokens: int, params: SamplingParams) -> int | None:
        """Most prompts one `generate` call should hold when the longest has `prompt_tokens` tokens
        (a caller that splits its work for progress, as evaluation does, calls with that many);
        None: any number, the engine schedules its own batches."""
        ...

    def sync_weights(self, model) -> None:
        """Sample from `model`'s current weights from the next `generate` on: called after every
        optimizer step, and whenever the policy object changes (wrapped in LoRA, resumed)."""
        ...

    def sampling_context(self, precision) -> AbstractContextManager:
        """The context `generate` runs in when training runs in `precision`
        (`rbctl.train.precision.Precision`): the training autocast for an engine that samples with
        the policy's own modules, none for one that samples in its own dtype."""
        ...

    def record_logprobs(self, on: bool = True) -> bool:
        """Ask for each sampled token's log-prob under the distribution it was drawn from,
        log softmax(logits / T), in `Sample.logprobs` (none when greedy); returns whether the engine
        will give them. `rollout/logprob_diff` and TIS (`algo.tis_cap`) compare them with the trainer's."""
        ...


def generate_each(engine: Engine, calls, progress=None) -> Iterator[list[list[Sample]]]:
    """`Engine.generate_calls` as one `generate` after another."""
    for prompts, params in calls:
        yield engine.generate(prompts, params, progress=progress)


def _cut_at_eos(tokens: list[int], eos_ids: list[int]) -> tuple[list[int], bool]:
    """Keep tokens up to and including the first EOS; padding after it is dropped."""
    eos = set(eos_ids)
    for i, t in enumerate(tokens):
        if t in eos:
            return tokens[: i + 1], True
    return tokens, False
