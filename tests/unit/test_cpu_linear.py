"""The CPU Linear kernel (`model.cpu_linear`): oneDNN's float32 gemm gives torch's values and
gradients (rounding apart), falls back where it does not apply, and `auto` picks it only for a
pretrained model on an AMD CPU."""

from __future__ import annotations

import contextlib
import unittest.mock as mock

import pytest
import torch
import torch.nn.functional as F

from rbctl.errors import UserError
from rbctl.rollout import cpu_linear as cl
from tests.conftest import tiny_llama

pytestmark = pytest.mark.skipif(not cl.onednn_available(), reason="this torch build has no oneDNN")


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("transposed", [False, True])
def test_onednn_linear_gives_torch_values_and_gradients(bias: bool, transposed: bool) -> None:
    g = torch.Generator().manual_seed(0)
    x0 = torch.randn(5, 3, 24, generator=g)
    x0 = x0.transpose(0, 1).contiguous().transpose(0, 1) if transposed else x0  # a strided input
    w0, b0 = torch.randn(40, 24, generator=g), torch.randn(40, generator=g) if bias else None
    up = torch.randn(5, 3, 40, generator=g)
    outs = []
    for fn in (F.linear, cl.linear):
        x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
        b = b0.clone().requires_grad_() if bias else None
        y = fn(x, w, b)
        (y * up).sum().backward()
        outs.append((y.detach(), x.grad, w.grad, b.grad if bias else None))
    for ref, got in zip(*outs):
        if ref is None:
            assert got is None
            continue
        torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
    assert outs[1][0].abs().max() > 1.0  # not all zeros


def test_onednn_gradients_of_a_last_position_slice_and_a_sliced_upstream_gradient() -> None:
    """The layouts of the LM head under the shared-prompt forward: the input is a strided slice of
    the last position (`logits_to_keep`) and the gradient reaching it a slice of a larger one."""
    g = torch.Generator().manual_seed(1)
    h0, w0 = torch.randn(4, 9, 24, generator=g), torch.randn(300, 24, generator=g)
    up = torch.randn(4, 3, 300, generator=g)
    grads = []
    for fn in (F.linear, cl.linear):
        h, w = h0.clone().requires_grad_(), w0.clone().requires_grad_()
        y = fn(h[:, -1:], w, None)  # [4, 1, 300] from a strided [4, 1, 24] view
        (torch.cat([y, y, y], dim=1) * up).sum().backward()  # the gradient reaching y is a slice
        grads.append((h.grad, w.grad))
    for ref, got in zip(*grads):
        torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
    assert grads[1][1].abs().max() > 1.0


def test_onednn_linear_falls_back_outside_float32_cpu_and_under_autocast() -> None:
    x, w = torch.randn(4, 8), torch.randn(6, 8)
    assert torch.equal(cl.linear(x.bfloat16(), w.bfloat16(), None), F.linear(x.bfloat16(), w.bfloat16()))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = cl.linear(x, w, None)
        ref = F.linear(x, w)
    assert got.dtype == torch.bfloat16 and torch.equal(got, ref)
    assert cl.linear(torch.randn(0, 8), w, None).shape == (0, 6)


def test_a_model_routed_through_onednn_keeps_its_logits_gradients_and_state_dict() -> None:
    ref, model = tiny_llama(50, seed=0), tiny_llama(50, seed=0)
    n_linear = sum(type(m) is torch.nn.Linear for m in model.modules())
    keys = list(model.state_dict())
    assert cl.use_cpu_linear(model, "onednn") == n_linear > 0
    assert list(model.state_dict()) == keys
    ids = torch.randint(0, 50, (3, 7), generator=torch.Generator().manual_seed(1))
    grads = []
    for m in (ref, model):
        out = m(input_ids=ids).logits
        out.log_softmax(-1)[..., 0].sum().backward()
        grads.append((out.detach(), {n: p.grad for n, p in m.named_parameters()}))
    torch.testing.assert_close(grads[1][0], grads[0][0], atol=1e-5, rtol=1e-5)
    for name, gref in grads[0][1].items():
        torch.testing.assert_close(grads[1][1][name], gref, atol=1e-5, rtol=1e-5, msg=name)
    assert cl.use_cpu_linear(model, "torch") == 0
    assert all(type(m) is not cl.OneDNNLinear for m in model.modules())


