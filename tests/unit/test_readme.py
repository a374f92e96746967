"""The README is a user guide that stays true: at most ~250 lines, its two set-up commands are the
ones that work (`.ci/run` runs exactly its test command), every command and option it shows exists,
every module it names imports, and every relative link in it, in docs/ and in each study's README and
docs/ points at a file."""

from __future__ import annotations

import importlib.util
import re

from tests.conftest import REPO, cli_options

README = (REPO / "README.md").read_text()
MAIN_JOB = "python3 -m pip install torch==2.13.0 -e . && rbctl ablate"


def _bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)


def test_the_readme_is_a_short_user_guide():
    assert len(README.splitlines()) <= 255
    for heading in ("## Set-up: two commands", "## The main job", "## Commands", "## Where things are",
                    "## Documentation"):
        assert heading in README


def test_the_two_set_up_commands_are_the_main_job_and_what_ci_runs():
    blocks = [b.strip() for b in _bash_blocks(README)]
    assert blocks[0] == MAIN_JOB
    ci = (REPO / ".ci" / "run").read_text().strip().splitlines()[-1]
    # the whole suite, then the real-vLLM tests in vLLM's CPU venv
    assert blocks[1] == ci and "&& python3 -m pytest &&" in ci and ci.endswith(".venv-vllm/bin/python -m pytest -m vllm tests/vllm")


def test_every_command_module_and_option_the_readme_shows_exists():
    options = cli_options()
    text = "\n".join(_bash_blocks(README)) + "\n" + "\n".join(re.findall(r"`([^`\n]+)`", README))
    for command, args in re.findall(r"\brbctl (\w+)((?: [^\n`]*)?)", text):
        assert command in options, f"no command `rbctl {command}`"
        for opt in re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", args):
            assert opt in options[command], f"`rbctl {command}` has no option {opt}"
    for module in re.findall(r"python3? -m ([\w.]+)", text):
        assert importlib.util.find_spec(module) is not None, f"no module {module}"


def test_every_relative_link_in_the_readme_and_docs_resolves():
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "studies").glob("*/README.md")),
            *sorted((REPO / "studies").glob("*/docs/*.md"))]
    assert (REPO / "studies" / "reward_budgeting" / "docs" / "claims.md") in docs  # a study's documents are checked too
    missing = []
    for doc in docs:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text()):
            if re.match(r"[a-z]+://", target):
                continue
            if not (doc.parent / target).exists():
                missing.append(f"{doc.relative_to(REPO)} -> {target}")
    assert not missing, missing


def test_every_config_and_path_the_readme_names_exists():
    for path in set(re.findall(r"`((?:configs|docs|scripts|rbctl|tests|studies)/[\w./-]+)`", README)):
        path = path.rstrip(".")
        if "*" in path:
            continue
        assert (REPO / path).exists(), path


def test_the_documents_table_lists_every_document():
    table = README[README.index("## Documentation"):]
    listed = set(re.findall(r"^\| \[(docs/[\w.-]+\.md)\]", table, flags=re.M))
    assert listed == {f"docs/{p.name}" for p in (REPO / "docs").glob("*.md")}
