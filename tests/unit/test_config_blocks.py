"""One record per method (rbctl.algo.registry): a method's settings are its own `algo` block, built
from its record, whose keys are exactly its function's keyword parameters (defaults in the record
only); the choices are the registry's names; an arm's variant is labelled from the registry; two
arms of a sweep with one label are refused."""

from __future__ import annotations

import inspect
from typing import get_args

import pytest
import yaml

from rbctl import algo
from rbctl.algo import registry
from rbctl.algo.losses import LOSS_AGG
from rbctl.algo.registry import Method, MethodContext, register, setting, settings_problems
from rbctl.config.base import Section
from rbctl.config.methods import has_block, method_params
from rbctl.config.sweep import arm_variant, variant_parts
from rbctl.config.train import AlgoCfg, TrainConfig, load_train_config
from rbctl.errors import UserError
from rbctl.sweep.ablate import load_sweep
from tests.conftest import TINY_TRAIN


def test_the_choices_are_the_registrys_names():
    fields = AlgoCfg.model_fields
    assert get_args(fields["estimator"].annotation) == tuple(registry.ESTIMATORS)
    assert get_args(fields["policy_loss"].annotation) == tuple(registry.POLICY_LOSSES)
    assert get_args(get_args(fields["loss_agg"].annotation)[0]) == tuple(LOSS_AGG)


def test_every_shipped_block_holds_exactly_its_functions_parameters():
    registry.check_settings()  # also runs when the schema is built; here it must not raise
    blocks = {n for n, m in registry.METHODS.items() if has_block(m)}
    # a block for each optional method and each selectable one with settings; none for a sampling hook
    assert blocks == {n for n, m in registry.METHODS.items()
                      if m.kind in registry.OPTIONAL or (m.kind in registry.SELECTED and m.settings)}
    assert blocks <= set(AlgoCfg.model_fields)
    for name in blocks:  # the defaults live in the records: no function declares one for a setting
        params = algo.keyword_params(registry.METHODS[name].fn)
        block = _section_in(AlgoCfg.model_fields[name].annotation)
        assert set(block.model_fields) == set(registry.METHODS[name].settings), name
        assert all(params[k] is inspect.Parameter.empty for k in block.model_fields), name
    assert _section_in(AlgoCfg.model_fields["clip_cov"].annotation).model_fields["ratio"].default == 2e-4


def _loss(logp, old_logp, advantages, mask, *, clip_low: float, clip_high: float, width: float, depth: float = 1.0):
    raise AssertionError("never called")


@pytest.mark.parametrize("settings, message", [
    ({"width": setting(1.0), "depth": setting(), "extra": setting(0.0)}, "settings extra are not keyword-only parameters of _loss"),
    ({"depth": setting()}, "_loss takes width, which has no Setting"),
    ({"width": setting(1.0), "depth": setting(1.0)}, "_loss declares a default for depth"),
])
def test_a_record_that_does_not_match_its_function_is_named(settings, message):
    m = Method("wide", "policy_loss", _loss, "a test loss", settings=settings, shared=("clip_low", "clip_high"))
    assert any(message in p for p in settings_problems(m))


def test_register_refuses_a_taken_name_label_or_kind():
    with pytest.raises(ValueError, match="method 'gspo' is already registered"):
        register(Method("gspo", "policy_loss", _loss, "another gspo"))
    with pytest.raises(ValueError, match="variant label 'entropy_mask' is taken"):
        register(Method("mask2", "token_mask", _loss, "a mask", label="entropy_mask"))
    with pytest.raises(ValueError, match="variant label 'budget' is taken"):
        register(Method("budget2", "reward_transform", _loss, "a transform", label="budget"))
    with pytest.raises(ValueError, match="kind 'optimizer' is not one of"):
        register(Method("adam2", "optimizer", _loss, "not a kind"))
    with pytest.raises(ValueError, match="needs hidden_states, not one of entropy, ref_logp, lengths, generator"):
        register(Method("deep", "policy_loss", _loss, "a loss", needs=("hidden_states",)))
    with pytest.raises(ValueError, match="a estimator gets no context"):
        register(Method("est2", "estimator", _loss, "an estimator", needs=("entropy",)))
    assert not {"mask2", "adam2", "deep", "est2"} & set(registry.METHODS)


