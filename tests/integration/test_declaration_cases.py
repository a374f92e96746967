"""The six ways a declaration record could be fooled (docs/method.md, "What a sweep directory records"), each
reported in one line and never as "declared before any run in this directory finished": (a) sweep.yaml edited
after its last start, (b) finished runs copied into a fresh sweep directory, (c) a study declared into an empty
directory before finished runs were copied in, (d) history lines edited by hand, (e) the family a claim's
`applies_if.called_in` names changed after results, (f) runs in progress with results on disk; and a missing
history, which is said without a cause."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from rbctl.report import study as claims
from rbctl.report.declaration import declaration_sentence, family_declaration, study_declaration
from rbctl.store.history import read_history, record_version
from rbctl.store.rundir import SWEEP_HISTORY, SWEEP_STATE, study_history_path
from tests.integration.hand_runs import write_run, write_sweep_files

BEFORE = "declared before any run in this directory finished"
SWEEP = {"name": "s", "seeds": [0, 1, 2], "arms": {"a": {}, "b": {}}, "eval": {"benchmarks": ["builtin"], "n": 4},
         "comparisons": {"principal": [["b", "a"]], "metric": "avg@n", "mde": 10.0, "planning_sd": 3.5, "margin": 5.0}}


def sweep_dir(root: Path, started: str = "2026-12-05T00:00:00+0000", done: bool = True, recorded: str | None = None,
              finished_at_record: int = 0) -> Path:
    """Two arms × 3 seeds of finished runs (each started at ``started`` by its provenance), their sweep.yaml and
    state.json; with ``recorded`` the sweep file's version recorded then, with ``finished_at_record`` runs done."""
    keys = []
    for arm in ("a", "b"):
        for seed in range(3):
            write_run(root / "runs" / arm / f"seed_{seed}", cfg={"seed": seed, "algo": {"budget": 1.0 if arm == "b" else None}},
                      meta={"arm": arm, "seed": seed},
                      metrics=[{"step": 1, "entropy": 0.5}], evals=[], steps=4, correct=[4, 2, 1, 0], n=4,
                      started=started)
            keys.append(f"{arm}/seed_{seed}")
    write_sweep_files(root, keys, SWEEP)
    if not done:
        (root / SWEEP_STATE).write_text(json.dumps({"runs": {k: {"status": "running"} for k in keys}}))
    if recorded:
        record_version(root / SWEEP_HISTORY, SWEEP, "sweep.yaml", finished_at_record, 6, now=recorded)
    return root


def test_an_honest_record_is_declared_before_any_run_finished(tmp_path: Path) -> None:
    d = sweep_dir(tmp_path / "s", recorded="2026-12-01T00:00:00Z")
    assert family_declaration(d, "principal").text == BEFORE


def test_a_sweep_file_edited_after_its_last_start_is_undeclared(tmp_path: Path) -> None:
    # (a) sed -i 's/margin: 5.0/margin: 0.5/' DIR/sweep.yaml: the report would read ±0.5 under a version whose margin is 5
    d = sweep_dir(tmp_path / "s", recorded="2026-12-01T00:00:00Z")
    path = d / "sweep.yaml"
    path.write_text(path.read_text().replace("margin: 5.0", "margin: 0.5"))
    assert family_declaration(d, "principal").text == "sweep.yaml differs from every recorded version: treated as undeclared"
    assert declaration_sentence([d], "principal") == (
        "Declaration (recorded by rbctl ablate in sweep_history.jsonl): sweep.yaml differs from every recorded "
        "version: treated as undeclared.")
    # edited back to an older recorded version while a later one is in force: said too
    record_version(d / SWEEP_HISTORY, {**SWEEP, "comparisons": {**SWEEP["comparisons"], "margin": 0.5}}, "sweep.yaml",
                   6, 6, now="2026-12-06T00:00:00Z")
    path.write_text(path.read_text().replace("margin: 0.5", "margin: 5.0"))
    assert family_declaration(d, "principal").text == ("sweep.yaml is recorded version 1 of 2, not the latest: treated "
                                                       "as undeclared")


