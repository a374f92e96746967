"""A Llama forward pass without the per-module machinery, for the built-in policies on the CPU.

A built-in policy is a 2-layer, 64-wide `LlamaForCausalLM`: a forward pass of it is ~70 operations
on small tensors, and transformers' module tree (module calls, output capturing, kwarg merging,
config look-ups) costs about as much as the operations do. `lean_forward` runs the same operations
in the same order on the same weights — embedding, per layer RMSNorm, the q/k/v projections,
transformers' rotary embedding, the cache update, transformers' attention function for the
config's implementation (sdpa, or rbctl's shared-prefix decoding) with transformers' own causal
mask, the output projection, RMSNorm, the SiLU-gated MLP, the final norm and the LM head — so its
logits are the module tree's bit for bit (`tests/unit/test_lean_forward.py`; a main-job run's
metrics, samples and evaluations are byte-identical with and without it).

`use_lean_forward(model)` installs it as `model.forward` where it applies (`lean_forward_supported`):
a plain `LlamaForCausalLM` of float32 weights on the CPU whose projections are `torch.nn.Linear`
modules without hooks, under a transformers whose interfaces it calls as they are (5.2x). At each
call it falls back to the class's forward where anything differs from that — LoRA or another
wrapper has replaced a projection, a hook was added (FSDP), gradient checkpointing is on, or an
argument it does not take (`inputs_embeds`, `labels`, outputs of hidden states or attentions) is
passed.
"""

from __future__ import annotations

import functools
import inspect
import types

import torch
import torch.nn.functional as F

# the most parameters of a model that takes it: where per-operation overhead matters
LEAN_MAX_PARAMS = 10_000_000
_TAKES = frozenset({"past_key_values", "shared_prefix"})  # beside the named arguments of `_forward`


def _projections(layer) -> tuple:
    a, m = layer.self_attn, layer.mlp
    return a.q_proj, a.k_proj, a.v_proj, a.o_proj, m.gate_proj, m.up_proj, m.down_proj


def _plain(model) -> bool:
    """Every projection a plain Linear without bias, no hook on a layer or projection, no checkpointing."""
    if getattr(model.model, "gradient_checkpointing", False):
        return False
    for layer in model.model.layers:
        if layer._forward_pre_hooks or layer._forward_hooks:
            return False
        for lin in _projections(layer):
            if type(lin) is not torch.nn.Linear or lin.bias is not None or lin._forward_pre_hooks or lin._forward_hooks:
                return False
    return type(model.lm_head) is torch.nn.Linear and model.lm_head.bias is None


def lean_forward_supported(model) -> bool:
    """Whether `model` is one `lean_forward` computes exactly as its module tree (module docstring)."""
    from transformers import LlamaForCausalLM

    if type(model) is not LlamaForCausalLM or not _mirrors_installed_transformers():
        return False
    params = list(model.parameters())
    if not params or any(p.device.type != "cpu" or p.dtype != torch.float32 for p in params):
        return False
    cfg = model.config
    if cfg.mlp_bias or cfg.attention_bias or cfg.hidden_act != "silu" or getattr(cfg, "pretraining_tp", 1) != 1:
        return False
    return sum(p.numel() for p in params) <= LEAN_MAX_PARAMS and _plain(model)


@functools.lru_cache(maxsize=None)
def _mirrors_installed_transformers() -> bool:
    """Whether the installed transformers has the interfaces `lean_forward` calls as it calls them: the
    Llama forward's and `create_causal_mask`'s `cache` argument (transformers 5.2x). Older releases
    (5.19, which vLLM 0.32's CPU build pins) name it `past_key_values`: their models keep the module
    tree's forward."""
    from transformers import LlamaForCausalLM
    from transformers.masking_utils import create_causal_mask

    return all("cache" in inspect.signature(f).parameters for f in (create_causal_mask, LlamaForCausalLM.forward))


def use_lean_forward(model) -> bool:
    """Install `lean_forward` as `model.forward` where it applies; returns whether it did."""
    if not lean_forward_supported(model):
        return False
    model.forward = types.MethodType(_forward, model)
    return True


