"""`rbctl report` on a hand-made sweep shaped like the main job's study (tests/integration/report_sweeps.py):
principal comparisons stated in the sweep file, warm starts crossed with seeds, label shares and
escape times, clip fractions, an arm whose config is another's. Expected values are recomputed here
from the run files, independently of the report's code paths."""

from __future__ import annotations

import json
import math
import shutil

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
WARM, SEEDS = ("ws_a", "ws_b", "ws_c"), (0, 1, 2)
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


@pytest.mark.slow
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
    assert list(v["seeds"]) == [9, 9, 9] and v["seed_list"][0].startswith("ws_a/0,ws_a/1,ws_a/2,ws_b/0,")
    twin = v.iloc[2]
    assert bool(twin["same_config"]) and twin["verdict"] == "same config" and math.isnan(twin["p_holm"])
    text = report.read_text()
    assert "**Refused** (both arms ran the same training config; kept out of the Holm family): grpo_copy − grpo" in text
    assert "Holm–Bonferroni over these 2 comparisons" in text
    # P(improvement) over the units' runs: mean over all 9 × 9 pairs of 1[x > y] + ½·1[x = y]
    a, b = _per_unit(sweep, "grpo_budget"), _per_unit(sweep, "grpo")
    pi = np.mean([(a[u] > b[w]) + 0.5 * (a[u] == b[w]) for u in UNITS for w in UNITS])
    assert v["p_improve"][0] == pytest.approx(pi)
    assert v["p_improve_paired_lo"][0] <= pi <= v["p_improve_paired_hi"][0]
    # rliable's interval: each arm's runs resampled on their own (StratifiedIndependentBootstrap), 300 draws
    x, y = np.array([[a[u]] for u in UNITS]), np.array([[b[u]] for u in UNITS])
    rng = np.random.default_rng(0)
    ix, iy = rng.integers(0, 9, size=(300, 9, 1)), rng.integers(0, 9, size=(300, 9, 1))
    draws = [np.mean([(xs > ys) + 0.5 * (xs == ys) for xs in x[ix[i, :, 0], 0] for ys in y[iy[i, :, 0], 0]])
             for i in range(300)]
    assert (v["p_improve_indep_lo"][0], v["p_improve_indep_hi"][0]) == pytest.approx(tuple(np.quantile(draws, [0.025, 0.975])))
    shown = (report.parent / "tables" / "verdicts.md").read_text()
    assert "| P(improvement) [95% paired-bootstrap CI] | rliable 95% CI (independent bootstrap) |" in shown
    assert "P(improvement) [95% paired-bootstrap CI]" in (report.parent / "report.html").read_text()


def test_exploratory_family_is_separate_and_excludes_the_principal(study):
    sweep, report = study
    comps = pd.read_csv(report.parent / "tables" / "comparisons.csv")
    expl = comps[comps["family"] == "exploratory"]
    principal_avg = {(a, r) for a, r in PRINCIPAL}
    assert not any((a, r) in principal_avg and m == "avg@n" for a, r, m in zip(expl["arm"], expl["ref"], expl["metric"]))
    assert ((expl["arm"] == "grpo_budget") & (expl["ref"] == "grpo") & (expl["metric"] == "pass@8")).any()
    # exploratory rows keep their unadjusted p and get neither a Holm p nor a call
    ok = expl[~expl["same_config"] & expl["not_testable"].isna()]
    assert len(ok) and ok["p"].notna().all() and ok["p_holm"].isna().all()
    assert set(ok["verdict"]) == {"exploratory: no call"}
    text = report.read_text()
    assert "## Exploratory comparisons" in text and "Holm p (exploratory family)" not in text


