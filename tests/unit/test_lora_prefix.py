"""LoRA (PEFT) models take the shared-prompt forward and the lean sampler, with the same numbers."""

from __future__ import annotations

import torch

from tests.conftest import tiny_llama


def _lora(model):
    from peft import LoraConfig, get_peft_model

    lora = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules="all-linear"))
    for name, p in lora.named_parameters():  # B starts at 0: make the adapters act
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.5)
    return lora.eval()


def test_a_peft_model_shares_its_prompts_with_the_same_logits() -> None:
    from rbctl.rollout.kvcache import prefix_cache_supported
    from rbctl.train.batch import _can_share_prompts, response_logits

    model = _lora(tiny_llama(40))
    assert prefix_cache_supported(model)
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(3, 40, (2, 5), generator=g).repeat_interleave(3, 0)
    ids = torch.cat([prompts, torch.randint(3, 40, (6, 4), generator=g)], 1)
    mask = torch.ones_like(ids)
    assert _can_share_prompts(model, ids, mask, 5, 3)
    with torch.no_grad():
        shared = response_logits(model, ids, mask, 5, group_size=3)
        whole = response_logits(model, ids, mask, 5, group_size=1)
        with model.disable_adapter():
            base = response_logits(model, ids, mask, 5, group_size=3)
    assert shared.shape == (6, 4, 40)
    torch.testing.assert_close(shared, whole, atol=1e-5, rtol=1e-5)
    assert (shared - base).abs().max() > 1e-3  # the adapters are in the shared forward
