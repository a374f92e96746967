"""The `data.builtin` section (rbctl/config/data_builtin.py): each built-in task's keys and defaults come
from the task's own dataclasses; the warm-start cache folders and the problems of the shipped configs
are those of the release before (when the section was flat, with the links task's defaults)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from rbctl.config.train import TrainConfig, load_train_config
from rbctl.errors import UserError
from rbctl.tasks import builtin, fixpoint, links, maze
from rbctl.train.training_data import task_spec, warm_start_spec
from tests.conftest import TINY_TRAIN

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
STUDY_CONFIGS = CONFIGS.parent / "studies" / "reward_budgeting" / "configs"  # lab/: the study's pilots


def _problems_digest(spec) -> str:
    probs = [p for split in ("train", "test") for p in builtin.module_of(spec).problems(spec, split)]
    return hashlib.sha256(json.dumps([[p.id, p.problem, p.answer] for p in probs]).encode()).hexdigest()[:16]


# Computed with the flat section (main at 7b835fd) for the same three configs (the first design of the
# plateau task, configs/fixpoint.yaml then, is studies/reward_budgeting/configs/lab/fixpoint_v1.yaml now).
BEFORE = {
    "lab/fixpoint_v1.yaml": ("builtin-fixpoint-672fcff14a2d", "0cbb55b0da580015"),
    "quickstart.yaml": ("builtin-ab7bcbd6a2f4", "f19e78bcd586e0b1"),
    "TINY_TRAIN": ("builtin-bed1faf79213", "765712958d3bd03e"),
}


@pytest.mark.parametrize("name", list(BEFORE))
def test_cache_folders_and_problems_are_unchanged(name):
    folder = STUDY_CONFIGS if name.startswith("lab/") else CONFIGS
    cfg = TrainConfig.model_validate(TINY_TRAIN) if name == "TINY_TRAIN" else load_train_config(folder / name)
    spec, ws = task_spec(cfg), warm_start_spec(cfg)
    assert (builtin.warm_start_path(spec, ws).name, _problems_digest(spec)) == BEFORE[name]


def test_a_bare_task_gets_its_own_defaults():
    # the flat section gave `task: fixpoint` the links task's num_keys 8, demo_error 0.2 and 1200 steps
    cfg = load_train_config(None, ["data.builtin.task=fixpoint"])
    assert (task_spec(cfg), warm_start_spec(cfg)) == (fixpoint.TaskSpec(), fixpoint.WarmStartSpec())
    # the task's first design (studies/reward_budgeting/configs/lab/fixpoint_v1.yaml) set exactly the fixpoint defaults: the same warm start
    assert builtin.warm_start_path(task_spec(cfg), warm_start_spec(cfg)).name == BEFORE["lab/fixpoint_v1.yaml"][0]
    cfg = load_train_config(None, [])
    assert (cfg.data.builtin.task, task_spec(cfg), warm_start_spec(cfg)) == ("links", links.TaskSpec(), links.WarmStartSpec())
    cfg = load_train_config(None, ["data.builtin.task=maze"])
    assert (task_spec(cfg), warm_start_spec(cfg)) == (maze.TaskSpec(), maze.WarmStartSpec())


@pytest.mark.parametrize("overrides, message", [
    (["data.builtin.depth1_frac=0.5"],  # a fixpoint key under the default task
     "--set 'data.builtin.depth1_frac=0.5': unknown config key 'data.builtin.depth1_frac' for 'links' "
     "(a key of 'fixpoint': select it first)"),
    (["data.builtin.task=fixpoint", "data.builtin.min_hops=2"],
     "unknown config key 'data.builtin.min_hops' for 'fixpoint' (did you mean 'data.builtin.max_hops'?)"),
    (["data.builtin.task=fixpoint", "data.builtin.num_keys=8"],  # the task's own check: a config error
     "max_hops + num_roots (6 + 3) must be <= num_keys (8)"),
    (["data.builtin.task=sudoku"], "unknown built-in task; valid: links, fixpoint, maze"),
    (["data.builtin.num_keys=17"], "config key 'data.builtin.num_keys': Input should be less than or equal to 16"),
])
def test_keys_are_validated_against_the_selected_task(overrides, message):
    with pytest.raises(UserError) as e:
        load_train_config(None, overrides)
    assert message in str(e.value)


def test_section_keys_come_from_the_task_dataclasses():
    from rbctl.config.data_builtin import SECTIONS

    for kind, section in SECTIONS.items():
        keys = builtin.config_keys(kind)
        assert list(section.model_fields) == ["task", "warm_start"] + [k.key for k in keys]  # shared keys, then the task's
        for k in keys:
            f = section.model_fields[k.key]
            assert (f.default, f.description) == (k.default, k.doc)
    assert [k.key for k in builtin.config_keys("links")] == [
        "num_keys", "min_hops", "max_hops", "train_size", "test_size", "seed", "demo_error", "warm_start_steps"]


def test_config_reference_lists_every_task_key():
    from scripts.config_doc import reference_markdown

    out = reference_markdown()
    for kind in builtin.KINDS:
        for k in builtin.config_keys(kind):
            assert f"| `data.builtin.{k.key}` ({kind}) |" in out
