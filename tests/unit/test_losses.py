"""Tests of rbctl.algo.losses against hand-computed values and slow plain-Python references."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from rbctl.errors import UserError
from rbctl.algo.policy_losses import clip_loss
from rbctl.algo.losses import (
    LOSS_AGG,
    BatchNorm,
    adaptive_alpha,
    aggregation_weights,
    at_tokens,
    k3_kl,
    entropy_of_logprobs,
    token_entropy,
    token_logprobs,
    vocab_logprobs,
)


def aggregate(loss: torch.Tensor, mask: torch.Tensor, mode: str, norm: BatchNorm) -> torch.Tensor:
    return (aggregation_weights(mask, mode, norm) * loss).sum()


def norm_of(mask: torch.Tensor, max_new_tokens: int) -> BatchNorm:
    return BatchNorm(n_seqs=mask.shape[0], n_tokens=int(mask.sum()), max_new_tokens=max_new_tokens)


# --- loss aggregation ----------------------------------------------------------------------------

# Two sequences of lengths 3 and 1 (T = 4, max_new_tokens = 4); padded entries hold junk (9, 7).
MASK = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
LOSS = torch.tensor([[1.0, 2.0, 3.0, 9.0], [4.0, 7.0, 7.0, 7.0]])
NORM = BatchNorm(n_seqs=2, n_tokens=4, max_new_tokens=4)


def test_token_mean_hand_value() -> None:
    # (1 + 2 + 3 + 4) / 4 tokens = 2.5
    assert aggregate(LOSS, MASK, "token-mean", NORM).item() == pytest.approx(2.5)


def test_seq_mean_token_mean_hand_value() -> None:
    # ((1 + 2 + 3)/3 + 4/1) / 2 seqs = (2 + 4)/2 = 3
    assert aggregate(LOSS, MASK, "seq-mean-token-mean", NORM).item() == pytest.approx(3.0)


def test_seq_mean_token_sum_norm_hand_value() -> None:
    # ((1 + 2 + 3)/4 + 4/4) / 2 seqs = (1.5 + 1)/2 = 1.25
    assert aggregate(LOSS, MASK, "seq-mean-token-sum-norm", NORM).item() == pytest.approx(1.25)


def test_unknown_aggregation_raises() -> None:
    with pytest.raises(UserError, match="unknown loss aggregation"):
        aggregation_weights(MASK, "sum", NORM)


@pytest.mark.parametrize("mode", list(LOSS_AGG))
def test_padding_does_not_change_the_loss(mode: str) -> None:
    # Append 3 padded columns (mask 0) holding arbitrary finite loss values.
    mask = torch.cat([MASK, torch.zeros(2, 3, dtype=MASK.dtype)], dim=1)
    loss = torch.cat([LOSS, torch.tensor([[1e4, -3.0, 55.0], [-1e4, 0.5, 2.0]])], dim=1)
    assert aggregate(loss, mask, mode, NORM).item() == pytest.approx(aggregate(LOSS, MASK, mode, NORM).item())


@pytest.mark.parametrize("mode", list(LOSS_AGG))
def test_micro_batches_with_the_global_norm_sum_to_the_one_pass_loss(mode: str) -> None:
    gen = torch.Generator().manual_seed(0)
    lengths = torch.tensor([5, 1, 3, 6])
    mask = (torch.arange(6)[None, :] < lengths[:, None]).long()  # [4, 6]
    loss = torch.randn(4, 6, generator=gen)
    norm = norm_of(mask, max_new_tokens=8)  # n_seqs 4, n_tokens 15
    whole = aggregate(loss, mask, mode, norm)
    split = aggregate(loss[:2], mask[:2], mode, norm) + aggregate(loss[2:], mask[2:], mode, norm)
    assert split.item() == pytest.approx(whole.item())
    # and the gradient: d loss / d l_it are the weights, identical in both passes
    l1 = loss.clone().requires_grad_(True)
    aggregate(l1, mask, mode, norm).backward()
    l2 = loss.clone().requires_grad_(True)
    (aggregate(l2[:2], mask[:2], mode, norm) + aggregate(l2[2:], mask[2:], mode, norm)).backward()
    assert_close(l2.grad, l1.grad)


def test_micro_batch_control_local_norm_would_differ() -> None:
    # Control that the micro-batch case is not degenerate: normalising each micro-batch by its own
    # token count (6 and 9 tokens) and averaging does not give the one-pass token-mean.
    lengths = torch.tensor([5, 1, 3, 6])
    mask = (torch.arange(6)[None, :] < lengths[:, None]).long()
    loss = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    whole = aggregate(loss, mask, "token-mean", norm_of(mask, 8))
    local = (
        aggregate(loss[:2], mask[:2], "token-mean", norm_of(mask[:2], 8))
        + aggregate(loss[2:], mask[2:], "token-mean", norm_of(mask[2:], 8))
    ) / 2
    assert local.item() != pytest.approx(whole.item())


# --- token log-probs and entropy -----------------------------------------------------------------


def logits_case() -> torch.Tensor:
    gen = torch.Generator().manual_seed(1)
    return 3.0 * torch.randn(2, 3, 7, generator=gen)  # [N, T, V]


def slow_log_softmax(row: list[float], temperature: float) -> list[float]:
    z = [x / temperature for x in row]
    m = max(z)
    log_norm = m + math.log(sum(math.exp(x - m) for x in z))
    return [x - log_norm for x in z]


def slow_entropy(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """−Σ_v p log p, token by token in plain Python floats."""
    n, t, _ = logits.shape
    out = [[0.0] * t for _ in range(n)]
    for i in range(n):
        for j in range(t):
            logp = slow_log_softmax(logits[i, j].tolist(), temperature)
            out[i][j] = -sum(math.exp(lp) * lp for lp in logp)
    return torch.tensor(out)


@pytest.mark.parametrize("temperature", [1.0, 0.6, 1.7])
def test_token_entropy_matches_slow_reference(temperature: float) -> None:
    logits = logits_case()
    assert_close(token_entropy(logits, temperature), slow_entropy(logits, temperature))


def test_token_entropy_hand_values() -> None:
    # uniform over V = 5: log 5; p = [1/4, 3/4] (logits [0, log 3]): −(¼ ln ¼ + ¾ ln ¾) ≈ 0.562335
    assert token_entropy(torch.zeros(1, 1, 5)).item() == pytest.approx(math.log(5))
    two = torch.tensor([[[0.0, math.log(3.0)]]])
    assert token_entropy(two).item() == pytest.approx(-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)))
    # temperature 2 on logits [0, 2 log 3] is the same distribution [1/4, 3/4]
    two_t = torch.tensor([[[0.0, 2 * math.log(3.0)]]])
    assert token_entropy(two_t, temperature=2.0).item() == pytest.approx(token_entropy(two).item())
    # a vanishing probability (logit −1e4) adds nothing and no NaN: H of p ∝ [1, e], q = 1/(1+e)
    peaked = torch.tensor([[[0.0, -1e4, 1.0]]])
    q = 1 / (1 + math.e)
    assert token_entropy(peaked).item() == pytest.approx(-(q * math.log(q) + (1 - q) * math.log(1 - q)))


def test_token_entropy_with_masked_vocabulary_is_finite() -> None:
    # p ∝ [1, 0, e]: the masked entry contributes 0, as for −1e4 above.
    q = 1 / (1 + math.e)
    h = token_entropy(torch.tensor([[[0.0, -math.inf, 1.0]]])).item()
    assert h == pytest.approx(-(q * math.log(q) + (1 - q) * math.log(1 - q)))


@pytest.mark.parametrize("temperature", [1.0, 0.6, 1.7])
def test_logged_entropy_from_log_softmax_matches_slow_reference(temperature: float) -> None:
    logits = logits_case()
    h = entropy_of_logprobs(vocab_logprobs(logits, temperature))
    assert_close(h, slow_entropy(logits, temperature))
    assert_close(h, token_entropy(logits, temperature))


def test_logged_entropy_of_many_rows_matches_the_reference_row_by_row() -> None:
    # more rows than one chunk of entropy_of_logprobs, with a masked token in a later chunk
    logits = 2.0 * torch.randn(9, 5, 11, generator=torch.Generator().manual_seed(4))
    logits[7, 2, 3] = -math.inf
    h = entropy_of_logprobs(vocab_logprobs(logits))
    assert h.shape == (9, 5) and torch.isfinite(h).all()
    assert_close(h, token_entropy(logits))


def test_temperature_one_uses_the_logits_as_they_are() -> None:
    from rbctl.algo.losses import scaled

    logits = logits_case()
    assert scaled(logits, 1.0) is logits  # no pass over the vocabulary to divide by 1
    assert torch.equal(vocab_logprobs(logits, 1.0), torch.log_softmax(logits, dim=-1))
    assert torch.equal(scaled(logits, 0.5), logits / 0.5)


def test_logged_entropy_with_masked_vocabulary_is_finite() -> None:
    q = 1 / (1 + math.e)  # p ∝ [1, 0, e], as for token_entropy
    h = entropy_of_logprobs(vocab_logprobs(torch.tensor([[[0.0, -math.inf, 1.0]]]))).item()
    assert h == pytest.approx(-(q * math.log(q) + (1 - q) * math.log(1 - q)))
    assert entropy_of_logprobs(vocab_logprobs(torch.zeros(1, 1, 5))).item() == pytest.approx(math.log(5))


def test_token_logprobs_are_the_log_softmax_at_the_tokens() -> None:
    logits = logits_case()
    tokens = torch.tensor([[0, 6, 3], [2, 2, 5]])
    lsm = vocab_logprobs(logits, 0.6)
    assert torch.equal(at_tokens(lsm, tokens), token_logprobs(logits, tokens, 0.6))


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_token_logprobs_match_slow_log_softmax(temperature: float) -> None:
    logits = logits_case()
    tokens = torch.tensor([[0, 6, 3], [2, 2, 5]])
    ref = torch.tensor(
        [
            [slow_log_softmax(logits[i, j].tolist(), temperature)[tokens[i, j]] for j in range(3)]
            for i in range(2)
        ]
    )
    assert_close(token_logprobs(logits, tokens, temperature), ref)
    assert_close(
        token_logprobs(logits, tokens, temperature),
        torch.log_softmax(logits / temperature, dim=-1).gather(-1, tokens[..., None])[..., 0],
    )


# --- PPO surrogate (rbctl.algo.policy_losses.clip_loss) -------------------------------------------------------------------------------

EPS_LOW, EPS_HIGH = 0.2, 0.28


def test_ppo_ratio_one_gives_minus_advantage() -> None:
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -3.0]])
    out = clip_loss(logp, logp.clone(), torch.tensor([1.5, -0.7]), torch.ones(2, 2), clip_low=EPS_LOW, clip_high=EPS_HIGH)
    assert_close(out.loss_mat, torch.tensor([[-1.5, -1.5], [0.7, 0.7]]))
    assert not out.token_stats["clipped_low"].any() and not out.token_stats["clipped_high"].any()


def test_ppo_clip_values_flags_and_zero_gradient_where_the_clip_binds() -> None:
    # PPO's L = min(ρA, clip(ρ, 1 − ε_low, 1 + ε_high)·A) (Schulman et al. 2017, eq. 7, with DAPO's two ε);
    # the loss is −L. Ratios ρ per token; ε_low = 0.2, ε_high = 0.28, so the clip range is [0.8, 1.28].
    # seq 0, A = 2:    ρ = 1.5 -> −2·min(1.5, 1.28) = −2.56, clip binds (high)
    #                  ρ = 1.1 -> −2.2;  ρ = 0.5 -> max(−1.0, −1.6) = −1.0 (unclipped: no flag)
    # seq 1, A = −0.5: ρ = 0.5 -> 0.5·max(0.5, 0.8) = 0.4, clip binds (low)
    #                  ρ = 0.9 -> 0.45;  ρ = 1.5 -> 0.5·max(1.5, 1.28) = 0.75 (unclipped: no flag)
    ratios = torch.tensor([[1.5, 1.1, 0.5], [0.5, 0.9, 1.5]])
    old = torch.tensor([[-1.0, -2.0, -0.3], [-4.0, -0.1, -1.2]])
    logp = (old + ratios.log()).requires_grad_(True)
    out = clip_loss(logp, old, torch.tensor([2.0, -0.5]), torch.ones(2, 3), clip_low=EPS_LOW, clip_high=EPS_HIGH)
    assert_close(out.loss_mat, torch.tensor([[-2.56, -2.2, -1.0], [0.4, 0.45, 0.75]]))
    assert out.token_stats["clipped_high"].tolist() == [[True, False, False], [False, False, False]]
    assert out.token_stats["clipped_low"].tolist() == [[False, False, False], [True, False, False]]
    # d(−A ρ)/d logp = −A ρ where unclipped; 0 where the clip binds
    out.loss_mat.sum().backward()
    assert_close(logp.grad, torch.tensor([[0.0, -2.2, -1.0], [0.0, 0.45, 0.75]]))


# --- KL and adaptive α ---------------------------------------------------------------------------


def test_k3_kl_zero_when_equal_positive_otherwise() -> None:
    logp = torch.tensor([[-0.1, -2.0, -5.0]])
    assert torch.equal(k3_kl(logp, logp.clone()), torch.zeros(1, 3))
    # logp = log ½, ref = log ¼: q = −ln 2 -> ½ + ln 2 − 1 ≈ 0.193147
    # logp = log ¼, ref = log ½: q =  ln 2 -> 2 − ln 2 − 1 ≈ 0.306853
    lp = torch.tensor([math.log(0.5), math.log(0.25)])
    ref = torch.tensor([math.log(0.25), math.log(0.5)])
    assert_close(k3_kl(lp, ref), torch.tensor([0.5 + math.log(2) - 1, 1 - math.log(2)]))
    gen = torch.Generator().manual_seed(2)
    a, b = torch.randn(50, generator=gen), torch.randn(50, generator=gen)
    q = b - a
    assert_close(k3_kl(a, b), torch.exp(q) - q - 1)
    assert (k3_kl(a, b) > 0).all()


def test_k3_kl_is_unbiased_for_kl_policy_to_reference() -> None:
    # Exact expectation over y ~ π: Σ π(y) k3(y) = KL(π || π_ref).
    pi = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    ref = torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64)
    kl = (pi * (pi / ref).log()).sum()  # 0.5 ln 2.5 + 0.2 ln 0.4 ≈ 0.274887
    assert kl.item() == pytest.approx(0.5 * math.log(2.5) + 0.2 * math.log(0.4))
    assert (pi * k3_kl(pi.log(), ref.log())).sum().item() == pytest.approx(kl.item())


def test_adaptive_alpha_steps_and_clips() -> None:
    # below target -> up by δ; above -> down; at target -> unchanged; then the clip at [lo, hi]
    assert adaptive_alpha(0.01, entropy=0.5, target=1.0, delta=0.005, lo=0.0, hi=0.05) == pytest.approx(0.015)
    assert adaptive_alpha(0.01, entropy=1.5, target=1.0, delta=0.005, lo=0.0, hi=0.05) == pytest.approx(0.005)
    assert adaptive_alpha(0.01, entropy=1.0, target=1.0, delta=0.005, lo=0.0, hi=0.05) == 0.01
    assert adaptive_alpha(0.048, entropy=0.5, target=1.0, delta=0.005, lo=0.0, hi=0.05) == 0.05
    assert adaptive_alpha(0.002, entropy=1.5, target=1.0, delta=0.005, lo=0.001, hi=0.05) == 0.001
