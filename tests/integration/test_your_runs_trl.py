"""`rbctl report MANIFEST` over real TRL runs (docs/your_runs.md): TRL's `GRPOTrainer` and rbctl's
`BudgetGRPOTrainer`, 2 arms × 3 seeds of 4 CPU steps on a tiny Llama built in code, TRL's own
evaluation every 2 steps and its TensorBoard logging on. The report reads TRL's own files only
(trainer_state.json; a checkpoint's copy for the runs that saved no state), and the same runs read
through their TensorBoard event files give the same numbers.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import yaml
from scipy import stats

from tests.conftest import tiny_llama

pytest.importorskip("rbctl.integrations.trl", reason="TRL is not installed (pip install 'rbctl[trl]')")

ARMS = ("grpo", "budget")
SEEDS = (0, 1, 2)
STEPS, EVAL_EVERY, G, P = 4, 1, 4, 2  # an evaluation every step: two in the last quarter (steps 3, 4)
LR = 0.3  # large: four steps of a tiny model then move its evaluation apart between arms


def contains_a(completions, **kwargs):
    """Binary reward: 1 if the completion contains the letter 'a' (so eval_reward is a fraction)."""
    return [float("a" in c) for c in completions]


def train(out: Path, arm: str, seed: int, evaluate: bool = True) -> None:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from rbctl.integrations.trl import BudgetGRPOTrainer
    from rbctl.tasks.builtin import build_tokenizer
    from rbctl.tasks.links import TaskSpec

    tokenizer = build_tokenizer(TaskSpec())
    model = tiny_llama(len(tokenizer), layers=1, seed=seed, pad_token_id=tokenizer.pad_token_id,
                       bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    train_set = Dataset.from_dict({"prompt": ["ab#c?", "cd#e?", "ef#g?", "gh#a?"]})
    eval_set = Dataset.from_dict({"prompt": ["ba#d?", "dc#a?"]})
    last_seed = seed == SEEDS[-1]  # these runs save a checkpoint (its trainer_state.json) instead of save_state()
    save = last_seed or not evaluate  # without TRL's evaluation every run keeps its last checkpoint for rbctl eval
    args = GRPOConfig(
        output_dir=str(out), max_steps=STEPS, per_device_train_batch_size=P * G, per_device_eval_batch_size=P * G,
        num_generations=G, max_completion_length=6, learning_rate=LR, logging_steps=1,
        eval_strategy="steps" if evaluate else "no", eval_steps=EVAL_EVERY, report_to=["tensorboard"],
        save_strategy="steps" if save else "no", save_steps=STEPS, use_cpu=True, seed=seed, dataloader_num_workers=0,
        disable_tqdm=True,
    )
    cls, extra = (GRPOTrainer, {}) if arm == "grpo" else (BudgetGRPOTrainer, {"budget": 1.0})
    trainer = cls(model=model, reward_funcs=contains_a, args=args, train_dataset=train_set,
                  eval_dataset=eval_set if evaluate else None, processing_class=tokenizer, **extra)
    trainer.train()
    if not last_seed or not evaluate:
        trainer.save_state()


@pytest.fixture(scope="module")
def trl_runs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("trl_runs")
    for arm in ARMS:
        for seed in SEEDS:
            train(root / arm / f"seed_{seed}", arm, seed)
    return root


def manifest(root: Path, runs_from: str, **extra) -> Path:
    data = {"runs_from": runs_from, "names": "trl", "name": f"trl_{runs_from}", "root": str(root),
            "arms": {"grpo": {}, "budget": {"variant": "budget"}}, "seeds": list(SEEDS),
            "comparisons": {"principal": [["budget", "grpo"]], "mde": 10, "planning_sd": 10},
            "ceiling": {"value": 1.0, "source": "every completion can contain an 'a'"}, **extra}
    path = root / f"{runs_from}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def state(root: Path, arm: str, seed: int) -> dict:
    """TRL's trainer state of one run, read here with json (the checkpoint's copy for the last seed)."""
    d = root / arm / f"seed_{seed}"
    f = d / "trainer_state.json" if (d / "trainer_state.json").is_file() else d / f"checkpoint-{STEPS}" / "trainer_state.json"
    return json.loads(f.read_text())


def logged(root: Path, arm: str, seed: int, key: str) -> dict[int, float]:
    return {r["step"]: r[key] for r in state(root, arm, seed)["log_history"] if r.get(key) is not None}


@pytest.mark.slow  # six TRL runs (~6 s each on 2 shared cores) and two reports
def test_a_report_over_trl_runs_calls_the_declared_comparison_from_trls_own_files(trl_runs, tmp_path) -> None:
    from typer.testing import CliRunner

    from rbctl.cli import app
    from rbctl.report.data import report_data

    assert not (trl_runs / "grpo" / "seed_2" / "trainer_state.json").exists()  # read from checkpoint-4/
    path = manifest(trl_runs, "trl", report={"sections": ["plateau"]})  # a runs manifest asks for the plateau test
    result = CliRunner().invoke(app, ["report", str(path), "-o", str(tmp_path / "trl")])
    assert result.exit_code == 0, result.output

    # the held-out score is TRL's eval_reward at the last step; Δ per seed by hand, the paired t-test
    final = {arm: [logged(trl_runs, arm, s, "eval_reward")[STEPS] for s in SEEDS] for arm in ARMS}
    deltas = [b - a for b, a in zip(final["budget"], final["grpo"])]
    data = report_data([path], n_boot=200)
    row = data.verdict.rows.iloc[0]
    assert (row.arm, row.ref, int(row.seeds)) == ("budget", "grpo", 3)
    assert row.delta == pytest.approx(sum(deltas) / 3)
    if len(set(deltas)) > 1:
        p = stats.ttest_rel(final["budget"], final["grpo"]).pvalue
        assert row.p_holm == pytest.approx(p)  # one member: Holm's p is the p
        assert row.call.split(" (")[0] == ("inconclusive" if p >= 0.05 else "higher" if row.delta > 0 else "lower")
    else:
        assert row.call == "not testable"
    assert "budget − grpo" in result.output and row.call.split(" (")[0] in result.output  # the call, printed

    report = (tmp_path / "trl" / "report.md").read_text()
    # the plateau test of the plain arm: TRL's eval_reward at steps 3 (nearest ¾T) and 4, its entropy from step 1
    plateau = data.plateau
    assert plateau.arm == "grpo" and "## Plateau test" in report
    change = sum(abs(logged(trl_runs, "grpo", s, "eval_reward")[4] - logged(trl_runs, "grpo", s, "eval_reward")[3])
                 for s in SEEDS) / 3 * 100
    assert plateau.verdict.stalled.value == pytest.approx(change)
    warm = sum(logged(trl_runs, "grpo", s, "entropy")[1] for s in SEEDS) / 3
    assert plateau.verdict.entropy_collapsed.threshold == pytest.approx(warm / 3)
    assert plateau.verdict.below_ceiling.value == pytest.approx(100 - 100 * sum(final["grpo"]) / 3)

    # κ_eff: BudgetGRPOTrainer's rbctl/kappa_eff, centred rolling mean of 5 logged values per run, then the mean over seeds
    traj = pd.read_csv(tmp_path / "trl" / "data" / "trajectories.csv")
    ke = traj[(traj.metric == "kappa_eff") & (traj.arm == "budget")].set_index("step")["mean"]
    runs = [logged(trl_runs, "budget", s, "rbctl/kappa_eff") for s in SEEDS]  # a step without a mixed group logs none
    for step in range(1, STEPS + 1):
        having = [r for r in runs if step in r]
        if not having:
            assert step not in ke.index
            continue
        # the window is 5 logged values (two either side), not 5 steps: a step without κ_eff is skipped
        windows = [[r[k] for k in sorted(r)[max(0, sorted(r).index(step) - 2):sorted(r).index(step) + 3]] for r in having]
        smooth = [sum(w) / len(w) for w in windows]
        assert ke[step] == pytest.approx(sum(smooth) / len(smooth))
    assert "traj_kappa_eff" in report
    # plain GRPOTrainer logs no κ_eff: named once, not filled in
    assert report.count("κ_eff: logged by 3 of 6 runs") == 1
    assert "kappa_eff" not in set(traj[traj.arm == "grpo"].metric)

    # the same runs through their TensorBoard event files: the same numbers (float32 there)
    tb = report_data([manifest(trl_runs, "tensorboard")], n_boot=200)
    tb_row = tb.verdict.rows.iloc[0]
    assert tb_row.delta == pytest.approx(row.delta) and tb_row.call == row.call
    assert math.isnan(row.p_holm) == math.isnan(tb_row.p_holm)
    if not math.isnan(row.p_holm):
        assert tb_row.p_holm == pytest.approx(row.p_holm)
    assert tb.plateau.verdict.stalled.value == pytest.approx(plateau.verdict.stalled.value)
    tb_ke = {c.metric: c for c in tb.trajectories.curves}["kappa_eff"].bands["budget"]["mean"]
    assert list(tb_ke.index) == sorted(ke.index)
    assert tb_ke.to_numpy() == pytest.approx(ke.sort_index().to_numpy())


@pytest.fixture(scope="module")
def trl_runs_without_eval(tmp_path_factory) -> Path:
    """The same six runs without TRL's evaluation: each keeps checkpoint-4 (model and tokenizer)."""
    root = tmp_path_factory.mktemp("trl_runs_no_eval")
    for arm in ARMS:
        for seed in SEEDS:
            train(root / arm / f"seed_{seed}", arm, seed, evaluate=False)
    return root


