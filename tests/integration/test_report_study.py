"""`rbctl report` on a hand-made sweep shaped like the main job's study (tests/integration/report_sweeps.py):
principal comparisons stated in the sweep file, warm starts crossed with seeds, label shares and
escape times, clip fractions, an arm whose config is another's. Expected values are recomputed here
from the run files, independently of the report's code paths."""

from __future__ import annotations

import json
import math

import matplotlib.image
import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from rbctl.errors import UserError
from rbctl.report import make_report
from rbctl.report.load import find_runs
from tests.integration.report_sweeps import N, final_correct, make_sweep

PRINCIPAL = [["grpo_budget", "grpo"], ["grpo_entropy_static", "grpo_budget"], ["grpo_copy", "grpo"]]
DESIGN = {"principal": PRINCIPAL, "mde": 5.0, "planning_sd": 5.5}
WARM, SEEDS = ("ws_a", "ws_b"), (0, 1, 2)
UNITS = [(w, s) for w in WARM for s in SEEDS]


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    sweep = make_sweep(tmp_path_factory.mktemp("study") / "sweep", arms=("grpo", "grpo_budget", "grpo_entropy_static"),
                       seeds=SEEDS, warm_starts=WARM, comparisons=DESIGN, twin="grpo_copy")
    return sweep, make_report([sweep], n_boot=300)


def _per_unit(sweep, arm) -> dict:
    return {(w, s): final_correct(sweep, arm, f"{w}/seed_{s}").mean() / N for w, s in UNITS}


def _delta(sweep, arm, ref) -> np.ndarray:
    a, b = _per_unit(sweep, arm), _per_unit(sweep, ref)
    return np.array([a[u] - b[u] for u in UNITS])


def test_principal_family_holm_and_the_refused_same_config_pair(study):
    sweep, report = study
    v = pd.read_csv(report.parent / "tables" / "verdicts.csv")
    assert [[a, r] for a, r in zip(v["arm"], v["ref"])] == PRINCIPAL and set(v["family"]) == {"principal"}
    d1, d2 = _delta(sweep, "grpo_budget", "grpo"), _delta(sweep, "grpo_entropy_static", "grpo_budget")
    p1, p2 = sps.ttest_1samp(d1, 0).pvalue, sps.ttest_1samp(d2, 0).pvalue
    lo_p, hi_p = sorted([p1, p2])  # Holm over m = 2 (the same-config pair is not counted)
    holm = {lo_p: min(1, 2 * lo_p), hi_p: max(min(1, 2 * lo_p), hi_p)}
    assert list(v["delta"][:2]) == pytest.approx([d1.mean(), d2.mean()])
    assert list(v["p_holm"][:2]) == pytest.approx([holm[p1], holm[p2]])
    assert list(v["seeds"]) == [6, 6, 6] and v["seed_list"][0] == "ws_a/0,ws_a/1,ws_a/2,ws_b/0,ws_b/1,ws_b/2"
    twin = v.iloc[2]
    assert bool(twin["same_config"]) and twin["verdict"] == "same config" and math.isnan(twin["p_holm"])
    text = report.read_text()
    assert "**Refused** (both arms ran the same training config; kept out of the Holm family): grpo_copy − grpo" in text
    assert "Holm–Bonferroni over these 2 comparisons" in text
    # P(improvement) over the units' runs: mean over all 6 × 6 pairs of 1[x > y] + ½·1[x = y]
    a, b = _per_unit(sweep, "grpo_budget"), _per_unit(sweep, "grpo")
    pi = np.mean([(a[u] > b[w]) + 0.5 * (a[u] == b[w]) for u in UNITS for w in UNITS])
    assert v["p_improve"][0] == pytest.approx(pi) and v["p_improve_lo"][0] <= pi <= v["p_improve_hi"][0]


def test_exploratory_family_is_separate_and_excludes_the_principal(study):
    sweep, report = study
    comps = pd.read_csv(report.parent / "tables" / "comparisons.csv")
    expl = comps[comps["family"] == "exploratory"]
    principal_avg = {(a, r) for a, r in PRINCIPAL}
    assert not any((a, r) in principal_avg and m == "avg@n" for a, r, m in zip(expl["arm"], expl["ref"], expl["metric"]))
    assert ((expl["arm"] == "grpo_budget") & (expl["ref"] == "grpo") & (expl["metric"] == "pass@8")).any()
    # Holm over the exploratory family only: its smallest p times the family's size
    ok = expl[~expl["same_config"]]
    assert ok["p_holm"].min() == pytest.approx(min(1.0, ok["p"].min() * len(ok)))
    assert "## Exploratory comparisons" in report.read_text()


def test_power_table_from_the_design_and_the_measured_sd(study):
    sweep, report = study
    power = pd.read_csv(report.parent / "tables" / "power.csv").set_index("comparison")
    row = power.loc["grpo_budget − grpo"]
    d = 100 * _delta(sweep, "grpo_budget", "grpo")
    assert row["units"] == 6 and row["measured_sd"] == pytest.approx(d.std(ddof=1))
    # power at the MDE with the planning SD: two-sided paired t at α/m = 0.05/2, noncentral t
    df, ncp, crit = 5, 5.0 * math.sqrt(6) / 5.5, sps.t.ppf(1 - 0.025 / 2, 5)
    assert row["power_planning"] == pytest.approx(sps.nct.sf(crit, df, ncp) + sps.nct.cdf(-crit, df, ncp))
    n = int(row["units_needed_planning"])
    ncp_at = lambda k: 5.0 * math.sqrt(k) / 5.5  # noqa: E731
    power_at = lambda k: sps.nct.sf(sps.t.ppf(1 - 0.0125, k - 1), k - 1, ncp_at(k))  # noqa: E731
    assert power_at(n) >= 0.8 > power_at(n - 1)
    assert "grpo_copy − grpo" not in power.index