def test_packed_weights_give_the_same_logits_and_the_same_samples_and_are_dropped_on_exit() -> None:
    from rbctl.rollout.base import SamplingParams
    from rbctl.rollout.hf import HFEngine
    class Tok:
        pad_token_id, eos_token_id = 0, 49

        def decode(self, ids, skip_special_tokens=True):
            return " ".join(map(str, ids))

    model = tiny_llama(50, seed=0, pad_token_id=0, eos_token_id=49).eval()
    cl.use_cpu_linear(model, "onednn")
    ids = torch.randint(0, 50, (4, 7), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        plain = model(input_ids=ids).logits
        with cl.packed_weights(model, 4) as n:
            assert n == sum(type(m) is cl.OneDNNLinear for m in model.modules()) > 0
            packed = model(input_ids=ids).logits
    assert torch.equal(packed, plain)  # the same gemm on the same values: bit-identical at ≥ 4 rows
    assert all(m._packed is None for m in model.modules() if type(m) is cl.OneDNNLinear)
    out = model(input_ids=ids).logits  # with gradient: the ordinary path
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters())
    engine = HFEngine(model, Tok())
    assert engine.fast
    params = SamplingParams(n=4, max_new_tokens=6, temperature=1.0, seed=3)
    got = engine.generate([[1, 2, 3], [4, 5]], params)
    with mock.patch("rbctl.rollout.hf.packed_weights", lambda m, rows: contextlib.nullcontext(0)):
        ref = engine.generate([[1, 2, 3], [4, 5]], params)
    assert [[s.token_ids for s in g] for g in got] == [[s.token_ids for s in g] for g in ref]


def test_lora_adapters_wrap_a_routed_model() -> None:
    from peft import LoraConfig, get_peft_model

    model = tiny_llama(50, seed=0)
    cl.use_cpu_linear(model, "onednn")
    lora = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    base = [m for n, m in lora.named_modules() if n.endswith("q_proj.base_layer")]
    assert base and all(type(m) is cl.OneDNNLinear for m in base)
    out = lora(input_ids=torch.tensor([[1, 2, 3]])).logits
    out.sum().backward()
    assert all(p.grad is not None for n, p in lora.named_parameters() if p.requires_grad)


def test_auto_is_onednn_only_for_a_pretrained_model_on_an_amd_cpu(monkeypatch) -> None:
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    monkeypatch.setattr(cl, "cpu_vendor", lambda: "AuthenticAMD")
    assert cl.resolve_cpu_linear("auto", cpu, builtin=False) == "onednn"
    assert cl.resolve_cpu_linear("auto", cpu, builtin=True) == "torch"
    assert cl.resolve_cpu_linear("auto", cuda, builtin=False) == "torch"
    monkeypatch.setattr(cl, "cpu_vendor", lambda: "GenuineIntel")
    assert cl.resolve_cpu_linear("auto", cpu, builtin=False) == "torch"
    assert cl.resolve_cpu_linear("onednn", cpu, builtin=True) == "onednn"
    assert cl.resolve_cpu_linear("torch", cpu, builtin=False) == "torch"
    with pytest.raises(UserError, match="model.cpu_linear: 'mkl'"):
        cl.resolve_cpu_linear("mkl", cpu, builtin=False)


def test_load_policy_routes_a_saved_model_as_asked(tmp_path) -> None:
    from transformers import PreTrainedTokenizerFast
    from tokenizers import Tokenizer, models, pre_tokenizers

    from rbctl.rollout.models import load_policy

    tiny_llama(50, seed=0).save_pretrained(tmp_path)
    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(50)} | {"[UNK]": 0}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="w1", pad_token="w0").save_pretrained(tmp_path)
    for kernel in ("onednn", "torch"):
        policy = load_policy(str(tmp_path), device="cpu", dtype="float32", cpu_linear=kernel, log=lambda *a: None)
        assert policy.cpu_linear == kernel
        routed = sum(type(m) is cl.OneDNNLinear for m in policy.model.modules())
        assert (routed > 0) == (kernel == "onednn")


def test_fsdp_refuses_an_explicit_onednn_kernel() -> None:
    from rbctl.config.train import load_train_config

    with pytest.raises(UserError, match="model.cpu_linear onednn"):
        load_train_config(None, ["model.fsdp=true", "model.cpu_linear=onednn"])