@pytest.mark.slow  # six TRL runs, six `rbctl eval` of their checkpoints and three reports
def test_trl_runs_without_evaluation_get_held_out_scores_from_rbctl_eval_of_their_checkpoints(
        trl_runs_without_eval, tmp_path, monkeypatch, capsys) -> None:
    from rbctl.cli import run
    from rbctl.report.data import report_data

    root = trl_runs_without_eval
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    # an output folder alone: reported (its trajectories), and the hint names its own checkpoint
    assert run(["report", str(root / "grpo" / "seed_0")]) == 0
    printed = capsys.readouterr().out
    ck = root / "grpo" / "seed_0" / f"checkpoint-{STEPS}"
    assert "1 trl run found" in printed and f"`rbctl eval {ck} -b BENCHMARKS`" in printed
    # rbctl eval of each last checkpoint, a custom benchmark whose fields follow its @ (the comma kept whole)
    problems = tmp_path / "problems.jsonl"
    problems.write_text("".join(json.dumps({"question": q, "solution": a}) + "\n"
                                for q, a in (("ab#c?", "1"), ("cd#a?", "2"), ("ef#g?", "3"))))
    spec = f"file:{problems}@question,solution"
    for arm in ARMS:
        for seed in SEEDS:
            rc = run(["eval", str(root / arm / f"seed_{seed}" / f"checkpoint-{STEPS}"), "-b", spec, "--n", "4",
                      "--max-new-tokens", "6", "--extraction", "last_number"])
            assert rc == 0, capsys.readouterr()
    summaries = {(arm, seed): json.loads(next((root / arm / f"seed_{seed}" / "eval").glob(
        "step_000004/protocol_*/problems/summary.json")).read_text()) for arm in ARMS for seed in SEEDS}
    path = manifest(root, "trl")
    data = report_data([path], n_boot=200)
    for r in data.sweep.runs:
        final = r.finals[spec]
        s = summaries[(r.arm, r.seed)]
        assert not final.get("mean_only") and final["per_problem"] == s["per_problem"] and r.final_step == STEPS
        assert s["num_problems"] == 3 and s["n"] == 4
    row = data.verdict.rows.iloc[0]
    avg = {arm: [summaries[(arm, s)]["metrics"]["avg@n"]["value"] for s in SEEDS] for arm in ARMS}
    assert row.delta == pytest.approx(sum(b - a for b, a in zip(avg["budget"], avg["grpo"])) / 3)
    assert not any(r.startswith("held-out score") for r in data.sweep.remarks)
    assert run(["report", str(path), "-o", str(tmp_path / "out")]) == 0
    assert "sweep file" not in (tmp_path / "out" / "report.md").read_text()
