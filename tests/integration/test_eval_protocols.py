"""Issue 51, cases 1, 2 and 5, as a user meets them on the built-in fixpoint task (configs/fixpoint.yaml,
4 steps): an evaluation's identity is its protocol. A side evaluation (other benchmarks, another n)
is kept beside the run's own and never becomes its final score, also after the run is extended; two
protocols' results coexist, and an interrupted one's message speaks of its own protocol only; a
checkpoint folder evaluated directly is the run's own evaluation (its task, grader, settings and
sampler), with the same numbers."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO, SHARED_BENCHMARKS, SHARED_MISSING, StopAt

CONFIG = str(REPO / "configs" / "fixpoint.yaml")
# 4 steps of 8 prompts; the held-out curve at steps 0, 2, 4 on the first 32 test problems × 8 samples
SETS = ["--set", "rollout.prompts_per_step=8", "--set", "save_every=2", "--set", "eval.every=2",
        "--set", "eval.limit=32", "--set", "sample_every=2", "--quiet"]
SIDE = ["--limit", "2", "--max-new-tokens", "4", "--data-dir", str(SHARED_BENCHMARKS)]  # the real benchmarks' data
# the side evaluation's protocol in words: n=1 and the token limit given, the rest the run's (T = 1)
WORDS = "n=1, temperature 1.0, top-p 1.0, at most 4 new tokens, seed 0, engine hf, first 2 problems"
needs_benchmarks = pytest.mark.skipif(not (SHARED_BENCHMARKS / "amc23.jsonl").is_file(), reason=SHARED_MISSING)


def cli(*argv: str) -> int:
    from rbctl.cli import run

    return run(list(argv))


def flat(text: str) -> str:
    return " ".join(text.split())  # rich folds long lines


@pytest.fixture(autouse=True)
def _keep_threads(monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # no path folded mid-word
    n = torch.get_num_threads()  # the runs' evaluations set 1 thread (their config's)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """Two finished 4-step fixpoint runs, plain GRPO ("first") and reward budgeting ("budget")."""
    root = tmp_path_factory.mktemp("runs")
    assert cli("train", CONFIG, "-o", str(root / "first"), "--set", "steps=4", *SETS) == 0
    assert cli("train", CONFIG, "-o", str(root / "budget"), "--set", "steps=4", "--set", "algo.budget=1.0", *SETS) == 0
    return root


@pytest.fixture
def runs(trained, tmp_path) -> Path:
    shutil.copytree(trained, tmp_path / "runs")
    return tmp_path / "runs"


def protocol_folder(run: Path, step: int, n: int) -> Path:
    found = [p for p in (run / "eval" / f"step_{step:06d}").glob("protocol_*")
             if json.loads((p / "protocol.json").read_text())["protocol"]["n"] == n]
    assert len(found) == 1, found
    return found[0]


def read(path: Path) -> dict:
    return json.loads(path.read_text())


@needs_benchmarks
def test_case1_a_side_evaluation_then_extending_the_run_leaves_its_final_score_and_its_comparison(runs, tmp_path,
                                                                                                   capsys):
    import csv

    from rbctl.report.load import load_run

    first, budget = runs / "first", runs / "budget"
    assert cli("eval", str(first), "-b", "amc23,aime24", "--n", "1", *SIDE) == 0
    said = flat(capsys.readouterr().out)
    assert (f"side evaluation of amc23, aime24: kept under its protocol ({WORDS}), beside the run's own; "
            "the run's final score stays its own evaluation") in said
    side = protocol_folder(first, 4, 1)
    assert sorted(p.name for p in side.iterdir()) == ["aime24", "amc23", "protocol.json"]
    assert not read(side / "protocol.json")["run_protocol"]
    # extending the run to 6 steps: its own evaluation at its new last step is its final score
    assert cli("train", CONFIG, "-o", str(first), "--set", "steps=6", "--extend", *SETS) == 0
    run = load_run(first)
    assert (run.final_step, list(run.finals)) == (6, ["builtin"])
    assert run.finals["builtin"] == read(first / "eval" / "periodic" / "step_000006" / "builtin" / "summary.json")
    assert [(e["step"], e["benchmarks"]) for e in run.side_evals] == [(4, ["aime24", "amc23"])]
    assert run.side_evals[0]["protocol"] == WORDS
    capsys.readouterr()
    assert cli("report", str(first), str(budget), "-o", str(tmp_path / "report")) == 0
    assert "budget − first" in flat(capsys.readouterr().out)  # the comparison's verdict line: the pair is found
    rows = {r["run"]: r for r in csv.DictReader(open(tmp_path / "report" / "tables" / "runs.csv"))}
    assert (rows["first/seed_0"]["final_eval_step"], rows["first/seed_0"]["benchmarks"]) == ("6", "builtin")
    assert f"side evaluation at step 4 (aime24, amc23; {WORDS}): not scored" in rows["first/seed_0"]["notes"]
    assert (rows["budget/seed_0"]["final_eval_step"], rows["budget/seed_0"]["notes"]) == ("4", "")


def test_a_side_evaluation_in_the_old_layout_is_not_a_final_score(tmp_path):
    """Run directories of the old layout still read: an `rbctl eval` on other benchmarks wrote
    RUN/eval/step_N/BENCH/; the run's declared evaluation (its periodic one at its last step) stays
    its final score, and the other benchmark is named as a side evaluation."""
    import yaml

    from rbctl.report.load import load_run
    from tests.integration.test_report_loose_runs import make_run

    run = make_run(tmp_path / "first", 10, (0, 10), [4, 2, 1, 0])
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    (run / "config.yaml").write_text(yaml.safe_dump({**cfg, "eval": {"benchmarks": ["builtin"], "n": 4}}))
    old = run / "eval" / "step_000010" / "amc23"
    old.mkdir(parents=True)
    (old / "summary.json").write_text(json.dumps({"benchmark": "amc23", "step": 10, "n": 1, "num_problems": 1,
                                                  "per_problem": [{"id": "a", "n": 1, "correct": 0}]}))
    loaded = load_run(run)
    assert (loaded.final_step, list(loaded.finals)) == (10, ["builtin"])
    assert loaded.finals["builtin"]["per_problem"][0]["correct"] == 4  # the periodic evaluation's
    assert [(e["step"], e["benchmarks"], e["protocol"]) for e in loaded.side_evals] == [(10, ["amc23"], "n=1")]
    # the old layout's own final evaluation (the declared benchmark and n) still is one, when training left none
    shutil.rmtree(run / "eval" / "periodic" / "step_000010")
    (run / "eval" / "step_000010" / "builtin").mkdir()
    (run / "eval" / "step_000010" / "builtin" / "summary.json").write_text(json.dumps(
        {"benchmark": "builtin", "step": 10, "n": 4, "num_problems": 1, "per_problem": [{"id": "p0", "n": 4, "correct": 3}]}))
    loaded = load_run(run)
    assert (loaded.final_step, list(loaded.finals)) == (10, ["builtin"]) and loaded.finals["builtin"]["per_problem"][0]["correct"] == 3


@needs_benchmarks
def test_case2_two_protocols_coexist_and_the_interrupted_message_is_true(runs, capsys, monkeypatch):
    first = runs / "first"
    # 4 problems each; at n = 4 a batch of 8 sequences is 2 prompts per call: amc23 takes calls 0 and 1
    base = ["eval", str(first), "-b", "amc23,aime24", "--limit", "4", "--max-new-tokens", "4", "--batch-size", "8",
            "--data-dir", str(SHARED_BENCHMARKS)]
    assert cli(*base, "--n", "2") == 0
    n2 = protocol_folder(first, 4, 2)
    kept = {b: (n2 / b / "summary.json").read_bytes() for b in ("amc23", "aime24")}
    capsys.readouterr()
    StopAt(monkeypatch, 1)  # Ctrl-C in amc23's second call at n = 4: aime24 not begun under this protocol
    assert cli(*base, "--n", "4") == 130
    n4 = protocol_folder(first, 4, 4)
    err = [x for x in capsys.readouterr().err.splitlines() if x.startswith("interrupted")]
    assert err == [f"interrupted: kept 2 of 4 amc23 problems graded under n=4, temperature 1.0, top-p 1.0, at most 4 "
                   f"new tokens, seed 0, engine hf, first 4 problems in {n4}; resume with: rbctl "
                   + " ".join(base[:0] + base + ["--n", "4"])]
    assert {b: (n2 / b / "summary.json").read_bytes() for b in kept} == kept  # the n = 2 results untouched
    monkeypatch.undo()
    assert cli(*base, "--n", "4") == 0  # resumed: both protocols complete, side by side
    assert "amc23: resuming in" in flat(capsys.readouterr().out)
    assert [read(n4 / b / "summary.json")["n"] for b in ("amc23", "aime24")] == [4, 4]
    assert {b: (n2 / b / "summary.json").read_bytes() for b in kept} == kept
    # and an explicit output folder holding the n = 2 results is not overwritten by n = 4: refused, one line
    assert cli(*base, "--n", "4", "-o", str(n2)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {n2 / 'amc23'} holds a complete evaluation under another "
                                               "protocol (n=2, temperature 1.0"), err


def test_case5_a_checkpoint_evaluated_directly_is_the_runs_own_evaluation(runs, capsys):
    budget = runs / "budget"
    ckpt = budget / "checkpoints" / "step_000004" / "model"
    own = budget / "eval" / "periodic" / "step_000004" / "builtin"
    assert cli("eval", str(ckpt), "-b", "builtin", "--n", "8") == 0
    said = flat(capsys.readouterr().out)
    assert f"{ckpt}: checkpoint 4 of run {budget}, evaluated as the run's (its task, protocol and settings)" in said
    assert f"builtin: the run already holds this protocol's result for step 4 ({own}): reused" in said
    assert "the run's own evaluation protocol (its config's eval:)" in said
    # evaluated again: the same result, the same way, in about the same time
    assert cli("eval", str(ckpt), "-b", "builtin", "--n", "8", "--force") == 0
    folder = protocol_folder(budget, 4, 8)
    assert read(folder / "protocol.json")["run_protocol"]
    mine, theirs = read(folder / "builtin" / "summary.json"), read(own / "summary.json")
    for key in ("metrics", "per_problem", "labels", "grader", "extraction", "num_problems"):
        assert mine[key] == theirs[key], key
    assert (folder / "builtin" / "samples.jsonl").read_bytes() == (own / "samples.jsonl").read_bytes()
    for key in ("engine", "sampler", "n", "temperature", "top_p", "max_new_tokens", "seed", "template", "example_prompt",
                "grader", "extraction", "device", "dtype", "threads"):
        assert mine["protocol"][key] == theirs["protocol"][key], key
    assert mine["protocol"]["sampler"] == "sampling loop" and mine["protocol"]["threads"] == 1  # the run's fast path
    assert "strategy" in mine["labels"]  # the fixpoint task's benchmark, not the links task's
    assert mine["time_s"] <= 2 * theirs["time_s"] + 1.0  # loose: the direct evaluation was 120× slower


def _reseal(ckpt_dir: Path) -> None:
    """Rewrite a checkpoint's COMPLETE marker after a file was removed (as a checkpoint saved without it)."""
    from rbctl.store.checkpoint import checkpoint_manifest

    step = int(ckpt_dir.name.removeprefix("step_"))
    (ckpt_dir / "COMPLETE").write_text(json.dumps({"step": step, "files": checkpoint_manifest(ckpt_dir)}))