def test_a_need_is_a_keyword_parameter_and_no_setting():
    m = Method("wide", "policy_loss", _loss, "a test loss", settings={"width": setting(1.0), "depth": setting()},
               shared=("clip_low", "clip_high"), needs=("entropy",))
    assert any("_loss needs entropy but takes no such keyword-only parameter" in p for p in settings_problems(m))


def test_method_params_are_the_block_plus_the_ppo_clip_where_the_block_has_none():
    a = load_train_config(None, ["algo.policy_loss=gspo", "algo.gspo.clip_high=1e-3", "algo.clip_low=0.1"]).algo
    assert method_params(a, "gspo") == {"clip_low": 3e-4, "clip_high": 1e-3}
    a = load_train_config(None, ["algo.clip_low=0.1"]).algo
    assert method_params(a, "clip") == {"clip_low": 0.1, "clip_high": 0.28, "clip_ratio_c": 3.0}
    assert method_params(a, "grpo") == {}
    a = load_train_config(None, ["algo.estimator=passk", "algo.passk.k=3"]).algo
    assert method_params(a, "passk") == {"k": 3}


def test_every_selectable_method_runs_with_its_resolved_defaults():
    import torch

    logp = torch.log(torch.tensor([[0.5, 0.25], [0.9, 0.1]]))
    mask = torch.ones(2, 2)
    for name in algo.POLICY_LOSSES:
        a = load_train_config(None, [f"algo.policy_loss={name}"]).algo
        ctx = MethodContext(entropy=torch.rand(2, 2), ref_logp=logp, lengths=mask.sum(-1), generator=torch.Generator())
        out = algo.compute_policy_loss(name, logp, logp.detach(), torch.tensor([1.0, -1.0]), mask,
                                       **method_params(a, name), **ctx.args_for(algo.get_policy_loss(name)))
        assert out.loss_mat.shape == (2, 2)
    for name, m in algo.ESTIMATORS.items():
        extra = [f"algo.{name}.{k}=2" for k, s in m.settings.items() if s.default is registry.REQUIRED]  # k of pass@k
        a = load_train_config(None, [f"algo.estimator={name}", *extra]).algo
        adv = algo.compute_advantages(torch.tensor([[1.0, 0.0, 0.0, 1.0]]), name, **method_params(a, name))
        assert adv.shape == (1, 4)


def test_only_the_selected_methods_block_is_filled_in_and_others_are_refused():
    a = load_train_config(None, ["algo.policy_loss=kl_cov"]).algo
    assert (a.kl_cov.ratio, a.kl_cov.coef) == (2e-4, 1.0)
    assert a.clip_cov is None and a.gspo is None and a.passk is None
    with pytest.raises(UserError, match="algo.gspo holds the settings of algo.policy_loss gspo, but algo.policy_loss is kl_cov"):
        load_train_config(None, ["algo.policy_loss=kl_cov", "algo.gspo.clip_low=0.1"])
    with pytest.raises(UserError, match=r"config key 'algo.clip_cov': lb must be < ub, got 6.0 and 5.0$"):
        load_train_config(None, ["algo.policy_loss=clip_cov", "algo.clip_cov.lb=6"])
    # the resolved config reloads as itself (a run directory's config.yaml)
    cfg = load_train_config(None, ["algo.policy_loss=clip_cov", "algo.entropy_mask.rho=0.3"])
    again = TrainConfig.model_validate(yaml.safe_load(yaml.safe_dump(cfg.model_dump(mode="json"))))
    assert again == cfg
    # a block written as null accepts --set keys below it
    path_cfg = {**TINY_TRAIN, "algo": {"policy_loss": "clip_cov", "clip_cov": None}}
    from rbctl.config.base import apply_overrides

    data = apply_overrides(path_cfg, ["algo.clip_cov.ratio=0.5"])
    assert TrainConfig.model_validate(data).algo.clip_cov.ratio == 0.5


