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
    fused_token_logprobs,
    resolve_logprobs,
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


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_fused_log_probs_entropy_and_gradient_equal_the_log_softmax_path(temperature: float) -> None:
    """On logits spread as a trained LM's are (most of the vocabulary far below the maximum, where
    exp is a denormal float) and over more rows than one chunk: the fused values, the logged
    entropy and the logits' gradient are the log-softmax path's up to float rounding."""
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(3, 70, 5000, generator=g) * 25  # 210 token rows: 4 chunks of 52
    tokens = torch.randint(0, 5000, (3, 70), generator=g)
    up = torch.randn(3, 70, generator=g)
    grads = []
    for path in ("fused", "softmax"):
        x = logits.clone().requires_grad_()
        if path == "fused":
            logp, ent = fused_token_logprobs(x, tokens, temperature, with_entropy=True)
        else:
            lsm = vocab_logprobs(x, temperature)
            logp, ent = at_tokens(lsm, tokens), entropy_of_logprobs(lsm.detach())
        (logp * up).sum().backward()
        grads.append((logp.detach(), ent, x.grad))
    (lp1, h1, g1), (lp2, h2, g2) = grads
    assert lp2.min() < -150  # the far tail is really there (exp of it is 0 in float32)
    assert_close(lp1, lp2, rtol=1e-6, atol=1e-4)
    assert_close(h1, h2, rtol=1e-5, atol=1e-4)
    assert_close(g1, g2, rtol=1e-5, atol=1e-6)
    assert g2.abs().max() > 0.1


def test_fused_log_probs_with_a_masked_vocabulary_and_without_entropy() -> None:
    logits = logits_case()
    logits[0, 0, 4] = float("-inf")  # a masked token (never the sampled one)
    tokens = torch.tensor([[0, 6, 3], [2, 2, 5]])
    logp, ent = fused_token_logprobs(logits, tokens, 0.6, with_entropy=True)
    assert_close(logp, token_logprobs(logits, tokens, 0.6))
    assert torch.isfinite(ent).all()
    assert_close(ent, token_entropy(logits, 0.6))
    assert fused_token_logprobs(logits, tokens, 0.6)[1] is None


def test_auto_log_probs_are_fused_for_a_pretrained_model_only() -> None:
    assert resolve_logprobs("auto", builtin=False) and not resolve_logprobs("auto", builtin=True)
    assert resolve_logprobs("fused", builtin=True) and not resolve_logprobs("softmax", builtin=False)


# --- PPO surrogate (rbctl.algo.policy_losses.clip_loss) -------------------------------------------------------------------------------

EPS_LOW, EPS_HIGH = 0.2, 0.28


def test_ppo_ratio_one_gives_minus_advantage() -> None:
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -3.0]])
    out = clip_loss(logp, logp.clone(), torch.tensor([1.5, -0.7]), torch.ones(2, 2), clip_low=EPS_LOW, clip_high=EPS_HIGH,
                    clip_ratio_c=3.0)
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
    out = clip_loss(logp, old, torch.tensor([2.0, -0.5]), torch.ones(2, 3), clip_low=EPS_LOW, clip_high=EPS_HIGH,
                    clip_ratio_c=3.0)
    assert_close(out.loss_mat, torch.tensor([[-2.56, -2.2, -1.0], [0.4, 0.45, 0.75]]))
    assert out.token_stats["clipped_high"].tolist() == [[True, False, False], [False, False, False]]
    assert out.token_stats["clipped_low"].tolist() == [[False, False, False], [True, False, False]]
    # d(−A ρ)/d logp = −A ρ where unclipped; 0 where the clip binds
    out.loss_mat.sum().backward()
    assert_close(logp.grad, torch.tensor([[0.0, -2.2, -1.0], [0.0, 0.45, 0.75]]))


def _verl_vanilla(old_log_prob, log_prob, advantages, response_mask, cliprange_low, cliprange_high, clip_ratio_c):
    """verl's compute_policy_loss_vanilla (verl/trainer/ppo/core_algos.py, volcengine/verl @ b178a3cd,
    lines 1159-1250) with loss_agg_mode "token-mean", transcribed line by line as the reference (its
    config reads and the rollout-correction weights left out; verl_F.masked_mean is Σ x·m / Σ m).
    Returns (pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower, pg_losses)."""
    def masked_mean(values, mask):
        return (values * mask).sum() / mask.sum()

    assert clip_ratio_c > 1.0
    negative_approx_kl = log_prob - old_log_prob
    negative_approx_kl = torch.clamp(negative_approx_kl, min=-20.0, max=20.0)
    ratio = torch.exp(negative_approx_kl)
    ppo_kl = masked_mean(-negative_approx_kl, response_mask)
    pg_losses1 = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1 - cliprange_low, 1 + cliprange_high)
    clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)
    pg_clipfrac = masked_mean(torch.gt(pg_losses2, pg_losses1).float(), response_mask)
    pg_losses3 = -advantages * clip_ratio_c
    clip_pg_losses2 = torch.min(pg_losses3, clip_pg_losses1)
    pg_clipfrac_lower = masked_mean(torch.gt(clip_pg_losses1, pg_losses3) * (advantages < 0).float(), response_mask)
    pg_losses = torch.where(advantages < 0, clip_pg_losses2, clip_pg_losses1)
    pg_loss = masked_mean(pg_losses, response_mask)  # agg_loss(..., "token-mean")
    return pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower, pg_losses


