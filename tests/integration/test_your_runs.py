"""Runs from elsewhere (rbctl.report.sources, docs/your_runs.md): a W&B-style long-table export built
here, what the report says about what runs do not log, the refusal of pickles and torn files, the
CLI telling a manifest by its content, and a study whose testbed is a manifest."""

from __future__ import annotations

import json
import math
import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.stats as sps
import yaml
from rbctl.cli import run
from rbctl.errors import UserError
from rbctl.report import study as claims
from rbctl.report.study.families import families
from rbctl.report.study.rules import apply_rule
from rbctl.report.analyses.comparisons import HIGHER, INCONCLUSIVE, call
from rbctl.report.data import report_data

# arm -> (baseline, variant) and its final held-out accuracy per seed 0, 1, 2 (the study test's numbers):
#   grpo .25 .3125 .375; grpo_budget .5 .5625 .6875  -> Δ .25, .25, .3125
#   rloo .375 .4375 .4375; rloo_budget .375 .4375 .5 -> Δ 0, 0, .0625
ARMS = {"grpo": ("grpo", "base"), "grpo_budget": ("grpo", "budget"), "rloo": ("rloo", "base"),
        "rloo_budget": ("rloo", "budget")}
FINAL = {"grpo": (0.25, 0.3125, 0.375), "grpo_budget": (0.5, 0.5625, 0.6875), "rloo": (0.375, 0.4375, 0.4375),
         "rloo_budget": (0.375, 0.4375, 0.5)}
STEPS = 4


def wandb_history(arm: str, seed: int) -> pd.DataFrame:
    """One run's history as W&B's `run.history()` gives it: a row per `_step`, a column per key, NaN
    where the key was not logged at that step (the evaluation every 2 steps)."""
    rows = []
    for step in range(1, STEPS + 1):
        rows.append({"_step": step, "train/entropy": 0.6 if step == 1 else 0.1, "train/reward": 0.1 * step,
                     "eval/acc": FINAL[arm][seed] - (0.01 if step == 2 else 0.0) if step % 2 == 0 else math.nan})
    return pd.DataFrame(rows)


def wandb_export(root: Path, fmt: str = "csv", skip: tuple = ()) -> Path:
    """Every run's history melted into the long table (run, step, key, value) a W&B export script writes."""
    frames = []
    for arm in ARMS:
        for seed in range(3):
            if (arm, seed) in skip:
                continue
            h = wandb_history(arm, seed).melt(id_vars="_step", var_name="key", value_name="value")
            frames.append(h.rename(columns={"_step": "step"}).assign(run=f"{arm}-{seed}"))
    table = pd.concat(frames)[["run", "step", "key", "value"]]
    path = root / f"export.{fmt}"
    if fmt == "csv":
        table.to_csv(path, index=False)  # NaN written as an empty cell
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in table.dropna().to_dict("records")))
    return path


def table_manifest(root: Path, table: Path, **extra) -> Path:
    data = {"runs_from": "table", "name": "imported", "root": str(root), "table": table.name, "path": "{arm}-{seed}",
            "arms": {a: {"baseline": b, "variant": v} for a, (b, v) in ARMS.items()}, "seeds": [0, 1, 2],
            "roles": {"heldout": "eval/acc", "benchmark": "math", "entropy": "train/entropy", "reward": "train/reward"},
            "comparisons": {"principal": [["grpo_budget", "grpo"], ["rloo_budget", "rloo"]], "mde": 10.0,
                            "planning_sd": 3.5},
            "ceiling": {"value": 0.98, "source": "stated in the test"}, **extra}
    path = root / "manifest.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def p_two_sided(deltas) -> float:
    return float(sps.ttest_1samp(deltas, 0.0).pvalue)


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_a_wandb_style_export_is_read_as_runs_and_called(tmp_path: Path, fmt: str) -> None:
    data = report_data([table_manifest(tmp_path, wandb_export(tmp_path, fmt))], n_boot=50)
    rows = data.verdict.rows.set_index("arm")
    p_grpo, p_rloo = p_two_sided([0.25, 0.25, 0.3125]), p_two_sided([0.0, 0.0, 0.0625])
    assert rows.loc["grpo_budget", "delta"] == pytest.approx((0.25 + 0.25 + 0.3125) / 3)
    assert rows.loc["grpo_budget", "p_holm"] == pytest.approx(2 * p_grpo)  # Holm over the 2 principal members
    assert rows.loc["rloo_budget", "p_holm"] == pytest.approx(p_rloo)
    assert rows.loc["grpo_budget", "call"] == HIGHER and rows.loc["rloo_budget", "call"].startswith(INCONCLUSIVE)
    run = next(r for r in data.sweep.runs if r.arm == "rloo" and r.seed == 2)
    assert [(e["step"], e["avg@n"]) for e in run.evals] == [(2, pytest.approx(0.4275)), (4, 0.4375)]
    assert run.final_step == 4 and [m["reward/mean"] for m in run.metrics] == pytest.approx([0.1, 0.2, 0.3, 0.4])
    # plateau of plain GRPO: 98 − 31.25 = 66.75 below the ceiling, entropy .1 < .6/3; evaluations at steps 2 and 4
    # leave one in the last quarter (steps 3-4), so "stalled" is not measured (a stall needs two there) and the
    # plateau does not hold
    v = data.plateau.verdict
    assert v.stalled.value is None and v.below_ceiling.value == pytest.approx(66.75) and not v.held
    # what these runs do not log is named once each, not filled in
    assert [r for r in data.sweep.remarks if "not logged" in r] == [
        f"{label}: not logged by these runs (the manifest names no metric for roles.{role})"
        for label, role in (("κ", "kappa"), ("κ_eff", "kappa_eff"), ("advantage gap", "adv_gap"),
                            ("response length", "response_length"))]
    assert {c.metric for c in data.trajectories.curves} == {"reward/mean", "avg@n", "entropy"}


