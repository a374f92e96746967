"""The README is a front door that stays true: at most 120 lines with the main job's command in its
first 25, its two set-up commands the ones that work (`.ci/run` runs exactly its test command), the
calls table it shows the generated docs/main_job.md's (what `rbctl ablate` printed at a stated commit),
every command and option it shows existing, every module it names importing, and every relative
link in it, in docs/, CHANGELOG.md and each study's README and docs/ pointing at a file, and every
document the code and configs cite existing. No document or config speaks of issue numbers or of one
machine's paths."""

from __future__ import annotations

import importlib.util
import re

from tests.conftest import REPO, cli_options

README = (REPO / "README.md").read_text()
STUDY_README = REPO / "studies" / "reward_budgeting" / "README.md"
MAIN_JOB = "python3 -m pip install torch==2.13.0 -e . && rbctl ablate"


def _bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)


def test_the_readme_is_a_short_front_door_with_the_main_job_first():
    lines = README.splitlines()
    assert len(lines) <= 120, len(lines)
    assert MAIN_JOB in lines[:25]
    for heading in ("## The main job: one command", "## The tests", "## Commands", "## Where things are"):
        assert heading in lines, heading
    # the first screen points where to go next: the tutorial, your own runs, the study
    first_screen = "\n".join(lines[:60])
    for target in ("docs/tutorial.md", "docs/your_runs.md", "studies/reward_budgeting/README.md",
                   "docs/figures/report_first_screen.png"):
        assert f"]({target})" in first_screen, target


def test_the_two_set_up_commands_are_the_main_job_and_what_ci_runs():
    blocks = [b.strip() for b in _bash_blocks(README)]
    assert blocks[0] == MAIN_JOB
    ci = (REPO / ".ci" / "run").read_text().strip().splitlines()[-1]
    # the whole suite, then the real-vLLM tests in vLLM's CPU venv
    assert blocks[1] == ci and "&& python3 -m pytest &&" in ci and ci.endswith(".venv-vllm/bin/python -m pytest -m vllm tests/vllm")


def test_the_calls_are_the_generated_main_job_documents():
    """The README's calls table is docs/main_job.md's (written by scripts/main_job_calls.py from the main
    job's sweep directory with the renderer `rbctl ablate` prints with), copied line for line, and the
    README names its runs' commit and count."""
    doc = (REPO / "docs" / "main_job.md").read_text()
    printed = doc.split("\n```\n", 1)[1].split("```", 1)[0]
    shown = "calls: declared comparisons\n" + README.split("```\ncalls: declared comparisons\n", 1)[1].split("```", 1)[0]
    assert len(shown.splitlines()) >= 6 and shown in printed
    commit = re.search(r"code one commit `(\w+)`", doc).group(1)
    runs = re.search(r"\); (\d+) runs \(", doc).group(1)
    assert f"at `{commit}`" in README and f"{runs} in the run below" in README


def test_the_generated_blocks_live_in_the_study_readme():
    """The study's generators write by default into its README (`--write-readme` with no path); the
    front README holds no generated block."""
    from studies.reward_budgeting.documents import STUDY_README as target

    assert target == STUDY_README
    study = STUDY_README.read_text()
    for name in ("headline", "claims", "maze", "real_model"):
        assert f"<!-- {name}: begin -->" in study and f"<!-- {name}: end -->" in study, name
        assert f"<!-- {name}: begin -->" not in README, name


def test_every_command_module_and_option_the_readme_shows_exists():
    options = cli_options()
    text = "\n".join(_bash_blocks(README)) + "\n" + "\n".join(re.findall(r"`([^`\n]+)`", README))
    for command, args in re.findall(r"\brbctl (\w+)((?: [^\n`]*)?)", text):
        assert command in options, f"no command `rbctl {command}`"
        for opt in re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", args):
            assert opt in options[command], f"`rbctl {command}` has no option {opt}"
    for module in re.findall(r"python3? -m ([\w.]+)", text):
        assert importlib.util.find_spec(module) is not None, f"no module {module}"


def _documents():
    return [REPO / "README.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").glob("*.md")),
            *sorted((REPO / "studies").glob("*/README.md")), *sorted((REPO / "studies").glob("*/docs/*.md"))]


def test_every_relative_link_in_the_readme_and_docs_resolves():
    docs = _documents()
    assert (REPO / "studies" / "reward_budgeting" / "docs" / "claims.md") in docs  # a study's documents are checked too
    missing = []
    for doc in docs:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text()):
            if re.match(r"[a-z]+://", target):
                continue
            if not (doc.parent / target).exists():
                missing.append(f"{doc.relative_to(REPO)} -> {target}")
    assert not missing, missing


def test_every_document_the_code_and_configs_cite_exists():
    """Every document path the package, scripts/ and the shipped configs cite (``docs/X.md``,
    ``studies/NAME/docs/X.md``, their figures), comments and docstrings included, names a file: a
    document moved (the study's results and journal to studies/reward_budgeting/docs/) is cited where
    it is now. A path after ``git show REV:`` names a file of that revision."""
    cited = re.compile(r"(?<![\w/.:-])((?:studies/[\w-]+/)?docs/[\w./-]+?\.(?:md|png))")
    files = [*sorted((REPO / "rbctl").rglob("*.py")), *sorted((REPO / "scripts").glob("*.py")),
             *sorted((REPO / "configs").rglob("*.yaml"))]
    missing = [f"{path.relative_to(REPO)}:{n}: {ref}" for path in files
               for n, line in enumerate(path.read_text().splitlines(), 1)
               for ref in cited.findall(line) if not (REPO / ref).exists()]
    assert len(files) > 100 and not missing, missing


def test_every_config_and_path_the_readme_names_exists():
    for path in set(re.findall(r"`((?:configs|docs|scripts|rbctl|tests|studies)/[\w./-]+)`", README)):
        path = path.rstrip(".")
        if "*" in path:
            continue
        assert (REPO / path).exists(), path


def test_the_documents_table_lists_every_document():
    table = README[README.index("| document | what it holds |"):]
    listed = set(re.findall(r"^\| \[(docs/[\w.-]+\.md)\]", table, flags=re.M))
    assert listed == {f"docs/{p.name}" for p in (REPO / "docs").glob("*.md")}


def _guide_files():
    """The README, docs/ and every config (shipped presets and the studies' own), comments included."""
    files = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), *sorted((REPO / "configs").rglob("*.yaml"))]
    for study in sorted((REPO / "studies").glob("*/")):
        files += [*sorted(study.glob("README.md")), *sorted(study.glob("docs/*.md")), *sorted(study.rglob("configs/**/*.yaml"))]
    return files


def test_no_document_or_config_names_an_issue_or_one_machines_paths():
    """`grep -rnE "[Ii]ssue [0-9]+|the issue's" docs configs README.md` finds nothing (nor in the studies'
    README, docs and configs): documents say what the software does and what was measured, not how
    they were asked for ("this session"); and no path of one machine (`/work/...`, `/home/...`) stands in them."""
    found = []
    for path in _guide_files():
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"[Ii]ssue [0-9]+|the issue's|this session|(?<![\w.])/(?:work|home|Users)/", line):
                found.append(f"{path.relative_to(REPO)}:{n}: {line.strip()[:100]}")
    assert not found, found