def _drifted_batch(seed: int, n: int = 12, t: int = 9):
    """Random log-probs, token advantages of both signs and a mask with padding; the log-ratios span
    (−2, 2) (ratios up to e² ≈ 7.4, past c = 3), one is 50 (past the ±20 clamp) and one −30."""
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(n, t, generator=gen) * 4
    log_ratio = (torch.rand(n, t, generator=gen) * 4 - 2)
    log_ratio[0, 0], log_ratio[1, 1] = 50.0, -30.0
    adv = torch.randn(n, t, generator=gen)
    adv[0, 0], adv[1, 1] = -1.3, 0.7
    lengths = torch.randint(3, t + 1, (n,), generator=gen)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).float()
    return old, old + log_ratio, adv, mask


def test_clip_loss_with_the_dual_clip_is_verls_vanilla_loss_on_drifted_ratios() -> None:
    old, logp, adv, mask = _drifted_batch(0)
    ratio = (logp - old).exp()
    assert ((ratio > 3) & (adv < 0) & (mask > 0)).sum() >= 5  # the dual clip binds on several tokens
    lp = logp.clone().requires_grad_(True)
    lp_ref = logp.clone().requires_grad_(True)
    out = clip_loss(lp, old, adv, mask, clip_low=EPS_LOW, clip_high=EPS_HIGH, clip_ratio_c=3.0)
    pg_loss, pg_clipfrac, _, pg_clipfrac_lower, pg_losses = _verl_vanilla(old, lp_ref, adv, mask, EPS_LOW, EPS_HIGH, 3.0)
    norm = BatchNorm(n_seqs=mask.shape[0], n_tokens=int(mask.sum()), max_new_tokens=mask.shape[1])
    loss = aggregate(out.loss_mat, mask, "token-mean", norm)
    assert torch.isfinite(out.loss_mat).all()
    assert_close(out.loss_mat, pg_losses, rtol=0, atol=0)  # the same per-token values, padding included
    assert_close(loss, pg_loss, rtol=1e-6, atol=0)
    frac = lambda name: (out.token_stats[name].float() * mask).sum() / mask.sum()  # noqa: E731
    assert frac("clipped_dual") == pg_clipfrac_lower and pg_clipfrac_lower > 0  # verl's pg_clipfrac_lower
    assert_close(frac("clipped_low") + frac("clipped_high"), pg_clipfrac)  # verl's pg_clipfrac is their sum
    assert frac("clipped_low") != pg_clipfrac_lower  # rbctl's clip/frac_low is another quantity
    # the gradients agree too (no ties −A·c = l here, where verl's min would halve the gradient)
    loss.backward()
    pg_loss.backward()
    assert_close(lp.grad, lp_ref.grad, rtol=1e-6, atol=1e-9)
    assert lp.grad[out.token_stats["clipped_dual"]].abs().max() == 0  # bound at −A·c: no gradient


def test_dual_clip_hand_values() -> None:
    # ε = (0.2, 0.28), c = 3. A = −1: ρ = 4 -> max(4, 1.28)·1 = 4 > 3, bound at −A·c = 3 (no gradient);
    # ρ = 2.5 -> 2.5 (below c); ρ = 0.5 -> 0.8 (the lower PPO clip). A = +1, ρ = 4 -> −1.28 (upper clip;
    # the dual clip is for A < 0 only). Without it (c = None) ρ = 4 at A = −1 costs 4.
    ratios = torch.tensor([[4.0, 2.5, 0.5], [4.0, 1.0, 1.0]])
    old = torch.zeros(2, 3)
    adv = torch.tensor([[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0]])
    logp = ratios.log().requires_grad_(True)
    out = clip_loss(logp, old, adv, torch.ones(2, 3), clip_low=EPS_LOW, clip_high=EPS_HIGH, clip_ratio_c=3.0)
    assert_close(out.loss_mat, torch.tensor([[3.0, 2.5, 0.8], [-1.28, -1.0, -1.0]]))
    assert out.token_stats["clipped_dual"].tolist() == [[True, False, False], [False, False, False]]
    out.loss_mat.sum().backward()
    assert_close(logp.grad, torch.tensor([[0.0, 2.5, 0.0], [0.0, -1.0, -1.0]]))
    off = clip_loss(ratios.log(), old, adv, torch.ones(2, 3), clip_low=EPS_LOW, clip_high=EPS_HIGH, clip_ratio_c=None)
    assert_close(off.loss_mat[0], torch.tensor([4.0, 2.5, 0.8]))
    assert not off.token_stats["clipped_dual"].any()
    with pytest.raises(UserError, match="clip_ratio_c must be > 1"):
        clip_loss(logp, old, adv, torch.ones(2, 3), clip_low=EPS_LOW, clip_high=EPS_HIGH, clip_ratio_c=1.0)


