"""What every rollout engine shares: sampling parameters, one completion (`Sample`), the `Engine`
interface, and EOS handling (so every engine cuts a completion the same way)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


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


class Engine(Protocol):
    """generate(prompt token ids, params) -> for each prompt, `params.n` samples, in prompt order."""

    name: str
    pad_id: int

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[Sample]]: ...


def _cut_at_eos(tokens: list[int], eos_ids: list[int]) -> tuple[list[int], bool]:
    """Keep tokens up to and including the first EOS; padding after it is dropped."""
    eos = set(eos_ids)
    for i, t in enumerate(tokens):
        if t in eos:
            return tokens[: i + 1], True
    return tokens, False
