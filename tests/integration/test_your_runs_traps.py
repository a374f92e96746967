"""The traps of the path from runs trained elsewhere to calls (docs/your_runs.md), each with its
test: a typo in a manifest (did you mean), a training metric named as the held-out score, a
value logged as null, the `rbctl eval` hint where it applies, a manifest's first report as its
declaration, a TRL output folder reported without a manifest, `-b` with a custom benchmark's
fields, and `-o FILE` in report, eval, train and ablate."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from rbctl.cli import run
from rbctl.errors import UserError
from rbctl.eval.imported import split_benchmarks
from rbctl.report.data import report_data
from rbctl.report.sources.declare import history_path

STEPS = 4


def trl_output(d: Path, seed: int, evaluated: bool = True, kappa_eff=None, checkpoint: bool = False) -> Path:
    """A TRL output folder: its trainer state as transformers' `TrainerState.save_to_json` writes it
    (a null where TRL logged NaN), and optionally the checkpoint folder TRL saves at the last step."""
    d.mkdir(parents=True)
    history = [{"step": s, "entropy": 0.5, "reward": 0.1 * s, "completions/mean_length": 6.0,
                "rbctl/kappa_eff": kappa_eff} for s in range(1, STEPS + 1)]
    if evaluated:
        history += [{"step": s, "eval_reward": 0.25 + 0.0625 * seed + 0.01 * s} for s in (2, 4)]
    (d / "trainer_state.json").write_text(json.dumps({"global_step": STEPS, "max_steps": STEPS, "log_history": history}))
    if checkpoint:
        (d / f"checkpoint-{STEPS}").mkdir()
        (d / f"checkpoint-{STEPS}" / "config.json").write_text("{}")
    return d


def trl_manifest(root: Path, **extra) -> Path:
    data = {"runs_from": "trl", "name": "trl", "root": str(root), "arms": {"grpo": {}, "grpo_budget": {"variant": "budget"}},
            "seeds": [0, 1, 2], "comparisons": {"principal": [["grpo_budget", "grpo"]], "mde": 10.0, "planning_sd": 3.0},
            **extra}
    path = root / "m.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def cli(args: list[str], capsys) -> tuple[int, str]:
    capsys.readouterr()
    rc = run(args)
    out = capsys.readouterr()
    return rc, out.out + out.err


@pytest.mark.parametrize(("change", "message"), [
    ({"arms": {"grpo": {}, "grpo_budget": {"variant": "budgett"}}}, r"unknown variant 'budgett' \(did you mean 'budget'\?\)"),
    ({"runs_from": "tlr"}, r"runs_from.*unknown runs_from 'tlr' \(did you mean 'trl'\?\)"),
    ({"names": "verll"}, r"names.*unknown names 'verll' \(did you mean 'verl'\?\)"),
    ({"roles": {"heldotu": "eval_reward"}}, r"unknown config key 'roles.heldotu' \(did you mean 'roles.heldout'\?\)"),
    # a training metric in the held-out role: TRL's training reward, a train/ name, a training role's own name
    ({"roles": {"heldout": "rewards/contains_a/mean"}}, r"roles.heldout': `rewards/contains_a/mean` is a training metric, "
                                                        r"not held out: trl logs its evaluation as eval_… or test_…"),
    ({"roles": {"heldout": "reward"}}, r"`reward` is also roles.reward, a training metric, not held out"),
    ({"runs_from": "tensorboard", "names": None, "roles": {"heldout": "train/reward"}}, r"`train/reward` is a training metric"),
    ({"runs_from": "tensorboard", "roles": {"heldout": "acc", "reward": "acc"}}, r"`acc` is also roles.reward, a training metric"),
])
def test_a_manifest_typo_or_a_training_metric_as_held_out_is_one_line(tmp_path: Path, change, message) -> None:
    for seed in (0, 1, 2):
        trl_output(tmp_path / "grpo" / f"seed_{seed}", seed)
    path = trl_manifest(tmp_path, **change)
    with pytest.raises(UserError, match=message):
        report_data([path])


def test_a_variant_of_ones_own_is_taken_as_written(tmp_path: Path) -> None:
    for arm in ("grpo", "grpo_budget"):
        for seed in (0, 1, 2):
            trl_output(tmp_path / arm / f"seed_{seed}", seed)
    data = report_data([trl_manifest(tmp_path, arms={"grpo": {}, "grpo_budget": {"variant": "my_trick"}})], n_boot=20)
    assert {r.variant for r in data.sweep.runs} == {"base", "my_trick"}


def test_null_is_undefined_and_a_mistyped_name_gets_the_logged_one(tmp_path: Path) -> None:
    for arm in ("grpo", "grpo_budget"):
        for seed in (0, 1, 2):
            trl_output(tmp_path / arm / f"seed_{seed}", seed, kappa_eff=None if arm == "grpo_budget" else 1.5)
    data = report_data([trl_manifest(tmp_path, roles={"adv_gap": "rbctl/adv_gapp", "response_length": "completion/mean_length"})],
                       n_boot=20)
    remarks = data.sweep.remarks
    assert ("κ_eff: undefined at every step grpo_budget/seed_0, grpo_budget/seed_1, grpo_budget/seed_2 logged it "
            "(`rbctl/kappa_eff` is null or NaN there)") in remarks
    assert not any(r.startswith("κ_eff: not logged") for r in remarks)
    assert ("response length: not logged by these runs (no `completion/mean_length` in their records; did you mean "
            "`completions/mean_length`?)") in remarks
    assert "advantage gap: not logged by these runs (no `rbctl/adv_gapp` in their records)" in remarks


def test_the_eval_hint_names_a_checkpoint_only_where_there_is_one(tmp_path: Path, capsys) -> None:
    for arm in ("grpo", "grpo_budget"):
        for seed in (0, 1, 2):
            trl_output(tmp_path / "trl" / arm / f"seed_{seed}", seed, evaluated=False, checkpoint=seed == 2)
    rc, printed = cli(["report", str(trl_manifest(tmp_path / "trl")), "-o", str(tmp_path / "out")], capsys)
    assert rc == 0, printed
    ck = tmp_path / "trl" / "grpo" / "seed_2" / f"checkpoint-{STEPS}"
    assert (f"note: held-out score: not logged by these runs (no `eval_reward` in their records); `rbctl eval {ck} "
            "-b BENCHMARKS` scores a checkpoint (here grpo/seed_2's step 4) where this report reads it") in printed
    report = (tmp_path / "out" / "report.md").read_text()
    assert "rbctl eval RUN" not in report and "sweep file" not in report
    # runs of a long table have no checkpoints rbctl knows of: the hint says how to name them
    table = tmp_path / "export.csv"
    table.write_text("run,step,key,value\n" + "".join(f"{a}-{s},1,train/reward,0.5\n" for a in ("grpo", "grpo_budget")
                                                      for s in (0, 1, 2)))
    m = tmp_path / "t.yaml"
    m.write_text(yaml.safe_dump({"runs_from": "table", "root": str(tmp_path), "table": "export.csv", "path": "{arm}-{seed}",
                                 "arms": {"grpo": {}, "grpo_budget": {"variant": "budget"}}, "seeds": [0, 1, 2],
                                 "roles": {"reward": "train/reward"}}))
    (line,) = [r for r in report_data([m], n_boot=20).sweep.remarks if r.startswith("held-out score")]
    assert line == ("held-out score: not logged by these runs (the manifest names no metric for roles.heldout); name the "
                    "metric of their evaluation as roles.heldout, or give the manifest `checkpoints:` (where each run's "
                    "checkpoints are) and score them with `rbctl eval` (docs/your_runs.md)")


def test_a_manifests_first_report_is_its_declaration_counted_by_the_runs_own_clocks(tmp_path: Path, capsys) -> None:
    root = tmp_path / "trl"
    root.mkdir()
    m = trl_manifest(root)
    # declared before any run exists: 0 of 6 finished
    rc, printed = cli(["report", str(m), "--declare"], capsys)
    assert rc == 0 and f"declared: {history_path(m)} (0 of 6 runs finished)" in printed
    (record,) = [json.loads(line) for line in history_path(m).read_text().splitlines()]
    assert (record["runs_finished"], record["runs_total"], record["content"]["runs_from"]) == (0, 6, "trl")
    import time

    time.sleep(1.1)  # the runs end after the version was first seen (a second's resolution)
    for arm in ("grpo", "grpo_budget"):
        for seed in (0, 1, 2):
            trl_output(root / arm / f"seed_{seed}", seed)
    rc, printed = cli(["report", str(m), "-o", str(tmp_path / "out")], capsys)
    assert rc == 0, printed
    report = (tmp_path / "out" / "report.md").read_text()
    assert (f"Declaration (recorded by rbctl report in {history_path(m)}, runs counted by their own clocks): declared "
            "before any run of this manifest (by the runs' own clocks) finished (manifest version") in report
    assert "The 1 comparison the runs manifest declares" in report and "sweep" not in report.split("## ")[1]
    # a new version (another margin) after the runs ended: declared after 6 of 6
    m.write_text(m.read_text().replace("mde: 10.0", "mde: 8.0"))
    rc, _ = cli(["report", str(m), "-o", str(tmp_path / "out")], capsys)
    assert rc == 0 and len(history_path(m).read_text().splitlines()) == 2
    assert "declared after 6 of 6 runs had finished" in (tmp_path / "out" / "report.md").read_text()


def test_a_trl_output_folder_alone_is_reported(tmp_path: Path, capsys, monkeypatch) -> None:
    run_dir = trl_output(tmp_path / "trl" / "grpo" / "seed_0", 0)
    (run_dir / "runs").mkdir()  # TRL's TensorBoard logs: not a sweep's runs/
    monkeypatch.chdir(tmp_path)
    rc, printed = cli(["report", "trl/grpo/seed_0"], capsys)
    assert rc == 0, printed
    assert ("note: no runs manifest: 1 trl run found under trl/grpo/seed_0, arms and seeds guessed from their names: "
            "grpo: seed 0; for calls, `rbctl report --init-manifest trl/grpo/seed_0` writes a manifest") in printed
    report = (tmp_path / "runs" / "grpo_seed_0" / "report.md").read_text()  # named after the run
    assert "| grpo | eval | 1 | 1 × 1 | 29.0 [29.0, 29.0] |" in report  # its final eval_reward, 0.25 + 0.01·4
    rc, printed = cli(["report", "--init-manifest", "trl/grpo/seed_0"], capsys)
    assert rc == 0 and (tmp_path / "runs_grpo_seed_0.yaml").is_file()
    written = yaml.safe_load((tmp_path / "runs_grpo_seed_0.yaml").read_text())
    assert written["runs"] == [{"arm": "grpo", "seed": 0, "path": "."}] and written["runs_from"] == "trl"
    rc, printed = cli(["report", "--init-manifest", "trl/grpo/seed_0"], capsys)  # never over the user's edits
    assert rc == 2 and "runs_grpo_seed_0.yaml exists" in printed
    rc, printed = cli(["report", "runs_grpo_seed_0.yaml", "-o", "from_manifest"], capsys)  # accepted as written
    assert rc == 0, printed
    assert "| grpo | eval | 1 | 1 × 1 | 29.0 [29.0, 29.0] |" in (tmp_path / "from_manifest" / "report.md").read_text()


def test_b_splits_on_commas_but_not_inside_a_custom_benchmarks_fields(capsys, tmp_path: Path) -> None:
    assert split_benchmarks("amc23,file:p.jsonl@question,solution,gsm8k") == ["amc23", "file:p.jsonl@question,solution", "gsm8k"]
    assert split_benchmarks("hf:openai/gsm8k:main:test@question,answer") == ["hf:openai/gsm8k:main:test@question,answer"]
    assert split_benchmarks("file:a@b/x.jsonl,gsm8k") == ["file:a@b/x.jsonl", "gsm8k"]  # an @ in a path is no field
    missing = tmp_path / "none.jsonl"
    rc, printed = cli(["eval", "builtin", "-b", f"file:{missing}@question,solution"], capsys)
    assert rc == 2 and f"benchmark file {missing} does not exist" in printed and "unknown benchmark" not in printed


@pytest.mark.parametrize("command", [["report", "MANIFEST"], ["eval", "builtin"], ["train", "quickstart"],
                                     ["ablate", "ablate_quickstart"]])
def test_o_file_is_exit_2_with_the_same_words_everywhere(tmp_path: Path, capsys, command) -> None:
    for seed in (0, 1, 2):
        trl_output(tmp_path / "grpo" / f"seed_{seed}", seed)
    taken = tmp_path / "a_file"
    taken.write_text("mine")
    args = [str(trl_manifest(tmp_path)) if a == "MANIFEST" else a for a in command]
    rc, printed = cli([*args, "-o", str(taken)], capsys)
    assert rc == 2 and printed.strip() == f"error: -o {taken}: {taken} is a file, not a folder"
    assert taken.read_text() == "mine"


@pytest.mark.parametrize(("module", "runs_from", "extra"), [("wandb", "wandb", "rbctl[wandb]"), ("mlflow", "mlflow", "rbctl[mlflow]"),
                                                       ("tensorboard", "tensorboard", "rbctl[tensorboard]")])
def test_a_missing_tracker_package_is_one_line_naming_its_extra(tmp_path: Path, monkeypatch, module, runs_from, extra) -> None:
    import sys

    (tmp_path / "runs" / "run-0").mkdir(parents=True)
    (tmp_path / "runs" / "run-0" / "events.out.tfevents.1.host").write_bytes(b"")
    for name in [module, *(n for n in sys.modules if n.startswith(module + "."))]:  # as if not installed: `import
        monkeypatch.setitem(sys.modules, name, None)  # wandb` raises ImportError, and so does a submodule another test loaded
    m = tmp_path / "m.yaml"
    m.write_text(yaml.safe_dump({"runs_from": runs_from, "root": str(tmp_path / "runs"), "arms": {"a": {}}, "seeds": [0],
                                 "path": "run-{seed}"}))
    with pytest.raises(UserError, match=rf"needs the {module} package: pip install '{re.escape(extra)}'$"):
        report_data([m])


def test_a_verl_log_named_metrics_jsonl_is_verls_not_an_rbctl_run(tmp_path: Path) -> None:
    # docs/your_runs.md points VERL_FILE_LOGGER_PATH at <arm>/seed_<s>/metrics.jsonl, rbctl's own log name
    for arm in ("grpo", "grpo_budget"):
        for seed in (0, 1, 2):
            log = tmp_path / "verl" / arm / f"seed_{seed}" / "metrics.jsonl"
            log.parent.mkdir(parents=True)
            log.write_text("".join(json.dumps({"step": s, "data": {"actor/entropy": 1.0 / s, "response_length/mean": 9.0,
                                                                   "critic/score/mean": 0.1 * s}}) + "\n"
                                   for s in range(1, STEPS + 1)))
    data = report_data([tmp_path / "verl"], n_boot=20)
    assert {(r.arm, r.seed, r.provenance["imported"]) for r in data.sweep.runs} == {
        (a, s, "folder") for a in ("grpo", "grpo_budget") for s in (0, 1, 2)}
    run = data.sweep.runs[0]
    assert [m["entropy"] for m in run.metrics] == pytest.approx([1.0, 0.5, 1 / 3, 0.25])
    assert data.sweep.remarks[0].startswith("no runs manifest: 6 verl runs found under")
