"""rbctl.integrations.trl: a two-step CPU GRPO run in TRL whose optimised advantages are rbctl's.

A tiny Llama built in code and rbctl's built-in character tokenizer (no Hub download). The test
subclass records the rewards TRL computed and the advantages that reached `compute_loss`, and checks
them against `rbctl.algo.compute_advantages` on the same rewards. It also keeps the model's weights
before and after each optimizer step, so that the logged `rbctl/kappa_eff` is checked against log-probs
recomputed here with a plain forward pass.
"""

from __future__ import annotations

import copy
import sys
import types

import pytest
import torch
from torch.testing import assert_close

from rbctl.algo import advantage_gap, compute_advantages, kappa, kappa_eff, nanmean_or_none
from rbctl.errors import UserError
from rbctl.integrations import require_version
from tests.conftest import tiny_llama

rb_trl = pytest.importorskip("rbctl.integrations.trl", reason="TRL is not installed (pip install 'rbctl[trl]')")

G = 4  # num_generations
P = 2  # prompts per step


def tiny_model_and_tokenizer():
    from rbctl.tasks.builtin import build_tokenizer
    from rbctl.tasks.links import TaskSpec

    tokenizer = build_tokenizer(TaskSpec())
    model = tiny_llama(len(tokenizer), layers=1, pad_token_id=tokenizer.pad_token_id,
                       bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    return model, tokenizer


def contains_a(completions, **kwargs):
    """Binary reward: 1 if the completion contains the letter 'a'."""
    return [float("a" in c) for c in completions]


def key(prompt_ids, prompt_mask, completion_ids, completion_mask) -> tuple:
    return tuple(prompt_ids[prompt_mask.bool()].tolist()), tuple(completion_ids[completion_mask.bool()].tolist())


def never(completions, **kwargs):
    """Reward 0 for everything: no group is mixed."""
    return [0.0] * len(completions)


def make_recording_trainer(tmp_path, seed=0, reward=contains_a, **trainer_kwargs):
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig

    class Recording(rb_trl.BudgetGRPOTrainer):
        """Records each generation batch (rows, rewards, weights it was sampled with) and each batch
        compute_loss optimised; the callback below adds the weights after each optimizer step."""

        def __init__(self, *args, **kwargs):
            self.generated, self.optimised = [], []
            super().__init__(*args, **kwargs)

        def _calculate_rewards(self, *args, **kwargs):
            rewards_per_func = super()._calculate_rewards(*args, **kwargs)
            self.generated.append({"rewards": rewards_per_func.sum(dim=1).clone()})
            return rewards_per_func

        def _generate_and_score_completions(self, inputs):
            out = super()._generate_and_score_completions(inputs)
            rows = zip(out["prompt_ids"], out["prompt_mask"], out["completion_ids"], out["completion_mask"])
            self.generated[-1]["keys"] = [key(*row) for row in rows]
            self.generated[-1]["logged_advantages"] = list(self._logs["advantages"])
            self.generated[-1]["tensors"] = {k: out[k].clone() for k in
                                             ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")}
            self.generated[-1]["weights_before"] = copy.deepcopy(self.model.state_dict())
            return out

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            rows = zip(inputs["prompt_ids"], inputs["prompt_mask"], inputs["completion_ids"], inputs["completion_mask"])
            self.optimised.append({"keys": [key(*row) for row in rows], "advantages": inputs["advantages"].clone()})
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

    class KeepLogs(TrainerCallback):
        def __init__(self):
            self.logs = []
            self.trainer = None

        def on_step_end(self, args, state, control, model=None, **kwargs):
            self.trainer.generated[-1]["weights_after"] = copy.deepcopy(model.state_dict())

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "rbctl/kappa" in logs:
                self.logs.append(dict(logs))

    model, tokenizer = tiny_model_and_tokenizer()
    dataset = Dataset.from_dict({"prompt": ["ab#c?", "cd#e?", "ef#g?", "gh#a?"]})
    args = GRPOConfig(
        output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=P * G, num_generations=G,
        max_completion_length=6, learning_rate=1e-2, logging_steps=1, report_to="none", save_strategy="no",
        use_cpu=True, seed=seed, dataloader_num_workers=0, disable_tqdm=True,
    )
    logs = KeepLogs()
    trainer = Recording(
        model=model, reward_funcs=reward, args=args, train_dataset=dataset, processing_class=tokenizer,
        callbacks=[logs], **trainer_kwargs,
    )
    logs.trainer = trainer
    return trainer, logs


def completion_logps(weights, tensors) -> torch.Tensor:
    """log π(completion token) [N, T] under `weights`: a plain forward of the tiny model, independent of TRL."""
    model, _ = tiny_model_and_tokenizer()
    model.load_state_dict(weights)
    model.eval()
    ids = torch.cat([tensors["prompt_ids"], tensors["completion_ids"]], dim=1)
    mask = torch.cat([tensors["prompt_mask"], tensors["completion_mask"]], dim=1)
    t = tensors["completion_ids"].size(1)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits[:, -t - 1 : -1].float()
    return logits.log_softmax(-1).gather(-1, tensors["completion_ids"].unsqueeze(-1)).squeeze(-1)


@pytest.mark.parametrize(("estimator", "budget", "shift"), [("grpo", 1.0, 0.0), ("rloo", 2.0, 0.5)])
def test_two_step_run_optimises_rbctls_advantages(tmp_path, estimator, budget, shift) -> None:
    trainer, logs = make_recording_trainer(tmp_path, estimator=estimator, budget=budget, shift=shift)
    trainer.train()

    assert len(trainer.generated) == 2 and len(trainer.optimised) == 2  # one generation batch per step
    mixed_groups = 0
    for step, (gen, opt) in enumerate(zip(trainer.generated, trainer.optimised)):
        rewards = gen["rewards"].view(P, G)
        expected = compute_advantages(rewards, estimator, budget=budget, shift=shift)  # [P, G]
        mixed_groups += int((rewards != rewards[:, :1]).any(dim=1).sum())
        # compute_loss saw the generation batch reshuffled: match rows by (prompt, completion) tokens.
        by_key = dict(zip(gen["keys"], expected.flatten().tolist()))
        assert sorted(opt["keys"]) == sorted(gen["keys"])
        assert_close(opt["advantages"], torch.tensor([by_key[k] for k in opt["keys"]]))
        # TRL's completion log holds the advantages that were optimised, not its own formula's.
        assert_close(torch.tensor(gen["logged_advantages"][-P * G :]), expected.flatten())
        # rbctl/kappa and rbctl/adv_gap beside TRL's metrics, from the same rewards and advantages.
        log = logs.logs[step]
        assert "reward" in log and "rbctl/kappa" in log and "rbctl/adv_gap" in log
        k = nanmean_or_none(kappa(rewards, expected))
        gap = advantage_gap(rewards == 1, expected)
        for name, value in [("rbctl/kappa", k), ("rbctl/adv_gap", gap)]:
            assert (log[name] is None) if value is None else log[name] == pytest.approx(value)
    assert mixed_groups > 0  # else every advantage is 0 and the comparison above proves little


def test_kappa_eff_is_the_measured_sharpening_of_each_step(tmp_path) -> None:
    # kappa_eff_every=1 (the default): every step logs rbctl/kappa_eff, computed from log π before and
    # after that step's optimizer update on the step's own completions. Recomputed here by hand.
    trainer, logs = make_recording_trainer(tmp_path, estimator="grpo", budget=1.0)
    trainer.train()
    assert len(logs.logs) == 2
    measured = 0
    for step, gen in enumerate(trainer.generated):
        rewards = gen["rewards"].view(P, G)
        cmask = gen["tensors"]["completion_mask"].float()
        old = completion_logps(gen["weights_before"], gen["tensors"])
        new = completion_logps(gen["weights_after"], gen["tensors"])
        d = ((new - old) * cmask).sum(dim=1).view(P, G)
        expected = nanmean_or_none(kappa_eff(rewards, d))
        logged = logs.logs[step]["rbctl/kappa_eff"]
        if expected is None:
            assert logged is None
        else:
            measured += 1
            assert logged is not None and torch.isfinite(torch.tensor(logged))
            assert logged == pytest.approx(expected, rel=1e-3, abs=1e-5)
            assert abs(expected) > 1e-4  # the step moved the policy: the comparison is not 0 == 0
    assert measured > 0  # at least one step had a mixed group


@pytest.mark.slow
def test_kappa_eff_is_null_without_mixed_groups_and_follows_its_period(tmp_path) -> None:
    trainer, logs = make_recording_trainer(tmp_path, reward=never, estimator="grpo", budget=1.0)
    trainer.train()
    assert [log["rbctl/kappa_eff"] for log in logs.logs] == [None, None]
    assert [log["rbctl/kappa"] for log in logs.logs] == [None, None]
    assert [log["rbctl/adv_gap"] for log in logs.logs] == [None, None]

    trainer, logs = make_recording_trainer(tmp_path, estimator="grpo", budget=1.0, kappa_eff_every=2)
    trainer.train()
    assert "rbctl/kappa_eff" not in logs.logs[0] and "rbctl/kappa_eff" in logs.logs[1]

    trainer, logs = make_recording_trainer(tmp_path, estimator="grpo", budget=1.0, kappa_eff_every=0)
    trainer.train()
    assert all("rbctl/kappa_eff" not in log for log in logs.logs)


def test_budget_changes_what_trl_would_have_used(tmp_path) -> None:
    # Same run, same rewards: K of G correct gives the budget's gap B/K, not GRPO's 1/std.
    trainer, _ = make_recording_trainer(tmp_path, estimator="grpo", budget=1.0)
    trainer.train()
    rewards = trainer.generated[0]["rewards"].view(P, G)
    k = rewards.sum(dim=1)
    mixed = (k > 0) & (k < G)
    assert mixed.any()
    expected = compute_advantages(rewards, "grpo", budget=1.0)
    gaps = (expected * rewards).sum(1) / k - (expected * (1 - rewards)).sum(1) / (G - k)
    assert_close(gaps[mixed], 1.0 / k[mixed])  # B/K
    trl_default = (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-4)
    assert not torch.allclose(expected[mixed], trl_default[mixed])


def test_conflicting_trl_settings_are_refused(tmp_path) -> None:
    from trl import GRPOConfig

    model, tokenizer = tiny_model_and_tokenizer()
    from datasets import Dataset

    dataset = Dataset.from_dict({"prompt": ["ab?"] * 4})
    base = dict(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=2, report_to="none", use_cpu=True)
    with pytest.raises(UserError, match="scale_rewards='none'.*estimator='dr_grpo'"):
        rb_trl.BudgetGRPOTrainer(model=model, reward_funcs=contains_a, processing_class=tokenizer,
                                 train_dataset=dataset, args=GRPOConfig(**base, scale_rewards="none"))
    with pytest.raises(UserError, match="sum_then_normalize"):
        rb_trl.BudgetGRPOTrainer(model=model, reward_funcs=contains_a, processing_class=tokenizer, train_dataset=dataset,
                                 args=GRPOConfig(**base, multi_objective_aggregation="normalize_then_sum"))
    # Bad rbctl arguments fail before TRL builds anything.
    with pytest.raises(UserError, match="unknown estimator"):
        rb_trl.BudgetGRPOTrainer(model=model, estimator="ppo")
    with pytest.raises(UserError, match="budget must be > 0"):
        rb_trl.BudgetGRPOTrainer(model=model, budget=0.0)
    with pytest.raises(UserError, match="kappa_eff_every must be an integer >= 0"):
        rb_trl.BudgetGRPOTrainer(model=model, kappa_eff_every=-1)


def test_unsupported_trl_version_names_the_range(monkeypatch) -> None:
    fake = types.ModuleType("trl")
    fake.__version__ = "0.29.1"
    monkeypatch.setitem(sys.modules, "trl", fake)
    monkeypatch.delitem(sys.modules, "rbctl.integrations.trl")
    with pytest.raises(UserError, match=r"supports trl>=1\.0,<1\.17 \(tested with trl==1\.16\.0\); found trl==0\.29\.1"):
        import rbctl.integrations.trl  # noqa: F401
    with pytest.raises(UserError, match="found trl==1.17.0"):
        require_version("trl", "1.17.0", rb_trl.SUPPORTED_TRL, rb_trl.TESTED_TRL)
