"""`rbctl ablate` keeps every version of the sweep file it ran under (SWEEP/sweep_history.jsonl): a margin
edited after a run finished is allowed on resume and recorded as declared after it; a change of the
runs' work stays refused; the report prints each family's declaration."""

from __future__ import annotations

import json
import time

import pytest
import yaml

from rbctl.errors import UserError
from rbctl.report.declaration import sweep_declaration
from rbctl.store.history import read_history
from rbctl.store.rundir import SWEEP_HISTORY
from rbctl.sweep import ablate
from tests.conftest import TINY_TRAIN

COMPARISONS = {"principal": [["grpo_budget", "grpo"]], "mde": 5.0, "planning_sd": 4.0,
               # the same pair on pass@2 is another comparison, so it may form its own family
               "families": {"budget": {"pairs": [["grpo_budget", "grpo"]], "metric": "pass@2", "margin": 5.0}}}


def _write(tmp_path, margin=None, budget=1.0):
    (tmp_path / "base.yaml").write_text(yaml.safe_dump({**TINY_TRAIN, "steps": 2}))
    sweep = {"name": "t", "base": "base.yaml", "seeds": [0], "jobs": 1,
             "arms": {"grpo": {}, "grpo_budget": {"algo.budget": budget}},
             "eval": {"benchmarks": ["builtin"], "n": 2, "limit": 4},
             "comparisons": {**COMPARISONS, "margin": margin}}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep, sort_keys=False))
    return path


@pytest.fixture
def fake_runs(monkeypatch):
    """Runs that finish at once: each writes the final evaluation's summary the resume checks and is
    recorded done; `finish` caps how many of the queued runs finish."""
    from rbctl.eval.pipeline import bench_dir_name
    from rbctl.store.rundir import SUMMARY, final_eval_dir
    from rbctl.store.write import write_sweep_state

    limit = {"n": None}

    def execute(todo, sweep, sweep_dir, state, *args, **kwargs):
        for key, rd, cfg, _ in todo[:limit["n"]]:
            out = final_eval_dir(rd, cfg.steps) / bench_dir_name("builtin")
            out.mkdir(parents=True)
            (out / SUMMARY).write_text("{}")
            (rd / "provenance.json").write_text(json.dumps({"started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}))
            state["runs"][key] = {"status": "done", "error": None}
        write_sweep_state(sweep_dir, state)

    monkeypatch.setattr(ablate, "_execute", execute)
    monkeypatch.setattr(ablate, "_prepare_shared", lambda *a: None)
    return limit


def test_a_margin_edited_after_one_run_is_recorded_and_a_changed_run_is_refused(tmp_path, fake_runs):
    path, out = _write(tmp_path), tmp_path / "sweep"
    fake_runs["n"] = 1  # one of the two runs finishes, then the sweep stops
    ablate.run_sweep(path, out, progress=False, log=lambda *a: None)
    fake_runs["n"] = 0
    ablate.run_sweep(path, out, progress=False, log=lambda *a: None)  # the same version, resumed: nothing new
    [first] = read_history(out / SWEEP_HISTORY)
    assert (first["runs_finished"], first["runs_total"], first["source"]) == (0, 2, str(path))
    assert first["content"]["comparisons"]["margin"] is None and first["content"]["jobs"] == 1

    fake_runs["n"] = None
    _write(tmp_path, margin=3.0)  # the principal margin, after grpo/seed_0 had finished
    said = []
    ablate.run_sweep(path, out, progress=False, log=said.append)
    assert said[0] == ("the sweep file changed since this directory's last start (comparisons.margin): recorded as "
                       "a new version after 1 of 2 runs had finished (sweep_history.jsonl); the report prints each "
                       "family's declaration from these records")
    second = read_history(out / SWEEP_HISTORY)[1]
    assert (second["runs_finished"], second["runs_total"]) == (1, 2)
    assert second["content"]["comparisons"]["margin"] == 3.0
    assert sweep_declaration(out, "comparisons.margin").text == "declared after 1 of 2 runs had finished"
    assert sweep_declaration(out, "comparisons.families.budget").text == "declared before any run in this directory finished"
    assert sweep_declaration(out, "comparisons.principal").text == "declared before any run in this directory finished"

    _write(tmp_path, margin=3.0, budget=2.0)  # another budget changes what the runs trained: refused, nothing recorded
    with pytest.raises(UserError, match="holds a different sweep"):
        ablate.run_sweep(path, out, progress=False, log=lambda *a: None)
    assert len(read_history(out / SWEEP_HISTORY)) == 2


def test_a_selection_records_the_whole_file_and_a_dry_run_writes_nothing(tmp_path, fake_runs):
    from rbctl.report import power
    from rbctl.sweep.plan import sweep_plan

    path, out = _write(tmp_path), tmp_path / "sweep"
    sweep_plan(path, out, power)
    assert not out.exists()
    ablate.run_sweep(path, out, progress=False, log=lambda *a: None, arms=["grpo"], seeds=[5])
    [only] = read_history(out / SWEEP_HISTORY)
    # the declared sweep, not the selection (which drops the pairs it cannot run and changes the seeds)
    assert only["content"]["seeds"] == [0] and only["content"]["comparisons"]["principal"] == [["grpo_budget", "grpo"]]
    assert (only["runs_finished"], only["runs_total"]) == (0, 1)


@pytest.mark.slow
def test_resumed_sweep_with_an_edited_margin_and_its_report(tmp_path, rbctl_cache):
    """End to end, with training: one arm first (`--arms grpo`), then the margin edited and the whole
    sweep resumed; the report prints each family's declaration."""
    from rbctl.report import make_report

    path, out = _write(tmp_path), tmp_path / "sweep"
    state = ablate.run_sweep(path, out, progress=False, log=lambda *a: None, arms=["grpo"])
    assert state["runs"]["grpo/seed_0"]["status"] == "done"
    _write(tmp_path, margin=3.0)
    state = ablate.run_sweep(path, out, progress=False, log=lambda *a: None)
    assert {k: r["status"] for k, r in state["runs"].items()} == {"grpo/seed_0": "done", "grpo_budget/seed_0": "done"}
    assert sweep_declaration(out, "comparisons.margin").text == "declared after 1 of 2 runs had finished"
    report = make_report([out]).read_text()
    answer = report[report.index("## Calls in detail: the principal comparisons"):report.index("## Declared family: budget")]
    family = report[report.index("## Declared family: budget"):]
    assert "Declaration (recorded by rbctl ablate in sweep_history.jsonl): declared after 1 of 2 runs had finished" in answer
    assert ("Declaration (recorded by rbctl ablate in sweep_history.jsonl): declared before any run in this directory "
            "finished") in family
    header = json.loads((out / "runs" / "grpo" / "seed_0" / "provenance.json").read_text())
    assert isinstance(header["git_dirty"], bool) and "torch" in header["packages"]
