"""The comparison arms wired into the config and the trainer (docs/method.md, "Other arms"): each
trains, logs its metrics and composes where defined; with every arm off the objective is GRPO's
advantages and PPO's clipped surrogate (hand values); the entropy mask restricts the gradient to its tokens; dynamic sampling keeps mixed groups
and counts generated rollouts; a sweep mixing dynamic and fixed batches is refused; the shipped
arms sweep validates."""

from __future__ import annotations

import json
import math

import pytest
import torch
import yaml
from safetensors.torch import load_file

from rbctl.algo.arms import dynamic_sampling_keep
from rbctl.algo import registry
from rbctl.config.train import TrainConfig, load_train_config
from rbctl.errors import UserError
from rbctl.rollout.base import Sample
from rbctl.sweep.ablate import load_sweep
from rbctl.sweep.grid import COMPUTE_KEYS
from rbctl.train.loop import train
from rbctl.train.metric_names import STEP_METRICS
from rbctl.train.objective import Objective
from rbctl.train.batch import Groups
from rbctl.train.sampling import collect_groups
from tests.conftest import TINY_TRAIN

TIMING = ("time/", "throughput/")
quiet = dict(progress=False, log=lambda *a: None)


def _objective(cfg):
    """The arm's objective as the trainer builds it: from its `algo` section and the run's seed."""
    return Objective(cfg.algo, seed=cfg.seed)


