"""The changes of call since a previous claims document (a study file's `previous:`, rbctl.report.study.changes):
read from the previous document's own tables (a file, or a file at a git commit), each claim and member whose call
differs is listed with both calls; detail that moves with no change of call (an inconclusive call's detectable
effect, a warm-start caveat) is not a change; a bad `previous` is a one-line error naming the key."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from rbctl.errors import UserError
from rbctl.report import study as claims
from rbctl.report.study.changes import call_kind, change_lines, parse_claims_document, read_previous
from rbctl.report.study.claims_document import table
from tests.integration.test_study_claims import SEVERAL
from tests.integration.test_study_vocabulary import study

DOC = """# s: the study's claims

Generated on 2026-12-05 by `rbctl report s.yaml`; do not edit by hand.

## 2. The families

### Family `budget`

| sweep | member | units | Δ points [95% CI] | call |
| --- | --- | --- | --- | --- |
| fixpoint | grpo_budget − grpo | 12 | +9.7 [+6.0, +13.4] | higher |
| fixpoint | rloo_budget − rloo | 12 | +0.4 [-2.9, +3.6] | equivalent within ±5 (these warm starts) |
| maze | grpo_budget − grpo | 5 | -4.6 [-6.1, -3.1] | lower |

### Family `budget_entropy`

| sweep | member | stalled | call |
| --- | --- | --- | --- |
| fixpoint | grpo_budget − grpo | mean of \\|a − b\\| = 3.64 | inconclusive (Δ > 0; detectable ≥ 7.3 points) |

## 4. The long horizons

### maze_long

maze_long, grpo_budget − grpo: -4.6 at step 250, -5.5 at the final evaluation: **final level lower**.

| comparison | units | Δ at step 250 (periodic; p unadj.) | Δ final (declared family) | call (final level) |
| --- | --- | --- | --- | --- |
| grpo_budget − grpo | 5 | -4.6 [-6.1, -3.2], p < 0.001 | -5.5 [-8.7, -2.2] | lower |

## 6. The claims