def _section_in(annotation):
    """The Section class of a field's annotation (`X` or `Optional[X]`), or None."""
    return next((a for a in (annotation, *get_args(annotation)) if isinstance(a, type) and issubclass(a, Section)), None)


def _schema_default(dotted: str):
    model, *path, last = [TrainConfig, *dotted.split(".")]
    for part in path:
        model = _section_in(model.model_fields[part].annotation)
    return model.model_fields[last].get_default(call_default_factory=True)


def test_variant_parts_are_off_at_the_schema_defaults_and_cover_every_optional_method():
    parts = variant_parts()
    for label, key, off in parts:
        assert _schema_default(key) == off, key
    # the budget, the entropy bonus, the policy loss; then every token mask, reward transform and sampling hook
    optional = [m.variant for kind in ("token_mask", "reward_transform", "sampling_hook") for m in registry.of_kind(kind)]
    assert [label for label, _, _ in parts] == ["budget", "entropy_{}", "{}", *optional]
    assert {"entropy_mask", "unlikeliness", "dynamic_sampling"} <= set(optional)
    assert arm_variant(load_train_config(None, []).algo.model_dump()) == "base"


def test_each_arm_is_labelled_from_its_resolved_config():
    def variant(*sets):
        cfg = load_train_config(None, list(sets))
        return arm_variant(cfg.algo.model_dump(), cfg.rollout.model_dump())

    for name in algo.POLICY_LOSSES:  # a policy loss names itself; the default, clip, is the base
        assert variant(f"algo.policy_loss={name}") == ("base" if name == "clip" else name)
    assert variant("algo.budget=1") == "budget"
    assert variant("algo.entropy.mode=adaptive") == "entropy_adaptive"
    assert variant("algo.entropy_mask.rho=0.2") == "entropy_mask"
    assert variant("algo.unlikeliness.beta=0.25") == "unlikeliness"
    assert variant("rollout.dynamic_sampling=true") == "dynamic_sampling"
    assert variant("algo.estimator=passk", "algo.passk.k=2") == "base"  # the estimator is the baseline
    assert variant("rollout.dynamic_sampling=true", "algo.unlikeliness.beta=0.1", "algo.entropy_mask.rho=0.2",
                   "algo.policy_loss=kl_cov", "algo.entropy.mode=static", "algo.entropy.alpha=0.1",
                   "algo.budget=2") == "budget+entropy_static+kl_cov+entropy_mask+unlikeliness+dynamic_sampling"


def _sweep(tmp_path, arms, **extra):
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(TINY_TRAIN))
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"base": "base.yaml", "arms": arms, **extra}))
    return tmp_path / "s.yaml"


def test_two_arms_with_one_label_are_refused_unless_the_sweep_is_over_settings(tmp_path):
    arms = {"mask_02": {"algo.entropy_mask": {"rho": 0.2}}, "mask_05": {"algo.entropy_mask": {"rho": 0.5}}}
    with pytest.raises(UserError, match=r"arms 'mask_02' and 'mask_05' get the same label \(baseline grpo, "
                                        r"variant entropy_mask\)"):
        load_sweep(_sweep(tmp_path, arms))
    _, configs = load_sweep(_sweep(tmp_path, arms, same_labels=True))
    assert [c.algo.entropy_mask.rho for c in configs.values()] == [0.2, 0.5]
    _, configs = load_sweep(_sweep(tmp_path, {"grpo": {}, "budget": {"algo.budget": 1.0}}))
    assert sorted(configs) == ["budget", "grpo"]
