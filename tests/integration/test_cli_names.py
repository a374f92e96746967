"""Configs by name: a shipped preset's name goes anywhere a config path goes; `rbctl presets` lists
them; `rbctl config` prints one resolved; a file given to the wrong command names the right one;
every missing key in one error; usage lines and help name arguments in capitals, with examples."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rbctl.cli import run

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _elsewhere(tmp_path, monkeypatch, rbctl_cache):
    monkeypatch.chdir(tmp_path)  # not the repository: a name must resolve to the shipped preset, not ./configs/


def _err_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("name", ["fixpoint", "fixpoint.yaml", "configs/fixpoint.yaml"])
def test_train_takes_a_preset_by_name(name, tmp_path, capsys):
    assert run(["train", name, "-o", "r", "--dry-run"]) == 0
    plan = capsys.readouterr().out
    assert "shipped warm start fixpoint-ws0" in plan and "100 steps" in plan
    assert not (tmp_path / "r").exists()


def test_train_fixpoint_dry_run_needs_no_run_directory(tmp_path, capsys):
    assert run(["train", "fixpoint", "--dry-run"]) == 0  # the command, as written
    assert "rbctl dry run" in capsys.readouterr().out and list(tmp_path.iterdir()) == []
    assert run(["train", "fixpoint"]) == 2  # a real run needs one
    assert "needs --out/-o RUN_DIR" in _err_line(capsys)


def test_an_unknown_name_suggests_the_close_presets(capsys):
    assert run(["train", "fixpont", "-o", "r"]) == 2
    line = _err_line(capsys)
    assert "config file fixpont does not exist, and no preset has that name (did you mean fixpoint" in line
    # a path elsewhere is that file, never silently the preset of its name; a folder named like one is no config
    assert run(["train", "./fixpoint.yaml", "-o", "r"]) == 2
    assert "config file ./fixpoint.yaml does not exist" in _err_line(capsys)
    Path("quickstart").mkdir()
    assert run(["train", "quickstart", "-o", "r", "--dry-run"]) == 0
    assert "the built-in links policy" in capsys.readouterr().out


def test_a_file_given_to_the_wrong_command_names_the_right_one(capsys):
    sweep, train = str(REPO / "configs" / "ablate_quickstart.yaml"), str(REPO / "configs" / "fixpoint.yaml")
    assert run(["train", sweep, "-o", "r"]) == 2
    assert _err_line(capsys) == (f"error: {sweep} is a sweep file (it has base: and arms:), not a training config: "
                                 f"run it with `rbctl ablate {sweep}`")
    assert run(["ablate", train, "-o", "s"]) == 2
    assert _err_line(capsys) == (f"error: {train} is a training config, not a sweep file (it has no base: and no "
                                 f"arms:): run it with `rbctl train {train} -o RUN`")
    assert not Path("r").exists() and not Path("s").exists()


def test_presets_lists_every_shipped_config_with_its_command_and_purpose(capsys, tmp_path, monkeypatch):
    import shutil

    from rbctl.config import presets
    from rbctl.config.presets import PURPOSES, preset_names

    assert set(PURPOSES) == set(preset_names())  # a preset added without a purpose fails here
    assert run(["presets"]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line for line in out[1:]}
    assert set(rows) == set(preset_names())
    assert rows["fixpoint"].split()[1] == "train" and PURPOSES["fixpoint"] in rows["fixpoint"]
    assert rows["ablate_quickstart"].split()[1] == "ablate" and "(8 arms × 3 seeds)" in rows["ablate_quickstart"]
    assert "(3 arms × 24 seeds)" in rows["ablate_fixpoint"]
    # a sweep over warm starts (none is shipped): its design names them
    shutil.copy(REPO / "studies" / "reward_budgeting" / "configs" / "ablate_claims_fixpoint.yaml", tmp_path)
    monkeypatch.setattr(presets, "presets_dir", lambda: tmp_path)
    assert presets.preset_summary("ablate_claims_fixpoint")[2].endswith("(12 arms × 4 warm starts × 3 seeds)")


def test_config_prints_the_resolved_training_config_and_a_sweep_arm(capsys):
    from rbctl.config.train import TrainConfig, load_train_config

    assert run(["config", "quickstart", "--set", "algo.budget=1.0"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("# ") and "resolved" in text.splitlines()[0]
    printed = TrainConfig.model_validate(yaml.safe_load(text))
    assert printed == load_train_config(REPO / "configs" / "quickstart.yaml", ["algo.budget=1.0"])
    assert printed.algo.loss_agg == "seq-mean-token-mean"  # the estimator's default, resolved
    assert run(["config", "ablate_quickstart", "--arm", "grpo_budget"]) == 0
    arm = TrainConfig.model_validate(yaml.safe_load(capsys.readouterr().out))
    assert arm.algo.budget == 1.0 and arm.eval.every == 20  # the arm's override and the sweep's set:
    assert run(["config", "ablate_quickstart", "--arm", "nope"]) == 2
    assert "has no arm 'nope'" in _err_line(capsys)
    assert run(["config", "ablate_quickstart"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["jobs"] == 2


def test_every_missing_key_is_reported_in_one_error(tmp_path, capsys):
    bad = tmp_path / "s.yaml"
    bad.write_text(yaml.safe_dump({"base": "quickstart.yaml", "arms": {"a": {}, "b": {"algo.budget": 1.0}},
                                   "comparisons": {"principal": [["b", "a"]]}}))
    assert run(["ablate", str(bad), "--dry-run"]) == 2
    assert _err_line(capsys) == f"error: {bad}: config keys 'comparisons.mde', 'comparisons.planning_sd' are required"


def test_a_copied_sweep_file_finds_its_base_as_a_preset(tmp_path):
    from rbctl.sweep.ablate import load_sweep

    copy = tmp_path / "elsewhere" / "mine.yaml"
    copy.parent.mkdir()
    copy.write_text((REPO / "configs" / "ablate_quickstart.yaml").read_text())  # base: quickstart.yaml, not beside it
    sweep, configs = load_sweep(copy)
    assert len(configs) == 8 and configs["grpo"].steps == 120
    (copy.parent / "quickstart.yaml").write_text("steps: 7\n")  # a base beside the sweep file wins
    assert load_sweep(copy)[1]["grpo"].steps == 7


@pytest.mark.parametrize("command, usage", [
    ("train", "train [OPTIONS] CONFIG"), ("eval", "eval [OPTIONS] MODEL"),
    ("ablate", "ablate [OPTIONS] [SWEEP]"), ("config", "config [OPTIONS] CONFIG"),
])
def test_usage_lines_name_arguments_in_capitals(command, usage, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert run([command, "--help"]) == 0
    out = capsys.readouterr().out
    line = out.split("Usage:")[1].splitlines()[0].strip()  # "<program> train [OPTIONS] CONFIG"
    assert line.endswith(usage) and "{" not in line


def test_help_has_examples(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert run(["--help"]) == 0
    out = capsys.readouterr().out
    assert "Examples" in out and "rbctl train fixpoint -o runs/first" in out and "rbctl ablate ablate_quickstart --dry-run" in out
    for command in ("train", "eval", "ablate"):
        assert run([command, "--help"]) == 0
        assert "Examples: rbctl " + command in capsys.readouterr().out
