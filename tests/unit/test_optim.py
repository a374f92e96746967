"""The run's optimizer: torch's fused AdamW (the default implementation's weights up to float
rounding; foreach where fused cannot run), and the learning-rate schedule."""

from __future__ import annotations

import math

import pytest
import torch

from rbctl.train.optim import fused_ok, lr_factor, make_optimizer
from tests.conftest import tiny_llama


def train_weights(tiny_config, foreach: bool | None, steps: int = 4) -> list[torch.Tensor]:
    cfg = tiny_config(optim__lr=1e-2, optim__weight_decay=0.1)
    model = tiny_llama(32, layers=2, seed=0)
    params = list(model.parameters())
    if foreach is None:
        opt, _ = make_optimizer(params, cfg.optim, cfg.steps)
    else:
        o = cfg.optim
        opt = torch.optim.AdamW(params, lr=o.lr, betas=(o.beta1, o.beta2), weight_decay=o.weight_decay, foreach=foreach)
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        ids = torch.randint(0, 32, (4, 12), generator=gen)
        opt.zero_grad()
        model(input_ids=ids, labels=ids).loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
    return [p.detach().clone() for p in params]


def test_run_optimizer_is_fused_and_gives_the_default_weights_up_to_rounding(tiny_config) -> None:
    cfg = tiny_config()
    opt, _ = make_optimizer(list(tiny_llama(32).parameters()), cfg.optim, cfg.steps)
    assert opt.param_groups[0]["fused"] is True
    default = train_weights(tiny_config, foreach=False)  # torch's default on CPU: a loop over tensors
    ours = train_weights(tiny_config, foreach=None)
    start = [p.detach() for p in tiny_llama(32, layers=2, seed=0).parameters()]
    assert all(not torch.equal(a, b) for a, b in zip(ours, start))  # every tensor moved
    for a, b, s in zip(ours, default, start):
        moved = (b - s).abs().max()  # 4 steps at lr 1e-2: updates of ~1e-2 per weight
        assert moved > 1e-3
        assert (a - b).abs().max() <= 1e-5 * moved  # rounding (measured: 3e-6 of it), not another update


def test_foreach_where_fused_cannot_run(tiny_config) -> None:
    assert fused_ok([torch.zeros(2), torch.zeros(3, dtype=torch.bfloat16)])
    assert not fused_ok([torch.zeros(2), torch.zeros(2, device="meta")])
    cfg = tiny_config()
    opt, _ = make_optimizer([torch.zeros(2, device="meta", requires_grad=True)], cfg.optim, cfg.steps)
    assert opt.param_groups[0]["foreach"] is True and not opt.param_groups[0]["fused"]


def test_lr_schedule_warmup_then_constant_or_cosine(tiny_config) -> None:
    const = tiny_config(steps=10, optim__warmup_steps=2)
    assert [lr_factor(const.optim, 10, s) for s in range(4)] == [0.5, 1.0, 1.0, 1.0]
    cos = tiny_config(steps=10, optim__warmup_steps=2, optim__schedule="cosine")
    assert lr_factor(cos.optim, 10, 2) == 1.0
    assert lr_factor(cos.optim, 10, 6) == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.5)))
    # the last step, s = 9: (1 + cos(π·7/8))/2 ≈ 0.038; past it (only an extended run gets there) it stays
    assert lr_factor(cos.optim, 10, 9) == pytest.approx(0.5 * (1 + math.cos(math.pi * 7 / 8)))
    assert lr_factor(cos.optim, 10, 10) == lr_factor(cos.optim, 10, 12) == lr_factor(cos.optim, 10, 9)
