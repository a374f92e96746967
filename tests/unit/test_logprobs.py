"""Hand-computed checks of the sampler-vs-trainer log-prob helpers (rbctl.rollout.logprobs)."""

from __future__ import annotations

import math

import pytest
import torch

from rbctl.rollout.base import Sample
from rbctl.rollout.logprobs import engine_logprobs_tensor, logprob_mismatch, tis_weights


def test_engine_logprobs_tensor_layout():
    samples = [[Sample(0, [5, 6], "", True, [-1.0, -2.0]), Sample(0, [5], "", False, [-0.5])],
               [Sample(1, [], "", False, [])]]
    got = engine_logprobs_tensor(samples, width=3)
    assert torch.equal(got, torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0], [0.0, 0.0, 0.0]]))
    with pytest.raises(ValueError):
        engine_logprobs_tensor([[Sample(0, [5], "", True, None)]], width=1)


def test_logprob_mismatch_hand_computed():
    engine = torch.tensor([[-1.0, -2.0, -0.5], [-0.1, -0.2, -9.0]])
    trainer = torch.tensor([[-1.5, -2.0, -3.0], [-0.4, -0.2, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    # response tokens: |−1−(−1.5)| = 0.5, 0, |−0.1−(−0.4)| = 0.3, 0 → 0.8 / 4 = 0.2 (padding ignored)
    assert logprob_mismatch(engine, trainer, mask) == pytest.approx(0.2)
    assert logprob_mismatch(engine, engine, mask) == 0.0
    assert logprob_mismatch(engine, trainer, torch.zeros_like(mask)) == 0.0


def test_tis_weights_hand_computed():
    old = torch.tensor([[-1.0, -2.0, -0.5, -4.0]], requires_grad=True)
    eng = torch.tensor([[-1.5, -1.0, -0.5, -7.0]])
    # old − engine = 0.5, −1, 0, 3 → exp: 1.6487, 0.3679, 1, 20.09 → capped at C = 2: 1.6487, 0.3679, 1, 2
    w = tis_weights(old, eng, cap=2.0)
    assert w.tolist()[0] == pytest.approx([math.exp(0.5), math.exp(-1.0), 1.0, 2.0])
    assert not w.requires_grad  # a constant weight on the loss
    big = tis_weights(torch.tensor([0.0]), torch.tensor([-1000.0]), cap=5.0)
    assert big.item() == pytest.approx(5.0)  # no overflow to inf before the cap
    with pytest.raises(ValueError):
        tis_weights(old, eng, cap=0.0)
