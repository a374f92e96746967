"""Small trainer defects, each pinned: a warm start of 0 steps, κ_eff of a skipped step, the "old"
log-probs under dropout, and top_p < 1 refused for training."""

from __future__ import annotations

import pytest
import torch

from rbctl.train import update as update_mod
from rbctl.train.loop import train
from rbctl.train.trainer import Trainer
from rbctl.train.step import rollout_batch
from rbctl.train.update import forward_logp, micro_batches, update

QUIET = dict(progress=False, log=lambda *a: None)


def test_warm_start_steps_zero_trains_from_the_untrained_policy(tiny_config, tmp_path):
    cfg = tiny_config(steps=1, data__builtin__warm_start_steps=0)
    done = train(cfg, tmp_path / "run", **QUIET)  # was: ZeroDivisionError in the warm start's schedule
    assert [r["step"] for r in done] == [1]


@pytest.mark.filterwarnings("error::UserWarning")  # the schedule stepped with every update skipped: no torch warning
def test_a_step_skipped_for_a_nonfinite_loss_logs_kappa_eff_as_null(tiny_config, tmp_path, monkeypatch):
    tr = Trainer(tiny_config(kappa_eff_every=1), tmp_path / "run", log=lambda *a: None)
    real = update_mod.aggregation_weights
    monkeypatch.setattr(update_mod, "aggregation_weights", lambda *a, **k: real(*a, **k) * float("nan"))
    before = [p.detach().clone() for p in tr.model.parameters()]
    metrics, _ = tr.step(1)
    assert metrics["nonfinite/skipped"] == 1
    assert metrics["kappa_eff"] is None  # was ≈ 0: the unchanged policy measured against itself
    assert all(torch.equal(a, b) for a, b in zip(before, tr.model.parameters()))
    monkeypatch.setattr(update_mod, "aggregation_weights", real)
    metrics, _ = tr.step(2)
    assert metrics["nonfinite/skipped"] == 0 and metrics["kappa_eff"] is not None


def test_old_logprobs_are_taken_in_eval_mode_under_dropout(tiny_config, tmp_path):
    cfg = tiny_config(model__lora="{r: 4, alpha: 8, dropout: 0.5}", kappa_eff_every=1)
    tr = Trainer(cfg, tmp_path / "run", log=lambda *a: None)
    with torch.no_grad():  # B = 0 at init would make the adapters, and their dropout, a no-op
        for name, p in tr.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    batch = rollout_batch(tr.state, tr.sampler, 1)
    tr.model.eval()  # the rollouts' mode: no dropout
    with torch.no_grad():
        want = torch.cat([forward_logp(tr.state, tr.model, batch, sl, False, False)[0] for sl in micro_batches(tr.state, batch.n)])
    tr.model.train()
    upd = update(tr.state, batch, tr.alpha)
    assert tr.model.training  # back in training mode afterwards
    # the behaviour policy's log-probs: exactly the eval-mode ones (a dropout forward differs by O(1))
    torch.testing.assert_close(upd.old_logp, want, rtol=0, atol=1e-6)
    assert upd.metrics["rollout/logprob_diff"] < 1e-4  # the hf sampler's own log-probs agree with them


def test_top_p_below_one_is_refused_for_training_with_the_reason():
    import pytest

    from rbctl.config.train import TOP_P_REFUSED, load_train_config
    from rbctl.errors import UserError

    with pytest.raises(UserError) as e:
        load_train_config(None, ["rollout.top_p=0.9"])
    msg = str(e.value)
    assert "config key 'rollout.top_p'" in msg and TOP_P_REFUSED in msg and "\n" not in msg
    assert "full distribution" in TOP_P_REFUSED
    assert load_train_config(None, ["rollout.top_p=1.0"]).rollout.top_p == 1.0
    assert load_train_config(None, ["eval.top_p=0.95"]).eval.top_p == 0.95  # evaluation may truncate


def test_kappa_eff_forwards_only_the_mixed_prompts_rollouts_and_keeps_its_value(tiny_config, tmp_path, monkeypatch):
    from rbctl.algo import kappa_eff, nanmean_or_none
    from rbctl.train.update import eval_logp, logratio_sums

    tr = Trainer(tiny_config(kappa_eff_every=1), tmp_path / "run", log=lambda *a: None)
    batch = rollout_batch(tr.state, tr.sampler, 1)
    batch.rewards[0] = 1.0  # prompt 0 all correct, prompt 1 all wrong, the rest as sampled (made mixed below)
    batch.rewards[1] = 0.0
    batch.rewards[2:, 0], batch.rewards[2:, 1] = 1.0, 0.0
    result = update(tr.state, batch, 0.0)
    seen = []
    real = update_mod.eval_logp
    monkeypatch.setattr(update_mod, "eval_logp", lambda p, m, b, *a, **k: seen.append(b.n) or real(p, m, b, *a, **k))
    d = logratio_sums(tr.state, batch, result.old_logp)
    g = batch.rewards.shape[1]
    assert seen == [batch.n - 2 * g]  # the two uniform groups never reach the forward pass
    assert torch.isnan(d[:2]).all() and torch.isfinite(d[2:]).all()
    # the whole batch's d, as before: equal on the mixed prompts up to float32 rounding of a smaller GEMM
    full_logp = eval_logp(tr.state, tr.state.model, batch, micro_batches(tr.state, batch.n), lean=True)
    full = ((full_logp - result.old_logp) * batch.response_mask).sum(-1).reshape(batch.rewards.shape)
    assert torch.allclose(d[2:], full[2:], rtol=0, atol=1e-5)
    # κ_eff itself within 1e-5 relative of the all-rollouts forward's (the tolerance logratio_sums states;
    # on this policy's shapes the two came out bit-identical, 0.3827)
    kappa_mixed, kappa_all = nanmean_or_none(kappa_eff(batch.rewards, d)), nanmean_or_none(kappa_eff(batch.rewards, full))
    assert abs(kappa_all) > 0.1 and kappa_mixed == pytest.approx(kappa_all, rel=1e-5, abs=0)
