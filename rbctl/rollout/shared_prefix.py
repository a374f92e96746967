"""Decoding attention that holds each prompt's keys and values once for its n samples (the hf engine's CPU loop).

After the prefill, the plain loop repeats each prompt's KV cache n times, so every decoding step
reads each prompt's keys and values n times over. Here a prompt's keys and values stay as the prefill left them, [P, kv heads, Lp, d], and each
sample's own response tokens go to a buffer of P·n rows. At a decoding step, for sample (p, j) and
query head h (served by KV head h // g, g = heads / KV heads):

    s_prompt = q·K_p / √d + b_p   (b_p: 0, or −∞ at the prompt's left padding)
    s_resp   = q·K_(p,j) / √d     (the sample's own response so far, this step's token included)
    out      = softmax([s_prompt, s_resp]) · [V_p; V_(p,j)]

— the attention transformers' sdpa computes over the repeated cache, with the same scaling and
masking: the two parts share one max and one normaliser. The n·g queries of a prompt meet its keys
in one matrix product. Results differ from sdpa's by float rounding (summation order), ~1e-7 of the
output's scale (tests/unit/test_shared_prefix.py).

A sample that has emitted EOS leaves the batch (`keep`): its slot in the P·n grid is computed on with
a zero query and dropped, so the prompt part stays one batched product whatever rows remain.

Used only with transformers ≥ 5.19 and for models whose every layer is plain causal full attention
(`shared_prefix_supported`): no sliding window, no logit soft-capping, no attention sinks or biases beyond the padding mask. The
attention function is registered with transformers (`AttentionInterface`) under `NAME` and switched
on for the decoding forwards only (`decoding_attention`); the prefill runs the model's own attention.
"""

from __future__ import annotations

import contextlib
import functools

import torch

from rbctl.rollout.kvcache import _inner

NAME = "rbctl_shared_prefix"
# Model types whose attention module calls the registered attention function with (module, query,
# key, value, mask, scaling=..., **forward kwargs) and whose cache update is `cache.update(k, v, layer_idx, ...)`.
_PLAIN_ATTENTION_MODELS = frozenset({"llama", "qwen2", "qwen3", "mistral"})
# The transformers versions this was tested on (5.19, 5.24) and later: older ones pass arguments to
# attention and to the cache differently, and keep the repeated cache.
MIN_TRANSFORMERS = (5, 19)


@functools.cache
def _transformers_new_enough() -> bool:
    import transformers

    return tuple(int(x) for x in transformers.__version__.split(".")[:2] if x.isdigit()) >= MIN_TRANSFORMERS


def shared_prefix_supported(model) -> bool:
    """Whether `model` (a transformers causal LM) attends as the shared-prefix decoding assumes."""
    cfg = getattr(_inner(model), "config", None)
    if not _transformers_new_enough() or cfg is None or getattr(cfg, "model_type", None) not in _PLAIN_ATTENTION_MODELS:
        return False
    if any(t != "full_attention" for t in (getattr(cfg, "layer_types", None) or [])):
        return False
    if getattr(cfg, "sliding_window", None) is not None and getattr(cfg, "use_sliding_window", True):
        return False
    return cfg._attn_implementation in ("sdpa", "eager", NAME)


