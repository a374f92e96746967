"""The guide stays true. docs/tutorial.md: its sweep file is valid as written and `rbctl ablate
--dry-run` prints the power lines the tutorial quotes; every `rbctl` command and option it shows
exists; the presets it names are shipped. docs/studies.md: its example is the shipped study file."""

from __future__ import annotations

import re

import pytest

from tests.conftest import REPO, cli_options

TUTORIAL = (REPO / "docs" / "tutorial.md").read_text()
STUDIES = (REPO / "docs" / "studies.md").read_text()


@pytest.mark.slow  # ~7 s: the dry run builds every arm's config and checks it
def test_the_tutorials_sweep_file_runs_dry_and_prints_the_quoted_power(tmp_path, monkeypatch, capsys):
    from rbctl.cli import run

    sweep = re.search(r"```yaml\n(name: my_question\n.*?)```", TUTORIAL, flags=re.S).group(1)
    (tmp_path / "my_sweep.yaml").write_text(sweep)
    monkeypatch.chdir(tmp_path)
    assert run(["ablate", "my_sweep.yaml", "-o", "runs/my_question", "--dry-run"]) == 0, capsys.readouterr().err
    out = " ".join(capsys.readouterr().out.split())
    quoted = re.search(r"Among its lines: `(power .*?) … (power 0\.8 needs \d+\s+units)`", TUTORIAL, flags=re.S)
    for part in quoted.groups():
        assert " ".join(part.split()) in out, part
    assert "2 arms × 6 seeds = 12 runs" in out
    assert not (tmp_path / "runs").exists()  # a dry run writes nothing


def test_every_command_and_option_the_tutorial_shows_exists():
    options = cli_options()
    text = "\n".join(re.findall(r"```bash\n(.*?)```", TUTORIAL, flags=re.S)) + "\n" + "\n".join(
        re.findall(r"`([^`\n]+)`", TUTORIAL))
    commands = re.findall(r"\brbctl (\w+)((?: [^\n`]*)?)", text)
    assert len(commands) >= 8
    for command, args in commands:
        assert command in options, f"no command `rbctl {command}`"
        for opt in re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", args):
            assert opt in options[command] | {"--help"}, f"`rbctl {command}` has no option {opt}"
    for preset in set(re.findall(r"`(configs/[\w.-]+\.yaml)`", TUTORIAL)) - {"configs/NAME.yaml"}:
        assert (REPO / preset).exists(), preset


def test_the_studies_page_shows_the_shipped_study_file():
    """docs/studies.md's YAML is configs/study_quickstart.yaml without its comments and its default
    `alpha: 0.05`, and it is a valid study file."""
    import yaml

    from rbctl.config.study import StudyConfig

    shown = yaml.safe_load(re.search(r"```yaml\n(name: study_quickstart\n.*?)```", STUDIES, flags=re.S).group(1))
    shipped = yaml.safe_load((REPO / "configs" / "study_quickstart.yaml").read_text())
    for family in shipped["families"].values():
        assert family.pop("alpha", 0.05) == 0.05
    assert shown == shipped
    StudyConfig.model_validate(shown)
    for command, args in re.findall(r"\brbctl (\w+)((?: [^\n`]*)?)", "\n".join(re.findall(r"```bash\n(.*?)```", STUDIES, flags=re.S))):
        assert {o for o in re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", args)} <= cli_options()[command]
