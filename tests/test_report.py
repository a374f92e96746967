"""Tests of rbctl.report.build on hand-made run and sweep directories (no training, no model)."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.image
import numpy as np
import pandas as pd
import pytest
import yaml

from rbctl.errors import UserError
from rbctl.grading.metrics import bootstrap_ci_2d
from rbctl.report.build import (
    arm_colors,
    band,
    bootstrap_diff_ci,
    find_runs,
    make_report,
    plot_pass_at_k,
    plot_trajectory,
    seed_frame,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
IDS = ["p0", "p1", "p2", "p3"]
N = 4  # samples per problem in every final evaluation

# Correct samples (of N = 4) per problem, per arm and seed:
#   grpo s0 [4,2,0,1] -> c/n [1, .5, 0, .25]  mean .4375 | pass@4: [1,1,0,1] mean .75
#   grpo s1 [3,2,1,0] -> [.75, .5, .25, 0]    mean .375  | pass@4: [1,1,1,0] mean .75
#   budget s0 [4,3,1,2] -> [1, .75, .25, .5]  mean .625  | pass@4: 1
#   budget s1 [4,2,2,1] -> [1, .5, .5, .25]   mean .5625 | pass@4: 1
# avg@n: grpo (.4375 + .375)/2 = .40625, budget (.625 + .5625)/2 = .59375, Δ = .1875; pass@4 Δ = .25
CORRECT = {
    ("grpo", 0): [4, 2, 0, 1],
    ("grpo", 1): [3, 2, 1, 0],
    ("grpo_budget", 0): [4, 3, 1, 2],
    ("grpo_budget", 1): [4, 2, 2, 1],
}
# Training entropy per step (4 steps) is ENTROPY[arm] + 0.01·seed; κ_eff is null at step 2.
ENTROPY = {"grpo": [0.50, 0.40, 0.30, 0.20], "grpo_budget": [0.50, 0.45, 0.42, 0.40],
           "grpo_entropy_static": [0.50, 0.52, 0.55, 0.60]}


def make_run(run_dir: Path, arm: str, seed: int, correct: list[int] | None, *, budget: float | None = None,
             entropy_mode: str = "none", steps: int = 4, logged: int | None = None, eval_jsonl: bool = True,
             run_json: bool = True, torn: bool = False) -> Path:
    """A run directory as `rbctl train` + `rbctl eval` leave it (only the files the report reads)."""
    run_dir.mkdir(parents=True)
    algo = {"estimator": "grpo", "budget": budget, "entropy": {"mode": entropy_mode}}
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"seed": seed, "steps": steps, "algo": algo}))
    if run_json:
        variant = "budget" if budget else ("base" if entropy_mode == "none" else f"entropy_{entropy_mode}")
        (run_dir / "run.json").write_text(json.dumps({"arm": arm, "seed": seed, "sweep": "t", "baseline": "grpo",
                                                      "variant": variant}))
    lines = []
    for step in range(1, (logged or steps) + 1):
        lines.append(json.dumps({
            "step": step, "reward/mean": 0.1 * step + 0.01 * seed, "acc/mean": 0.1 * step + 0.01 * seed,
            "entropy": ENTROPY[arm][step - 1] + 0.01 * seed, "kappa": 2.0, "kappa_eff": None if step == 2 else 1.0 * step,
            "response/len_mean": 10.0 + step,
        }))
    text = "\n".join(lines) + "\n"
    if torn:
        text += '{"step": 5, "reward/me'  # a crash mid-write
    (run_dir / "metrics.jsonl").write_text(text)
    if eval_jsonl:
        (run_dir / "eval.jsonl").write_text("".join(
            json.dumps({"step": s, "benchmark": "builtin", "n": N, "avg@n": 0.2 * s / 2 + 0.01 * seed, "pass@1": 0.1}) + "\n"
            for s in (2, 4)))
    if correct is not None:
        for step, cs in ((2, [0] * len(IDS)), (steps, correct)):  # an earlier evaluation that must be ignored
            bench = run_dir / "eval" / f"step_{step:06d}" / "builtin"
            bench.mkdir(parents=True)
            summary = {"benchmark": "builtin", "model": str(run_dir), "step": step, "n": N, "num_problems": len(IDS),
                       "metrics": {"avg@n": {"value": float(np.mean(cs)) / N, "ci_low": 0.0, "ci_high": 1.0}},
                       "per_problem": [{"id": i, "n": N, "correct": c} for i, c in zip(IDS, cs)]}
            (bench / "summary.json").write_text(json.dumps(summary))
        periodic = run_dir / "eval" / "periodic" / "step_000099" / "builtin"  # never a final evaluation
        periodic.mkdir(parents=True)
        (periodic / "summary.json").write_text(json.dumps({"benchmark": "builtin", "step": 99, "n": N,
                                                           "per_problem": [{"id": i, "n": N, "correct": 0} for i in IDS]}))
    return run_dir


def make_two_arms(root: Path) -> Path:
    """grpo and grpo_budget × seeds 0, 1 as loose run directories; grpo seed 1 has a torn last line."""
    for (arm, seed), correct in CORRECT.items():
        make_run(root / f"{arm}_s{seed}", arm, seed, correct, budget=1.0 if "budget" in arm else None,
                 torn=(arm, seed) == ("grpo", 1))
    return root


@pytest.fixture
def two_arms(tmp_path) -> Path:
    return make_two_arms(tmp_path / "runs")


@pytest.fixture(scope="module")
def two_arm_report(tmp_path_factory) -> Path:
    """The report of `make_two_arms`, built once (figures take most of a report's ~2 s)."""
    root = tmp_path_factory.mktemp("report")
    return make_report([make_two_arms(root / "runs")], root / "out")


def md_rows(path: Path) -> list[list[str]]:
    lines = path.read_text().strip().splitlines()
    assert set(lines[1].replace("|", "").replace(" ", "")) == {"-"}  # header separator
    rows = [[c.strip() for c in line.strip().strip("|").split(" | ")] for line in lines]
    assert len({len(r) for r in rows}) == 1, "every Markdown row has the header's number of cells"
    return [rows[0]] + rows[2:]


def test_final_scores_and_budget_delta_match_hand_computed(two_arm_report):
    report = two_arm_report
    assert report.name == "report.md"
    out = report.parent
    scores = pd.read_csv(out / "tables" / "final_scores.csv").set_index("arm")
    assert scores.loc["grpo", "avg"] == pytest.approx(0.40625)
    assert scores.loc["grpo_budget", "avg"] == pytest.approx(0.59375)
    assert scores.loc["grpo", "pass_k"] == pytest.approx(0.75)
    assert scores.loc["grpo_budget", "pass_k"] == pytest.approx(1.0)
    assert list(scores["k"]) == [4, 4] and list(scores["seeds"]) == [2, 2]
    assert list(scores["eval_steps"].astype(str)) == ["4", "4"]  # the highest eval/step_*, not step 2 or periodic/
    # The interval is bootstrap_ci_2d of the [seeds, problems] matrix of c/n.
    base = np.array([CORRECT["grpo", 0], CORRECT["grpo", 1]]) / N
    assert (scores.loc["grpo", "avg_lo"], scores.loc["grpo", "avg_hi"]) == pytest.approx(bootstrap_ci_2d(base))

    delta = pd.read_csv(out / "tables" / "budget_vs_base_avg.csv").iloc[0]
    assert (delta["baseline"], delta["base_arm"], delta["budget_arm"]) == ("grpo", "grpo", "grpo_budget")
    assert delta["delta"] == pytest.approx(0.59375 - 0.40625)
    assert delta["delta"] == pytest.approx(delta["budget"] - delta["base"])
    assert delta["pairing"] == "paired by seed"
    # Paired by seed: the interval bootstraps the per-(seed, problem) difference budget − base.
    budget = np.array([CORRECT["grpo_budget", 0], CORRECT["grpo_budget", 1]]) / N
    lo, hi = bootstrap_ci_2d(budget - base)
    assert (delta["delta_lo"], delta["delta_hi"]) == pytest.approx((lo, hi))
    passk = pd.read_csv(out / "tables" / "budget_vs_base_pass_k.csv").iloc[0]
    assert (passk["metric"], passk["delta"]) == ("pass@4", pytest.approx(0.25))

    text = report.read_text()
    assert lo > 0  # every paired difference is >= 0, so the interval excludes 0 ...
    assert "grpo + budget improves avg@n on builtin by +18.8 points" in text  # ... and the summary says so
    # pass@4: differences [0,0,1,0] and [0,0,0,1]; the interval is checked, never assumed.
    plo, phi = passk["delta_lo"], passk["delta_hi"]
    assert ("improves pass@4" in text) == (plo > 0)
    assert ("no significant difference in pass@4" in text) == (plo <= 0 <= phi)


def test_tables_exist_and_parse(two_arm_report):
    tables = two_arm_report.parent / "tables"
    for name in ("runs", "final_scores", "budget_vs_base_avg", "budget_vs_base_pass_k"):
        csv = pd.read_csv(tables / f"{name}.csv")
        rows = md_rows(tables / f"{name}.md")
        tex = (tables / f"{name}.tex").read_text()
        expected_rows = len(csv) if name in ("runs", "final_scores") else 1  # one baseline row
        assert len(rows) - 1 == expected_rows
        assert tex.lstrip().startswith("\\begin{tabular}") and tex.rstrip().endswith("\\end{tabular}")
        assert tex.isascii(), "pdflatex-safe: Δ, κ, × are written as math"
        assert tex.count("\\midrule") == 1 and tex.count("\\\\") == expected_rows + 1  # header + rows
    shown = dict(zip(*md_rows(tables / "budget_vs_base_avg.md")))
    assert shown["builtin avg@n base"] == "40.6" and shown["builtin avg@n budget"] == "59.4"
    assert shown["builtin avg@n Δ [95% CI]"].startswith("+18.8 [")
    assert "grpo\\_budget" in (tables / "final_scores.tex").read_text()  # underscores escaped


def test_figures_are_valid_images_and_embedded(two_arm_report):
    report = two_arm_report
    figures = report.parent / "figures"
    pngs = sorted(figures.glob("*.png"))
    names = {p.stem for p in pngs}
    assert {"traj_reward", "traj_heldout_builtin", "traj_entropy", "traj_kappa", "traj_kappa_eff",
            "traj_response_len", "pass_at_k_builtin"} <= names
    text = report.read_text()
    for png in pngs:
        assert png.read_bytes()[:8] == PNG_MAGIC
        h, w, channels = matplotlib.image.imread(png).shape
        assert h > 100 and w > 100 and channels in (3, 4)
        assert png.with_suffix(".svg").read_text().lstrip().startswith("<?xml")
        assert f"](figures/{png.name})" in text
    for link in [line.split("](", 1)[1].rstrip(")") for line in text.splitlines() if line.startswith("![")]:
        assert (report.parent / link).is_file()


def test_trajectories_mean_band_and_torn_line(two_arms, two_arm_report):
    runs, _ = find_runs([two_arms])
    torn = next(r for r in runs if (r.arm, r.seed) == ("grpo", 1))
    assert torn.last_step == 4  # the torn 5th line is dropped
    traj = pd.read_csv(two_arm_report.parent / "data" / "trajectories.csv")
    ent = traj[(traj["arm"] == "grpo") & (traj["metric"] == "entropy")].set_index("step")
    # step 3: seeds 0.30 and 0.31 -> mean 0.305, band [0.30, 0.31]
    assert ent.loc[3, ["mean", "lo", "hi", "seeds"]].tolist() == pytest.approx([0.305, 0.30, 0.31, 2])
    assert ent.index.max() == 4
    # κ_eff 1, null, 3, 4 -> steps 1, 3, 4; rolling mean over 5 centred values: all three -> 8/3
    keff = traj[(traj["arm"] == "grpo") & (traj["metric"] == "kappa_eff")].set_index("step")
    assert list(keff.index) == [1, 3, 4] and keff["mean"].tolist() == pytest.approx([8 / 3] * 3)
    held = traj[(traj["arm"] == "grpo_budget") & (traj["metric"] == "heldout:builtin")].set_index("step")
    assert held.loc[4, "mean"] == pytest.approx((0.4 + 0.41) / 2)


def test_partial_sweep_reports_what_exists_and_names_failures(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    runs = sweep / "runs"
    # run.json absent for grpo: arm from the directory layout, variant from config.yaml
    make_run(runs / "grpo" / "seed_0", "grpo", 0, CORRECT["grpo", 0], run_json=False)
    make_run(runs / "grpo" / "seed_1", "grpo", 1, CORRECT["grpo", 1], run_json=False, eval_jsonl=False)
    make_run(runs / "grpo_budget" / "seed_0", "grpo_budget", 0, CORRECT["grpo_budget", 0], budget=1.0)
    make_run(runs / "grpo_budget" / "seed_1", "grpo_budget", 1, None, budget=1.0, logged=2, torn=True)
    (sweep / "sweep.yaml").write_text("name: sweep\n")
    (sweep / "state.json").write_text(json.dumps({"runs": {
        "grpo/seed_0": {"status": "done", "error": None},
        "grpo/seed_1": {"status": "done", "error": None},
        "grpo_budget/seed_0": {"status": "done", "error": None},
        "grpo_budget/seed_1": {"status": "failed", "error": "UserError: loss non-finite"},
        "grpo_budget/seed_2": {"status": "done", "error": None},
    }}))
    from rbctl.cli import run

    assert run(["report", str(sweep)]) == 0  # default output: SWEEP/report
    report = sweep / "report" / "report.md"
    assert capsys.readouterr().out.rstrip().endswith(str(report))  # the CLI prints where the report is
    text = report.read_text()
    assert "sweep/grpo_budget/seed_1" in text and "failed" in text and "loss non-finite" in text
    assert "sweep/grpo_budget/seed_2" in text and "missing" in text
    scores = pd.read_csv(sweep / "report" / "tables" / "final_scores.csv").set_index("arm")
    assert scores.loc["grpo", "seeds"] == 2 and scores.loc["grpo_budget", "seeds"] == 1
    assert scores.loc["grpo_budget", "avg"] == pytest.approx(0.625)
    delta = pd.read_csv(sweep / "report" / "tables" / "budget_vs_base_avg.csv").iloc[0]
    assert delta["pairing"] == "unpaired"  # seeds {0} vs {0, 1}
    assert delta["delta"] == pytest.approx(0.625 - 0.40625)
    traj = pd.read_csv(sweep / "report" / "data" / "trajectories.csv")
    held = traj[(traj["arm"] == "grpo") & (traj["metric"] == "heldout:builtin")]
    assert set(held["seeds"]) == {1}  # grpo seed 1 has no eval.jsonl
    failed = traj[(traj["arm"] == "grpo_budget") & (traj["metric"] == "entropy")].set_index("step")
    assert failed.loc[2, "seeds"] == 2 and failed.loc[3, "seeds"] == 1  # the failed run logged 2 steps


def test_entropy_vs_budget_table(two_arms, tmp_path):
    for seed in (0, 1):
        make_run(two_arms / f"ent_s{seed}", "grpo_entropy_static", seed, [4, 2, 1, 1], entropy_mode="static")
    report = make_report([two_arms], tmp_path / "out")
    table = pd.read_csv(tmp_path / "out" / "tables" / "entropy_vs_budget.csv").set_index("arm")
    assert list(table.index) == ["grpo_budget", "grpo_entropy_static"]
    # last 10% of 4 steps = the last step: entropy 0.60 + 0.01·seed -> mean 0.605; κ_eff at step 4 = 4
    assert table.loc["grpo_entropy_static", "entropy_final"] == pytest.approx(0.605)
    assert table.loc["grpo_budget", "entropy_final"] == pytest.approx(0.405)
    assert table.loc["grpo_entropy_static", "kappa_eff_final"] == pytest.approx(4.0)
    # avg@n of [4,2,1,1]/4 = .5 for both seeds; Δ vs budget = .5 − .59375
    assert table.loc["grpo_entropy_static", "builtin:avg@n"] == pytest.approx(0.5)
    assert table.loc["grpo_entropy_static", "builtin:avg@n_delta_vs_budget"] == pytest.approx(0.5 - 0.59375)
    assert "grpo_entropy_static (entropy bonus) vs grpo_budget" in report.read_text()
    assert len(md_rows(tmp_path / "out" / "tables" / "entropy_vs_budget.md")) == 3


def test_one_colour_per_arm_in_every_figure():
    colors = arm_colors(["rloo", "grpo_budget", "grpo", "grpo"])
    assert colors == arm_colors(["grpo", "grpo_budget", "rloo"])  # input order does not matter
    assert list(colors) == ["grpo", "grpo_budget", "rloo"] and len(set(colors.values())) == 3
    steps = pd.DataFrame({0: [0.1, 0.2], 1: [0.3, 0.4]}, index=[1, 2])
    bands = {"rloo": band(steps), "grpo": band(steps)}
    curve = pd.DataFrame({"k": [1, 2], "value": [0.5, 0.7], "lo": [0.4, 0.6], "hi": [0.6, 0.8]})
    for fig in (plot_trajectory(bands, colors, "t", "y"), plot_pass_at_k({"grpo_budget": curve, "grpo": curve}, colors, "b")):
        for line in fig.axes[0].get_lines():
            assert line.get_color() == colors[line.get_label().split(" (")[0]]


def test_seed_frame_drops_nulls_and_bootstrap_diff_degenerate(two_arms):
    runs, _ = find_runs([two_arms])
    frame = seed_frame([r for r in runs if r.arm == "grpo"], "kappa_eff")
    assert list(frame.index) == [1, 3, 4] and list(frame.columns) == [0, 1]
    # Arms with no spread: every resample gives exactly 1 − 0.
    assert bootstrap_diff_ci(np.ones((2, 3)), np.zeros((3, 3)), n_boot=50) == (1.0, 1.0)


def test_output_folder_required_unless_one_sweep(two_arms, tmp_path):
    with pytest.raises(UserError, match="-o"):
        make_report([two_arms])
    with pytest.raises(UserError, match="no run or sweep"):
        make_report([tmp_path / "runs" / "grpo_s0" / "eval"], tmp_path / "o")
