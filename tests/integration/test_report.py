"""Tests of rbctl.report (its data and its rendering) on hand-made run and sweep directories (no training, no model)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib.image
import numpy as np
import pandas as pd
import pytest
import yaml

from rbctl.errors import UserError
from rbctl.report import final_scores_table, make_report
from rbctl.report.analyses.plateau import ceiling_file
from rbctl.report.load import find_runs
from rbctl.report.render.figures import arm_styles, panel_groups, plot_pass_at_k, plot_trajectory
from rbctl.report.series import band, unit_frame

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
    if eval_jsonl:  # warm start (step 0: pass@4 = 0.8 + 0.01·seed), then steps 2 and 4; the budget arm 0.1·s/4 higher
        (run_dir / "eval.jsonl").write_text("".join(
            json.dumps({"step": s, "benchmark": "builtin", "n": N, "pass@1": 0.1, "pass@4": 0.8 + 0.01 * seed,
                        "avg@n": 0.2 * s / 2 + 0.01 * seed + (0.1 * s / 4 if budget else 0.0)}) + "\n"
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


@pytest.mark.slow
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
    assert set(scores["interval"]) == {"t over units"}
    # maj@4 from each seed's summary: .5 and .6 -> .55 ± T1 · .1/2 = [−.085, 1.185], clipped to the range [0, 1]
    # (before: maj@4 55.0 [-8.5, 118.5])
    assert scores.loc["grpo", "maj_k"] == 4 and scores.loc["grpo", "maj"] == pytest.approx(0.55)
    assert (scores.loc["grpo", "maj_lo"], scores.loc["grpo", "maj_hi"]) == (0.0, 1.0)
    shown = {r[0]: r for r in md_rows(out / "tables" / "final_scores.md")}
    assert shown["grpo"][6] == "maj@4 55.0 [0.0, 100.0]"
    text = two_arm_report.read_text()
    assert "a 95% t-interval over units (n − 1 df), clipped to the metric's range [0, 100]" in text


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
    # two units are not a test (before: t = 7 on 1 df, p = 1 − (2/π)·atan(7) = .090)
    assert math.isnan(avg["p"]) and avg["not_testable"] == "2 units (a test needs 3)"
    passk = comps[comps["metric"] == "pass@4"].iloc[0]
    # Δ = .25 in both seeds: sd 0 (before: p = 0, Holm p 0.000, "higher"); no zero-width interval either
    assert passk["delta"] == pytest.approx(0.25) and math.isnan(passk["p"]) and math.isnan(passk["delta_lo"])
    assert math.isnan(passk["p_holm"]) and math.isnan(avg["p_holm"])  # no Holm family: nothing in it
    assert not bool(passk["significant"]) and not bool(avg["significant"])
    assert set(comps["verdict"]) == {"not testable"}
    # hierarchical bootstrap: withheld with 2 units (it covers less than 0.93 below MIN_HIERARCHICAL_UNITS)
    assert math.isnan(avg["hb_lo"]) and math.isnan(avg["hb_hi"])

    assert passk["p_improve"] == 1.0 and avg["p_improve"] == 1.0  # budget beats grpo in every pair of runs
    # 2 units: 3 distinct paired resamples, fewer than the 5 units an interval is shown from
    for side in ("paired", "indep"):
        assert math.isnan(avg[f"p_improve_{side}_lo"]) and math.isnan(avg[f"p_improve_{side}_hi"])

    text = two_arm_report.read_text()
    answer = text.split("## Plateau test")[0]
    assert "## Calls in detail: the principal comparisons" in answer
    assert "as one family: no comparison is testable, so no Holm–Bonferroni family is formed" in answer
    table = md_rows(two_arm_report.parent / "tables" / "verdicts.md")
    assert table[0][4:8] == ["Δ points [95% t-CI]", "Holm p", "P(improvement) [95% paired-bootstrap CI]",
                             "rliable 95% CI (independent bootstrap)"]
    rows = {(r[0], r[2]): r for r in table[1:]}
    assert rows["grpo_budget − grpo", "avg@n"][4:] == ["+21.9 [-17.8, +61.6]", "not testable", "1.00", "–",
                                                       "not testable"]  # the estimate alone: no interval at 2 units
    assert rows["grpo_budget − grpo", "pass@4"][4:6] == ["+25.0 [n/a]", "not testable"]
    assert ("**Not testable** (no p-value and no verdict; kept out of the Holm family): grpo_budget − grpo (avg@n: 2 "
            "units (a test needs 3)); grpo_budget − grpo (pass@4: 2 units (a test needs 3))." in answer)
    assert "0.000" not in text  # no p-value anywhere is printed as 0.000
    assert "](figures/per_unit_delta.png)" in answer
    assert text.index("## The answer") < text.index("## Calls in detail") < text.index("## Final scores") < text.index("## Runs")  # the run list last


def test_tables_exist_and_parse(two_arm_report):
    tables = two_arm_report.parent / "tables"
    for name in ("runs", "final_scores", "comparisons", "verdicts", "budget_vs_base_avg", "budget_vs_base_pass_k",
                 "final_entropy_kappa", "plateau", "plateau_units", "entropy_cause", "iqm"):
        csv = pd.read_csv(tables / f"{name}.csv")
        rows = md_rows(tables / f"{name}.md")
        tex = (tables / f"{name}.tex").read_text()
        assert len(rows) - 1 == len(csv)
        assert tex.lstrip().startswith("\\begin{tabular}") and tex.rstrip().endswith("\\end{tabular}")
        assert tex.isascii(), f"{name}: pdflatex-safe, symbols written as math"
        assert tex.count("\\midrule") == 1 and tex.count("\\\\") == len(csv) + 1  # header + rows
    shown = dict(zip(*md_rows(tables / "budget_vs_base_avg.md")))
    assert shown["base"] == "40.6" and shown["budget"] == "62.5"
    assert shown["Δ [95% t-CI]"] == "+21.9 [-17.8, +61.6]"
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
    assert held.loc[4, "mean"] == pytest.approx((0.5 + 0.51) / 2)


def test_ceiling_file(two_arms, tmp_path):
    runs, _ = find_runs([two_arms])
    assert ceiling_file(runs, [two_arms]) is None
    (two_arms / "ceiling.json").write_text(json.dumps({"value": 0.9, "source": "SFT on correct solutions"}))
    c = ceiling_file(runs, [two_arms])
    assert (c.value, c.source) == (0.9, "SFT on correct solutions")


def test_the_plateau_ceiling_is_never_read_off_the_compared_runs(two_arm_report):
    plateau = pd.read_csv(two_arm_report.parent / "tables" / "plateau.csv").set_index("criterion")
    # no ceiling file and a task that states none: grpo_budget's 50.5 points is the best arm's level, not a
    # ceiling shown reachable, so the criterion is not evaluated (it would read 10.0 points below)
    assert math.isnan(plateau.loc["below_ceiling", "value"])
    assert plateau.loc["below_ceiling", "detail"] == "not evaluated: ceiling unknown"
    # the divergence guard is a row of its own, between the criteria and the verdict
    assert list(plateau.index) == ["stalled", "below_ceiling", "entropy_collapsed", "improved", "plateau"]
    units = pd.read_csv(two_arm_report.parent / "tables" / "plateau_units.csv")
    assert units["gap"].isna().all()
    # evaluations at steps 0, 2, 4: one in the last quarter (≥ 3), so "stalled" is not measured (before: the change
    # from step 2, 20 points each); a stall needs two evaluations there
    assert units["stalled"].isna().all()
    assert plateau.loc["stalled", "detail"].startswith("not evaluated: 2 of 2 units have fewer than 2 held-out")
    assert "no ceiling file, and the task states none" in two_arm_report.read_text()


@pytest.mark.slow
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
    out = capsys.readouterr().out
    assert f"report: {report}\n  beside it: report.html, summary.md and summary.tex" in out  # where the report is
    # what was not scored, by arm, then the calls last (here none is testable: one common seed)
    assert "incomplete: grpo_budget: 1 of 3 seeds failed (UserError: loss non-finite)" in out
    assert "incomplete: grpo_budget: 1 of 3 seeds missing" in out
    assert out.rstrip().splitlines()[-1].strip().startswith("p: Holm-adjusted") and "not testable" in out
    text = report.read_text()
    assert "grpo_budget: 1 of 3 seeds failed (UserError: loss non-finite)" in text
    assert "grpo_budget: 1 of 3 seeds missing" in text
    incomplete = pd.read_csv(sweep / "report" / "tables" / "incomplete.csv").set_index("run")  # run by run
    assert incomplete.loc["sweep/grpo_budget/seed_1", "status"] == "failed"
    assert incomplete.loc["sweep/grpo_budget/seed_2", "status"] == "missing"
    scores = pd.read_csv(sweep / "report" / "tables" / "final_scores.csv").set_index("arm")
    assert scores.loc["grpo", "seeds"] == 2 and scores.loc["grpo_budget", "seeds"] == 1
    assert scores.loc["grpo_budget", "avg"] == pytest.approx(0.625)
    assert scores.loc["grpo_budget", "interval"] == "bootstrap over problems (1 unit)"
    # one arm has a t-interval, the other a bootstrap: the caption and the CLI table's title name both
    # (before: "95% t-interval over units" above a bootstrap row)
    assert "a 95% interval per row as its `interval` column names it" in text
    assert "bootstrap interval over the problems" in final_scores_table(sweep / "report").title
    delta = pd.read_csv(sweep / "report" / "tables" / "comparisons.csv").iloc[0]
    assert str(delta["seed_list"]) == "0" and delta["delta"] == pytest.approx(0.625 - 0.4375)  # common seed 0 only
    verdicts = pd.read_csv(sweep / "report" / "tables" / "verdicts.csv")
    assert set(verdicts["verdict"]) == {"not testable"}  # one common seed
    assert "Ceiling: 95.0% (a longer run)" in text
    assert (sweep / "report" / "report.html").is_file()
    traj = pd.read_csv(sweep / "report" / "data" / "trajectories.csv")
    held = traj[(traj["arm"] == "grpo") & (traj["metric"] == "heldout:builtin")]
    assert set(held["seeds"]) == {1}  # grpo seed 1 has no eval.jsonl
    failed = traj[(traj["arm"] == "grpo_budget") & (traj["metric"] == "entropy")].set_index("step")
    assert failed.loc[2, "seeds"] == 2 and failed.loc[3, "seeds"] == 1  # the failed run logged 2 steps


@pytest.mark.slow
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
    assert "no comparison is testable, so no Holm–Bonferroni family is formed" in report.read_text()  # 2 seeds
    desc = pd.read_csv(tmp_path / "out" / "tables" / "final_entropy_kappa.csv").set_index("arm")
    # last quarter of 4 logged steps = the last one: entropy 0.60 + 0.01·seed; κ_eff at step 4 = 4
    assert desc.loc["grpo_entropy_static", "entropy_final"] == pytest.approx(0.605)
    assert desc.loc["grpo_entropy_static", "entropy_final_hi"] == pytest.approx(0.605 + T1 * 0.005)
    assert desc.loc["grpo_budget", "entropy_final"] == pytest.approx(0.405)
    assert desc.loc["grpo", "kappa_eff_final"] == pytest.approx(4.0)
    points = pd.read_csv(tmp_path / "out" / "data" / "run_finals.csv").set_index(["arm", "seed"])
    assert points.loc[("grpo", 1), "heldout_pass1"] == pytest.approx(0.375)
    assert points.loc[("grpo_entropy_static", 0), "entropy_final"] == pytest.approx(0.60)
    corr = pd.read_csv(tmp_path / "out" / "tables" / "entropy_cause.csv").set_index(["x", "level"])
    between, within = corr.loc[("entropy_final", "between arms")], corr.loc[("entropy_final", "within arms")]
    # between arms, 3 units (arm means), 1 df; within arms, 6 runs − 3 arm means = 3 units, 2 df: both
    # fewer than the 3 df a correlation needs, so the report withholds them (their r below, by hand)
    assert between["units"] == 3 and between["df"] == 1 and math.isnan(between["r"]) and math.isnan(between["p"])
    assert between["withheld"] == "1 df: 3 arms, fewer than the 3 df a correlation needs"
    assert within["units"] == 3 and within["df"] == 2 and math.isnan(within["r"])
    assert within["withheld"] == "2 df: 6 runs, fewer than the 3 df a correlation needs"
    assert "withheld (1 df: 3 arms, fewer than the 3 df a correlation needs)" in (
        tmp_path / "out" / "tables" / "entropy_cause.md").read_text()
    from rbctl.report.analyses.entropy import split_levels
    from rbctl.report.stats import pearson_ci

    b, w = split_levels(points.reset_index(), "entropy_final")
    # between: entropy .205, .405, .605 vs pass@1 .40625, .625, .5: centred x = (−.2, 0, .2),
    # y = (−.104167, .114583, −.010417): r = .01875/√(.08 · .024089) = .4271, what would have been shown
    assert pearson_ci(b["x"], b["y"]).r == pytest.approx(0.42712, abs=1e-4)
    # within: entropy −.005/+.005 in every arm vs pass@1 +.03125/−.03125 (grpo), 0, 0 (the others):
    # r = −.0003125/√(.00015 · .001953) = −.5774
    assert pearson_ci(w["x"], w["y"], groups=3).r == pytest.approx(-1 / math.sqrt(3), abs=1e-4)


def test_one_colour_per_arm_small_multiples_and_legends_outside():
    from rbctl.report.render.figures import PALETTE

    info = {"grpo": ("grpo", "base"), "grpo_budget": ("grpo", "budget"), "rloo": ("rloo", "base"),
            "rloo_budget": ("rloo", "budget"), "grpo_ent": ("grpo", "entropy_static")}
    styles = arm_styles(info)
    assert styles == arm_styles(dict(reversed(list(info.items()))))  # input order does not matter
    assert len({st.color for st in styles.values()}) == 5 and {st.color for st in styles.values()} <= set(PALETTE)
    many = arm_styles({f"a{i:02d}": ("grpo", "base") for i in range(10)})  # past 8 arms: another line style
    assert many["a08"].color == many["a00"].color and many["a08"].linestyle != many["a00"].linestyle
    groups = panel_groups(info)
    assert [arms for _, arms in groups] == [["grpo", "grpo_budget"], ["grpo_budget", "grpo_ent"],
                                            ["rloo", "rloo_budget"]]
    steps = pd.DataFrame({0: [0.1, 0.9], 1: [0.3, 1.0]}, index=[0, 2])  # t-band at step 2 runs past 1
    bands = {a: band(steps) for a in info}
    curve = pd.DataFrame({"k": [1, 2], "value": [0.5, 0.7], "lo": [0.4, 0.6], "hi": [0.6, 0.8]})
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    for fig in (plot_trajectory(bands, styles, groups, "t", "y", hline=(0.9, "ceiling"), limits=(0.0, 1.0)),
                plot_pass_at_k({a: curve for a in info}, styles, groups, "b")):
        axes = [ax for ax in fig.axes if ax.get_visible()]
        assert len(axes) == 3  # one panel per group
        FigureCanvasAgg(fig).draw()
        for ax in axes:
            legend = ax.get_legend()
            for line, handle in zip(ax.get_lines(), legend.legend_handles):  # the legend shows the lines' styles
                assert (handle.get_color(), handle.get_linestyle()) == (line.get_color(), line.get_linestyle())
            for line in ax.get_lines():
                arm = line.get_label().split(" (")[0]
                if arm in styles:
                    assert (line.get_color(), line.get_linestyle()) == (styles[arm].color, styles[arm].linestyle)
            assert legend.get_window_extent().y1 <= ax.get_window_extent().y0  # below the data
            for band_patch in ax.collections:  # bands clipped to the metric's range [0, 1]
                ys = band_patch.get_paths()[0].vertices[:, 1]
                assert ys.min() >= 0.0 and ys.max() <= 1.0
        assert fig.get_figwidth() * 160 == 1600  # 1600 px at the report's dpi
    traj = plot_trajectory(bands, styles, groups, "t", "y", hline=(0.9, "ceiling"))
    assert any(line.get_label() == "ceiling" and list(line.get_ydata()) == [0.9, 0.9]
               for line in traj.axes[0].get_lines())


def test_unit_frame_drops_nulls(two_arms):
    runs, _ = find_runs([two_arms])
    frame = unit_frame([r for r in runs if r.arm == "grpo"], "kappa_eff")
    assert list(frame.index) == [1, 3, 4] and list(frame.columns) == [("", 0), ("", 1)]


@pytest.mark.slow
def test_cli_table_and_output_folder(two_arms, two_arm_report, tmp_path):
    table = final_scores_table(two_arm_report.parent)
    assert [c.header for c in table.columns] == ["arm", "benchmark", "units", "avg@n", "pass@n", "maj@k", "interval"]
    # the title names the interval the rows use (before: "t-interval over units" also over a bootstrap row)
    assert table.title == "final scores: % correct with a 95% t-interval over units (n − 1 df), clipped to the metric's range [0, 100]"
    one = two_arms / "grpo_s0"
    assert make_report([one], n_boot=50) == one / "report" / "report.md"  # a run directory: RUN_DIR/report
    single = (one / "report" / "report.md").read_text()
    assert "family of 0" not in single  # before: "as one Holm–Bonferroni family of 0"
    assert "No principal comparisons are declared" in single and "everything below is exploratory" in single
    with pytest.raises(UserError, match="-o"):
        make_report([one, two_arms / "grpo_s1"])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UserError, match="no run or sweep"):  # before anything about -o
        make_report([empty, empty])


def test_the_report_renders_its_data_and_scripts_read_the_same_tables(two_arms, two_arm_report):
    from rbctl.report import report_data
    from rbctl.report.analyses.plateau import Plateau
    from rbctl.report.render.report import shown_tables
    from rbctl.report.render.tables import markdown_table

    data = report_data([two_arms])
    assert isinstance(data.plateau, Plateau) and data.plateau.arm == "grpo"
    assert data.plateau.verdict.below_ceiling.held is None  # no ceiling stated: not evaluated, as tables/plateau.csv
    assert [c.label for c in data.verdict.comparisons] == ["grpo_budget − grpo"] * 2  # avg@n and pass@4
    tables = shown_tables(data)  # rendered without writing: what scripts print
    written = {f.stem: f.read_text() for f in (two_arm_report.parent / "tables").glob("*.md")}
    assert set(tables) == set(written) and "plateau" in tables
    assert {name: markdown_table(t) for name, t in tables.items()} == written


@pytest.mark.slow
def test_report_package_imports_no_torch():
    import subprocess
    import sys

    code = ("import sys, rbctl.report, rbctl.report.data, rbctl.report.render.report, rbctl.report.analyses.plateau, "
            "rbctl.report.analyses.entropy, rbctl.report.render.figures, rbctl.report.survival, "
            "rbctl.report.analyses.escape_time, rbctl.report.robust, rbctl.report.power, "
            "rbctl.report.analyses.warm_starts, rbctl.store.read; "
            "bad = [m for m in ('torch', 'transformers') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.slow
def test_kappa_eff_is_not_compared_between_arms_with_different_updates_per_step(two_arms, two_arm_report, tmp_path):
    # the same arms, but grpo_budget deals each batch into mini-batches of 2 of its 4 prompts: 2 optimizer
    # updates per step against grpo's 1, so its κ_eff (measured after all of them) is not grpo's scale
    for arm, seed in CORRECT:
        f = two_arms / f"{arm}_s{seed}" / "config.yaml"
        cfg = yaml.safe_load(f.read_text())
        cfg["algo"].update(ppo_mini_batch_size=2 if "budget" in arm else None, ppo_epochs=1)
        cfg["rollout"]["prompts_per_step"] = 4
        cfg["optim"] = {"lr": 1e-3}
        f.write_text(yaml.safe_dump(cfg))
    report = make_report([two_arms], tmp_path / "out", n_boot=50)
    text = report.read_text()
    note = ("κ_eff is not compared between arms: it is cumulative over a step's optimizer updates, so it is comparable "
            "only at equal mini-batch size, epochs and learning rate, and the arms differ in algo.ppo_mini_batch_size "
            "(grpo null (one mini-batch), grpo_budget 2); optimizer updates per step (grpo 1, grpo_budget 2).")
    assert note in text
    corr = pd.read_csv(tmp_path / "out" / "tables" / "entropy_cause.csv").set_index(["x", "level"])
    refused = corr.loc[("kappa_eff_final", "between arms")]
    assert bool(refused["refused"]) and math.isnan(refused["r"]) and math.isnan(refused["p"])
    assert not bool(corr.loc[("entropy_final", "between arms"), "refused"])  # entropy is still compared
    assert not bool(corr.loc[("kappa_eff_final", "within arms"), "refused"])  # within an arm the updates are alike
    assert "not compared (see the note)" in (tmp_path / "out" / "tables" / "entropy_cause.md").read_text()
    assert not (tmp_path / "out" / "figures" / "traj_kappa_eff.png").exists()
    assert "κ_eff" not in md_rows(tmp_path / "out" / "tables" / "final_entropy_kappa.md")[0][-1]
    # arms that share their updates: compared, and κ_eff described as cumulative over the step's updates
    same = two_arm_report.read_text()
    assert "κ_eff is not compared" not in same and (two_arm_report.parent / "figures" / "traj_kappa_eff.png").exists()
    assert "cumulative over the step's optimizer updates" in same
    base = pd.read_csv(two_arm_report.parent / "tables" / "entropy_cause.csv").set_index(["x", "level"])
    assert not bool(base.loc[("kappa_eff_final", "between arms"), "refused"])
