"""A study (studies/<name>/) is a user of rbctl, not a part of it: every module under studies/ imports,
and none imports a private name of rbctl (a name or module with a leading underscore), at module
level or inside a function, so the study runs on rbctl's public API alone."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from tests.conftest import REPO

STUDIES = REPO / "studies"
MODULES = sorted(p for p in STUDIES.rglob("*.py") if "__pycache__" not in p.parts)


def dotted(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def private_rbctl_imports(source: str) -> list[tuple[int, str]]:
    """(line, what) of every import of a private rbctl name in ``source``: `from rbctl.x import _y`,
    `from rbctl._x import y`, `import rbctl._x`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "rbctl":
            private = [a.name for a in node.names if a.name.startswith("_")]
            if any(part.startswith("_") for part in node.module.split(".")) or private:
                found.append((node.lineno, f"from {node.module} import {', '.join(a.name for a in node.names)}"))
        elif isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] == "rbctl" and any(p.startswith("_") for p in parts):
                    found.append((node.lineno, f"import {a.name}"))
    return sorted(found)


def test_the_checker_finds_each_kind_of_private_import():
    source = ("import rbctl.report\nfrom rbctl.report.stats import holm\n"
              "def f():\n    from rbctl.report.render.answer import _delta_label, verdict_table\n"
              "import rbctl._hidden\nfrom rbctl._x.y import z\nfrom .local import _fine\nfrom os import _exit\n")
    assert private_rbctl_imports(source) == [
        (4, "from rbctl.report.render.answer import _delta_label, verdict_table"),
        (5, "import rbctl._hidden"), (6, "from rbctl._x.y import z")]


def test_there_are_study_modules_to_check():
    assert dotted(STUDIES / "reward_budgeting" / "documents" / "maze_results.py") in {dotted(p) for p in MODULES}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(REPO)))
def test_a_study_module_imports_and_uses_only_public_rbctl_names(path: Path):
    importlib.import_module(dotted(path))
    bad = private_rbctl_imports(path.read_text(encoding="utf-8"))
    assert not bad, f"{path.relative_to(REPO)} imports private rbctl names: " + "; ".join(f"line {n}: {w}" for n, w in bad)


# names of the reward-budgeting study's documents, published table, sweeps and pilots
STUDY_NAMES = r"maze_results|maze_setting|real_model|maxrl_maze|claims_fixpoint|fixpoint_long|lab_fixpoint"


def test_the_package_source_names_nothing_of_the_study():
    import re
    import subprocess

    files = subprocess.run(["git", "ls-files", "rbctl"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    assert "rbctl/cli/__init__.py" in files
    found = [f"{f}:{n}: {line.strip()[:80]}" for f in files if (REPO / f).suffix in (".py", ".json", ".yaml", ".md", ".txt")
             for n, line in enumerate((REPO / f).read_text(encoding="utf-8").splitlines(), 1)
             if re.search(STUDY_NAMES, line)]
    found += [f for f in files if re.search(STUDY_NAMES, f)]
    assert not found, "the package names the study's files:\n" + "\n".join(found)