def test_finished_runs_copied_into_a_fresh_sweep_directory_count_by_their_provenance(tmp_path: Path) -> None:
    # (b) runs that ran on 2026-11-30 copied into a directory whose first version is recorded on 2026-12-01 with
    # state.json counting none of them done
    d = sweep_dir(tmp_path / "s", started="2026-11-30T10:00:00+0000", done=False, recorded="2026-12-01T00:00:00Z")
    assert read_history(d / SWEEP_HISTORY)[0]["runs_finished"] == 0
    assert family_declaration(d, "principal").text == ("declared after results existed: 6 runs with results on disk "
                                                       "had started before this version by their provenance")
    # a start time with its zone: 2026-12-01T01:00:00+0200 is 2026-11-30T23:00Z, before the version too
    for run in (d / "runs" / "a").iterdir():
        (run / "provenance.json").write_text(json.dumps({"started": "2026-12-01T01:00:00+0200"}))
    assert family_declaration(d, "principal").text.endswith("6 runs with results on disk had started before this "
                                                            "version by their provenance")


def test_a_study_declared_into_an_empty_directory_then_runs_copied_in(tmp_path: Path, monkeypatch) -> None:
    # (c) `rbctl report study.yaml --declare` before the sweep exists, then runs made elsewhere on 2026-11-30 copied in
    from rbctl.report.declaration import declare_study_file

    monkeypatch.chdir(tmp_path)
    study = tmp_path / "study_c.yaml"
    study.write_text(yaml.safe_dump({"name": "c", "testbeds": {"bed": "runs/bed"}}))
    declare_study_file(study)
    history = study_history_path(Path("runs/bed"), "study_c")
    assert read_history(history)[0]["runs_finished"] == 0
    assert study_declaration(study, Path("runs/bed"), "testbeds.bed").text == BEFORE  # nothing on disk yet
    elsewhere = sweep_dir(tmp_path / "elsewhere", started="2026-11-30T10:00:00+0000")
    shutil.copytree(elsewhere / "runs", tmp_path / "runs" / "bed" / "runs")
    assert study_declaration(study, Path("runs/bed"), "testbeds.bed").text == (
        "declared after results existed: 6 runs with results on disk had started before this version by their "
        "provenance")


def test_history_lines_edited_by_hand_break_the_chain(tmp_path: Path) -> None:
    # (d) the second version recorded after 3 runs had finished, then its line edited to say 0; or a line's content
    # changed with its sha256 left as it was
    d = sweep_dir(tmp_path / "s", recorded="2026-12-01T00:00:00Z")
    record_version(d / SWEEP_HISTORY, {**SWEEP, "comparisons": {**SWEEP["comparisons"], "margin": 3.0}}, "sweep.yaml",
                   3, 6, now="2026-12-02T00:00:00Z")
    (d / "sweep.yaml").write_text((d / "sweep.yaml").read_text().replace("margin: 5.0", "margin: 3.0"))
    assert family_declaration(d, "principal").text == "declared after 3 of 6 runs had finished"
    lines = (d / SWEEP_HISTORY).read_text().splitlines()
    edited = lines[1].replace('"runs_finished": 3', '"runs_finished": 0')
    assert edited != lines[1]
    (d / SWEEP_HISTORY).write_text("\n".join([lines[0], edited]) + "\n")
    assert family_declaration(d, "principal").text == "history chain broken at line 2: treated as undeclared"
    stale = lines[0].replace('"margin": 5.0', '"margin": 50.0')
    (d / SWEEP_HISTORY).write_text("\n".join([stale, lines[1]]) + "\n")
    assert family_declaration(d, "principal").text == "history chain broken at line 1: treated as undeclared"
    # a line deleted: the next one's `prev` no longer matches
    (d / SWEEP_HISTORY).write_text(lines[1] + "\n")
    assert family_declaration(d, "principal").text == "history chain broken at line 1: treated as undeclared"


def test_a_history_written_before_records_were_chained_still_reads_and_says_so(tmp_path: Path) -> None:
    d = sweep_dir(tmp_path / "s", recorded="2026-12-01T00:00:00Z")
    line = json.loads((d / SWEEP_HISTORY).read_text())
    (d / SWEEP_HISTORY).write_text(json.dumps({k: v for k, v in line.items() if k not in ("prev", "chain")}) + "\n")
    assert family_declaration(d, "principal").text == (BEFORE + " (a history kept before records were chained: an "
                                                       "edit to its early lines would not show)")


def test_runs_in_progress_with_results_on_disk_count(tmp_path: Path) -> None:
    # (f) a margin edited on 2026-12-06 while every run is still running (state.json: 0 done) with metrics and
    # evaluations on disk since 2026-12-05
    d = sweep_dir(tmp_path / "s", done=False, recorded="2026-12-01T00:00:00Z")
    record_version(d / SWEEP_HISTORY, {**SWEEP, "comparisons": {**SWEEP["comparisons"], "margin": 3.0}}, "sweep.yaml",
                   0, 6, now="2026-12-06T00:00:00Z")
    (d / "sweep.yaml").write_text((d / "sweep.yaml").read_text().replace("margin: 5.0", "margin: 3.0"))
    assert family_declaration(d, "principal").text == ("declared after results existed: 6 runs with results on disk had "
                                                       "started before this version by their provenance")
    # runs that record no start time are not taken to have started after it
    for run in (d / "runs" / "b").iterdir():
        (run / "provenance.json").write_text(json.dumps({"git_commit": "0123abc"}))
    assert family_declaration(d, "principal").text == (
        "declared after results existed: 3 runs with results on disk had started before this version by their "
        "provenance; 3 runs with results on disk record no start time")


