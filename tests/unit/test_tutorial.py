"""docs/tutorial.md stays true: its sweep file is valid as written and `rbctl ablate --dry-run` prints
the power lines the tutorial quotes; every `rbctl` command and option it shows exists; the presets
it names are shipped."""

from __future__ import annotations

import re

import pytest

from tests.conftest import REPO, cli_options

TUTORIAL = (REPO / "docs" / "tutorial.md").read_text()


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