def test_a_checkpoint_without_its_task_marker_takes_its_runs_task_or_is_refused_in_one_line(runs, capsys):
    first = runs / "first"
    ckpt = first / "checkpoints" / "step_000004" / "model"
    (ckpt / "rbctl_builtin.json").unlink()
    _reseal(ckpt.parent)
    assert cli("eval", str(ckpt), "-b", "builtin", "--n", "8", "--force") == 0  # the run's config names the task
    mine = read(protocol_folder(first, 4, 8) / "builtin" / "summary.json")
    theirs = read(first / "eval" / "periodic" / "step_000004" / "builtin" / "summary.json")
    assert (mine["metrics"], mine["protocol"]["example_prompt"]) == (theirs["metrics"], theirs["protocol"]["example_prompt"])
    (first / "config.yaml").unlink()
    capsys.readouterr()
    assert cli("eval", str(ckpt), "-b", "builtin") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: benchmark builtin: cannot tell which built-in task {ckpt} was trained on "
                   f"({first / 'config.yaml'} is missing or invalid and it has no rbctl_builtin.json); restore the "
                   "run's config.yaml or name the benchmarks (-b)"]


def test_a_step_that_names_another_checkpoint_than_the_folder_is_refused(runs, capsys):
    ckpt = runs / "first" / "checkpoints" / "step_000004"
    assert cli("eval", str(ckpt), "--step", "2") == 2
    assert re.fullmatch(rf"error: {re.escape(str(ckpt))} is checkpoint 4 of run .*first; --step 2 names another "
                        r"\(drop --step\)", capsys.readouterr().err.strip())


