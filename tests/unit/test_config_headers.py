"""The commands named in the comment headers of configs/ and of the studies' configs/ exist: a header
that names a module or an option that is gone (`python -m rbctl.dryrun` once) sends a user to an error."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from tests.conftest import REPO, cli_options

ROOT = REPO
CONFIGS = sorted([*(ROOT / "configs").rglob("*.yaml"), *(ROOT / "studies").glob("*/configs/**/*.yaml")])


def _header(path: Path) -> str:
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("# "))
    return "\n".join(lines)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_in_a_config_header_exists(path):
    header, options = _header(path), cli_options()
    for module in re.findall(r"python3? -m ([\w.]+)", header):
        assert importlib.util.find_spec(module) is not None, f"{path.name}: no module {module}"
    for command, args in re.findall(r"\brbctl (\w+)([^;)`\n]*)", header):
        assert command in options, f"{path.name}: no command `rbctl {command}`"
        for opt in re.findall(r"(?<!\S)(--?[a-z][\w-]*)", args):
            assert opt in options[command], f"{path.name}: `rbctl {command}` has no option {opt}"


def test_a_top_level_config_starts_with_the_command_that_runs_it():
    for path in [*(ROOT / "configs").glob("*.yaml"), *(ROOT / "studies").glob("*/configs/*.yaml")]:
        first, folder = path.read_text().splitlines()[0], path.parent.relative_to(ROOT)
        assert re.fullmatch(rf"# rbctl (train|ablate|report) {folder}/{path.name} -o runs/{path.stem}", first), (path.name, first)
