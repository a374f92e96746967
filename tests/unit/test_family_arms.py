"""A declared family never holds one treatment twice: rbctl.sweep.ablate refuses two arms of a family
that train identically (equal configs, or equal but for an estimator whose advantages agree), and every
shipped sweep passes the check."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rbctl.errors import UserError
from rbctl.sweep.ablate import load_sweep
from rbctl.sweep.grid import same_training
from tests.conftest import REPO

ARMS = {"grpo": {}, "grpo_budget": {"algo.budget": 1.0}, "dr_grpo": {"algo.estimator": "dr_grpo"},
        "dr_grpo_budget": {"algo.estimator": "dr_grpo", "algo.budget": 1.0}}
PRINCIPAL = [["grpo_budget", "grpo"], ["dr_grpo_budget", "dr_grpo"]]


def _sweep(tmp_path: Path, loss_agg) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"base": "fixpoint.yaml", "set": {"algo.loss_agg": loss_agg}, "arms": ARMS,
                                    "comparisons": {"principal": PRINCIPAL, "mde": 5.0, "planning_sd": 5.0}}))
    return path


def test_grpo_and_dr_grpo_with_the_budget_and_one_aggregation_are_one_arm(tmp_path: Path) -> None:
    # budgeted, both centre r̃ without std scaling: equal advantages; with one pinned aggregation, equal training
    with pytest.raises(UserError, match="arms 'grpo_budget' and 'dr_grpo_budget' of family 'principal' resolve to "
                                        "the same training"):
        load_sweep(_sweep(tmp_path, "token-mean"))
    # each estimator's own aggregation (null): GRPO's seq-mean-token-mean, Dr.GRPO's seq-mean-token-sum-norm
    _, configs = load_sweep(_sweep(tmp_path, None))
    assert not same_training(configs["grpo_budget"], configs["dr_grpo_budget"])
    assert not same_training(configs["grpo"], configs["dr_grpo"])  # unbudgeted: GRPO scales by the group's std


@pytest.mark.slow  # ~2 s a sweep file (every arm resolved, warm starts checked)
@pytest.mark.parametrize("path", sorted(p for p in [*(REPO / "configs").rglob("*.yaml"),
                                                      *(REPO / "studies").glob("*/configs/**/*.yaml")]
                                         if "arms" in (d := yaml.safe_load(p.read_text()) or {}) and "runs_from" not in d),
                         ids=lambda p: p.name)
def test_no_shipped_sweep_holds_one_treatment_twice_in_a_family(path: Path) -> None:
    load_sweep(path)  # raises on two arms of one family that train identically


def test_an_escape_signal_no_run_logs_is_refused(tmp_path: Path) -> None:
    path = _sweep(tmp_path, None)
    data = yaml.safe_load(path.read_text())
    data["escape"] = {"metric": "label/strategy/walk", "signal": "train"}
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(UserError, match="escape.signal: train with escape.metric 'label/strategy/walk': label shares "
                                        "are logged by the periodic evaluation only"):
        load_sweep(path)
    data["escape"]["signal"] = "eval"
    path.write_text(yaml.safe_dump(data))
    load_sweep(path)