| claim | hypothesis | rule | call |
| --- | --- | --- | --- |
| a | The budget helps | family `budget` | **contradicted**: maze grpo_budget − grpo is called lower |
| d | κ falls with K | exact | **supported**: κ 1.000, 0.500 |
"""


def test_a_previous_document_is_read_from_its_own_tables() -> None:
    doc = parse_claims_document(DOC, "prev.md")
    assert doc.date == "2026-12-05"
    assert doc.claims == {"a": ("contradicted", "maze grpo_budget − grpo is called lower"),
                          "d": ("supported", "κ 1.000, 0.500")}
    assert doc.members == {("budget", "fixpoint", "grpo_budget − grpo"): "higher",
                           ("budget", "fixpoint", "rloo_budget − rloo"): "equivalent within ±5 (these warm starts)",
                           ("budget", "maze", "grpo_budget − grpo"): "lower",
                           ("budget_entropy", "fixpoint", "grpo_budget − grpo"):
                               "inconclusive (Δ > 0; detectable ≥ 7.3 points)",
                           ("long horizon", "maze_long", "grpo_budget − grpo"): "lower"}  # an escaped \| is one cell


@pytest.mark.parametrize("text, kind", [
    ("inconclusive (Δ > 0; detectable ≥ 7.3 points)", "inconclusive"),
    ("equivalent within ±5 (these warm starts)", "equivalent within ±5"),
    ("lower (within ±5)", "lower (within ±5)"),
    ("higher", "higher"),
])
def test_the_detail_of_a_call_is_not_a_change_of_call(text: str, kind: str) -> None:
    assert call_kind(text) == kind


def test_the_changes_name_both_calls_and_what_either_document_lacks() -> None:
    prev = parse_claims_document(DOC, "prev.md")
    now_members = {("budget", "fixpoint", "grpo_budget − grpo"): "higher",
                   ("budget", "fixpoint", "rloo_budget − rloo"): "inconclusive (Δ > 0; detectable ≥ 6.1 points)",
                   ("budget_entropy", "fixpoint", "grpo_budget − grpo"): "inconclusive (Δ > 0; detectable ≥ 5.0 points)",
                   ("budget", "smollm2", "grpo_budget − grpo"): "higher",
                   ("long horizon", "maze_long", "grpo_budget − grpo"): "inconclusive (Δ < 0; detectable ≥ 4.6 points)"}
    now_claims = {"a": ("inconclusive", "1 of the 2 needed members called higher"), "d": ("supported", "κ 1.000"),
                  "g": ("supported", "2 of 2")}
    text = "\n".join(change_lines(prev, "New rules.", now_claims, now_members, 7, table, {"a": ["maze"]}))
    assert "## 7. Changes of call since the previous document" in text
    assert "Compared with `prev.md` (generated 2026-12-05)" in text
    assert "The study file's words on the change (its author's, not a record): New rules." in text
    assert "Claims whose call changed: 1 of 2 (the same call: d)." in text
    assert ("| a | contradicted: maze grpo_budget − grpo is called lower | inconclusive: 1 of the 2 needed members "
            "called higher | maze |") in text
    assert "its call may move again when they finish" in text
    assert "Claims new in this document: g." in text
    # rloo: equivalent -> inconclusive is a change; budget_entropy's detectable effect moved, its call did not
    assert "Members whose call changed: 2; the same call: 2." in text
    assert "| long horizon | maze_long | grpo_budget − grpo | lower | inconclusive (Δ < 0; detectable ≥ 4.6 points) |" in text
    assert "| budget | fixpoint | rloo_budget − rloo | equivalent within ±5 (these warm starts) | inconclusive" in text
    assert "not read in this one (a sweep pending, or a member no longer formed): budget maze grpo_budget − grpo." in text
    assert "Read in this document, not in the previous one: budget smollm2 grpo_budget − grpo." in text


def test_no_unread_sweep_no_column_for_it() -> None:
    prev = parse_claims_document(DOC, "prev.md")
    text = "\n".join(change_lines(prev, None, {"a": ("supported", "2 of 2")}, {}, 1, table, {"a": []}))
    assert "| claim | previous call | this call |" in text and "sweeps not read yet" not in text
    assert "words on the change" not in text


def test_a_bad_previous_is_one_line_naming_the_key(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match=r"^previous.file: gone.md does not exist$"):
        read_previous("gone.md", None)
    (tmp_path / "x.md").write_text("# not a claims document\n")
    with pytest.raises(UserError, match=r"^previous.file: x.md holds no claims table"):
        read_previous("x.md", None)
    with pytest.raises(UserError, match=r"^previous: cannot read x.md at commit abc123 \("):
        read_previous("x.md", "abc123")


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def test_a_study_document_lists_its_changes_since_the_document_at_a_commit(tmp_path: Path, monkeypatch) -> None:
    path = study(tmp_path, claims_={"a": SEVERAL})
    first = claims.claims_markdown(claims.load_study(path, n_boot=20))
    assert "Changes of call" not in first  # no previous: no section
    monkeypatch.chdir(tmp_path)
    (tmp_path / "claims.md").write_text(first)
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "add", "claims.md")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    head = _git(tmp_path, "rev-parse", "--short", "HEAD")
    # the file on disk now says another call; the commit's version is the one read
    prev = parse_claims_document(first, "claims.md")
    member, was = next((k, c) for k, c in prev.members.items() if c == "higher")
    (tmp_path / "claims.md").write_text(first.replace("**" + prev.claims["a"][0] + "**", "**contradicted**"))
    cfg = yaml.safe_load(path.read_text())
    cfg["previous"] = {"file": "claims.md", "commit": head}
    path.write_text(yaml.safe_dump(cfg, allow_unicode=True))
    text = claims.claims_markdown(claims.load_study(path, n_boot=20))
    assert f"Compared with `claims.md at {head}`" in text
    assert "Claims whose call changed: 0 of 1 (the same call: a)." in text
    assert f"Members whose call changed: 0; the same call: {len(prev.members)}." in text
    # the file on disk: claim a's call differs from this document's, and is listed with both calls
    cfg["previous"] = {"file": "claims.md"}
    path.write_text(yaml.safe_dump(cfg, allow_unicode=True))
    text = claims.claims_markdown(claims.load_study(path, n_boot=20))
    assert "Claims whose call changed: 1 of 1." in text
    assert f"| a | contradicted: {prev.claims['a'][1]} | {prev.claims['a'][0]}: {prev.claims['a'][1]} |" in text
    assert member[2] and was == "higher"


def test_a_long_horizons_final_level_is_compared_too(tmp_path: Path, monkeypatch) -> None:
    from tests.integration.test_study_claims import BUDGET, CORRECT, long_sweep, make_sweep

    fix = make_sweep(tmp_path / "fix", CORRECT, {"principal": BUDGET})
    long = long_sweep(tmp_path / "long", 20.0)  # final level: equivalent within ±20 (TOST p 0.025 on 3 units)
    cfg = {"testbeds": {"fixpoint": str(fix)},
           "long": {"fixpoint": {"dir": str(long), "main_step": 100, "name": "fixpoint_long"}}}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(cfg, allow_unicode=True))
    first = claims.claims_markdown(claims.load_study(path, n_boot=20))
    row = next(line for line in first.splitlines() if line.startswith("| grpo_budget − grpo | 3 |"))
    assert row.endswith("| equivalent within ±20 |")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "prev.md").write_text(first.replace(row, row.removesuffix("equivalent within ±20 |") + "lower |"))
    cfg["previous"] = {"file": "prev.md"}
    path.write_text(yaml.safe_dump(cfg, allow_unicode=True))
    text = claims.claims_markdown(claims.load_study(path, n_boot=20))
    assert "Members whose call changed: 1; the same call: 0." in text
    assert "| long horizon | fixpoint_long | grpo_budget − grpo | lower | equivalent within ±20 |" in text


def test_a_previous_document_that_cannot_be_read_is_said_in_the_section(tmp_path: Path, monkeypatch) -> None:
    path = study(tmp_path, claims_={"a": SEVERAL})
    monkeypatch.chdir(tmp_path)  # not a git repository: a shallow clone's missing commit reads the same way
    cfg = yaml.safe_load(path.read_text())
    cfg["previous"] = {"file": "claims.md", "commit": "4a31d28"}
    path.write_text(yaml.safe_dump(cfg, allow_unicode=True))
    text = claims.claims_markdown(claims.load_study(path, n_boot=20))
    assert "Changes of call since the previous document\n\nNot compared: previous: cannot read claims.md at " \
           "commit 4a31d28 (fatal: not a git repository" in text
    assert "### (a) The budget improves several baselines" in text  # the rest of the document stands
