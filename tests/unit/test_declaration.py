"""Declarations from hand-made version histories (rbctl.store.history, rbctl.report.declaration): the
earliest version from which a key kept its latest value, and what it says."""

from __future__ import annotations

import json

import pytest
import yaml

from rbctl.report.declaration import (Declaration, declare_study, declare_study_file, family_declaration, lookup,
                                      study_declaration, sweep_declaration)
from rbctl.store.history import content_sha256, read_history, record_version
from rbctl.store.rundir import SWEEP_HISTORY, SWEEP_STATE, study_history_path


def _comparisons(margin=None, budget_margin=5.0, alpha=0.05):
    return {"principal": [["b", "a"]], "metric": "avg@n", "benchmark": None, "alpha": alpha, "mde": 5.0,
            "planning_sd": 4.0, "power": 0.8, "margin": margin,
            "families": {"budget": {"pairs": [["c", "a"]], "metric": None, "benchmark": None, "alpha": None,
                                    "margin": budget_margin, "mde": None, "planning_sd": None, "power": None}}}


def _history(tmp_path, versions):
    """A sweep directory whose sweep_history.jsonl holds ``versions``: (comparisons, finished, total)."""
    for i, (comps, done, total) in enumerate(versions):
        record_version(tmp_path / SWEEP_HISTORY, {"name": "t", "comparisons": comps}, "sweep.yaml", done, total,
                       now=f"2026-12-0{i + 1}T00:00:00Z")
    return tmp_path


def test_a_version_is_appended_only_when_it_differs_from_the_latest(tmp_path):
    path = tmp_path / "h.jsonl"
    a, b = {"x": 1, "y": [1, 2]}, {"x": 2, "y": [1, 2]}
    assert record_version(path, a, "f.yaml", 0, 4)["sha256"] == content_sha256({"y": [1, 2], "x": 1})  # key order is not content
    assert record_version(path, dict(a), "f.yaml", 1, 4) is None
    record_version(path, b, "f.yaml", 2, 4)
    record_version(path, a, "f.yaml", 3, 4)  # edited back: recorded again, the latest line is the version in force
    assert [(h["content"]["x"], h["runs_finished"]) for h in read_history(path)] == [(1, 0), (2, 2), (1, 3)]
    line = json.loads(path.read_text().splitlines()[0])
    assert set(line) == {"sha256", "first_seen", "runs_finished", "runs_total", "source", "content", "prev", "chain"}


def test_a_margin_changed_after_a_run_finished_is_declared_after_it_and_an_unchanged_family_before(tmp_path):
    d = _history(tmp_path, [(_comparisons(margin=None), 0, 4), (_comparisons(margin=3.0), 1, 4)])
    margin = sweep_declaration(d, "comparisons.margin")
    second = read_history(d / SWEEP_HISTORY)[1]
    assert margin == Declaration("comparisons.margin", "2026-12-02T00:00:00Z", 1, 4, False, sha256=second["sha256"])
    assert margin.text == "declared after 1 of 4 runs had finished"
    budget = sweep_declaration(d, "comparisons.families.budget")
    assert budget.in_force_before_first is True and budget.first_seen == "2026-12-01T00:00:00Z"
    assert budget.text == "declared before any run in this directory finished"
    # the principal family resolves the principal margin, so it changed with it; the budget family's own margin did not
    assert family_declaration(d, "principal").text == "declared after 1 of 4 runs had finished"
    assert family_declaration(d, "budget").text == "declared before any run in this directory finished"


def test_a_value_changed_and_changed_back_counts_from_its_return(tmp_path):
    # 5 → 3 → 5: the value now in force has held only since the third version
    d = _history(tmp_path, [(_comparisons(budget_margin=5.0), 0, 6), (_comparisons(budget_margin=3.0), 2, 6),
                            (_comparisons(budget_margin=5.0), 5, 6)])
    assert sweep_declaration(d, "comparisons.families.budget.margin").text == "declared after 5 of 6 runs had finished"
    assert sweep_declaration(d, "comparisons.principal").text == "declared before any run in this directory finished"


def test_an_inherited_value_changes_the_family_that_inherits_it(tmp_path):
    # the budget family leaves alpha null: it is called at the principal alpha, so a changed alpha is a new declaration
    d = _history(tmp_path, [(_comparisons(alpha=0.05), 0, 4), (_comparisons(alpha=0.1), 2, 4)])
    assert family_declaration(d, "budget").text == "declared after 2 of 4 runs had finished"
    assert sweep_declaration(d, "comparisons.families.budget").text == "declared before any run in this directory finished"  # its own block


