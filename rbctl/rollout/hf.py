"""Rollout engines: sample n completions per prompt and return their token ids in prompt order.

An engine takes prompt token ids and `SamplingParams` and returns, for each prompt, n `Sample`s.
`hf` runs `transformers` generation (KV cache, temperature, top_p, EOS) on CPU or one GPU;
`vllm` (rbctl.rollout.vllm, for GPUs) implements the same `generate` signature.

On CPU, for a plain decoder-only model (see `prefix_cache_supported`) and a generation config
that adds no logits processor of its own, `hf` runs its own sampling loop instead of
`model.generate`. It samples from the same distribution — the same forward pass with a KV cache,
logits in float32, `TemperatureLogitsWarper` then `TopPLogitsWarper` (transformers' own), softmax,
a draw by inverse CDF (`draw`; argmax when greedy), stop at EOS or max_new_tokens — and does less work:
1. each prompt is run once, not n times. Sampling in float32 from a model of plain full attention
   (Llama, Qwen2/3, Mistral without a sliding window: `shared_prefix_supported`), its keys and
   values are then held once for its n samples, and decoding attends over them and each sample's
   own tokens (rbctl.rollout.shared_prefix; one SmolLM2 rollout of 16 × 64 tokens on one thread
   decoded at 137 against 127 tok/s, medians of 4 alternating calls of a profiling script);
   otherwise its KV cache is repeated n times after the prefill;
2. a sequence that has emitted EOS leaves the batch (its rows are dropped from the cache), so
   later decoding steps run only the unfinished sequences;
3. the cache has room reserved for max_new_tokens after the prefill (`reserve_cache`; the shared
   cache's response buffer likewise), so each step writes its keys and values in place instead of
   copying the whole cache.
4. a model whose Linear layers run on oneDNN (`model.cpu_linear`) has its float32 weights reordered
   into oneDNN's blocked layout once per call (`cpu_linear.packed_weights`), not at every decode step.
Random draws are spread over rows differently than in `generate`, so a seed gives other (equally
distributed) samples than `generate` would; greedy decoding gives the same tokens.

Randomness: the engine owns a `torch.Generator` on the model's device, seeded with
`SamplingParams.seed` at the start of each call. The sampling loop draws from it; `model.generate`
(which samples with torch's global RNG and takes no generator) runs with the generator's state lent
to the global RNG and handed back afterwards (`lent_to_global_rng`). Either way a seed gives the
draws that `torch.manual_seed(seed)` followed by the same sampling gave before the engine had a
generator of its own, and torch's global RNG is left as the caller had it.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import replace

import torch

from rbctl.algo.losses import scaled
from rbctl.rollout.base import Sample, SamplingParams, _cut_at_eos, _eos_ids
from rbctl.rollout.cpu_linear import packed_weights
from rbctl.rollout.generation import LogprobRecorder, TokenMeter, metering_criteria, plain_generation_config
from rbctl.rollout.kvcache import (forward_with_cache, left_pad, new_cache, position_ids, prefix_cache_supported,
                                   reserve_cache)
from rbctl.rollout.shared_prefix import SharedPrefixCache, decoding_attention, shared_prefix_supported


def next_tokens(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None = None) -> torch.Tensor:
    """Token choice of `generate` from last-position logits [B, V]: argmax when greedy, else a draw
    (from `generator`; None = torch's global RNG) from softmax of the temperature-scaled,
    nucleus-filtered float32 logits (transformers' warpers)."""
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopPLogitsWarper

    scores = logits.float()
    if params.temperature <= 0:
        return scores.argmax(dim=-1)
    if params.temperature != 1.0:
        scores = TemperatureLogitsWarper(params.temperature)(None, scores)
    if params.top_p < 1.0:
        scores = TopPLogitsWarper(params.top_p)(None, scores)
    return draw(torch.softmax(scores, dim=-1), generator)


def draw(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One index per row of `probs` [B, V] (rows of non-negative weights), by inverse CDF: a uniform
    draw u in [0, total) from `generator` (None = torch's global RNG) picks the first index whose
    cumulative weight exceeds u.

    The cumulative sum runs in float64, so each index's interval is its float32 weight up to a
    relative 1e-16 of the total: over softmaxes of 49,152 random logits the drawn distribution is
    within 1e-14 of total variation of the exact one, against 3e-4 with a float32 sum (whose late
    entries round each small probability by up to ±6e-8). A zero weight is an
    empty interval and is never drawn. `torch.multinomial` draws the same distribution but takes
    V exponential variates per row; this takes one uniform (~0.06 s against ~1.1 s over a
    64-token rollout of 16 rows on SmolLM2's vocabulary at 2 threads)."""
    cdf = probs.double().cumsum_(-1)
    total = cdf[:, -1:]
    if not bool(((total > 0) & torch.isfinite(total)).all()):  # as torch.multinomial refuses them
        raise RuntimeError("sampling weights contain inf or nan, or a row sums to 0 (non-finite logits?)")
    # torch.rand's float64 lies in [0, 1 - 2^-53], and a product with such a factor rounds below the
    # total, so some entry (the last nonzero weight's) exceeds u; right=True skips empty intervals
    if isinstance(generator, CallStreams):
        u = generator.rand(cdf.dtype, cdf.device) * total
    else:
        u = torch.rand(total.shape, dtype=cdf.dtype, device=cdf.device, generator=generator) * total
    return torch.searchsorted(cdf, u, right=True).squeeze(1)


class CallStreams:
    """The random streams of several `generate` calls sampled as one batch (`HFEngine.generate_calls`):
    the rows of call c (`sizes[c]` prompts × n, consecutive) draw from generator c, in row order,
    as they would in their own call; rows that have finished draw nothing (`keep`)."""

    def __init__(self, generators: list[torch.Generator], sizes: list[int], n: int):
        self.generators = generators
        self.call_of_row = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes) * n)
        self.counts = [k * n for k in sizes]

    def keep(self, rows: torch.Tensor) -> None:
        """The active rows are now `rows` (indices into all the calls' rows, ascending)."""
        self.counts = torch.bincount(self.call_of_row[rows.cpu()], minlength=len(self.generators)).tolist()

    def rand(self, dtype, device) -> torch.Tensor:
        """[active rows, 1] uniforms, each call's from its own generator."""
        return torch.cat([torch.rand((k, 1), dtype=dtype, device=device, generator=g)
                          for g, k in zip(self.generators, self.counts) if k])


@contextlib.contextmanager
def lent_to_global_rng(generator: torch.Generator):
    """Run code that samples with torch's global RNG (transformers' `generate`) from `generator`'s
    stream: inside, the global RNG of the generator's device holds the generator's state; on exit
    the generator takes the advanced state and the global RNG is restored (`torch.random.fork_rng`)."""
    dev = generator.device
    cuda = dev.type == "cuda"
    index = (dev.index if dev.index is not None else torch.cuda.current_device()) if cuda else None
    with torch.random.fork_rng(devices=[index] if cuda else [], device_type="cuda"):
        if cuda:
            torch.cuda.set_rng_state(generator.get_state(), index)
        else:
            torch.set_rng_state(generator.get_state())
        yield
        generator.set_state(torch.cuda.get_rng_state(index) if cuda else torch.get_rng_state())


# Several calls sample as one batch (`HFEngine.generate_calls`) for models of at most this many
# parameters, up to this many rows: there a decoding step's time is mostly per-operation overhead,
# whatever the rows (an evaluation of a main-job checkpoint, 256 problems × 8 samples in 32 calls of 64
# rows on one thread: 1.04 s in 32 loops, 0.45 s in one; the reward-budgeting study's performance
# journal, studies/reward_budgeting/docs/performance.md). SmolLM2-135M samples fastest in calls of 64
# rows (`default_batch_size`) and is not merged.
MERGE_MAX_PARAMS = 10_000_000
MERGE_ROWS = 4096


def merge_rows(model) -> int:
    """Rows that several calls may sample as one batch on `model` (0: none; `MERGE_MAX_PARAMS`)."""
    return MERGE_ROWS if sum(p.numel() for p in model.parameters()) <= MERGE_MAX_PARAMS else 0


class HFEngine:
    """Batched sampling on a transformers model. Each sub-batch of a call holds at most `max_batch`
    sequences and, when `max_batch_tokens` is set, at most that many sequence-tokens (sequences ×
    (longest prompt + max_new_tokens): the KV cache's size in tokens), and at least one prompt's n
    samples. On CPU a lean sampling loop replaces `model.generate` where it is equivalent (module
    docstring)."""

    name = "hf"

    def __init__(self, model, tokenizer, max_batch: int = 256, logprobs: bool = False, dtype: str = "auto",
                 max_batch_tokens: int | None = None):
        self.model = model  # the policy; training updates it in place
        self.dtype = dtype  # "bfloat16": sample from a bf16 replica of it (`sampling_model`)
        self._replica = None
        self.logprobs = logprobs  # record the sampled tokens' log-probs (training: rollout/logprob_diff)
        self.tokenizer = tokenizer
        self.max_batch = max_batch
        self.max_batch_tokens = max_batch_tokens
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else _eos_ids(model, tokenizer)[0]
        self.eos_ids = _eos_ids(model, tokenizer)
        self.fast = self._fast_path_ok()
        self.shared_prefix = self.fast and shared_prefix_supported(model)
        self.merge_rows = merge_rows(model)
        self._generator: torch.Generator | None = None  # made on the model's device at the first call

    # -- the Engine protocol besides generate --

    def sync_weights(self, model) -> None:
        """Sample from `model`. The engine samples with the policy's own modules (the bf16 replica is
        refreshed from them at every call), so an optimizer step needs nothing; a new policy object
        (LoRA-wrapped, resumed) is taken up."""
        if model is not self.model:
            self.model = model
            self._replica = None
            self.fast = self._fast_path_ok()
            self.shared_prefix = self.fast and shared_prefix_supported(model)
            self.merge_rows = merge_rows(model)

    def sampling_context(self, precision):
        """The training forward's autocast: the sampler and the trainer compute one distribution one way."""
        return precision.context()

    def record_logprobs(self, on: bool = True) -> bool:
        self.logprobs = on
        return on

    def prompts_per_call(self, prompt_tokens: int, params: SamplingParams) -> int:
        """Prompts per sub-batch when the longest prompt has `prompt_tokens` tokens (class docstring)."""
        sequences = self.max_batch
        if self.max_batch_tokens is not None:
            sequences = min(sequences, self.max_batch_tokens // (prompt_tokens + params.max_new_tokens))
        return max(1, sequences // params.n)

    def generator(self, device: torch.device) -> torch.Generator:
        """The engine's own random stream on `device` (seeded from the OS until a call seeds it)."""
        if self._generator is None or self._generator.device != device:
            self._generator = torch.Generator(device=device)
            self._generator.seed()
        return self._generator

    @property
    def sampler(self) -> str:
        """How this engine samples the model it holds (recorded in evaluation summaries,
        ``protocol.sampler``): "sampling loop" (its own, module docstring) or "generate" (transformers')."""
        return "sampling loop" if self.fast else "generate"

    def _fast_path_ok(self) -> bool:
        if next(self.model.parameters()).device.type != "cpu":
            return False  # measured on CPU only; on GPUs `generate` (or vLLM) is used
        return plain_generation_config(getattr(self.model, "generation_config", None)) \
            and prefix_cache_supported(self.model)

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], params: SamplingParams, progress=None) -> list[list[Sample]]:
        """`Engine.generate`; `progress(k)` is told of decoding every `PROGRESS_EVERY` steps (`rbctl.rollout.generation.TokenMeter`)."""
        model = self.sampling_model()
        device = next(model.parameters()).device
        gen = self.generator(device)
        if params.seed is not None:
            gen.manual_seed(params.seed)
        per_call = self.prompts_per_call(max(map(len, prompts), default=0), params)
        out: list[list[Sample]] = []
        was_training = model.training
        model.eval()
        # a oneDNN model's weights reordered once for the whole call: they do not change within it
        packed = packed_weights(model, min(per_call, len(prompts)) * params.n) if self.fast else contextlib.nullcontext()
        try:
            with packed:
                for start in range(0, len(prompts), per_call):
                    chunk = prompts[start:start + per_call]
                    meter = TokenMeter(progress, len(chunk) * params.n, params.max_new_tokens, PROGRESS_EVERY)
                    if self.fast:
                        responses, logps = self._sample(model, chunk, params, device, gen, meter)
                    else:
                        responses, logps = self._hf_generate(model, chunk, params, device, gen, meter)
                    meter.close()
                    out += self._samples(responses, logps, params.n, start)
        finally:
            model.train(was_training)
        return out

    def _samples(self, responses: list[list[int]], logps, n: int, first: int = 0) -> list[list[Sample]]:
        """Rows [k·n] of response tokens (and their log-probs, or None) as k prompts' n `Sample`s each,
        cut at EOS; the first prompt's index is `first`."""
        out: list[list[Sample]] = []
        for j, resp in enumerate(responses):
            if j % n == 0:
                out.append([])
            toks, finished = _cut_at_eos(resp, self.eos_ids)
            text = self.tokenizer.decode(toks, skip_special_tokens=True)
            out[-1].append(Sample(first + j // n, toks, text, finished, logps[j][: len(toks)] if logps is not None else None))
        return out

    def generate_calls(self, calls: list[tuple[list[list[int]], SamplingParams]], progress=None):
        """`Engine.generate_calls`. Calls that can run as one batch (`_merged_run`) do: one
        sampling loop over all their rows, each call's rows drawing from a generator seeded with its
        own seed, in the order they would alone (`CallStreams`). The logits are those of the calls
        alone up to float32 rounding (torch's CPU matmul takes another kernel for 1-3 rows than for
        more, so a call's last unfinished rows round differently alone than among others): a token
        could differ only where that rounding moves a draw across an interval's edge. None did in
        the checks of the reward-budgeting study's performance journal
        (studies/reward_budgeting/docs/performance.md: every sample of a fixpoint and a maze
        evaluation, 2,048 and 8,192, identical); the recorded log-probs agree to ~1e-7
        (tests/unit/test_merged_calls.py)."""
        i = 0
        while i < len(calls):
            j = self._merged_run(calls, i)
            if j == i + 1:
                yield self.generate(*calls[i], progress=progress)
            else:
                yield from self._generate_merged(calls[i:j], progress)
            i = j

    def _merged_run(self, calls, i: int) -> int:
        """The end j of the run calls[i:j] that samples as one batch: consecutive calls on the CPU
        sampling loop with one prompt width (so each prompt is padded as in its own call), the same
        parameters but the seed, every seed given, each call one sub-batch of `generate`, at most
        `merge_rows` rows in all (and within `max_batch_tokens`). A lone call: j = i + 1."""
        prompts, params = calls[i]
        if not (self.fast and self.merge_rows and params.seed is not None and prompts):
            return i + 1
        width, per_call = max(map(len, prompts)), self.prompts_per_call(max(map(len, prompts)), params)
        bound = self.merge_rows
        if self.max_batch_tokens is not None:
            bound = min(bound, self.max_batch_tokens // (width + params.max_new_tokens))
        rows, j = 0, i
        while j < len(calls):
            ps, pp = calls[j]
            if (not ps or pp.seed is None or replace(pp, seed=params.seed) != params or len(ps) > per_call
                    or max(map(len, ps)) != width or rows + len(ps) * pp.n > bound):
                break
            rows += len(ps) * pp.n
            j += 1
        return max(j, i + 1)

    @torch.no_grad()
    def _generate_merged(self, calls, progress):
        """Each call's `generate` result for `calls` (`_merged_run`), sampled in one loop."""
        model = self.sampling_model()
        device = next(model.parameters()).device
        params = calls[0][1]
        gens = [torch.Generator(device=device) for _ in calls]
        for g, (_, p) in zip(gens, calls):
            g.manual_seed(p.seed)
        sizes = [len(ps) for ps, _ in calls]
        prompts = [q for ps, _ in calls for q in ps]
        was_training = model.training
        model.eval()
        try:
            with packed_weights(model, len(prompts) * params.n):
                meter = TokenMeter(progress, len(prompts) * params.n, params.max_new_tokens, PROGRESS_EVERY)
                responses, logps = self._sample(model, prompts, params, device, CallStreams(gens, sizes, params.n), meter)
                meter.close()
        finally:
            model.train(was_training)
        self.generator(device).set_state(gens[-1].get_state())  # as after the last call alone
        start = 0
        for k in sizes:
            rows = slice(start * params.n, (start + k) * params.n)
            yield self._samples(responses[rows], logps[rows] if logps is not None else None, params.n)
            start += k

    @torch.no_grad()
    def sampling_model(self):
        """The model that samples: the policy, or with dtype "bfloat16" a replica of it whose
        parameters are bfloat16 copies of the policy's (buffers, such as rotary frequencies, stay as
        they are), refreshed from the policy at every call: one cast-copy of the weights, ~0.1 s
        for 135M parameters."""
        if self.dtype != "bfloat16":
            return self.model
        params = list(self.model.parameters())
        if params[0].dtype == torch.bfloat16:
            return self.model
        if self._replica is None:
            # deepcopy with the parameters pre-mapped: no float32 copy of the weights is ever made
            memo = {id(p): torch.nn.Parameter(p.detach().to(torch.bfloat16), requires_grad=False) for p in params}
            self._replica = copy.deepcopy(self.model, memo)
        else:
            for dst, src in zip(self._replica.parameters(), params):
                dst.copy_(src)
        return self._replica

    def _sample(self, model, chunk: list[list[int]], params: SamplingParams, device, gen: torch.Generator | CallStreams,
                meter: TokenMeter):
        """Response token lists [B·n] (prompt-major), each up to its first EOS or max_new_tokens, and
        their log-probs (`sampled_logprobs`; None when greedy or not recorded). `gen`: the call's
        generator, or several calls' (`CallStreams`)."""
        n, eos = params.n, torch.tensor(self.eos_ids, device=device)
        ids, mask = left_pad(chunk, self.pad_id)
        ids, mask = ids.to(device), mask.to(device)
        cache = new_cache(model)
        logits = forward_with_cache(model, ids, mask, position_ids(mask), cache, logits_to_keep=1)[:, -1]
        # float32 only: in bf16 (a bf16 sampler, or under autocast) sdpa accumulates in float32 and this would not
        shared = self.shared_prefix and n > 1 and model.dtype == torch.float32 and not torch.is_autocast_enabled("cpu")
        if shared:  # each prompt's keys and values held once (rbctl.rollout.shared_prefix)
            cache = SharedPrefixCache(cache, n, mask, params.max_new_tokens)
        else:
            cache.batch_repeat_interleave(n)  # [B, …] -> [B·n, …]: prompt b's rows are b·n … b·n+n−1
            reserve_cache(cache, params.max_new_tokens)
        logits, mask = logits.repeat_interleave(n, 0), mask.repeat_interleave(n, 0)
        pos = mask.sum(-1, keepdim=True)  # position of the first response token, [B·n, 1]
        tokens = torch.full((len(chunk) * n, params.max_new_tokens), self.pad_id, dtype=torch.long, device=device)
        rows = torch.arange(len(chunk) * n, device=device)  # active row i is sequence rows[i]
        sampled = params.temperature > 0 and self.logprobs
        logps = torch.zeros(tokens.shape, device=device) if sampled else None
        for t in range(params.max_new_tokens):
            logits = logits.float()  # once: a bf16 sampler's logits are cast for both uses below
            nxt = next_tokens(logits, params, gen)
            tokens[rows, t] = nxt
            if sampled:
                logps[rows, t] = sampled_logprobs(logits, nxt, params.temperature)
            if t + 1 == params.max_new_tokens:
                break
            done = torch.isin(nxt, eos)
            if done.any():
                keep = (~done).nonzero().squeeze(1)
                if keep.numel() == 0:
                    break
                cache.keep(keep) if shared else cache.batch_select_indices(keep)
                rows, nxt, mask, pos = rows[keep], nxt[keep], mask[keep], pos[keep]
                if isinstance(gen, CallStreams):
                    gen.keep(rows)
            meter.tick(t + 1, len(rows))
            if shared:  # the attention masks the prompts' padding itself: no mask is built
                with decoding_attention(model):
                    logits = forward_with_cache(model, nxt[:, None], None, pos, cache, logits_to_keep=1,
                                                shared_prefix=cache)[:, -1]
                cache.advance()
            else:
                mask = torch.cat([mask, mask.new_ones(len(rows), 1)], dim=1)
                logits = forward_with_cache(model, nxt[:, None], mask, pos, cache, logits_to_keep=1)[:, -1]
            pos = pos + 1
        return tokens.tolist(), (logps.tolist() if sampled else None)

    def _hf_generate(self, model, chunk: list[list[int]], params: SamplingParams, device, gen: torch.Generator,
                     meter: TokenMeter):
        """Response token lists [B·n] from `model.generate` (padding after EOS included) and their
        log-probs (recorded by `LogprobRecorder`; None when greedy or not recorded)."""
        ids, mask = left_pad(chunk, self.pad_id)
        gen_kwargs = dict(
            max_new_tokens=params.max_new_tokens,
            num_return_sequences=params.n,
            pad_token_id=self.pad_id,
            eos_token_id=self.eos_ids,
            use_cache=True,
        )
        if meter.report is not None:
            gen_kwargs["stopping_criteria"] = [metering_criteria(meter, ids.shape[1], self.eos_ids, device)]
        recorder = None
        if params.temperature > 0:
            gen_kwargs.update(do_sample=True, temperature=params.temperature, top_p=params.top_p, top_k=0)
            if self.logprobs:
                recorder = LogprobRecorder(params.temperature)
                gen_kwargs["logits_processor"] = [recorder]
        else:
            gen_kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        with lent_to_global_rng(gen):  # generate draws with torch.multinomial from the global RNG
            seqs = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), **gen_kwargs)
        resp = seqs[:, ids.shape[1]:]
        return resp.tolist(), (recorder.result(resp).tolist() if recorder is not None else None)


PROGRESS_EVERY = 16  # decoding steps between progress reports (one report costs a GPU sync on `generate`'s path)


def sampled_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float) -> torch.Tensor:
    """log softmax(logits / T) at the sampled tokens, [B, V], [B] → [B]: the sampling path's own
    log-probs (the distribution the tokens were drawn from when top_p = 1, which training requires),
    compared with the trainer's as `rollout/logprob_diff`."""
    return torch.log_softmax(scaled(logits, temperature), dim=-1).gather(-1, tokens[:, None]).squeeze(1)
