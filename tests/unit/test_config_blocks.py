"""One definition of each method seam: a method's settings are its own `algo` block whose keys are
exactly its function's keyword parameters (defaults in the block only), the choices are the
registries' names, an arm's variant is labelled from one table tied to the schema, and the flat
keys of earlier releases are one-line errors naming their new key."""

from __future__ import annotations

import inspect
from typing import Optional, get_args

import pytest
import yaml
from pydantic import Field

from rbctl import algo
from rbctl.algo.losses import LOSS_AGG
from rbctl.config.base import Section
from rbctl.config.sweep import VARIANT_PARTS, arm_variant
from rbctl.config.methods import ADDED_METHODS, SELECTORS, check_method_blocks, method_functions, method_params
from rbctl.config.train import AlgoCfg, TrainConfig, load_train_config
from tests.conftest import TINY_TRAIN


def test_the_choices_are_the_registries_names():
    fields = AlgoCfg.model_fields
    assert get_args(fields["estimator"].annotation) == tuple(algo.ESTIMATORS)
    assert get_args(fields["policy_loss"].annotation) == tuple(algo.POLICY_LOSSES)
    assert get_args(get_args(fields["loss_agg"].annotation)[0]) == tuple(LOSS_AGG)


def test_every_shipped_block_holds_exactly_its_functions_parameters():
    check_method_blocks(AlgoCfg)  # also runs at import; here it must not raise
    blocks = {n for n in method_functions() if n in AlgoCfg.model_fields}
    assert blocks == {"passk", "clip_cov", "kl_cov", "gspo", "entropy_mask", "unlikeliness"}
    # the defaults live in the blocks: no function declares one for a setting
    for name in blocks:
        params = algo.keyword_params(method_functions()[name])
        block = _section_in(AlgoCfg.model_fields[name].annotation)
        assert all(params[k] is inspect.Parameter.empty for k in block.model_fields), name


def _loss(logp, old_logp, advantages, mask, *, clip_low: float, clip_high: float, width: float, depth: float = 1.0):
    raise AssertionError("never called")


@pytest.mark.parametrize("fields, message", [
    ({"width": (float, Field(1.0)), "depth": (float, Field(1.0)), "extra": (float, Field(0.0))}, "has extra, which _loss does not take"),
    ({"depth": (float, Field(1.0))}, "lacks width, parameters of _loss"),
    ({"width": (float, Field(1.0)), "depth": (float, Field(1.0))}, "_loss declares a default for depth"),
])
def test_a_block_that_does_not_match_its_function_is_refused(fields, message):
    from pydantic import create_model

    block = create_model("WideCfg", __base__=Section, **fields)
    schema = create_model("FakeAlgo", __base__=Section, clip_low=(float, 0.2), clip_high=(float, 0.28),
                          wide=(Optional[block], None))
    with pytest.raises(TypeError, match=message):
        check_method_blocks(schema, {"wide": _loss})
    # a method with settings but no block at all
    with pytest.raises(TypeError, match=r"algo.narrow \(no block\) lacks width"):
        check_method_blocks(schema, {"narrow": _loss})


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
        out = algo.compute_policy_loss(name, logp, logp.detach(), torch.tensor([1.0, -1.0]), mask,
                                       **method_params(a, name), **({"generator": torch.Generator()}
                                                                    if "generator" in algo.get_policy_loss(name).params else {}))
        assert out.loss_mat.shape == (2, 2)
    for name in algo.ESTIMATORS:
        extra = ["algo.passk.k=2"] if name == "passk" else []
        a = load_train_config(None, [f"algo.estimator={name}", *extra]).algo
        adv = algo.compute_advantages(torch.tensor([[1.0, 0.0, 0.0, 1.0]]), name, **method_params(a, name))
        assert adv.shape == (1, 4)


def test_only_the_selected_methods_block_is_filled_in_and_others_are_refused():
    a = load_train_config(None, ["algo.policy_loss=kl_cov"]).algo
    assert (a.kl_cov.ratio, a.kl_cov.coef) == (2e-4, 1.0)
    assert a.clip_cov is None and a.gspo is None and a.passk is None
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
    for label, key, off in VARIANT_PARTS:
        assert _schema_default(key) == off, key
    labelled = {key.split(".", 1)[1] for _, key, _ in VARIANT_PARTS if key.startswith("algo.")}
    assert set(ADDED_METHODS) <= labelled  # every optional method (null = off) names itself in the variant
    selection_blocks = {n for registry in SELECTORS.values() for n in registry if n in AlgoCfg.model_fields}
    optional = {n for n, f in AlgoCfg.model_fields.items()
                if f.default is None and _section_in(f.annotation) is not None and n not in selection_blocks}
    assert optional == set(ADDED_METHODS)
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
