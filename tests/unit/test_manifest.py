"""The runs manifest (rbctl.config.manifest) and how a role's name matches what a run logged
(rbctl.report.sources): the presets, patterns, warm starts and explicit runs."""

from __future__ import annotations

import pytest

from rbctl.config.base import validate
from rbctl.config.manifest import RunsManifest
from rbctl.errors import UserError
from rbctl.report.sources import heldout_scores


def manifest(**data) -> RunsManifest:
    return validate(RunsManifest, {"runs_from": "trl", "arms": {"a": {}, "b": {"variant": "budget"}}, **data}, "m.yaml")


def test_arms_seeds_and_warm_starts_name_the_runs_through_the_pattern() -> None:
    m = manifest(seeds=[0, 3], warm_starts=["w1", "w2"])
    assert [e.path for e in m.entries()][:4] == ["a/w1/seed_0", "a/w1/seed_3", "a/w2/seed_0", "a/w2/seed_3"]
    assert len(m.entries()) == 8 and m.entries()[-1].warm_start == "w2"
    m = manifest(seeds=[1], path="out/{arm}-s{seed}")
    assert [e.path for e in m.entries()] == ["out/a-s1", "out/b-s1"]
    m = manifest(runs=[{"arm": "b", "seed": 7, "path": "x/y"}])  # by hand: only those
    assert [(e.arm, e.seed, e.path) for e in m.entries()] == [("b", 7, "x/y")]


@pytest.mark.parametrize(("data", "message"), [
    ({"path": "{arm}/{run}"}, "m.yaml: .*path.*unknown placeholder {run}"),
    ({"runs": [{"arm": "c", "seed": 0, "path": "p"}]}, "unknown arm 'c'"),
    ({"runs_from": "table"}, "config key 'table': required with runs_from table"),
    ({"comparisons": {"principal": [["b", "z"]], "mde": 1, "planning_sd": 1}}, "unknown arm 'z'"),
    ({"seeds": [1, 1]}, "seeds must be distinct"),
    ({"roles": {"kapa": "x"}}, "unknown config key 'roles.kapa' \\(did you mean 'roles.kappa'\\?\\)"),
])
def test_a_bad_manifest_is_one_line_naming_the_key(data, message) -> None:
    with pytest.raises(UserError, match=message):
        manifest(**data)


def test_the_presets_fill_the_roles_and_a_given_key_replaces_its_own() -> None:
    assert manifest().resolved_roles().kappa_eff == "rbctl/kappa_eff"
    roles = manifest(roles={"kappa_eff": None, "heldout": "eval_accuracy"}).resolved_roles()
    assert roles.kappa_eff is None and roles.heldout == "eval_accuracy" and roles.entropy == "entropy"
    assert manifest(runs_from="tensorboard", table=None).preset() == "none"
    assert manifest(runs_from="tensorboard", names="verl").resolved_roles().entropy == "actor/entropy"


def test_verls_val_core_keys_give_one_benchmark_per_data_source_at_the_largest_n() -> None:
    roles = manifest(names="verl").resolved_roles()
    logged = {"val-core/openai/gsm8k/acc/mean@8": 0.5, "val-core/openai/gsm8k/acc/best@8/mean": 0.9,
              "val-aux/openai/gsm8k/acc/mean@1": 0.4, "val-core/aime/reward/mean@16": 0.1,
              "val-core/aime/reward/mean@4": 0.2, "actor/entropy": 1.0}
    assert heldout_scores(logged, roles) == {"openai/gsm8k": ("val-core/openai/gsm8k/acc/mean@8", 0.5),
                                             "aime": ("val-core/aime/reward/mean@16", 0.1)}
    trl = manifest().resolved_roles()
    assert heldout_scores({"eval_reward": 0.25, "eval_reward_std": 0.1}, trl) == {"eval": ("eval_reward", 0.25)}
