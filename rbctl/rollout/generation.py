"""What the hf engine (`rbctl.rollout.hf`) hangs on transformers' generation: whether a model's
generation config lets its own sampling loop stand in for `generate` (`plain_generation_config`),
the progress meter of both sampling paths (`TokenMeter`, on `generate`'s path through a stopping
criterion that stops nothing) and the log-probs of the tokens `generate` draws (`LogprobRecorder`)."""

from __future__ import annotations

import torch


# Generation-config keys that add no logits processor (or that every call overrides), and settings
# at their neutral value: a model whose generation config sets anything else (a repetition penalty,
# suppressed tokens, ...) samples with `generate`.
_PLAIN_GENERATION_KEYS = {
    "bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id", "transformers_version",
    "_from_model_config", "max_length", "max_new_tokens", "do_sample", "temperature", "top_p", "top_k",
    "use_cache", "output_attentions", "output_hidden_states", "output_scores", "output_logits",
    "return_dict_in_generate",
}
_NEUTRAL_GENERATION_VALUES = {
    "repetition_penalty": 1.0, "encoder_repetition_penalty": 1.0, "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0, "min_length": 0, "typical_p": 1.0, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0,
    "num_beams": 1, "num_beam_groups": 1, "num_return_sequences": 1, "renormalize_logits": False,
}


def plain_generation_config(gen_cfg) -> bool:
    """True when `gen_cfg` adds nothing to sampling beyond what rbctl passes (temperature, top_p, EOS)."""
    if gen_cfg is None:
        return True
    return all(k in _PLAIN_GENERATION_KEYS or v is None or _NEUTRAL_GENERATION_VALUES.get(k, object()) == v
               for k, v in gen_cfg.to_diff_dict().items())


class TokenMeter:
    """Progress of one sub-batch of `rows` samples in sample-token slots, rows × max_new_tokens in
    all: a sample still decoding has done the tokens it has, a finished one all max_new_tokens
    (what it will never need). `report(k)` gets the slots done since its last call, every
    `every` decoding steps and at `close`; the reports of a sub-batch add up to exactly
    rows × max_new_tokens, so a progress bar over them reaches its end, and its rate gives an ETA."""

    def __init__(self, report, rows: int, max_new_tokens: int, every: int):
        self.report, self.rows, self.max_new_tokens, self.every = report, rows, max_new_tokens, every
        self.done = self.steps = 0

    def tick(self, generated: int, active) -> None:
        """After a decoding step: each of the `active` unfinished samples has `generated` tokens
        (`active`: a number, or a function giving it, called only when a report is due)."""
        self.steps += 1
        if self.report is not None and self.steps % self.every == 0:
            n = active() if callable(active) else active
            self._to(n * generated + (self.rows - n) * self.max_new_tokens)

    def close(self) -> None:
        if self.report is not None:
            self._to(self.rows * self.max_new_tokens)

    def _to(self, done: int) -> None:
        if done > self.done:
            self.report(done - self.done)
            self.done = done


def metering_criteria(meter: TokenMeter, prompt_width: int, eos_ids: list[int], device):
    """A `generate` stopping criterion that never stops anything and ticks `meter` at every step."""
    from transformers import StoppingCriteria

    eos = torch.tensor(eos_ids, device=device)

    class Metering(StoppingCriteria):
        def __init__(self):
            self.finished = None

        def __call__(self, input_ids, scores, **kwargs):
            last = torch.isin(input_ids[:, -1], eos)
            self.finished = last if self.finished is None else self.finished | last
            meter.tick(input_ids.shape[1] - prompt_width, lambda: int((~self.finished).sum()))
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    return Metering()


class LogprobRecorder:
    """A `generate` logits processor that keeps one step's distribution at a time and, at the next
    step, the log-prob of the token drawn from it. Custom processors run before generate's own
    temperature and top-p warpers, so the temperature is applied here."""

    def __init__(self, temperature: float):
        self.temperature = temperature
        self.prev = None
        self.steps: list[torch.Tensor] = []

    def __call__(self, input_ids, scores):
        if self.prev is not None:
            self.steps.append(self.prev.gather(-1, input_ids[:, -1:]).squeeze(1))
        self.prev = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def result(self, response: torch.Tensor) -> torch.Tensor:
        """[B·n, L] log-probs of the response tokens (the last one from the last kept distribution)."""
        if self.prev is not None and len(self.steps) < response.shape[1]:
            self.steps.append(self.prev.gather(-1, response[:, len(self.steps):len(self.steps) + 1]).squeeze(1))
        if not self.steps:
            return response.new_zeros(response.shape, dtype=torch.float32)
        return torch.stack(self.steps, dim=1)