def test_warm_start_level(study):
    sweep, report = study
    ws = pd.read_csv(report.parent / "tables" / "warm_starts.csv")
    mine = ws[ws["comparison"] == "grpo_budget − grpo"].set_index("level")
    d = _delta(sweep, "grpo_budget", "grpo")
    means = [d[:3].mean(), d[3:].mean()]  # ws_a's seeds, then ws_b's
    assert mine.loc["warm start ws_a", "delta"] == pytest.approx(means[0])
    assert mine.loc["warm start ws_a", "p"] == pytest.approx(sps.ttest_1samp(d[:3], 0).pvalue)
    over = mine.loc["over warm starts (unit = warm start)"]
    assert over["units"] == 2 and over["delta"] == pytest.approx(np.mean(means))
    assert over["p"] == pytest.approx(sps.ttest_1samp(means, 0).pvalue)
    assert mine.loc["pooled (unit = warm start × seed), Holm", "units"] == 6
    # one-way ANOVA F of Δ by warm start
    assert mine.loc["variance of Δ", "p"] == pytest.approx(sps.f_oneway(d[:3], d[3:]).pvalue)
    assert "## Warm starts" in report.read_text()


def test_escape_times_survival_and_log_rank(study):
    sweep, report = study
    esc = pd.read_csv(report.parent / "tables" / "escape.csv").set_index("arm")
    for arm in ("grpo", "grpo_budget"):
        times = []
        for w, s in UNITS:
            lines = [json.loads(x) for x in (sweep / "runs" / arm / w / f"seed_{s}" / "eval.jsonl").read_text().splitlines()]
            times.append(next((e["step"] for e in lines if e["label/strategy/walk"] >= 0.5), None))
        escaped = [t for t in times if t is not None]
        assert esc.loc[arm, "runs"] == 6 and esc.loc[arm, "escaped"] == len(escaped)
        # censoring only at τ = 160 (every run's last evaluation): the KM RMST is the mean of min(T, τ)
        assert esc.loc[arm, "rmst"] == pytest.approx(np.mean([160 if t is None else t for t in times]))
    lr = pd.read_csv(report.parent / "tables" / "escape_logrank.csv")
    assert [[a, r] for a, r in zip(lr["arm"], lr["ref"])] == PRINCIPAL
    assert (report.parent / "data" / "escape_times.csv").is_file()


def test_html_report_is_self_contained_and_in_the_same_order(study):
    _, report = study
    html = (report.parent / "report.html").read_text()
    assert "data:image/png;base64," in html and 'src="figures/' not in html and "<link" not in html
    md_heads = [line.lstrip("#").strip() for line in report.read_text().splitlines() if line.startswith("## ")]
    html_heads = [h.split(">", 1)[1].split("</h2")[0] for h in html.split("<h2")[1:]]
    assert md_heads == html_heads and md_heads[0].startswith("Answer") and md_heads[-1] == "Runs"
    assert html.count("<img") == report.read_text().count("![")


def test_figures_of_the_study(study):
    _, report = study
    figures = report.parent / "figures"
    for name in ("per_unit_delta", "escape_km", "score_distributions", "traj_label_strategy_walk_builtin",
                 "traj_clip_frac_low", "traj_clip_frac_high"):
        h, w, _ = matplotlib.image.imread(figures / f"{name}.png").shape
        assert w == 1600, name
    assert not (figures / "traj_label_strategy_shortcut_builtin.png").exists()  # 1 − walk: not drawn twice


def test_a_principal_comparison_without_runs_is_named(tmp_path):
    design = {**DESIGN, "principal": [["grpo_budget", "grpo"], ["grpo_entropy_static", "grpo"]]}
    sweep = make_sweep(tmp_path / "s", arms=("grpo", "grpo_budget"), seeds=(0, 1, 2), comparisons=design)
    text = make_report([sweep], tmp_path / "out", n_boot=50).read_text()
    assert "**Not computed** (no final evaluations of both arms on the principal benchmark): grpo_entropy_static − grpo." in text
    assert "Holm–Bonferroni over this comparison at α = 0.05" in text


def test_warm_start_from_the_layout_and_a_broken_score_names_the_run(tmp_path):
    sweep = make_sweep(tmp_path / "s", arms=("grpo", "grpo_budget"), seeds=(0, 1), warm_starts=("ws_a",))
    (sweep / "runs" / "grpo" / "ws_a" / "seed_1" / "run.json").unlink()
    runs, _ = find_runs([sweep])
    r = next(x for x in runs if x.arm == "grpo" and x.seed == 1)
    assert (r.warm_start, r.unit, r.name) == ("ws_a", ("ws_a", 1), "grpo/ws_a/seed_1")
    f = sweep / "runs" / "grpo_budget" / "ws_a" / "seed_0" / "eval" / "step_000160" / "builtin" / "summary.json"
    s = json.loads(f.read_text())
    s["per_problem"][3]["n"] = 0
    f.write_text(json.dumps(s))
    with pytest.raises(UserError, match=r"run grpo_budget/ws_a/seed_0 .*problem p3"):
        make_report([sweep], tmp_path / "out")
