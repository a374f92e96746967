"""Rollout engines: sample n completions per prompt and return their token ids in prompt order.

An engine takes prompt token ids and `SamplingParams` and returns, for each prompt, n `Sample`s.
`hf` runs `transformers` generation (KV cache, temperature, top_p, EOS) on CPU or one GPU;
`vllm` (rbctl.vllm_engine, the scale-out issue) implements the same `generate` signature.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


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


def left_pad(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token lists: ids [B, L] and attention mask [B, L] (1 on real tokens)."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        if s:
            ids[i, width - len(s):] = torch.tensor(s, dtype=torch.long)
            mask[i, width - len(s):] = 1
    return ids, mask


class HFEngine:
    """Batched sampling with `model.generate`. `max_batch` caps sequences per generate call."""

    name = "hf"

    def __init__(self, model, tokenizer, max_batch: int = 256):
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch = max_batch
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else _eos_ids(model, tokenizer)[0]
        self.eos_ids = _eos_ids(model, tokenizer)

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[Sample]]:
        if params.seed is not None:
            torch.manual_seed(params.seed)
        device = next(self.model.parameters()).device
        per_call = max(1, self.max_batch // params.n)
        out: list[list[Sample]] = []
        was_training = self.model.training
        self.model.eval()
        try:
            for start in range(0, len(prompts), per_call):
                chunk = prompts[start:start + per_call]
                ids, mask = left_pad(chunk, self.pad_id)
                gen_kwargs = dict(
                    max_new_tokens=params.max_new_tokens,
                    num_return_sequences=params.n,
                    pad_token_id=self.pad_id,
                    eos_token_id=self.eos_ids,
                    use_cache=True,
                )
                if params.temperature > 0:
                    gen_kwargs.update(do_sample=True, temperature=params.temperature, top_p=params.top_p, top_k=0)
                else:
                    gen_kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
                seqs = self.model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), **gen_kwargs)
                responses = seqs[:, ids.shape[1]:].tolist()
                for j, resp in enumerate(responses):
                    p = start + j // params.n
                    if j % params.n == 0:
                        out.append([])
                    toks, finished = _cut_at_eos(resp, self.eos_ids)
                    text = self.tokenizer.decode(toks, skip_special_tokens=True)
                    out[-1].append(Sample(p, toks, text, finished))
        finally:
            self.model.train(was_training)
        return out


def _cut_at_eos(tokens: list[int], eos_ids: list[int]) -> tuple[list[int], bool]:
    """Keep tokens up to and including the first EOS; padding after it is dropped."""
    eos = set(eos_ids)
    for i, t in enumerate(tokens):
        if t in eos:
            return tokens[: i + 1], True
    return tokens, False
