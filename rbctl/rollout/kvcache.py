"""Forward passes over a KV cache, shared by the hf engine's sampling loop (rbctl.rollout.hf) and
the trainer's shared-prompt scoring (rbctl.train.batch): left-padded inputs and their positions, an
empty cache laid out for a model, room reserved in it for the tokens to come, whether a model can
continue from a prefix's cache at all, and one forward pass that extends the cache."""

from __future__ import annotations

import functools
import inspect

import torch


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


def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions that follow the attention mask, as in generation: left padding does not shift them."""
    return (attention_mask.cumsum(-1) - 1).clamp(min=0)


@functools.lru_cache(maxsize=None)
def _forward_params(model_cls: type) -> frozenset[str]:
    """Argument names of a model class's forward (looked up once per class: inspect is slow)."""
    return frozenset(inspect.signature(model_cls.forward).parameters)


def _inner(model):
    """The transformers model under a PEFT wrapper (whose forward passes its keyword arguments on
    to it), else `model`: the signature and generation method that decide what a forward takes."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def _cache_kwarg(model) -> str | None:
    """Name of the forward argument that takes a KV cache (transformers renamed it), or None."""
    params = _forward_params(type(_inner(model)))
    for name in ("cache", "past_key_values"):
        if name in params:
            return name
    return None


def new_cache(model):
    """An empty DynamicCache laid out for `model` (sliding-window layers included where it has them)."""
    from transformers import DynamicCache

    try:
        return DynamicCache(config=model.config)
    except TypeError:  # transformers < 4.56 builds layers lazily
        return DynamicCache()


def reserve_cache(cache, room: int) -> None:
    """Give each full-attention layer of `cache` (already filled, e.g. by a prefill) room for `room`
    more tokens, so decoding writes each step's keys and values in place (`_reserved_layer_class`)
    instead of concatenating them onto a copy of the whole cache (torch.profiler put that copy at
    ~30% of a SmolLM2 rollout of 16 rows × 64 tokens; in wall time the gain is within this CPU's
    noise). Attention reads the same values, so results are unchanged (tests/unit/test_rollout.py)."""
    from transformers.cache_utils import DynamicLayer

    for i, layer in enumerate(cache.layers):
        if type(layer) is DynamicLayer and layer.get_seq_length() > 0:
            cache.layers[i] = _reserved_layer_class().wrapping(layer, room)


@functools.cache
def _reserved_layer_class():
    """The class, built on first use: transformers is imported lazily."""
    from transformers.cache_utils import DynamicLayer

    class ReservedLayer(DynamicLayer):
        """A DynamicLayer whose keys and values are views of longer buffers: `update` copies the new
        token's states into the next free slots while there is room, and otherwise grows as usual."""

        @classmethod
        def wrapping(cls, layer, room: int):
            new = cls()
            new.__dict__.update(layer.__dict__)
            b, h, n, d = layer.keys.shape
            new._k = layer.keys.new_empty(b, h, n + room, d)
            new._v = layer.values.new_empty(b, h, n + room, layer.values.shape[-1])
            new._k[:, :, :n] = layer.keys
            new._v[:, :, :n] = layer.values
            new._n = n
            new._expose()
            return new

        def _expose(self):
            self.keys, self.values = self._k[:, :, :self._n], self._v[:, :, :self._n]

        def update(self, key_states, value_states, *args, **kwargs):
            t = key_states.shape[-2]
            if self._k is None or self._n + t > self._k.shape[-2]:
                self._k = self._v = None  # out of room: ordinary growth from here on
                return super().update(key_states, value_states, *args, **kwargs)
            self._k[:, :, self._n:self._n + t] = key_states
            self._v[:, :, self._n:self._n + t] = value_states
            self._n += t
            self._expose()
            return self.keys, self.values

        def batch_select_indices(self, indices):
            if self._k is None:
                return super().batch_select_indices(indices)
            self._k, self._v = self._k[indices], self._v[indices]
            self._expose()

        def batch_repeat_interleave(self, repeats: int):
            if self._k is None:
                return super().batch_repeat_interleave(repeats)
            self._k, self._v = self._k.repeat_interleave(repeats, 0), self._v.repeat_interleave(repeats, 0)
            self._expose()

        def crop(self, tokens_to_remove: int):
            super().crop(tokens_to_remove)
            self._k = self._v = None

        def reset(self):
            super().reset()
            self._k = self._v = None

    return ReservedLayer


def prefix_cache_supported(model) -> bool:
    """Whether `model` can run a prefix once and continue from its DynamicCache as generation does,
    with the cache's rows repeated or dropped: a decoder-only model that prepares its generation
    inputs the standard way (no multimodal, M-RoPE or recurrent state) and takes position ids."""
    from transformers.generation.utils import GenerationMixin

    model = _inner(model)  # LoRA adapters (PEFT) change no input of the forward
    if getattr(model.config, "is_encoder_decoder", False):
        return False
    if getattr(type(model), "prepare_inputs_for_generation", None) is not GenerationMixin.prepare_inputs_for_generation:
        return False
    if "position_ids" not in _forward_params(type(model)) or _cache_kwarg(model) is None:
        return False
    from transformers import cache_utils

    plain = tuple(getattr(cache_utils, n) for n in ("DynamicLayer", "DynamicSlidingWindowLayer")
                  if hasattr(cache_utils, n))
    return all(type(layer) in plain for layer in getattr(new_cache(model), "layers", []))


def forward_with_cache(model, input_ids, attention_mask, positions, cache, logits_to_keep: int = 0, **forward):
    """One forward pass that reads and extends `cache`; `attention_mask` covers cache + input;
    `forward`: further arguments of the model's forward (which it hands to its attention function)."""
    kwargs = {_cache_kwarg(model): cache, "use_cache": True, **forward}
    if logits_to_keep and "logits_to_keep" in _forward_params(type(_inner(model))):
        kwargs["logits_to_keep"] = logits_to_keep
        if input_ids.shape[1] > logits_to_keep and model.dtype != torch.float32:
            # as positions (a tensor), the kept hidden states are gathered into a contiguous tensor: a
            # strided slice of bf16 rows makes torch's matmul expand the head's weight per row (a
            # [B, d, V] copy, ~0.4 s for SmolLM2's prefill); gathered, it is one matrix product with
            # the same result (float32 keeps the slice: there it is fast and this would round differently)
            width = input_ids.shape[1]
            kwargs["logits_to_keep"] = torch.arange(width - logits_to_keep, width, device=input_ids.device)
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions, **kwargs).logits
    return logits[:, -logits_to_keep:] if logits_to_keep else logits