def test_power_table_from_the_design_and_the_measured_sd(study):
    sweep, report = study
    power = pd.read_csv(report.parent / "tables" / "power.csv").set_index("comparison")
    row = power.loc["grpo_budget − grpo"]
    d = 100 * _delta(sweep, "grpo_budget", "grpo")
    assert row["units"] == 9 and row["measured_sd"] == pytest.approx(d.std(ddof=1))
    # power at the MDE with the planning SD: two-sided paired t at α/m = 0.05/2, noncentral t
    df, ncp, crit = 8, 5.0 * math.sqrt(9) / 5.5, sps.t.ppf(1 - 0.025 / 2, 8)
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
    per = [d[3 * i:3 * i + 3] for i in range(3)]  # ws_a's seeds, ws_b's, ws_c's
    means = [x.mean() for x in per]
    assert mine.loc["warm start ws_a", "delta"] == pytest.approx(means[0])
    assert mine.loc["warm start ws_a", "p"] == pytest.approx(sps.ttest_1samp(per[0], 0).pvalue)
    over = mine.loc["over warm starts (unit = warm start)"]
    assert over["units"] == 3 and over["delta"] == pytest.approx(np.mean(means))
    assert over["p"] == pytest.approx(sps.ttest_1samp(means, 0).pvalue)
    # the tests over warm starts of the 2 principal comparisons are one Holm family (before: printed unadjusted)
    d2 = _delta(sweep, "grpo_entropy_static", "grpo_budget")
    p_over = [over["p"], sps.ttest_1samp([d2[3 * i:3 * i + 3].mean() for i in range(3)], 0).pvalue]
    lo_p, hi_p = sorted(p_over)
    holm = {lo_p: min(1, 2 * lo_p), hi_p: max(min(1, 2 * lo_p), hi_p)}
    assert over["p_holm"] == pytest.approx(holm[p_over[0]])
    other = ws[(ws["comparison"] == "grpo_entropy_static − grpo_budget") & ws["level"].str.startswith("over")].iloc[0]
    assert other["p_holm"] == pytest.approx(holm[p_over[1]])
    pooled = mine.loc["pooled (unit = warm start × seed), Holm"]
    assert pooled["units"] == 9 and pooled["p"] == pytest.approx(sps.ttest_1samp(d, 0).pvalue)
    # one-way ANOVA F of Δ by warm start
    assert mine.loc["variance of Δ", "p"] == pytest.approx(sps.f_oneway(*per).pvalue)
    text = report.read_text()
    assert "## Warm starts" in text and "Holm-adjusted over the 2 comparisons of this table tested at that level" in text
    rows = [r for r in (report.parent / "tables" / "warm_starts.md").read_text().splitlines() if "over warm starts" in r]
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert cells[6] == (f"{holm[p_over[0]]:.3f}" if holm[p_over[0]] >= 0.001 else "< 0.001")


def test_escape_times_survival_and_log_rank(study):
    sweep, report = study
    esc = pd.read_csv(report.parent / "tables" / "escape.csv").set_index("arm")
    for arm in ("grpo", "grpo_budget"):
        times = []
        for w, s in UNITS:
            lines = [json.loads(x) for x in (sweep / "runs" / arm / w / f"seed_{s}" / "eval.jsonl").read_text().splitlines()]
            times.append(next((e["step"] for e in lines if e["label/strategy/walk"] >= 0.5), None))
        escaped = [t for t in times if t is not None]
        assert esc.loc[arm, "runs"] == 9 and esc.loc[arm, "escaped"] == len(escaped)
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
    assert md_heads == html_heads and md_heads[:3] == ["The question", "The answer", "Calls in detail: the principal comparisons"] and md_heads[-1] == "Runs"
    assert html.count("<img") == report.read_text().count("![")


def test_figures_of_the_study(study):
    _, report = study
    figures = report.parent / "figures"
    for name in ("per_unit_delta", "escape_km", "score_distributions", "traj_label_strategy_walk_builtin",
                 "traj_clip_frac_low", "traj_clip_frac_high"):
        h, w, _ = matplotlib.image.imread(figures / f"{name}.png").shape
        assert w == 1600, name
    assert not (figures / "traj_label_strategy_shortcut_builtin.png").exists()  # 1 − walk: not drawn twice


@pytest.mark.slow
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


@pytest.mark.slow
def test_an_untestable_principal_comparison_is_outside_holm_and_the_power_m(tmp_path):
    design = {**DESIGN, "principal": [["grpo_budget", "grpo"], ["grpo_entropy_static", "grpo_budget"]]}
    sweep = make_sweep(tmp_path / "s", arms=("grpo", "grpo_budget", "grpo_entropy_static"), seeds=(0, 1, 2),
                       comparisons=design)
    shutil.rmtree(sweep / "runs" / "grpo_entropy_static" / "seed_2")  # that arm keeps 2 seeds: its comparison has 2 units
    report = make_report([sweep], tmp_path / "out", n_boot=50)
    v = pd.read_csv(report.parent / "tables" / "verdicts.csv")
    a = {s: final_correct(sweep, "grpo_budget", f"seed_{s}").mean() / N for s in (0, 1, 2)}
    b = {s: final_correct(sweep, "grpo", f"seed_{s}").mean() / N for s in (0, 1, 2)}
    p = sps.ttest_1samp([a[s] - b[s] for s in (0, 1, 2)], 0).pvalue
    assert v["p_holm"][0] == pytest.approx(p)  # a family of one: Holm p = p
    assert v["verdict"][1] == "not testable" and math.isnan(v["p_holm"][1]) and v["seeds"][1] == 2
    # the power section's m is Holm's: 1, not 2 (before: α/2 for the power while Holm used m = 1)
    power = pd.read_csv(report.parent / "tables" / "power.csv").set_index("comparison")
    crit = sps.t.ppf(1 - 0.05 / 2, 2)
    ncp = 5.0 * math.sqrt(3) / 5.5
    assert power.loc["grpo_budget − grpo", "power_planning"] == pytest.approx(
        sps.nct.sf(crit, 2, ncp) + sps.nct.sf(crit, 2, -ncp))
    text = report.read_text()
    assert "α/m = 0.05/1 = 0.05 (Holm's first step over the m = 1 principal comparison that is tested)" in text
    assert "Not tested, so not counted in m (as in the Holm family): grpo_entropy_static − grpo_budget (2 units" in text
    assert "Holm–Bonferroni over this comparison at α = 0.05" in text