class SharedPrefixCache:
    """The KV state of a decoding loop over P prompts × n samples (module docstring). Passed to the
    model as its cache: `update` writes the step's keys and values of the active rows into the
    response buffer and returns that buffer so far; the attention function reads the prompt part
    from here (the `shared_prefix` forward argument)."""

    def __init__(self, prefill_cache, n: int, prompt_mask: torch.Tensor, room: int):
        """`prefill_cache`: a DynamicCache filled by the prompts' prefill ([P, kv heads, Lp, d] per
        layer); `prompt_mask` [P, Lp] (1 = token, 0 = left padding); `room`: response tokens to hold."""
        self.n, self.t, self.rows = n, 0, None  # rows: the active samples' slots, None = all P·n
        self.keys = [layer.keys for layer in prefill_cache.layers]
        self.values = [layer.values for layer in prefill_cache.layers]
        p, h, _, d = self.keys[0].shape
        self.prompts = p
        self.bias = torch.zeros(prompt_mask.shape, dtype=self.keys[0].dtype, device=self.keys[0].device)
        self.bias = self.bias.masked_fill(prompt_mask == 0, float("-inf"))[:, None, None, :]  # [P, 1, 1, Lp]
        # zeros, not empty: a finished row's slot keeps being multiplied (by a zero query) and dropped
        self.resp_keys = [k.new_zeros(p * n, h, room, d) for k in self.keys]
        self.resp_values = [v.new_zeros(p * n, h, room, v.shape[-1]) for v in self.values]

    def update(self, key_states, value_states, layer_idx: int, *args, **kwargs):
        k, v = self.resp_keys[layer_idx], self.resp_values[layer_idx]
        if self.rows is None:
            k[:, :, self.t] = key_states[:, :, 0]
            v[:, :, self.t] = value_states[:, :, 0]
        else:
            k[self.rows, :, self.t] = key_states[:, :, 0]
            v[self.rows, :, self.t] = value_states[:, :, 0]
        return k[:, :, :self.t + 1], v[:, :, :self.t + 1]

    def advance(self) -> None:
        """After a decoding forward: its token's keys and values are part of the responses now."""
        self.t += 1

    def keep(self, keep: torch.Tensor) -> None:
        """The active rows become `keep` (indices into the current active rows), as the loop's batch does."""
        self.rows = keep if self.rows is None else self.rows[keep]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.keys[layer_idx].shape[-2] + self.t


def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, shared_prefix=None, **kwargs):
    """Attention of one decoding token per active row over its prompt's shared keys and values and
    its own response (module docstring). query [B, heads, 1, d]; key, value [P·n, kv heads, t, d]
    (`SharedPrefixCache.update`); returns ([B, 1, heads, d], None) as transformers' functions do."""
    c, layer = shared_prefix, module.layer_idx
    if c is None or query.shape[2] != 1:
        raise RuntimeError(f"{NAME} attention runs one decoding token with a SharedPrefixCache only")
    kp, vp = c.keys[layer], c.values[layer]
    p, n, (b, heads, _, d) = c.prompts, c.n, query.shape
    kvh = kp.shape[1]
    g, rows_all = heads // kvh, p * n
    scale = d ** -0.5 if scaling is None else scaling
    q = query.reshape(b, kvh, g, d)  # query head h is served by KV head h // g (transformers' repeat_kv)
    if c.rows is not None:
        full = q.new_zeros(rows_all, kvh, g, d)
        full[c.rows] = q
        q = full

    def to_grid(x):  # [P·n, kvh, g, …] -> [P, kvh, n·g, …]: a prompt's queries together
        return x.view(p, n, kvh, g, *x.shape[3:]).transpose(1, 2).reshape(p, kvh, n * g, *x.shape[3:])

    def to_rows(x):  # the inverse of to_grid
        return x.unflatten(2, (n, g)).transpose(1, 2).reshape(rows_all, kvh, g, *x.shape[3:])

    s_prompt = torch.matmul(to_grid(q), kp.transpose(-1, -2)).mul_(scale).add_(c.bias)  # [P, kvh, n·g, Lp]
    s_resp = torch.matmul(q, key.transpose(-1, -2)).mul_(scale)  # [P·n, kvh, g, t]
    top = torch.maximum(to_rows(s_prompt.amax(-1, keepdim=True)), s_resp.amax(-1, keepdim=True))
    e_prompt = s_prompt.sub_(to_grid(top)).exp_()
    e_resp = s_resp.sub_(top).exp_()
    total = to_rows(e_prompt.sum(-1, keepdim=True)).add_(e_resp.sum(-1, keepdim=True))
    out = torch.matmul(e_resp, value).add_(to_rows(torch.matmul(e_prompt, vp))).div_(total)
    if c.rows is not None:
        out = out[c.rows]
    return out.reshape(b, 1, heads, d), None


@functools.cache
def _register() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, attention)


@contextlib.contextmanager
def decoding_attention(model):
    """Inside, `model`'s attention layers call `attention` above (their prefill is done)."""
    _register()
    cfg = _inner(model).config
    before = cfg._attn_implementation
    cfg._attn_implementation = NAME
    try:
        yield
    finally:
        cfg._attn_implementation = before