def test_a_sweep_runs_final_score_is_its_sweeps_evaluation_and_never_a_protocol_folder(tmp_path):
    """A sweep's run is scored by the final evaluation `rbctl ablate` wrote (RUN/eval/step_N/BENCH);
    an `rbctl eval` of it under any protocol, its own included, is listed beside it, never scored."""
    from rbctl.store.read import final_summaries, read_run
    from rbctl.store.rundir import protocol_dir_name

    run = tmp_path / "run"
    final = run / "eval" / "step_000004" / "builtin"
    final.mkdir(parents=True)
    (final / "summary.json").write_text(json.dumps({"benchmark": "builtin", "step": 4, "n": 8}))
    (run / "run.json").write_text(json.dumps({"arm": "grpo", "seed": 0}))
    (run / "config.yaml").write_text("steps: 4\n")
    (run / "metrics.jsonl").write_text("")
    protocol = {"n": 2, "temperature": 1.0}
    name = protocol_dir_name(protocol)
    assert name == protocol_dir_name(dict(reversed(protocol.items())))  # key order does not matter
    assert name != protocol_dir_name({"n": 4, "temperature": 1.0}) and re.fullmatch(r"protocol_[0-9a-f]{10}", name)
    side = run / "eval" / "step_000004" / name
    (side / "builtin").mkdir(parents=True)
    (side / "protocol.json").write_text(json.dumps({"id": name, "protocol": protocol, "text": "n=2",
                                                    "run_protocol": True, "run_benchmarks": ["builtin"]}))
    (side / "builtin" / "summary.json").write_text(json.dumps({"benchmark": "builtin", "step": 4, "n": 2}))
    assert final_summaries(run) == (4, {"builtin": {"benchmark": "builtin", "step": 4, "n": 8}})
    data = read_run(run, periodic_final=True)  # given on its own: still its sweep's evaluation
    assert data["finals"]["builtin"]["n"] == 8
    assert [(e["step"], e["benchmarks"], e["protocol"]) for e in data["side_evals"]] == [(4, ["builtin"], "n=2")]