def test_a_missing_history_names_no_cause(tmp_path: Path) -> None:
    d = sweep_dir(tmp_path / "s")
    assert family_declaration(d, "principal").text == "no declaration record in this directory"
    assert "before rbctl kept" not in declaration_sentence([d], "principal")


def test_a_claim_is_declared_only_once_the_family_its_applicability_names_is(tmp_path: Path) -> None:
    # (e) claim x reads family `main` where the member is called higher in family `gate` (applies_if.called_in);
    # `gate`'s margin changed after 3 of 6 runs had finished: the claim is in force only from then
    from rbctl.config.base import validate
    from rbctl.config.study import StudyConfig

    d = sweep_dir(tmp_path / "s")
    fams = {"main": {"members": ["b − a"]}, "gate": {"members": ["b − a"], "margin": 5}}
    rule = {"kind": "calls", "family": "main", "support": "higher", "applies_if": {"called_in": "gate", "called": "higher"}}
    study = {"name": "e", "testbeds": {"bed": str(d)}, "families": fams, "claims": {"x": {"hypothesis": "h", "rule": rule}}}
    path = tmp_path / "study_e.yaml"
    first = validate(StudyConfig, study, "study").model_dump(mode="json")
    record_version(study_history_path(d, "study_e"), first, str(path), 0, 6, now="2026-12-01T00:00:00Z")
    study["families"]["gate"]["margin"] = 2
    path.write_text(yaml.safe_dump(study, allow_unicode=True))
    second = validate(StudyConfig, study, "study").model_dump(mode="json")
    record_version(study_history_path(d, "study_e"), second, str(path), 3, 6, now="2026-12-06T00:00:00Z")
    doc = claims.claims_markdown(claims.load_study(path, n_boot=20))
    claim = doc.split("### (x) ")[1]
    assert ("Declared (the study file): declared after 3 of 6 runs had finished; 6 runs with results on disk had started "
            "before this version by their provenance (every sweep it reads).") in claim
    fam_main = doc.split("### Family `main`")[1].split("### Family")[0]
    assert f"Declared (the study file): {BEFORE} (every sweep it reads)." in fam_main
    # the study file edited after its last record and read without recording it: declares nothing
    study["families"]["main"]["alpha"] = 0.1
    path.write_text(yaml.safe_dump(study, allow_unicode=True))
    s = claims.load_study(path, n_boot=20)
    from rbctl.report.study.declared import declarations

    ((_, dec),) = declarations(s, "families.main", None, list(s.testbeds))
    assert dec.text == "the study file differs from every recorded version: treated as undeclared"


def test_what_the_study_file_says_was_written_after_earlier_results_is_said_so(tmp_path: Path) -> None:
    d = sweep_dir(tmp_path / "s")
    study = {"name": "n", "testbeds": {"bed": str(d)}, "families": {"main": {"members": ["b − a"]}},
             "claims": {"x": {"hypothesis": "h", "rule": {"kind": "calls", "family": "main", "support": "higher"}}},
             "note": "Written after a pilot of the same design had been seen.", "written_after_results": ["x"]}
    path = tmp_path / "study_n.yaml"
    path.write_text(yaml.safe_dump(study, allow_unicode=True))
    from rbctl.report.declaration import declare_study_file

    (d / SWEEP_STATE).write_text(json.dumps({"runs": {}}))  # recorded as if before any run had finished
    declare_study_file(path)
    for run in d.glob("runs/*/seed_*"):  # and the runs started after it
        (run / "provenance.json").write_text(json.dumps({"started": "2027-01-01T00:00:00+0000"}))
    doc = claims.claims_markdown(claims.load_study(path, n_boot=20))
    claim = doc.split("### (x) ")[1]
    assert ("Declared (the study file): declared after an earlier run set's results (the study file says so); "
            f"{BEFORE} (every sweep it reads).") in claim
    assert f"Declared (the study file): {BEFORE} (every sweep it reads)." in doc.split("### Family `main`")[1]
