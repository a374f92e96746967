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
from rbctl.report import final_scores_table, make_report
from rbctl.report.figures import arm_styles, panel_groups, plot_pass_at_k, plot_trajectory
from rbctl.report.load import find_runs, read_ceiling
from rbctl.report.series import band, seed_frame

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
IDS = ["p0", "p1", "p2", "p3"]
N = 4  # samples per problem in every final evaluation

# Correct samples (of N = 4) per problem, per arm and seed:
#   grpo s0 [4,2,0,1] -> c/n [1, .5, 0, .25]  mean .4375 | pass@4: [1,1,0,1] mean .75
#   grpo s1 [3,2,1,0] -> [.75, .5, .25, 0]    mean .375  | pass@4: [1,1,1,0] mean .75
#   budget s0 [4,3,1,2] -> [1, .75, .25, .5]  mean .625  | pass@4: 1
#   budget s1 [4,3,2,1] -> [1, .75, .5, .25]  mean .625  | pass@4: 1
# avg@n: grpo (.4375 + .375)/2 = .40625, budget .625; per-seed Δ .1875 and .25, mean .21875;
# pass@4: per-seed Δ .25 and .25.
# t-interval over 2 seeds: sd of two values a, b is |a − b|/√2, so the standard error is |a − b|/2,
# and t_{0.975, 1} = tan(0.475·π) = 12.7062047361747.
T1 = 12.7062047361747
CORRECT = {
    ("grpo", 0): [4, 2, 0, 1],
    ("grpo", 1): [3, 2, 1, 0],
    ("grpo_budget", 0): [4, 3, 1, 2],
    ("grpo_budget", 1): [4, 3, 2, 1],
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
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"seed": seed, "steps": steps, "algo": algo,
                                                          "rollout": {"group_size": 4}}))
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
    if eval_jsonl:  # warm start (step 0: pass@4 = 0.8 + 0.01·seed), then steps 2 and 4
        (run_dir / "eval.jsonl").write_text("".join(
            json.dumps({"step": s, "benchmark": "builtin", "n": N, "avg@n": 0.2 * s / 2 + 0.01 * seed, "pass@1": 0.1,
                        "pass@4": 0.8 + 0.01 * seed}) + "\n"
            for s in (0, 2, 4)))
    if correct is not None:
        for step, cs in ((2, [0] * len(IDS)), (steps, correct)):  # an earlier evaluation that must be ignored
            bench = run_dir / "eval" / f"step_{step:06d}" / "builtin"
            bench.mkdir(parents=True)
            maj = {"value": 0.5 + 0.1 * seed, "ci_low": 0.0, "ci_high": 1.0}  # maj@4: .5 (seed 0), .6 (seed 1)
            summary = {"benchmark": "builtin", "model": str(run_dir), "step": step, "n": N, "num_problems": len(IDS),
                       "metrics": {"avg@n": {"value": float(np.mean(cs)) / N, "ci_low": 0.0, "ci_high": 1.0},
                                   "maj@1": {"value": 0.0}, "maj@4": maj},
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


def test_final_scores_hand_computed(two_arm_report):
    out = two_arm_report.parent
    scores = pd.read_csv(out / "tables" / "final_scores.csv").set_index("arm")
    assert scores.loc["grpo", "avg"] == pytest.approx(0.40625)
    assert scores.loc["grpo_budget", "avg"] == pytest.approx(0.625)
    assert scores.loc["grpo", "pass_k"] == pytest.approx(0.75)
    assert scores.loc["grpo_budget", "pass_k"] == pytest.approx(1.0)
    assert list(scores["k"]) == [4, 4] and list(scores["seeds"]) == [2, 2]
    assert list(scores["eval_steps"].astype(str)) == ["4", "4"]  # the highest eval/step_*, not step 2 or periodic/
    # t-interval over the per-seed scores .4375 and .375: half-width T1 · .0625/2
    half = T1 * 0.0625 / 2
    assert (scores.loc["grpo", "avg_lo"], scores.loc["grpo", "avg_hi"]) == pytest.approx((0.40625 - half, 0.40625 + half))
    assert scores.loc["grpo", "avg_per_seed"] == "0.4375,0.3750"
    assert set(scores["interval"]) == {"t over seeds"}
    # maj@4 from each seed's summary: .5 and .6 -> .55 ± T1 · .1/2
    assert scores.loc["grpo", "maj_k"] == 4 and scores.loc["grpo", "maj"] == pytest.approx(0.55)
    assert scores.loc["grpo", "maj_hi"] == pytest.approx(0.55 + T1 * 0.05)


def test_paired_deltas_holm_and_summary(two_arm_report):
    out = two_arm_report.parent
    comps = pd.read_csv(out / "tables" / "comparisons.csv")
    assert len(comps) == 2  # grpo_budget vs grpo: avg@n and pass@4
    avg = comps[comps["metric"] == "avg@n"].iloc[0]
    assert (avg["arm"], avg["ref"], avg["kind"]) == ("grpo_budget", "grpo", "budget_vs_base")
    assert avg["per_seed_delta"] == "0.1875,0.2500" and avg["seeds"] == 2
    assert avg["delta"] == pytest.approx(0.21875)
    half = T1 * 0.0625 / 2
    assert (avg["delta_lo"], avg["delta_hi"]) == pytest.approx((0.21875 - half, 0.21875 + half))
    # t = .21875 / .03125 = 7 on 1 df (a Cauchy): p = 1 − (2/π)·atan(7)
    p = 1 - 2 / np.pi * np.arctan(7.0)
    assert avg["p"] == pytest.approx(p)
    passk = comps[comps["metric"] == "pass@4"].iloc[0]
    assert passk["delta"] == pytest.approx(0.25) and passk["p"] == 0.0  # Δ = .25 in both seeds
    # Holm over 2: the smaller p (0) is multiplied by 2, the larger by 1
    assert passk["p_holm"] == 0.0 and avg["p_holm"] == pytest.approx(p)
    assert bool(passk["significant"]) and not bool(avg["significant"])
    # hierarchical bootstrap: every resampled seed and problem set gives a mean in [min, max] of the cells
    assert 0.0 <= avg["hb_lo"] <= avg["hb_hi"] <= 0.5

    text = two_arm_report.read_text()
    summary = text.split("## Runs")[0]
    assert "Seeds per arm: 2" in summary and "2 comparisons, Holm–Bonferroni" in summary
    assert "unadjusted" in summary
    assert ("grpo_budget vs grpo on builtin, avg@n: no significant difference, Δ +21.9 points [-17.8, +61.6] "
            "(95% t-interval over seeds, unadjusted)") in summary
    assert "per-seed Δ: +18.8, +25.0" in summary and "n = 2 seeds" in summary
    assert "grpo_budget vs grpo on builtin, pass@4: higher, Δ +25.0 points" in summary
    assert "Plateau test on grpo" in summary


def test_tables_exist_and_parse(two_arm_report):
    tables = two_arm_report.parent / "tables"
    for name in ("runs", "final_scores", "comparisons", "budget_vs_base_avg", "budget_vs_base_pass_k",
                 "final_entropy_kappa", "plateau", "entropy_cause"):
        csv = pd.read_csv(tables / f"{name}.csv")
        rows = md_rows(tables / f"{name}.md")
        tex = (tables / f"{name}.tex").read_text()
        assert len(rows) - 1 == len(csv)
        assert tex.lstrip().startswith("\\begin{tabular}") and tex.rstrip().endswith("\\end{tabular}")
        assert tex.isascii(), f"{name}: pdflatex-safe, symbols written as math"
        assert tex.count("\\midrule") == 1 and tex.count("\\\\") == len(csv) + 1  # header + rows
    shown = dict(zip(*md_rows(tables / "budget_vs_base_avg.md")))
    assert shown["base"] == "40.6" and shown["budget"] == "62.5"
    assert shown["Δ [95% CI]"] == "+21.9 [-17.8, +61.6]"
    assert "grpo\\_budget" in (tables / "final_scores.tex").read_text()  # underscores escaped


def test_figures_are_valid_images_and_embedded(two_arm_report):
    report = two_arm_report
    figures = report.parent / "figures"
    pngs = sorted(figures.glob("*.png"))
    names = {p.stem for p in pngs}
    assert {"traj_reward", "traj_heldout_builtin", "traj_entropy", "traj_kappa", "traj_kappa_eff",
            "pass_at_k_builtin", "scatter_entropy_final", "scatter_kappa_eff_final"} <= names
    assert "traj_response_len" not in names  # the prompt mix, not a policy decision
    text = report.read_text()
    for png in pngs:
        assert png.read_bytes()[:8] == PNG_MAGIC
        h, w, channels = matplotlib.image.imread(png).shape
        assert h > 100 and w > 100 and channels in (3, 4)
        assert png.with_suffix(".svg").read_text().lstrip().startswith("<?xml")
        assert f"](figures/{png.name})" in text
    for link in [line.split("](", 1)[1].rstrip(")") for line in text.splitlines() if line.startswith("![")]:
        assert (report.parent / link).is_file()


def test_trajectories_t_band_step0_and_torn_line(two_arms, two_arm_report):
    runs, _ = find_runs([two_arms])
    torn = next(r for r in runs if (r.arm, r.seed) == ("grpo", 1))
    assert torn.last_step == 4  # the torn 5th line is dropped
    traj = pd.read_csv(two_arm_report.parent / "data" / "trajectories.csv")
    ent = traj[(traj["arm"] == "grpo") & (traj["metric"] == "entropy")].set_index("step")
    # step 3: seeds 0.30 and 0.31 -> mean 0.305, t-band ± T1 · 0.01/2
    assert ent.loc[3, ["mean", "lo", "hi", "seeds"]].tolist() == pytest.approx(
        [0.305, 0.305 - T1 * 0.005, 0.305 + T1 * 0.005, 2])
    assert ent.index.max() == 4
    # κ_eff 1, null, 3, 4 -> steps 1, 3, 4; rolling mean over 5 centred values: all three -> 8/3
    keff = traj[(traj["arm"] == "grpo") & (traj["metric"] == "kappa_eff")].set_index("step")
    assert list(keff.index) == [1, 3, 4] and keff["mean"].tolist() == pytest.approx([8 / 3] * 3)
    held = traj[(traj["arm"] == "grpo_budget") & (traj["metric"] == "heldout:builtin")].set_index("step")
    assert list(held.index) == [0, 2, 4]  # the held-out curve starts at the warm start
    assert held.loc[4, "mean"] == pytest.approx((0.4 + 0.41) / 2)


def test_ceiling_from_warm_start_or_ceiling_json(two_arms, tmp_path):
    runs, _ = find_runs([two_arms])
    c = read_ceiling(runs, [two_arms])
    # step-0 pass@4 (G = 4) is 0.80 for seed 0 and 0.81 for seed 1, two runs of each: mean 0.805
    assert c.value == pytest.approx(0.805) and "pass@4" in c.source
    (two_arms / "ceiling.json").write_text(json.dumps({"value": 0.9, "source": "SFT on correct solutions"}))
    assert read_ceiling(runs, [two_arms]).value == 0.9
    for r in runs:
        r.evals = [e for e in r.evals if e["step"] != 0]
    assert read_ceiling(runs, [tmp_path]).value is None


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
    (sweep / "ceiling.json").write_text(json.dumps({"value": 0.95, "source": "a longer run"}))
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
    assert scores.loc["grpo_budget", "interval"] == "bootstrap over problems (1 seed)"
    delta = pd.read_csv(sweep / "report" / "tables" / "comparisons.csv").iloc[0]
    assert str(delta["seed_list"]) == "0" and delta["delta"] == pytest.approx(0.625 - 0.4375)  # common seed 0 only
    assert "not tested" in text and "at least 2 common seeds" in text
    assert "ceiling: 95.0% (a longer run)" in text
    traj = pd.read_csv(sweep / "report" / "data" / "trajectories.csv")
    held = traj[(traj["arm"] == "grpo") & (traj["metric"] == "heldout:builtin")]
    assert set(held["seeds"]) == {1}  # grpo seed 1 has no eval.jsonl
    failed = traj[(traj["arm"] == "grpo_budget") & (traj["metric"] == "entropy")].set_index("step")
    assert failed.loc[2, "seeds"] == 2 and failed.loc[3, "seeds"] == 1  # the failed run logged 2 steps


def test_entropy_arm_comparisons_and_descriptives(two_arms, tmp_path):
    for seed in (0, 1):
        make_run(two_arms / f"ent_s{seed}", "grpo_entropy_static", seed, [4, 2, 1, 1], entropy_mode="static")
    report = make_report([two_arms], tmp_path / "out")
    comps = pd.read_csv(tmp_path / "out" / "tables" / "comparisons.csv")
    assert len(comps) == 6  # 3 pairs × (avg@n, pass@4)
    ent = comps[(comps["arm"] == "grpo_entropy_static") & (comps["metric"] == "avg@n")].set_index("ref")
    # avg@n of [4,2,1,1]/4 = .5 in both seeds: vs budget (.625, .625) -> -.125 each; vs grpo -> .0625, .125
    assert ent.loc["grpo_budget", "per_seed_delta"] == "-0.1250,-0.1250"
    assert ent.loc["grpo", "delta"] == pytest.approx(0.09375)
    assert ent.loc["grpo_budget", "kind"] == "entropy_vs_budget" and ent.loc["grpo", "kind"] == "entropy_vs_base"
    assert "6 comparisons, Holm–Bonferroni" in report.read_text()
    desc = pd.read_csv(tmp_path / "out" / "tables" / "final_entropy_kappa.csv").set_index("arm")
    # last quarter of 4 logged steps = the last one: entropy 0.60 + 0.01·seed; κ_eff at step 4 = 4
    assert desc.loc["grpo_entropy_static", "entropy_final"] == pytest.approx(0.605)
    assert desc.loc["grpo_entropy_static", "entropy_final_hi"] == pytest.approx(0.605 + T1 * 0.005)
    assert desc.loc["grpo_budget", "entropy_final"] == pytest.approx(0.405)
    assert desc.loc["grpo", "kappa_eff_final"] == pytest.approx(4.0)
    points = pd.read_csv(tmp_path / "out" / "data" / "run_finals.csv").set_index(["arm", "seed"])
    assert points.loc[("grpo", 1), "heldout_pass1"] == pytest.approx(0.375)
    assert points.loc[("grpo_entropy_static", 0), "entropy_final"] == pytest.approx(0.60)
    corr = pd.read_csv(tmp_path / "out" / "tables" / "entropy_cause.csv")
    allruns = corr[(corr["runs"] == "all runs") & (corr["x"] == "entropy_final")].iloc[0]
    # 6 runs; entropy ranks 0.2,0.21 | 0.4,0.41 | 0.6,0.61 vs pass@1 .4375,.375 | .625,.625 | .5,.5
    assert allruns["n"] == 6


def test_styles_small_multiples_and_legends_outside():
    info = {"grpo": ("grpo", "base"), "grpo_budget": ("grpo", "budget"), "rloo": ("rloo", "base"),
            "rloo_budget": ("rloo", "budget"), "grpo_ent": ("grpo", "entropy_static")}
    styles = arm_styles(info)
    assert styles == arm_styles(dict(reversed(list(info.items()))))  # input order does not matter
    assert styles["grpo"].color == styles["grpo_budget"].color != styles["rloo"].color
    assert (styles["grpo"].linestyle, styles["grpo_budget"].linestyle) == ("-", "--")
    assert styles["grpo_ent"].color not in {styles[a].color for a in ("grpo", "rloo")}
    groups = panel_groups(info)
    assert [arms for _, arms in groups] == [["grpo", "grpo_budget"], ["grpo_budget", "grpo_ent"],
                                            ["rloo", "rloo_budget"]]
    steps = pd.DataFrame({0: [0.1, 0.2], 1: [0.3, 0.4]}, index=[0, 2])
    bands = {a: band(steps) for a in info}
    curve = pd.DataFrame({"k": [1, 2], "value": [0.5, 0.7], "lo": [0.4, 0.6], "hi": [0.6, 0.8]})
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    for fig in (plot_trajectory(bands, styles, groups, "t", "y", hline=(0.9, "ceiling")),
                plot_pass_at_k({a: curve for a in info}, styles, groups, "b")):
        axes = [ax for ax in fig.axes if ax.get_visible()]
        assert len(axes) == 3  # one panel per group
        FigureCanvasAgg(fig).draw()
        for ax in axes:
            for line in ax.get_lines():
                arm = line.get_label().split(" (")[0]
                if arm in styles:
                    assert (line.get_color(), line.get_linestyle()) == (styles[arm].color, styles[arm].linestyle)
            assert ax.get_legend().get_window_extent().y1 <= ax.get_window_extent().y0  # below the data
    traj = plot_trajectory(bands, styles, groups, "t", "y", hline=(0.9, "ceiling"))
    assert any(line.get_label() == "ceiling" and list(line.get_ydata()) == [0.9, 0.9]
               for line in traj.axes[0].get_lines())


def test_seed_frame_drops_nulls(two_arms):
    runs, _ = find_runs([two_arms])
    frame = seed_frame([r for r in runs if r.arm == "grpo"], "kappa_eff")
    assert list(frame.index) == [1, 3, 4] and list(frame.columns) == [0, 1]


def test_cli_table_and_output_folder(two_arms, two_arm_report, tmp_path):
    table = final_scores_table(two_arm_report.parent)
    assert [c.header for c in table.columns] == ["arm", "benchmark", "seeds", "avg@n", "pass@n", "maj@k"]
    with pytest.raises(UserError, match="-o"):
        make_report([two_arms])
    with pytest.raises(UserError, match="no run or sweep"):
        make_report([tmp_path / "runs" / "grpo_s0" / "eval"], tmp_path / "o")


def test_report_package_imports_no_torch():
    import subprocess
    import sys

    code = ("import sys, rbctl.report, rbctl.report.build, rbctl.report.compare, rbctl.report.plateau, "
            "rbctl.report.diagnostics, rbctl.report.figures; "
            "bad = [m for m in ('torch', 'transformers') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