def test_a_huge_log_ratio_gives_a_finite_loss_and_gradient() -> None:
    # log ρ = 100: exp overflows float32 to inf without the ±20 clamp; −A·ρ is then ±inf and the
    # gradient 0·inf = NaN. Clamped, ρ = e^20 (verl's bound): A < 0 costs −A·c with the dual clip,
    # −A·e^20 without it; A > 0 is clipped at 1 + ε_high either way; every gradient is finite.
    old = torch.zeros(1, 2)
    adv = torch.tensor([[-1.0, 1.0]])
    for c, first in ((3.0, 3.0), (None, math.exp(20.0))):
        logp = torch.full((1, 2), 100.0, requires_grad=True)
        out = clip_loss(logp, old, adv, torch.ones(1, 2), clip_low=EPS_LOW, clip_high=EPS_HIGH, clip_ratio_c=c)
        assert_close(out.loss_mat, torch.tensor([[first, -1.28]]))
        out.loss_mat.sum().backward()
        assert torch.equal(logp.grad, torch.zeros(1, 2))  # past the clamp (and clipped): no gradient, not NaN


def _plain_surrogate(logp, old, adv, lo, hi):
    """The clipped surrogate as rbctl computed it before the guards: exp(logp − old), no clamp, no dual clip."""
    ratio = torch.exp(logp - old)
    return torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 1.0 - lo, 1.0 + hi))


@pytest.mark.parametrize("agg", list(LOSS_AGG))
def test_where_no_guard_binds_loss_and_gradient_are_bit_identical_with_c_3_and_null(agg) -> None:
    gen = torch.Generator().manual_seed(5)
    n, t = 16, 11
    old = -torch.rand(n, t, generator=gen) * 5
    log_ratio = torch.rand(n, t, generator=gen) * 1.6 - 0.8  # ρ in (0.45, 2.2): every PPO clip case, none past c = 3
    adv = torch.randn(n, generator=gen)
    mask = (torch.arange(t)[None, :] < torch.randint(1, t + 1, (n,), generator=gen)[:, None]).float()
    norm = BatchNorm(n_seqs=n, n_tokens=int(mask.sum()), max_new_tokens=t)
    w = aggregation_weights(mask, agg, norm)
    results = []
    for c in (3.0, None, "before"):
        lp = (old + log_ratio).requires_grad_(True)
        if c == "before":
            mat = _plain_surrogate(lp, old, adv[:, None], EPS_LOW, EPS_HIGH)
        else:
            out = clip_loss(lp, old, adv, mask, clip_low=EPS_LOW, clip_high=EPS_HIGH, clip_ratio_c=c)
            assert not out.token_stats["clipped_dual"].any()
            mat = out.loss_mat
        loss = (w * mat).sum()
        loss.backward()
        results.append((mat.detach(), loss.detach(), lp.grad))
    (m3, l3, g3), (mn, ln, gn), (mb, lb, gb) = results
    assert torch.equal(m3, mn) and torch.equal(l3, ln) and torch.equal(g3, gn)
    assert torch.equal(mn, mb) and torch.equal(ln, lb) and torch.equal(gn, gb)  # as before the guards
    # bit for bit, signed zeros included
    assert all(torch.equal(x.view(torch.int32), y.view(torch.int32)) for x, y in ((g3, gb), (m3, mb)))


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


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_lean_token_logprobs_equal_the_log_softmax_ones(temperature: float) -> None:
    from rbctl.algo.losses import lean_token_logprobs, token_logprobs

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(9, 5, 300, generator=g) * 4
    logits[0, 0, :150] = float("-inf")  # a masked vocabulary
    tokens = torch.randint(150, 300, (9, 5), generator=g)
    lean = lean_token_logprobs(logits, tokens, temperature)
    assert lean.shape == tokens.shape and lean.dtype == torch.float32
    torch.testing.assert_close(lean, token_logprobs(logits, tokens, temperature), atol=2e-6, rtol=0)