def test_missing_seeds_other_steps_and_another_eval_grid_are_reported(tmp_path: Path) -> None:
    table = wandb_export(tmp_path, skip={("rloo", 1)})
    df = pd.read_csv(table)
    # grpo-2 stopped after step 3, and rloo_budget-0 was also evaluated at step 3; a run no arm names
    df = df[~((df.run == "grpo-2") & (df.step == 4))]
    extra = pd.DataFrame([{"run": "rloo_budget-0", "step": 3, "key": "eval/acc", "value": 0.4},
                          {"run": "sweep-xyz", "step": 1, "key": "train/reward", "value": 0.5}])
    pd.concat([df, extra]).to_csv(table, index=False)
    data = report_data([table_manifest(tmp_path, table)], n_boot=50)
    issues = {i.name: (i.status, i.detail) for i in data.sweep.issues}
    assert issues["imported/rloo/seed_1"][0] == "missing"
    assert issues["grpo/seed_2"] == ("no final evaluation", "math: its last held-out evaluation is at step 2, "
                                     "its last logged step is 3 (an earlier evaluation is not a final score)")
    assert issues[str(table)] == ("not named", f"the table's runs sweep-xyz are in no arm of {tmp_path / 'manifest.yaml'}; "
                                  "they are not read")
    remarks = data.sweep.remarks
    assert "the runs logged different numbers of steps: 3 steps: grpo/seed_2; 4 steps: " in "\n".join(remarks)
    assert any(r.startswith("the runs evaluated math at different steps: 2,4 (") and "2,3,4 (rloo_budget/seed_0)" in r
               for r in remarks)
    grpo = data.comparisons.rows.set_index(["arm", "ref"]).loc[("grpo_budget", "grpo")]
    assert int(grpo.seeds) == 2  # seed 2 of grpo has no final score: paired over seeds 0, 1


def _trl_run(d: Path) -> Path:
    """A TRL output folder's trainer state, the shape transformers' `TrainerState.save_to_json` writes."""
    d.mkdir(parents=True)
    history = [{"step": s, "entropy": 0.5, "reward": 0.1 * s} for s in (1, 2)] + [{"step": 2, "eval_reward": 0.5}]
    (d / "trainer_state.json").write_text(json.dumps({"global_step": 2, "max_steps": 2, "log_history": history},
                                                     indent=2))
    return d