def test_changed_keys_compare_versions_key_by_key():
    from rbctl.store.history import changed_keys

    old = {"seeds": [0, 1], "comparisons": {"margin": None, "families": {"a": {"margin": 5.0}, "b": {}}}}
    new = {"seeds": [0, 1], "comparisons": {"margin": 3.0, "families": {"a": {"margin": 4.0}}}, "escape": None}
    assert changed_keys(old, new) == ["comparisons.margin", "comparisons.families.a.margin", "comparisons.families.b",
                                      "escape"]
    assert changed_keys(new, new) == []


def test_no_history_and_an_absent_key(tmp_path):
    none = sweep_declaration(tmp_path, "comparisons.margin")
    assert none == Declaration("comparisons.margin", None, None, None, None)
    assert none.text == "no declaration record in this directory"
    d = _history(tmp_path, [(_comparisons(), 0, 2)])
    missing = sweep_declaration(d, "comparisons.families.escape")
    assert missing.absent and missing.text.startswith("not declared")
    assert family_declaration(d, "escape").absent


def test_a_sweep_whose_history_began_after_runs_had_finished_is_unknown_there(tmp_path):
    # a directory made before rbctl kept histories, resumed with 3 of 4 runs done: that first version's
    # declaration time is unknown; a later change is dated by the record
    d = _history(tmp_path, [(_comparisons(margin=None), 3, 4), (_comparisons(margin=2.0), 4, 4)])
    budget = sweep_declaration(d, "comparisons.families.budget")
    assert (budget.in_force_before_first, budget.finished_before) == (None, 3)
    assert budget.text == "first recorded after 3 of 4 runs had finished: whether it was in force before them is not recorded"
    assert sweep_declaration(d, "comparisons.margin").text == "declared after 4 of 4 runs had finished"


def test_lookup_finds_names_with_dots():
    data = {"families": {"a.b": {"margin": 2.0}, "a": {"margin": 1.0}}}
    assert lookup(data, "families.a.b.margin") == 2.0 and lookup(data, "families.a.margin") == 1.0
    assert lookup(data, "families.c") is lookup(data, "nope.x")  # both missing


def test_a_study_is_declared_in_each_sweep_it_reads_before_its_runs(tmp_path):
    study = tmp_path / "my_study.yaml"
    bed, main = tmp_path / "bed", tmp_path / "main"
    main.mkdir()
    (main / SWEEP_STATE).write_text(json.dumps({"runs": {"a/seed_0": {"status": "done", "error": None},
                                                         "a/seed_1": {"status": "pending", "error": None}}}))
    content = {"claims": {"c1": {"rule": "all_higher"}}}
    assert declare_study(study, content, [bed, main, bed]) == [study_history_path(bed, "my_study"),
                                                               study_history_path(main, "my_study")]
    assert declare_study(study, content, [bed, main]) == []  # the same version: nothing new
    assert study_declaration(study, bed, "claims.c1").text == "declared before any run in this directory finished"  # bed made, no runs
    other = tmp_path / "not_yet"
    assert declare_study(tmp_path / "s2.yaml", content, [other, main], create=False) == [study_history_path(main, "s2")]
    assert not other.exists()  # a report records only where a sweep directory exists
    declared = study_declaration(study, main, "claims.c1")
    assert (declared.finished_before, declared.total) == (1, 2)
    assert declared.text == "declared after 1 of 2 runs had finished"


