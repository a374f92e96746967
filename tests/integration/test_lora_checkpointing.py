"""LoRA with gradient checkpointing (`model.lora` + `model.gradient_checkpointing`, the paper
recipes): the adapters get the gradients they get without checkpointing, under reentrant and
non-reentrant checkpointing, on Llama- and Qwen3-shaped models built in code; and the trainer sets
it up so that transformers 4.x's checkpointing (reentrant by default, input gradients left off)
trains the adapters too."""

from __future__ import annotations

import functools

import pytest
import torch

from rbctl.train.trainer import enable_gradient_checkpointing

pytest.importorskip("peft")


def _tiny(kind: str):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    sizes = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=8, max_position_embeddings=64)
    torch.manual_seed(0)
    if kind == "qwen3":
        return Qwen3ForCausalLM(Qwen3Config(**sizes))
    return LlamaForCausalLM(LlamaConfig(**sizes))


def _lora(model):
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    torch.manual_seed(1)
    for name, p in model.named_parameters():
        if "lora_B" in name:  # B = 0 at init would leave A without gradient
            torch.nn.init.normal_(p, std=0.1)
    return model.train()


def _lora_grads(model) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(2))
    logits = model(input_ids=ids).logits
    torch.log_softmax(logits.float(), -1)[:, :-1].gather(-1, ids[:, 1:, None]).mean().backward()
    return {n: p.grad.clone() if p.grad is not None else None for n, p in model.named_parameters() if "lora_" in n}


@pytest.mark.parametrize("kind", ["llama", "qwen3"])
@pytest.mark.parametrize("use_reentrant", [True, False])
def test_adapters_get_their_gradients_under_checkpointing(kind, use_reentrant):
    want = _lora_grads(_lora(_tiny(kind)))
    base = _tiny(kind)
    enable_gradient_checkpointing(base, lora=True, use_reentrant=use_reentrant)
    model = _lora(base)
    assert model.base_model.model.model.gradient_checkpointing  # checkpointing is on
    got = _lora_grads(model)
    assert got.keys() == want.keys() and len(got) == 2 * 7 * 2  # A and B of 7 projections in 2 layers
    for name, g in got.items():
        assert g is not None and g.abs().sum() > 0, name
        torch.testing.assert_close(g, want[name], msg=name)  # recomputation changes no value


def _transformers_4x_checkpointing(self, gradient_checkpointing_kwargs=None):
    """`PreTrainedModel.gradient_checkpointing_enable` as transformers 4.56 (the floor) has it: reentrant unless
    told otherwise, and input gradients enabled only for transformers' own PEFT integration."""
    from torch.utils.checkpoint import checkpoint

    kwargs = gradient_checkpointing_kwargs if gradient_checkpointing_kwargs is not None else {"use_reentrant": True}
    self._set_gradient_checkpointing(enable=True, gradient_checkpointing_func=functools.partial(checkpoint, **kwargs))
    if getattr(self, "_hf_peft_config_loaded", False):
        self.enable_input_require_grads()


def test_the_trainers_lora_trains_under_transformers_4x_checkpointing(tiny_config, tmp_path, monkeypatch):
    from transformers import PreTrainedModel

    from rbctl.train.step import rollout_batch
    from rbctl.train.trainer import Trainer
    from rbctl.train.update import update

    monkeypatch.setattr(PreTrainedModel, "gradient_checkpointing_enable", _transformers_4x_checkpointing)
    monkeypatch.delattr(PreTrainedModel, "activation_checkpointing_enable")  # 5.x's name, which 4.x has not
    cfg = tiny_config(model__lora="{r: 4, alpha: 8, target_modules: all-linear}", model__gradient_checkpointing="true")
    tr = Trainer(cfg, tmp_path / "run", log=lambda *a: None)
    batch = rollout_batch(tr.state, tr.sampler, 1)
    assert batch.correct.any() and not batch.correct.all()  # mixed groups: nonzero advantages
    grads = {}
    step = tr.opt.step

    def recording_step(*a, **k):
        grads.update({n: p.grad.detach().clone() for n, p in tr.model.named_parameters() if p.grad is not None})
        return step(*a, **k)

    tr.opt.step = recording_step
    update(tr.state, batch, tr.alpha)
    lora_b = [g for n, g in grads.items() if "lora_B" in n]
    assert lora_b and all(g.abs().sum() > 0 for g in lora_b)  # B = 0 at init: A's gradient is 0, B's is not


@pytest.mark.parametrize("lora", [False, True])
def test_a_grouped_query_model_trains_with_checkpointing_on_the_cpu(lora):
    """A training forward on the CPU holds grouped KV heads once (`rbctl.rollout.gqa.kv_heads_once`), but
    checkpointing recomputes the layers in the backward, outside that context: with both, the
    recomputed keys had 4 heads where the forward saved 2 (CheckpointError). Found by the GPU check's
    memory estimate run on the CPU."""
    from rbctl.train.batch import response_logits

    model = _tiny("qwen3")  # 4 query heads over 2 KV heads
    enable_gradient_checkpointing(model, lora=lora)
    model = _lora(model) if lora else model.train()
    ids = torch.randint(0, 64, (4, 10), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(ids)
    mask[0, :2] = 0  # a padded row: the masked path where kv_heads_once acts
    logits = response_logits(model, ids, mask, prompt_width=4)
    logits.float().logsumexp(-1).sum().backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert grads and all(g is not None for g in grads) and any(g.abs().sum() > 0 for g in grads)