def uses_lean_forward(model) -> bool:
    """Whether `lean_forward` is installed as `model.forward` (`use_lean_forward`)."""
    return getattr(model.forward, "__func__", None) is _forward


def _rms(x: torch.Tensor, norm) -> torch.Tensor:
    """transformers' LlamaRMSNorm (float32 in and out)."""
    variance = x.pow(2).mean(-1, keepdim=True)
    return norm.weight * (x * torch.rsqrt(variance + norm.variance_epsilon))


def _forward(self, input_ids=None, attention_mask=None, position_ids=None, cache=None, use_cache=None,
             logits_to_keep=0, **kwargs):
    if (input_ids is None or not _TAKES.issuperset(kwargs) or torch.is_autocast_enabled("cpu")
            or (self.training and self.config.attention_dropout) or not _plain(self)):
        return type(self).forward(self, input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                                  cache=cache, use_cache=use_cache, logits_to_keep=logits_to_keep, **kwargs)
    return lean_forward(self, input_ids, attention_mask, position_ids, cache, use_cache, logits_to_keep, **kwargs)


def lean_forward(model, input_ids, attention_mask=None, position_ids=None, cache=None, use_cache=None,
                 logits_to_keep=0, **kwargs):
    """`LlamaForCausalLM.forward` of `model` (module docstring): a `CausalLMOutputWithPast` with its
    logits and cache."""
    from transformers import DynamicCache
    from transformers.masking_utils import create_causal_mask
    from transformers.modeling_outputs import CausalLMOutputWithPast
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, slice_logits_to_keep
    from transformers.models.llama.modeling_llama import eager_attention_forward, rotate_half

    cache = kwargs.pop("past_key_values", None) if cache is None else cache
    m, cfg = model.model, model.config
    x = F.embedding(input_ids, m.embed_tokens.weight, m.padding_idx)
    if use_cache is None:
        use_cache = cfg.use_cache
    if use_cache and cache is None:
        cache = DynamicCache(config=cfg)
    if position_ids is None:
        seen = cache.get_seq_length() if cache is not None else 0
        position_ids = (torch.arange(x.shape[1], device=x.device) + seen).unsqueeze(0)
    mask = create_causal_mask(config=cfg, inputs_embeds=x, attention_mask=attention_mask, cache=cache,
                              position_ids=position_ids)
    cos, sin = m.rotary_emb(x, position_ids=position_ids)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    attend = ALL_ATTENTION_FUNCTIONS.get_interface(cfg._attn_implementation, eager_attention_forward)
    shape = x.shape[:-1]
    for layer in m.layers[:cfg.num_hidden_layers]:
        a, mlp = layer.self_attn, layer.mlp
        h = _rms(x, layer.input_layernorm)
        heads = (*shape, -1, a.head_dim)
        q = F.linear(h, a.q_proj.weight).view(heads).transpose(1, 2)
        k = F.linear(h, a.k_proj.weight).view(heads).transpose(1, 2)
        v = F.linear(h, a.v_proj.weight).view(heads).transpose(1, 2)
        q = (q * cos) + (rotate_half(q) * sin)
        k = (k * cos) + (rotate_half(k) * sin)
        if cache is not None:
            k, v = cache.update(k, v, a.layer_idx, kwargs=kwargs)
        out, _ = attend(a, q, k, v, mask, dropout=0.0, scaling=a.scaling, **kwargs)
        x = x + F.linear(out.reshape(*shape, -1).contiguous(), a.o_proj.weight)
        h = _rms(x, layer.post_attention_layernorm)
        x = x + F.linear(F.silu(F.linear(h, mlp.gate_proj.weight)) * F.linear(h, mlp.up_proj.weight), mlp.down_proj.weight)
    x = _rms(x, m.norm)
    logits = F.linear(slice_logits_to_keep(x, logits_to_keep), model.lm_head.weight)
    return CausalLMOutputWithPast(logits=logits, cache=cache)