def test_declaring_a_study_file_validates_it_and_records_every_sweep_it_names(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "study_x.yaml"
    path.write_text(yaml.safe_dump({"name": "x", "testbeds": {"maze": "runs/maze"}, "main": {"name": "main", "dir": "runs/main"}}))
    written = declare_study_file(path)
    assert written == [study_history_path("runs/maze", "study_x"), study_history_path("runs/main", "study_x")]
    assert read_history(written[0])[0]["content"]["testbeds"] == {"maze": "runs/maze"}
    from rbctl.errors import UserError

    path.write_text(yaml.safe_dump({"name": "x"}))
    with pytest.raises(UserError, match="testbeds"):
        declare_study_file(path)


def test_rbctl_report_declare_records_the_study_and_writes_no_document(tmp_path, monkeypatch, capsys):
    from rbctl.cli import run

    monkeypatch.chdir(tmp_path)
    path = tmp_path / "study_q.yaml"
    path.write_text(yaml.safe_dump({"name": "q", "testbeds": {"quick": "runs/quick"}}))
    assert run(["report", str(path), "--declare"]) == 0
    assert capsys.readouterr().out.strip() == f"declared: {study_history_path('runs/quick', 'study_q')}"
    assert not (tmp_path / "runs" / "q").exists()  # no document
    assert run(["report", str(path), "--declare"]) == 0
    assert "recorded already" in capsys.readouterr().out
    assert study_declaration(path, tmp_path / "runs" / "quick", "testbeds.quick").text == "declared before any run in this directory finished"
    # reporting it records the version it reads first (here the sweep has no runs yet, so no document)
    path.write_text(yaml.safe_dump({"name": "q2", "testbeds": {"quick": "runs/quick"}}))
    assert run(["report", str(path)]) == 2
    history = read_history(study_history_path(tmp_path / "runs" / "quick", "study_q"))
    assert [h["content"]["name"] for h in history] == ["q", "q2"]
    capsys.readouterr()
    assert run(["report", str(tmp_path), "--declare"]) == 2  # a directory is no study file
    assert "--declare records a study file's version" in capsys.readouterr().err


def test_the_reports_sentence_names_the_version_and_each_sweep(tmp_path):
    from rbctl.report.declaration import declaration_sentence

    a, b = tmp_path / "a", tmp_path / "b"
    _history(a, [(_comparisons(), 0, 2)])
    sha = read_history(a / SWEEP_HISTORY)[0]["sha256"][:7]
    assert declaration_sentence([a, a], "budget") == (
        "Declaration (recorded by rbctl ablate in sweep_history.jsonl): declared before any run in this directory finished "
        f"(sweep-file version `{sha}`, first seen 2026-12-01T00:00:00Z).")
    assert declaration_sentence([a, b], "budget").endswith(
        f"`{b}`: no declaration record in this directory.")
    assert declaration_sentence([], "principal") == "Declaration: no sweep directory, so no declaration record."


# A sweep file and a runs manifest that use no `report:` block, and the sha256 of each one's version as
# rbctl recorded it before the block existed (computed at that schema: the sweep file's content without
# `design`, null designs being left out already; the manifest's with `design: null`, as manifests were
# always recorded). A schema change that moves these hashes gives every existing sweep directory or
# manifest a new version of its file on its next start or report, as if its declaration had changed.
VERSIONED_SWEEP = """\
name: versions
base: base.yaml
seeds: [0, 1, 2]
arms:
  grpo: {}
  budget: {algo.budget: 1.0}
eval: {benchmarks: [builtin], n: 4}
comparisons: {principal: [[budget, grpo]], mde: 10.0, planning_sd: 8.0}
"""
VERSIONED_SWEEP_SHA256 = "44fa135f9b4f438db076dbc084d09ab2a78354e9150f0dd071457694528f81e5"
VERSIONED_MANIFEST = """\
runs_from: table
name: versions
table: runs.csv
arms:
  grpo: {baseline: grpo, variant: base}
  budget: {baseline: grpo, variant: budget}
seeds: [0, 1, 2]
comparisons: {principal: [[budget, grpo]], mde: 10.0, planning_sd: 8.0}
"""
VERSIONED_MANIFEST_SHA256 = "5abd392260596fd48df6c767ab7e3936bc861bf923cfdf47c9a747dc74f7ea93"


def test_a_sweep_file_without_a_report_block_keeps_the_version_it_had_before_the_block(tmp_path):
    from rbctl.sweep.ablate import sweep_file_content

    (tmp_path / "base.yaml").write_text("steps: 2\n")
    path = tmp_path / "sweep.yaml"
    path.write_text(VERSIONED_SWEEP)
    content, _ = sweep_file_content(path)
    assert "report" not in content and "design" not in content
    assert content_sha256(content) == VERSIONED_SWEEP_SHA256
    path.write_text(VERSIONED_SWEEP + "report: {sections: []}\n")  # a stated block is a new version
    stated, _ = sweep_file_content(path)
    assert stated["report"]["sections"] == [] and content_sha256(stated) != VERSIONED_SWEEP_SHA256


def test_a_manifest_without_a_report_block_keeps_the_version_it_had_before_the_block(tmp_path, monkeypatch):
    from rbctl.report.sources import read_manifest
    from rbctl.report.sources.declare import declare_manifest

    monkeypatch.chdir(tmp_path)  # the manifest's root, ".", is the current directory
    (tmp_path / "runs.csv").write_text("run,step,key,value\n")
    path = tmp_path / "runs.yaml"
    path.write_text(VERSIONED_MANIFEST)
    record = declare_manifest(path, read_manifest(path))
    assert "report" not in record["content"] and record["content"]["design"] is None
    assert record["sha256"] == VERSIONED_MANIFEST_SHA256
    assert declare_manifest(path, read_manifest(path)) is None  # reported again: no new version
    path.write_text(VERSIONED_MANIFEST + "report: {sections: [plateau]}\n")
    assert declare_manifest(path, read_manifest(path))["content"]["report"]["sections"] == ["plateau"]