def _lines(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _weights(run_dir, step):
    return load_file(str(run_dir / "checkpoints" / f"step_{step:06d}" / "model" / "model.safetensors"))


# Settings that make a method act within two tiny steps (a method not here runs with its defaults; a
# required setting without a value here is 2).
ACTING = {"clip_cov": {"ratio": 0.2, "lb": -5.0}, "kl_cov": {"ratio": 0.2}, "entropy_mask": {"rho": 0.2}}


def method_arm(m: registry.Method) -> tuple[dict, list[str]]:
    """The overrides that turn registered method `m` on, and the metrics it must log (its records')."""
    given = {k: 2 for k, s in m.settings.items() if s.default is registry.REQUIRED} | ACTING.get(m.name, {})
    if m.kind == "sampling_hook":
        overrides = {f"rollout__{m.name}": "true"}
    elif m.kind in registry.SELECTED:
        overrides = {f"algo__{m.kind}": m.name, **{f"algo__{m.name}__{k}": v for k, v in given.items()}}
    else:  # an optional block: on with its settings (a first one given its default where none is set)
        given = given or {k: s.default for k, s in list(m.settings.items())[:1]}
        overrides = {f"algo__{m.name}__{k}": v for k, v in given.items()}
    return overrides, [d.key for d in m.metrics]


# One arm per registered method but the base (GRPO's advantages, PPO's clip), and arms that compose methods.
ARMS = {m.name: method_arm(m) for m in registry.METHODS.values()
        if m.name not in (registry.DEFAULT_POLICY_LOSS, TrainConfig().algo.estimator)}
ARMS |= {
    "unlikeliness_budget": ({"algo__unlikeliness__beta": 0.25, "algo__budget": 1.0}, ["reward/shaped_mean"]),
    "mask_kl_cov_budget": ({"algo__entropy_mask__rho": 0.5, "algo__policy_loss": "kl_cov",
                            "algo__budget": 1.0, "algo__estimator": "rloo"}, ["tokens/frac_entropy_mask"]),
}


@pytest.mark.parametrize("arm", list(ARMS))
def test_each_arm_trains_two_steps_without_nan_and_logs_its_metrics(arm, tiny_config, tmp_path):
    overrides, keys = ARMS[arm]
    run = tmp_path / arm
    train(tiny_config(steps=2, save_every=2, **overrides), run, **quiet)
    lines = _lines(run)
    assert [r["step"] for r in lines] == [1, 2]
    for r in lines:
        for k in ["loss/total", "grad_norm", "entropy", "kappa", "rollout/generated", "clip/frac_low", "clip/frac_high", *keys]:
            assert r.get(k) is not None, (k, r)
        for k, v in r.items():
            assert not (isinstance(v, float) and math.isnan(v)), (k, v)
        assert r["nonfinite/skipped"] == 0
        assert r["rollout/generated"] >= 4 * 4  # P·G
        assert [k for k in r if not any(m.matches(k) for m in STEP_METRICS)] == []  # docs/metrics.md lists it
    last = lines[-1]
    if arm == "clip_cov":
        assert any(r["policy_loss/frac_cov_clipped"] > 0 for r in lines)
    if arm == "kl_cov":
        assert last["policy_loss/frac_kl_penalised"] == pytest.approx(0.2, abs=0.02)  # ⌊0.2·#valid⌋ tokens
    if arm == "entropy_mask":
        assert 0.15 <= last["tokens/frac_entropy_mask"] <= 0.5  # top 20% (ties at τ kept)
    if arm.startswith("unlikeliness"):
        assert all(r["reward/shaped_mean"] <= r["reward/mean"] for r in lines)  # r·(1 − β·rank/G) <= r


def test_with_every_arm_off_the_objective_is_grpo_and_ppos_clipped_surrogate():
    obj = _objective(load_train_config(None, []))  # policy_loss clip, no mask, no reward transform
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    assert obj.shape_rewards(rewards, samples=None) is rewards
    # GRPO: mean 0.5, unbiased std sqrt(4·0.25/3) = sqrt(1/3): A = ±0.5/(sqrt(1/3) + 1e-6)
    a = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    torch.testing.assert_close(obj.advantages(rewards), torch.tensor([[a, -a, -a, a]]))
    mask = torch.ones(2, 3)
    assert obj.token_masks(torch.rand(2, 3), mask) == {} and not obj.needs_entropy and not obj.shapes_rewards
    # PPO's surrogate (Schulman et al. 2017, eq. 7) with ε_low = 0.2, ε_high = 0.28: loss −min(ρA, clip(ρ)A)
    # row A = 2:    ρ 1.5 -> −min(3, 2.56) = −2.56;  ρ 1.1 -> −2.2;  ρ 0.5 -> −min(1, 1.6) = −1
    # row A = −0.5: ρ 0.5 -> −min(−0.25, −0.4) = 0.4;  ρ 0.9 -> 0.45;  ρ 1.5 -> −min(−0.75, −0.64) = 0.75
    old = torch.tensor([[-1.0, -2.0, -0.3], [-4.0, -0.1, -1.2]])
    logp = old + torch.tensor([[1.5, 1.1, 0.5], [0.5, 0.9, 1.5]]).log()
    out = obj.policy_loss(logp, old, torch.tensor([2.0, -0.5]), mask, draw=(1, 0, 0))
    torch.testing.assert_close(out.loss_mat, torch.tensor([[-2.56, -2.2, -1.0], [0.4, 0.45, 0.75]]))
    assert set(out.token_stats) == {"clipped_low", "clipped_high", "clipped_dual"}
    assert not out.token_stats["clipped_dual"].any()  # no ρ above the dual clip's c = 3
    assert out.token_stats["clipped_high"].tolist() == [[True, False, False], [False, False, False]]
    assert out.token_stats["clipped_low"].tolist() == [[False, False, False], [True, False, False]]


def test_entropy_quantile_one_keeps_every_token_and_changes_nothing(tiny_config, tmp_path):
    train(tiny_config(steps=1), tmp_path / "off", **quiet)
    train(tiny_config(steps=1, algo__entropy_mask__rho=1.0), tmp_path / "all", **quiet)
    a, b = _lines(tmp_path / "off")[0], _lines(tmp_path / "all")[0]
    assert b["tokens/frac_entropy_mask"] == 1.0
    for k in a:
        if not k.startswith(TIMING):
            assert a[k] == b[k], k
    wa, wb = _weights(tmp_path / "off", 1), _weights(tmp_path / "all", 1)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_entropy_mask_gives_gradient_only_to_the_high_entropy_tokens():
    cfg = load_train_config(None, ["algo.entropy_mask.rho=0.4"])
    obj = _objective(cfg)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    entropy = torch.tensor([[0.1, 0.9, 0.5], [0.7, 0.2, 5.0]])  # 5.0 is padding: never counted
    # valid entropies sorted: 0.1 0.2 0.5 0.7 0.9; τ = quantile(0.6) = 0.5 + 0.4·(0.7 − 0.5) = 0.58
    logp = torch.full((2, 3), -1.0, requires_grad=True)
    adv = torch.tensor([1.0, -1.0])
    out = obj.policy_loss(logp, logp.detach(), adv, mask, entropy)
    (out.loss_mat * mask).sum().backward()
    has_grad = logp.grad != 0
    assert has_grad.tolist() == [[False, True, False], [True, False, False]]
    # at ρ = exp(0) = 1 the clip surrogate's gradient is −A on the kept tokens
    assert logp.grad[0, 1].item() == pytest.approx(-1.0) and logp.grad[1, 0].item() == pytest.approx(1.0)
    assert out.token_stats["tokens/frac_entropy_mask"].tolist() == has_grad.tolist()
    # the same batch without the mask: every valid token gets gradient
    logp.grad = None
    plain = _objective(load_train_config(None, []))
    assert plain.policy_loss(logp, logp.detach(), adv, mask, entropy).token_stats.keys() == {"clipped_low", "clipped_high",
                                                                                           "clipped_dual"}
    (plain.policy_loss(logp, logp.detach(), adv, mask, entropy).loss_mat * mask).sum().backward()
    assert (logp.grad != 0).tolist() == mask.bool().tolist()


def test_clip_cov_pick_is_seeded_by_the_draw_and_leaves_the_global_rng_alone():
    cfg = load_train_config(None, ["algo.policy_loss=clip_cov", "algo.clip_cov.ratio=0.3", "algo.clip_cov.lb=-10"])
    obj = _objective(cfg)
    torch.manual_seed(0)
    logp, old = torch.randn(4, 6), torch.randn(4, 6) * 0.01
    logp = old + logp * 0.01
    adv, mask = torch.tensor([1.0, -1.0, 0.5, -0.5]), torch.ones(4, 6)
    state = torch.get_rng_state()
    a = obj.policy_loss(logp, old, adv, mask, draw=(3, 0, 0)).token_stats["cov_clipped"]
    b = obj.policy_loss(logp, old, adv, mask, draw=(3, 0, 0)).token_stats["cov_clipped"]
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(a, b) and a.sum().item() == 7  # ⌊0.3·24⌋ of the candidates
    picks = {tuple(obj.policy_loss(logp, old, adv, mask, draw=(s, 0, 0)).token_stats["cov_clipped"].flatten().tolist())
             for s in range(8)}
    assert len(picks) > 1


def test_policy_loss_parameters_come_from_the_config():
    cfg = load_train_config(None, ["algo.policy_loss=gspo", "algo.clip_low=0.1"])
    assert _objective(cfg).loss_params == {"clip_low": 3e-4, "clip_high": 4e-4}  # GSPO's own ε, not algo.clip_low
    assert cfg.algo.loss_agg == "seq-mean-token-mean"  # forced by the registry
    cfg = load_train_config(None, ["algo.policy_loss=kl_cov", "algo.kl_cov.ratio=0.01", "algo.kl_cov.coef=0.5"])
    assert _objective(cfg).loss_params == {"ratio": 0.01, "coef": 0.5}
    cfg = load_train_config(None, ["algo.policy_loss=clip_cov", "algo.clip_high=0.3"])
    assert _objective(cfg).loss_params == {"clip_low": 0.2, "clip_high": 0.3, "ratio": 2e-4, "lb": 1.0, "ub": 5.0}
    assert cfg.algo.clip_cov.ratio == 2e-4 and cfg.algo.kl_cov is None  # the selected loss's block, resolved
    cfg = load_train_config(None, ["algo.estimator=passk", "algo.passk.k=3"])
    obj = _objective(cfg)
    assert obj.estimator_params == {"k": 3}
    r = torch.tensor([[1.0, 0, 0, 0, 0, 0, 0, 0]])
    from rbctl.algo import compute_advantages

    assert torch.equal(obj.advantages(r), compute_advantages(r, "passk", k=3))


def test_unlikeliness_ranks_by_the_samplers_mean_token_logprob():
    obj = _objective(load_train_config(None, ["algo.unlikeliness.beta=0.5", "rollout.group_size=4"]))

    def s(lps):
        return Sample(0, [1] * len(lps), "", True, lps)

    # mean log-probs: -1.0, -0.25, -3.0, -0.5 -> ranks (ascending) 1, 3, 0, 2
    samples = [[s([-1.0, -1.0]), s([-0.25]), s([-2.0, -4.0]), s([-0.5, -0.5, -0.5])]]
    r = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    shaped = obj.shape_rewards(r, samples)
    assert shaped.tolist() == [[1 - 0.5 * 1 / 4, 1 - 0.5 * 3 / 4, 1.0, 0.0]]
    off = _objective(load_train_config(None, []))
    assert off.shape_rewards(r, samples) is r


def _fake_round(patterns):
    """sample_round(rnd) returning round rnd's groups with the given correct counts (G = 4)."""

    def sample_round(rnd):
        ks = patterns[rnd]
        correct = torch.tensor([[i < k for i in range(4)] for k in ks])
        return Groups(idx=[100 * rnd + p for p in range(len(ks))], samples=[[f"{rnd}.{p}"] * 4 for p in range(len(ks))],
                      correct=correct, grader_failures=rnd, generated=4 * len(ks))

    return sample_round


def test_dynamic_sampling_keeps_mixed_groups_and_counts_what_it_generated():
    rounds = [[0, 2, 4], [1, 4, 0], [3, 3, 3]]
    g = collect_groups(_fake_round(rounds), 3, hooks=[dynamic_sampling_keep], max_rounds=5)
    assert g.idx == [1, 100, 200] and g.rounds == 3 and g.generated == 36 and g.topped_up == 0
    assert g.grader_failures == 0 + 1 + 2
    k = g.correct.sum(dim=1)
    assert ((k > 0) & (k < 4)).all()
    # rounds run out: topped up with filtered-out groups in sampling order
    g = collect_groups(_fake_round(rounds), 3, hooks=[dynamic_sampling_keep], max_rounds=1)
    assert g.idx == [1, 100, 0] and g.topped_up == 1 and g.generated == 24
    # off: round 0 as sampled
    g = collect_groups(_fake_round(rounds), 3, hooks=[], max_rounds=5)
    assert g.idx == [0, 1, 2] and g.generated == 12 and g.rounds == 1


def test_dynamic_sampling_run_keeps_only_mixed_groups(tiny_config, tmp_path):
    cfg = tiny_config(steps=2, save_every=2, rollout__dynamic_sampling="true", rollout__max_resample_rounds=20)
    train(cfg, tmp_path / "dyn", **quiet)
    train(tiny_config(steps=1), tmp_path / "plain", **quiet)
    lines, plain = _lines(tmp_path / "dyn"), _lines(tmp_path / "plain")[0]
    for r in lines:
        assert r["rollout/generated"] >= 4 * 4
        assert r["rollout/topped_up"] == 0
        assert r["groups/frac_mixed"] == 1.0 and r["groups/frac_all_correct"] == r["groups/frac_all_wrong"] == 0
        assert r["rollout/generated"] == 16 * r["rollout/rounds"]
    # round 0 is the fixed-batch run's sampling: where it had unmixed groups, more was generated
    assert plain["rollout/generated"] == 16
    assert (lines[0]["rollout/generated"] > 16) == (plain["groups/frac_mixed"] < 1)


@pytest.mark.parametrize("overrides, message", [
    (["algo.estimator=maxrl", "algo.budget=1"], "does not compose with algo.budget"),
    (["algo.estimator=passk", "algo.passk.k=2", "algo.budget=1"], "does not compose with algo.budget"),
    (["algo.estimator=passk"], "config key 'algo.passk.k' is required"),
    (["algo.estimator=passk", "algo.passk.k=9"], r"passk.k=9 must be <= rollout.group_size=8"),
    (["algo.passk.k=2"], "algo.passk holds the settings of algo.estimator passk, but algo.estimator is grpo"),
    (["algo.kl_cov.ratio=0.1"], "algo.kl_cov holds the settings of algo.policy_loss kl_cov, but algo.policy_loss is clip"),
    (["algo.estimator=passk", "algo.passk.k=2", "algo.unlikeliness.beta=0.25"], "does not compose with algo.estimator passk"),
    (["algo.policy_loss=gspo", "algo.loss_agg=token-mean"], "needs algo.loss_agg seq-mean-token-mean"),
    (["algo.policy_loss=ppo"], "policy_loss"),
    (["algo.entropy_mask.rho=0"], "algo.entropy_mask.rho"),
    (["algo.unlikeliness.beta=1.5"], "algo.unlikeliness.beta"),
    (["algo.unlikeliness.beta=0"], "algo.unlikeliness.beta"),  # off is null, not 0
    (["algo.policy_loss=clip_cov", "algo.clip_cov.lb=5", "algo.clip_cov.ub=1"], r"config key 'algo.clip_cov': lb must be < ub, got 5.0 and 1.0"),
])
def test_invalid_combinations_are_one_line_config_errors(overrides, message):
    with pytest.raises(UserError, match=message) as e:
        load_train_config(None, overrides)
    assert "\n" not in str(e.value)


def test_budget_composes_with_the_arms_that_allow_it():
    for extra in (["algo.policy_loss=clip_cov"], ["algo.policy_loss=gspo"], ["algo.entropy_mask.rho=0.2"],
                  ["algo.unlikeliness.beta=0.25"], ["rollout.dynamic_sampling=true"]):
        assert load_train_config(None, ["algo.budget=1", *extra]).algo.budget == 1.0


def _write_sweep(tmp_path, arms, **extra):
    (tmp_path / "base.yaml").write_text(yaml.safe_dump({**TINY_TRAIN, "steps": 2}))
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"name": "t", "base": "base.yaml", "arms": arms, **extra}, sort_keys=False))
    return path