class Planted:
    """A pickle that, were it ever loaded, would write a file: its absence shows nothing ran."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "ran"))


def _trl_manifest(root: Path) -> Path:
    path = root / "m.yaml"
    path.write_text(yaml.safe_dump({"runs_from": "trl", "root": str(root), "arms": {"a": {}}, "seeds": [0]}))
    return path


def _report(args: list[str], capsys) -> tuple[int, str]:
    """`rbctl report ARGS` as the console script runs it: (exit code, what it printed)."""
    capsys.readouterr()
    rc = run(["report", *args])
    out = capsys.readouterr()
    return rc, out.out + out.err


def test_a_pickle_is_never_loaded_and_a_truncated_file_is_one_line(tmp_path: Path, capsys) -> None:
    run = _trl_run(tmp_path / "a" / "seed_0")
    marker = tmp_path / "ran.txt"
    # TRL's own training_args.bin beside the state is a pickle: ignored, never loaded
    (run / "training_args.bin").write_bytes(pickle.dumps(Planted(marker)))
    assert report_data([_trl_manifest(tmp_path)], n_boot=20).sweep.runs[0].finals["eval"]["per_problem"][0]["correct"] == 0.5
    assert not marker.exists()
    # a pickle in place of the state: refused by its first byte, before any parser sees it
    (run / "trainer_state.json").write_bytes(pickle.dumps(Planted(marker)))
    out = tmp_path / "out"
    rc, printed = _report([str(_trl_manifest(tmp_path)), "-o", str(out)], capsys)
    assert rc == 2 and not marker.exists() and not out.exists()
    assert printed.strip().count("\n") == 0
    assert f"error: {run / 'trainer_state.json'}: a pickle (or torch.save file); rbctl never unpickles" in printed
    # a truncated state: the file and line
    full = json.dumps({"global_step": 2, "log_history": [{"step": 1, "entropy": 0.5}]}, indent=2)
    (run / "trainer_state.json").write_text(full[: len(full) // 2])
    with pytest.raises(UserError, match=rf"^{run / 'trainer_state.json'} line \d+: invalid JSON \(truncated\)"):
        report_data([_trl_manifest(tmp_path)])
    rc, printed = _report([str(_trl_manifest(tmp_path)), "-o", str(out)], capsys)
    assert rc == 2 and printed.strip().count("\n") == 0 and not out.exists()


def test_a_torn_jsonl_line_a_pickled_table_and_a_bad_value_are_refused(tmp_path: Path) -> None:
    log = tmp_path / "a" / "seed_0"
    log.mkdir(parents=True)
    (log / "run.jsonl").write_text('{"step": 1, "data": {"actor/entropy": 0.5}}\n{"step": 2, "data": {"actor/ent')
    m = tmp_path / "v.yaml"
    m.write_text(yaml.safe_dump({"runs_from": "verl", "root": str(tmp_path), "arms": {"a": {}}, "seeds": [0]}))
    with pytest.raises(UserError, match=rf"^{log / 'run.jsonl'} line 2: invalid JSON \(truncated\)"):
        report_data([m])
    table = tmp_path / "export.pkl"
    table.write_bytes(pickle.dumps({"run": ["a-0"]}))
    with pytest.raises(UserError, match=r"export.pkl: a pickle"):
        report_data([table_manifest(tmp_path, table)])
    bad = tmp_path / "export.csv"
    bad.write_text("run,step,key,value\ngrpo-0,1,eval/acc,high\n")
    with pytest.raises(UserError, match=r"export.csv line 2: value 'high' is not a number"):
        report_data([table_manifest(tmp_path, bad)])
    bad.write_text("run,step,key,value\ngrpo-0,4,eval/acc,3.5\n")  # a score that is not a fraction
    with pytest.raises(UserError, match=r"held-out score eval/acc = 3.5 at step 4; rbctl compares fractions"):
        report_data([table_manifest(tmp_path, bad)])


@pytest.mark.slow  # a whole report with its figures (~12 s)
def test_the_cli_tells_a_manifest_by_its_content_and_writes_runs_name(tmp_path: Path, monkeypatch, capsys) -> None:
    manifest = table_manifest(tmp_path, wandb_export(tmp_path))
    odd = tmp_path / "my_runs.yml"  # any name: the content (`runs_from:`) decides
    odd.write_text(manifest.read_text())
    monkeypatch.chdir(tmp_path)
    rc, printed = _report([str(odd)], capsys)
    assert rc == 0, printed
    assert "higher" in printed and "note: κ_eff: not logged by these runs" in printed  # the call, the missing role
    report = (tmp_path / "runs" / "imported" / "report.md").read_text()
    assert "| grpo_budget − grpo | math | avg@n | 3 |" in report
    assert report.count("κ_eff: not logged by these runs") == 1
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"runs_from": "neptune", "arms": {"a": {}}}))
    rc, printed = _report([str(bad)], capsys)
    assert rc == 2 and "runs_from" in printed


def test_a_study_takes_a_manifest_as_a_testbed(tmp_path: Path) -> None:
    manifest = table_manifest(tmp_path, wandb_export(tmp_path))
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({
        "name": "imported study", "testbeds": {"imported": str(manifest)},
        "families": {"budget": {"members": ["{X}_budget − {X}"], "declared": "principal"}},
        "claims": {"a": {"hypothesis": "The budget improves several RL baselines",
                         "rule": {"kind": "calls", "family": "budget", "support": "higher", "count": 2,
                                  "contradict": ["lower"]}}}}))
    s = claims.load_study(study, n_boot=50)
    (tb,) = s.testbeds
    grpo, rloo = tb.family("principal")
    assert grpo.p_holm == pytest.approx(2 * p_two_sided([0.25, 0.25, 0.3125]))
    assert [call(grpo), call(rloo)] == [HIGHER, INCONCLUSIVE]
    fams = families(s)
    assert [(m.comparison.arm, call(m.comparison)) for m in fams["budget"].members] == [
        ("grpo_budget", HIGHER), ("rloo_budget", INCONCLUSIVE)]
    # one member higher of the two asked for, none lower: inconclusive by the rule
    assert apply_rule(s.config.claims["a"], s, fams).outcome == "inconclusive"
    doc = claims.claims_markdown(s, command="rbctl report study.yaml")
    assert "imported" in doc and "grpo_budget − grpo" in doc
    assert np.isfinite(grpo.delta.mean)


def test_escape_reads_a_signal_the_runs_log_and_names_one_they_do_not(tmp_path: Path) -> None:
    table = wandb_export(tmp_path)
    setting = {"metric": "train/reward", "threshold": 0.25, "signal": "train", "hold": 1}
    data = report_data([table_manifest(tmp_path, table, escape=setting)], n_boot=50)
    # train/reward = 0.1·step: first ≥ 0.25 at step 3, held at step 4 -> every run escapes at step 3
    rows = data.escape.rows
    assert len(rows) == 12 and set(rows.time) == {3.0} and set(rows.event) == {1}
    data = report_data([table_manifest(tmp_path, table, escape={**setting, "metric": "train/walk_share"})], n_boot=50)
    assert "escape signal: not logged by these runs (no `train/walk_share` in their training records)" in data.sweep.remarks
    assert not len(data.escape.rows)


def test_a_run_folder_without_records_is_missing_and_no_run_at_all_is_an_error(tmp_path: Path) -> None:
    _trl_run(tmp_path / "a" / "seed_0")
    (tmp_path / "a" / "seed_1").mkdir()  # crashed before TRL wrote any state
    m = tmp_path / "m.yaml"
    m.write_text(yaml.safe_dump({"runs_from": "trl", "root": str(tmp_path), "arms": {"a": {}}, "seeds": [0, 1, 2]}))
    issues = {i.name: (i.status, i.detail) for i in report_data([m], n_boot=20).sweep.issues}
    assert issues["imported/a/seed_1"][0] == "missing" and "no trainer_state.json" in issues["imported/a/seed_1"][1]
    assert issues["imported/a/seed_2"] == ("missing", f"{tmp_path / 'a' / 'seed_2'} does not exist (the manifest {m} names it)")
    m.write_text(yaml.safe_dump({"runs_from": "trl", "root": str(tmp_path), "arms": {"b": {}}, "seeds": [0]}))
    with pytest.raises(UserError, match=rf"^{m}: none of the 1 runs it names was found \(first: .*b/seed_0 does not exist"):
        report_data([m])


def test_reporting_a_study_with_a_manifest_testbed_records_nothing_into_the_manifest(tmp_path: Path, capsys) -> None:
    manifest = table_manifest(tmp_path, wandb_export(tmp_path))
    before = manifest.read_text()
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({"name": "imported study", "testbeds": {"imported": str(manifest)}}))
    rc, printed = _report([str(study), "--declare"], capsys)
    assert rc == 0, printed
    assert manifest.read_text() == before and sorted(p.name for p in tmp_path.iterdir()) == [
        "export.csv", "manifest.yaml", "study.yaml"]


def test_a_study_of_a_manifest_without_held_out_scores_compares_a_training_metric(tmp_path: Path) -> None:
    # no held-out role: no benchmark at all; a family on the last quarter of entropy needs none
    manifest = table_manifest(tmp_path, wandb_export(tmp_path), roles={"entropy": "train/entropy",
                                                                        "reward": "train/reward"}, comparisons=None)
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({
        "name": "entropy study", "testbeds": {"imported": str(manifest)},
        "families": {"entropy": {"members": ["{X}_budget − {X}"], "metric": "last_quarter:entropy"}}}))
    s = claims.load_study(study, n_boot=50)
    fams = families(s)
    members = {m.comparison.arm: m.comparison for m in fams["entropy"].members}
    # train/entropy is 0.1 at the last quarter's step (4) in every run: Δ = 0 in every seed, not testable
    assert set(members) == {"grpo_budget", "rloo_budget"}
    assert all(c.delta.mean == pytest.approx(0.0) and call(c) == "not testable" for c in members.values())
    doc = claims.claims_markdown(s, command="rbctl report study.yaml")
    assert "grpo_budget − grpo" in doc
