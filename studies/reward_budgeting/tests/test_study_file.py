"""The study file (configs/study_claims.yaml): valid in rbctl's study vocabulary, and reported by
`rbctl report` on tiny hand-made sweeps in the directories it names, its own exact check
(checks.py: kappa_falls_with_k) included; the README's claims block (documents/claims.py) from it."""

from __future__ import annotations

import re
from pathlib import Path

from tests.integration.test_study_claims import BUDGET, CORRECT, PLATEAU, long_sweep, make_sweep

STUDY = Path(__file__).resolve().parents[1] / "configs" / "study_claims.yaml"


def test_the_study_file_is_valid_in_the_vocabulary() -> None:
    from rbctl.config.base import read_yaml, validate
    from rbctl.config.study import StudyConfig

    cfg = validate(StudyConfig, read_yaml(STUDY), str(STUDY))
    assert cfg.claims and cfg.families and read_yaml(STUDY)["name"] == "study_claims"
    assert [h.name for h in cfg.long.values()] == ["fixpoint_long", "maze_long"] and cfg.main.name == "main"
    assert cfg.selection["maze"].rule == "plateau"


def test_rbctl_report_of_the_study_file_on_tiny_sweeps(tmp_path: Path, capsys, monkeypatch) -> None:
    from rbctl.cli import run

    comps = {"principal": BUDGET, "margin": 15.0, "families": {
        "entropy_vs_budget": {"pairs": [["grpo_entropy", "grpo_budget"]], "margin": 15.0},
        "entropy_vs_base": {"pairs": [["grpo_entropy", "grpo"]], "margin": 15.0}}}
    monkeypatch.chdir(tmp_path)
    for name in ("ablate_claims_fixpoint", "ablate_claims_maze", "ablate_fixpoint", "ablate_maze_claims_setting"):
        make_sweep(tmp_path / "runs" / name, CORRECT, comps, periodic=PLATEAU, ceiling=0.98)
    for name in ("ablate_fixpoint_long", "ablate_maze_long"):
        long_sweep(tmp_path / "runs" / name, 20.0)
    study = STUDY  # read in place: its checks file (../checks.py) is found beside it
    assert run(["report", str(study), "-o", "out"]) == 0
    doc = (tmp_path / "out" / "claims.md").read_text()
    out = capsys.readouterr().out
    assert "claims: out/claims.md" in out
    claims = out[re.search(r"^claims *$", out, re.M).start():]  # the table of each claim's call ends the output
    for cid, call in (("a", "inconclusive"), ("d", "supported")):
        assert re.search(rf"^ {re.escape(cid)} +{call} ", claims, re.M), claims
    for cid in ("a", "a-speed", "b", "c", "d", "e", "e-entropy", "f", "g"):
        assert f"\n### ({cid}) " in doc
    # the study's version was recorded by this report, after every run had finished; the sweep files kept none; the
    # study file lists claims a to f as written after an earlier run set's results, and the claims say so
    earlier = "declared after an earlier run set's results (the study file says so); "
    assert f"Declared (the study file): fixpoint: {earlier}declared after 15 of 15 runs had finished" in doc
    assert f"Declared (the study file and the sweep files): {earlier}no declaration record in this directory" in doc
    claim_a = doc.split("### (a) ")[1].split("### ")[0]
    assert f"Declared (the study file and the sweep files): {earlier}no declaration record" in claim_a
    assert "before the first result" not in doc and "declared before any run in this directory" not in doc
    # a sweep a family names but does not read is named, with why
    assert "Not read: fixpoint: no run logs `label/strategy/walk` at its eval points on builtin; maze: " in doc
    assert "Not read: maze_horizon: `runs/ablate_maze_horizon` does not exist yet." in doc
    assert "Study-level multiplicity: 12 members called in 4 families" in doc
    # (a): GRPO higher, RLOO equivalent within ±15 on both tiny testbeds
    assert "### (a) The budget improves several RL baselines" in doc
    assert "Call: **inconclusive** — 1 of the 2 needed members called higher" in doc
    assert "Call: **supported** — GRPO + budget κ: 1.000, 0.500" in doc  # (d), exact
    assert "nothing" not in doc and "no effect" not in doc
    # studies/reward_budgeting/documents/claims.py writes the README block: per member the p that decided each call (RLOO: TOST, Holm over 2
    # members: 2 × .0125 = .025; GRPO: superiority, 2 × .0059 = .012)
    from studies.reward_budgeting.documents.claims import main as claims_main

    readme = tmp_path / "README.md"
    readme.write_text("x\n<!-- claims: begin -->\nold\n<!-- claims: end -->\n")
    assert claims_main([str(study), "--write-readme", str(readme)]) == 0
    text = readme.read_text()
    assert ("- **rloo_budget − rloo** — fixpoint equivalent within ±15 (+2.1 [-6.9, +11.0], TOST Holm p 0.025); "
            "maze equivalent within ±15 (+2.1 [-6.9, +11.0], TOST Holm p 0.025)") in text
    assert "- **grpo_budget − grpo** — fixpoint higher (+27.1 [+18.1, +36.0], Holm p 0.012); maze higher" in text
    assert "old" not in text