def test_sweep_check_refuses_mixing_dynamic_and_fixed_batches(tmp_path):
    path = _write_sweep(tmp_path, {"grpo": {}, "dapo": {"rollout.dynamic_sampling": True}})
    with pytest.raises(UserError, match=r"arm 'dapo' sets rollout.dynamic_sampling=True.*generated rollouts.*"
                                        r"allow_unequal_compute"):
        load_sweep(path)
    path = _write_sweep(tmp_path, {"a": {"rollout.dynamic_sampling": True},
                                   "b": {"rollout.dynamic_sampling": True, "rollout.max_resample_rounds": 9}})
    with pytest.raises(UserError, match="max_resample_rounds=9"):
        load_sweep(path)
    path = _write_sweep(tmp_path, {"a": {"rollout.dynamic_sampling": True}, "b": {"rollout.dynamic_sampling": True,
                                                                                   "algo.budget": 1.0}})
    assert len(load_sweep(path)[1]) == 2  # both dynamic, same rounds: equal
    path = _write_sweep(tmp_path, {"grpo": {}, "dapo": {"rollout.dynamic_sampling": True}}, allow_unequal_compute=True)
    assert load_sweep(path)[1]["dapo"].rollout.dynamic_sampling


def test_the_shipped_arms_sweep_is_valid_and_otherwise_equal_compute():
    from rbctl.config.presets import preset
    from rbctl.sweep.grid import _flat_get

    sweep, configs = load_sweep(preset("ablate_arms.yaml"))
    assert len(sweep.seeds) >= 5 and sweep.eval.n >= 8
    assert sweep.base == "fixpoint.yaml"  # the plateau task, as the main sweep
    a = {name: c.algo for name, c in configs.items()}
    assert a["grpo"].budget is None and a["grpo_budget"].budget == 1.0
    assert {a["grpo_entropy_static"].entropy.mode, a["grpo_entropy_adaptive"].entropy.mode} == {"static", "adaptive"}
    assert {a[n].policy_loss for n in ("clip_cov", "kl_cov", "gspo")} == {"clip_cov", "kl_cov", "gspo"}
    assert a["clip_cov"].clip_cov.ratio == 2e-4 and a["kl_cov"].kl_cov.ratio == 2e-3
    assert (a["gspo"].gspo.clip_low, a["gspo"].gspo.clip_high) == (3e-4, 4e-4)
    assert a["entropy_mask"].entropy_mask.rho == 0.2
    assert a["passk"].estimator == "passk" and a["passk"].passk.k == 4
    assert a["maxrl"].estimator == "maxrl" and a["unlikeliness"].unlikeliness.beta == 0.25
    assert configs["dynamic_sampling"].rollout.dynamic_sampling
    # allow_unequal_compute is set for the dynamic-sampling arm only: every other compute key is equal
    for key in COMPUTE_KEYS:
        assert len({json.dumps(_flat_get(c.model_dump(), key)) for c in configs.values()}) == 1, key
    assert sum(c.rollout.dynamic_sampling for c in configs.values()) == 1
