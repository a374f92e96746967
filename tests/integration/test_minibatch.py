"""Mini-batch updates (`algo.ppo_mini_batch_size`, docs/method.md "Mini-batch updates"): the batch's
groups dealt into M mini-batches, one optimizer step each, ratios against the behaviour policy's
log-probs from before the first step. M = 1 is the previous update exactly; with M > 1 the clip
acts, a slow reference loop gives the same update, and GSPO and KL-Cov differ from GRPO."""

from __future__ import annotations

import copy

import pytest
import torch

from rbctl.config.train import load_train_config
from rbctl.errors import UserError
from rbctl.rollout.kvcache import position_ids
from rbctl.train.optim import make_optimizer
from rbctl.train.trainer import Trainer
from rbctl.train.step import rollout_batch
from rbctl.train.update import mini_batches, mini_batches_per_epoch, update

QUIET = dict(log=lambda *a: None)


def _params(model):
    return [p.detach().clone() for p in model.parameters()]


def _updated(cfg, tmp_path, name):
    """The trainer's parameters after one rollout and update at step 1, and the update's metrics."""
    tr = Trainer(cfg, tmp_path / name, **QUIET)
    batch = rollout_batch(tr.state, tr.sampler, 1)
    res = update(tr.state, batch, tr.alpha)
    return tr, batch, res


def test_one_mini_batch_of_all_prompts_is_the_update_without_mini_batches_bit_for_bit(tiny_config, tmp_path):
    tr, _, a = _updated(tiny_config(), tmp_path, "null")
    base = _params(tr.model)
    tr, _, b = _updated(tiny_config(algo__ppo_mini_batch_size=4), tmp_path, "p")  # P = 4: M = 1
    assert all(torch.equal(u, v) for u, v in zip(base, _params(tr.model)))
    assert a.metrics == b.metrics and b.optimizer_steps == 1
    assert b.metrics["clip/frac_low"] == b.metrics["clip/frac_high"] == 0.0  # on-policy: every ratio is 1


def test_mini_batches_are_whole_groups_each_once_per_epoch_seeded_and_reshuffled(tiny_config, tmp_path):
    tr = Trainer(tiny_config(algo__ppo_mini_batch_size=1, algo__micro_batch_size=2), tmp_path / "r", **QUIET)
    assert mini_batches_per_epoch(tr.state) == 4
    epochs = [mini_batches(tr.state, 4, step=3, epoch=e) for e in range(3)]
    for minis in epochs:
        assert len(minis) == 4 and all(len(micro) == 2 for micro in minis)  # G = 4 rows in micro-batches of 2
        groups = [torch.cat(micro).tolist() for micro in minis]
        for rows in groups:  # one whole group of G = 4 consecutive rows
            assert rows == list(range(rows[0], rows[0] + 4)) and rows[0] % 4 == 0
        assert sorted(r for rows in groups for r in rows) == list(range(16))  # every row once
    order = lambda minis: [int(torch.cat(m)[0]) // 4 for m in minis]  # noqa: E731
    assert order(epochs[0]) == order(mini_batches(tr.state, 4, step=3, epoch=0))  # seeded
    assert len({tuple(order(m)) for m in epochs}) > 1  # another deal per epoch


def test_a_mini_batch_size_that_does_not_divide_p_is_a_one_line_error():
    with pytest.raises(UserError) as e:
        load_train_config(None, ["rollout.prompts_per_step=16", "algo.ppo_mini_batch_size=5"])
    assert "algo.ppo_mini_batch_size=5 must divide rollout.prompts_per_step=16" in str(e.value)
    assert "\n" not in str(e.value)


def _reference_update(tr, batch, lr_model):
    """A slow, plain loop of what M = 2 mini-batches must do (GRPO's clip loss, seq-mean-token-mean,
    no KL term, no entropy bonus): the behaviour log-probs once, then per mini-batch a full forward,
    ρ = exp(log π − log π_old), the clipped surrogate max(−A·ρ, −A·clip(ρ, 1 − ε_lo, 1 + ε_hi)),
    no dual clip (the config's `algo.clip_ratio_c` must be null), weights 1/|y_i| / (sequences in
    the mini-batch), one clipped-gradient AdamW step. Returns the model and, per mini-batch, its
    ratios and the tokens where the clip bound."""
    model, cfg = lr_model, tr.cfg
    opt, _ = make_optimizer([p for p in model.parameters() if p.requires_grad], cfg.optim, cfg.steps)
    assert cfg.algo.clip_ratio_c is None
    lo, hi, t = cfg.algo.clip_low, cfg.algo.clip_high, cfg.rollout.temperature
    lp = batch.prompt_width

    def logp(rows):
        ids, attn = batch.input_ids[rows], batch.attention_mask[rows]
        logits = model(input_ids=ids, attention_mask=attn, position_ids=position_ids(attn)).logits[:, lp - 1:-1]
        return torch.log_softmax(logits.float() / t, -1).gather(-1, batch.response_ids[rows].unsqueeze(-1)).squeeze(-1)

    with torch.no_grad():
        old = logp(slice(None))
    adv = batch.advantages.reshape(-1)
    seen = []
    for micro in mini_batches(tr.state, batch.n // cfg.rollout.group_size, batch.step, 0):
        rows = torch.cat(micro)
        mask = batch.response_mask[rows]
        ratio = torch.exp(logp(rows) - old[rows])
        a = adv[rows].unsqueeze(-1)
        loss_tok = torch.maximum(-a * ratio, -a * ratio.clamp(1 - lo, 1 + hi))
        w = mask / mask.sum(1, keepdim=True) / len(rows)
        opt.zero_grad()
        (w * loss_tok).sum().backward()
        torch.nn.utils.clip_grad_norm_(list(model.parameters()), cfg.optim.max_grad_norm)
        opt.step()
        r = ratio.detach()
        low = ((r < 1 - lo) & (a < 0) & (mask > 0)).sum().item()
        high = ((r > 1 + hi) & (a > 0) & (mask > 0)).sum().item()
        seen.append((r, mask, low, high))
    return model, seen


def test_two_mini_batches_match_a_slow_reference_loop_and_the_clip_binds_on_the_second(tiny_config, tmp_path):
    # lr 0.05: the first step moves the policy far enough that the second mini-batch's ratios leave
    # [1 − 0.2, 1 + 0.28] on some tokens (and one past the dual clip's c = 3: the next test; off here)
    cfg = tiny_config(algo__ppo_mini_batch_size=2, algo__log_kl="false", optim__lr=0.05, algo__clip_ratio_c="null")
    tr = Trainer(cfg, tmp_path / "run", **QUIET)
    batch = rollout_batch(tr.state, tr.sampler, 1)
    assert batch.advantages.abs().sum() > 0
    before = _params(tr.model)
    ref_model, seen = _reference_update(tr, batch, copy.deepcopy(tr.model))
    res = update(tr.state, batch, tr.alpha)
    assert res.optimizer_steps == 2
    # the two forward paths (the trainer's shared-prompt pass, the reference's full pass) round
    # differently; AdamW's steps here are ~lr = 0.05, so 1e-4 is 0.2% of a step. Adam divides each
    # element's gradient by its own scale, so the few elements whose gradient is rounding noise get
    # steps that differ more (measured: 3 of 4096 by up to 2e-4): 99% within 1e-4, all within 1e-3
    assert max((p - q).abs().max().item() for p, q in zip(tr.model.parameters(), before)) > 0.04
    diff = torch.cat([(p - q).abs().flatten() for p, q in zip(tr.model.parameters(), ref_model.parameters())])
    assert (diff <= 1e-4).float().mean() >= 0.99 and diff.max() <= 1e-3
    (r1, m1, low1, high1), (r2, m2, low2, high2) = seen
    # the first mini-batch is stepped on by the behaviour policy itself: every ratio is 1 (up to the
    # rounding of two forward passes), so the clip cannot bind there; the second is off-policy
    assert torch.allclose(r1[m1 > 0], torch.ones_like(r1[m1 > 0]), atol=1e-5) and low1 == high1 == 0
    assert (r2[m2 > 0] - 1).abs().max() > 0.28 and low2 + high2 > 0
    n_tokens = batch.response_mask.sum().item()
    # the logged fractions are over the batch's tokens: (clipped tokens over both mini-batches) / tokens
    assert res.metrics["clip/frac_low"] == pytest.approx((low1 + low2) / n_tokens, abs=1e-12)
    assert res.metrics["clip/frac_high"] == pytest.approx((high1 + high2) / n_tokens, abs=1e-12)


def test_with_mini_batches_gspo_and_kl_cov_train_differently_from_grpo(tiny_config, tmp_path):
    common = dict(algo__ppo_mini_batch_size=2, optim__lr=0.01)
    grpo = _params(_updated(tiny_config(**common), tmp_path, "grpo")[0].model)
    for loss, extra in (("gspo", {}), ("kl_cov", {"algo__kl_cov__ratio": 0.2})):
        tr, _, res = _updated(tiny_config(algo__policy_loss=loss, **common, **extra), tmp_path, loss)
        assert res.optimizer_steps == 2
        assert any(not torch.equal(a, b) for a, b in zip(grpo, _params(tr.model))), loss
    # ... while with one mini-batch (every ratio 1) KL-Cov's |log π − log π_old| penalty is 0 at the
    # step's only update: its gradient at ρ = 1 is GRPO's without the clip, and the clip cannot bind
    one = _params(_updated(tiny_config(optim__lr=0.01), tmp_path, "grpo1")[0].model)
    klc = _params(_updated(tiny_config(optim__lr=0.01, algo__policy_loss="kl_cov"), tmp_path, "klc1")[0].model)
    assert all(torch.allclose(a, b, atol=1e-7) for a, b in zip(one, klc))


def test_mini_batch_metrics_log_the_pre_update_entropy_and_nonzero_clip_fractions(tiny_config, tmp_path):
    from rbctl.train.loop import train

    def run(name, **kw):
        return train(tiny_config(steps=3, optim__lr=0.005, **kw), tmp_path / name, progress=False, log=lambda *a: None)

    one, four = run("m1"), run("m4", algo__ppo_mini_batch_size=1)
    assert all(r["clip/frac_low"] == r["clip/frac_high"] == 0 for r in one)  # one on-policy step per batch
    assert any(r["clip/frac_low"] + r["clip/frac_high"] > 0 for r in four)  # later mini-batches are off-policy
    # step 1 samples the same rollouts from the same warm start: the logged entropy is the pre-update
    # policy's in both, from the first epoch's forward (M = 1) or the behaviour pass (M = 4)
    assert four[0]["entropy"] == pytest.approx(one[0]["entropy"], rel=1e-5)
    assert four[0]["kl"] == pytest.approx(0.0, abs=1e-6)  # the pre-update policy is the reference
    assert all(r["kappa_eff"] is not None for r in four if r["groups/frac_mixed"] > 0)


def test_the_dual_clip_binds_off_policy_only_and_where_it_does_not_the_update_is_unchanged(tiny_config, tmp_path):
    # as the reference-loop test: lr 0.05 moves the policy far in the first of two mini-batches, and
    # one token of the second with A < 0 rises to ρ ≈ 4.7 (every other one with A < 0 stays below 1)
    common = dict(algo__ppo_mini_batch_size=2, algo__log_kl="false", optim__lr=0.05)
    tr, batch, off = _updated(tiny_config(algo__clip_ratio_c="null", **common), tmp_path, "off")
    _, seen = _reference_update(tr, batch, copy.deepcopy(Trainer(tr.cfg, tmp_path / "ref", **QUIET).model))
    adv = batch.advantages.reshape(-1)
    rows = [torch.cat(m) for m in mini_batches(tr.state, batch.n // tr.cfg.rollout.group_size, batch.step, 0)]
    (r2, m2, _, _), a2 = seen[1], adv[rows[1]].unsqueeze(-1)
    n_tokens = batch.response_mask.sum().item()

    def binds(c):  # the second mini-batch's tokens with A < 0 and ρ > c (the first is on-policy: ρ = 1)
        return ((r2 > c) & (a2 < 0) & (m2 > 0)).sum().item()

    assert binds(3.0) > 0 and binds(8.0) == 0
    # c = 8 binds nowhere: the update is bit for bit the one without the dual clip
    tr8, _, c8 = _updated(tiny_config(algo__clip_ratio_c=8.0, **common), tmp_path, "c8")
    assert all(torch.equal(u, v) for u, v in zip(_params(tr.model), _params(tr8.model)))
    assert c8.metrics == off.metrics and c8.metrics["clip/frac_dual"] == 0.0
    # c = 3 (the default) binds on the drifted token: logged as verl's pg_clipfrac_lower, and the update differs
    tr3, _, c3 = _updated(tiny_config(**common), tmp_path, "c3")
    assert tr3.cfg.algo.clip_ratio_c == 3.0
    assert c3.metrics["clip/frac_dual"] == pytest.approx(binds(3.0) / n_tokens, abs=1e-12)
    assert any(not torch.equal(u, v) for u, v in zip(_params(tr.model), _params(tr3.model)))


def test_clip_cov_logs_the_quota_its_floor_of_one_token_makes_per_mini_batch(tiny_config, tmp_path):
    # ratio 2e-4 of a mini-batch's few dozen tokens is < 1 token: each of the M calls asks for
    # max(⌊2e-4·n⌋, 1) = 1 token, so the quota is M / the batch's tokens, far above 2e-4
    for m, size in ((1, "null"), (2, 2), (4, 1)):
        cfg = tiny_config(algo__ppo_mini_batch_size=size, algo__policy_loss="clip_cov", algo__clip_cov__ratio=2e-4,
                          optim__lr=0.05)
        tr, batch, res = _updated(cfg, tmp_path, f"m{m}")
        assert mini_batches_per_epoch(tr.state) == m
        n_tokens = batch.response_mask.sum().item()
        assert res.metrics["policy_loss/frac_cov_quota"] == pytest.approx(m / n_tokens, abs=1e-12)
        assert 0.0 <= res.metrics["policy_loss/frac_cov_clipped"] <= res.metrics["policy_loss/frac_cov_quota"]
