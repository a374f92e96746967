"""`rbctl report STUDY.yaml` (rbctl.report.claims) on hand-made sweep directories (4 problems × n = 4,
3 seeds): the families and calls come from each sweep file, and every number below is worked out by
hand from the counts."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import scipy.stats as sps
import yaml

from rbctl.algo.sharpness import finite_g_check, kappa_by_k
from rbctl.errors import UserError
from rbctl.report import claims
from rbctl.report.analyses.comparisons import EQUIVALENT, HIGHER, INCONCLUSIVE, call
from rbctl.report.power import mde_paired
from tests.integration.hand_runs import write_run, write_sweep_files

N = 4
# arm -> (estimator, budget, entropy mode, variant); correct of n = 4 on problems p0..p3 per seed 0, 1, 2
ARMS = {
    "grpo": ("grpo", None, "none", "base"),
    "grpo_budget": ("grpo", 1.0, "none", "budget"),
    "grpo_entropy": ("grpo", None, "static", "entropy_static"),
    "rloo": ("rloo", None, "none", "base"),
    "rloo_budget": ("rloo", 1.0, "none", "budget"),
}
# avg@4 per seed:                        Δ budget − base per seed
#   grpo         .25   .3125 .375
#   grpo_budget  .5    .5625 .6875        .25, .25, .3125  -> mean .2708, sd .0361, t 13.0, 2 df
#   grpo_entropy .3125 .3125 .3125        (− grpo: +.0625, 0, −.0625)
#   rloo         .375  .4375 .4375
#   rloo_budget  .375  .4375 .5           0, 0, .0625      -> mean .0208, sd .0361, t 1.0
CORRECT = {
    "grpo": ([4, 0, 0, 0], [4, 1, 0, 0], [4, 2, 0, 0]),
    "grpo_budget": ([4, 4, 0, 0], [4, 4, 1, 0], [4, 4, 2, 1]),
    "grpo_entropy": ([4, 1, 0, 0], [4, 1, 0, 0], [4, 1, 0, 0]),
    "rloo": ([4, 2, 0, 0], [4, 2, 1, 0], [4, 3, 0, 0]),
    "rloo_budget": ([4, 2, 0, 0], [4, 2, 1, 0], [4, 2, 1, 1]),
}
# entropy logged at steps 1..4 (0.6 at step 1, then this): the last quarter is step 4's value; per seed
# the entropy arm adds 0.05·seed, so the bonus's rise over GRPO differs between seeds (testable)
ENTROPY = {"grpo": 0.10, "grpo_budget": 0.05, "grpo_entropy": 0.20, "rloo": 0.12, "rloo_budget": 0.06}


def make_sweep(root: Path, correct: dict, comparisons: dict, steps: int = 4, periodic: dict | None = None,
               ceiling: float | None = None) -> Path:
    keys = []
    for arm, per_seed in correct.items():
        estimator, budget, mode, variant = ARMS[arm]
        for seed, c in enumerate(per_seed):
            cfg = {"seed": seed, "steps": steps, "rollout": {"group_size": 8, "prompts_per_step": 16},
                   "algo": {"estimator": estimator, "budget": budget, "entropy": {"mode": mode},
                            "loss_agg": "seq-mean-token-sum-norm" if estimator == "dr_grpo" else "token-mean"}}
            e = ENTROPY[arm] + (0.05 * seed if mode == "static" else 0.0)
            # κ_eff at steps 1..4 and the share of mixed prompts; the early quarter is step 1
            metrics = [{"step": s, "entropy": (0.6 if s == 1 else e), "kappa_eff": 1.0 + 0.1 * s + 0.01 * seed,
                        "groups/frac_mixed": 0.5} for s in range(1, steps + 1)]
            write_run(root / "runs" / arm / f"seed_{seed}", cfg=cfg, metrics=metrics, steps=steps, correct=c, n=N,
                      meta={"arm": arm, "seed": seed, "sweep": "s", "baseline": estimator, "variant": variant},
                      evals=(periodic or {}).get((arm, seed), []))
            keys.append(f"{arm}/seed_{seed}")
    write_sweep_files(root, keys, {"name": "s", "seeds": [0, 1, 2], "arms": {a: {} for a in correct},
                                   "eval": {"benchmarks": ["builtin"], "n": N},
                                   "comparisons": {"metric": "avg@n", "mde": 10.0, "planning_sd": 3.5, **comparisons}})
    if ceiling is not None:
        (root / "ceiling.json").write_text(json.dumps({"value": ceiling, "source": "stated in the test"}))
    return root


BUDGET = [["grpo_budget", "grpo"], ["rloo_budget", "rloo"]]
FAMILIES = {"entropy_vs_base": {"pairs": [["grpo_entropy", "grpo"]]}}
# periodic evaluations: GRPO at step 3 equals its final level (stalled), far below a 0.98 ceiling, and its
# entropy falls from 0.6 to 0.1 (< 0.6 / 3): the plateau test holds for plain GRPO
PLATEAU = {("grpo", s): [{"step": 0, "avg@n": 0.2}, {"step": 3, "avg@n": v}] for s, v in enumerate((0.25, 0.3125, 0.375))}


def study_file(tmp_path: Path, margin: float | None = None, ceiling: float | None = 0.98, long: bool = False) -> Path:
    comps = {"principal": BUDGET, "families": FAMILIES, **({"margin": margin} if margin else {})}
    fix = make_sweep(tmp_path / "fix", CORRECT, comps, periodic=PLATEAU, ceiling=ceiling)
    study = {"name": "toy", "testbeds": {"fixpoint": str(fix)},
             "families": {"budget": "principal", "entropy_vs_base": "entropy_vs_base"}}
    if long:
        study["long"] = {"fixpoint": {"dir": str(long_sweep(tmp_path / "long", 20.0)), "main_step": 100}}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study))
    return path


def p_two_sided(deltas) -> float:
    return float(sps.ttest_1samp(deltas, 0.0).pvalue)


def test_the_budget_family_is_the_sweep_files_and_claim_a_reads_its_calls(tmp_path: Path) -> None:
    study = claims.load_study(study_file(tmp_path), n_boot=50)
    (tb,) = study.testbeds
    grpo, rloo = tb.family("principal")
    p_grpo, p_rloo = p_two_sided([0.25, 0.25, 0.3125]), p_two_sided([0.0, 0.0, 0.0625])
    assert grpo.p_holm == pytest.approx(2 * p_grpo) and rloo.p_holm == pytest.approx(p_rloo)  # Holm over the 2
    assert [call(grpo), call(rloo)] == [HIGHER, INCONCLUSIVE]
    # rloo's detectable effect: power 0.8 at α/2 with its 3 units and sd(Δ) = .0361
    assert rloo.detectable == pytest.approx(mde_paired(0.0625 / math.sqrt(3), 3, 0.025, 0.8), rel=1e-9)
    measured, verdict = claims.claim_a(study.testbeds, "principal")
    assert measured == "GRPO on fixpoint: higher; RLOO on fixpoint: inconclusive"
    assert verdict == "inconclusive: only GRPO called higher, 1 inconclusive"
    doc = claims.claims_markdown(study, command="rbctl report study.yaml")
    assert "no difference" not in doc and "| (a) The budget improves several RL baselines |" in doc
    # the same Holm p as the sweep's own report prints for the row
    assert "| GRPO | fixpoint | grpo_budget − grpo | 3 | 31.2 | 58.3 | +27.1 [" in doc
    assert f"| {100 * (0.98 - 0.3125):.1f} |" in doc  # GRPO's distance to the stated ceiling: 98 − 31.25 points
    assert "token-mean" in doc and "Code of the claims sweeps (testbeds, settings, long horizons): `0123abc` (one commit)." in doc


def test_claim_a_fails_when_the_others_are_equivalent_within_the_stated_margin(tmp_path: Path) -> None:
    # margin 15 points: rloo's TOST p = P(T2 < (.0208 − .15)/.0208) = 0.0125, Holm over 2 -> 0.025: equivalent
    study = claims.load_study(study_file(tmp_path, margin=15.0), n_boot=50)
    grpo, rloo = study.testbeds[0].family("principal")
    se = 0.0625 / math.sqrt(3) / math.sqrt(3)
    p_up = sps.t.cdf((0.0625 / 3 - 0.15) / se, 2)
    assert rloo.p_tost == pytest.approx(p_up, rel=1e-9) and rloo.p_tost_holm == pytest.approx(2 * p_up, rel=1e-9)
    assert call(rloo) == EQUIVALENT and call(grpo) == HIGHER
    assert claims.claim_a(study.testbeds, "principal")[1] == "fails: only GRPO is higher; the others are equivalent"


def test_claim_b_needs_the_plateau_and_a_bonus_that_raised_entropy(tmp_path: Path) -> None:
    study = claims.load_study(study_file(tmp_path), n_boot=50)
    (tb,) = study.testbeds
    assert tb.plateau_held  # stalled (change 0), 98 − 31.25 ≥ 15 points below, entropy 0.1 < 0.6/3
    (c,) = tb.family("entropy_vs_base")
    rose, why = claims.entropy_rose(tb, c)
    # entropy Δ per seed: .20 − .10, .25 − .10, .30 − .10 = .10, .15, .20: mean .15, t 5.2 on 2 df
    assert rose and why.startswith("entropy Δ +0.150 nats/token (p 0.035")
    measured, verdict = claims.claim_b(study.testbeds, "entropy_vs_base")
    # Δ pass@1: +.0625, 0, −.0625: inconclusive, so "does not move" is not shown
    assert "grpo_entropy − grpo: inconclusive (Δ = 0" in measured
    assert verdict == "inconclusive: 1 of 1 inconclusive, none higher"
    # without a stated ceiling the plateau test cannot hold, and claim (b) is not read there
    other = claims.load_study(study_file(tmp_path / "no_ceiling", ceiling=None), n_boot=50)
    assert not other.testbeds[0].plateau_held
    assert not any(other.testbeds[0].data.plateau.held_for(a) for a in ("grpo", "rloo"))
    assert claims.claim_b(other.testbeds, "entropy_vs_base")[1].startswith("not tested")


def test_the_plateau_test_of_every_plain_baseline(tmp_path: Path) -> None:
    study = claims.load_study(study_file(tmp_path), n_boot=50)
    p = study.testbeds[0].data.plateau
    # the plain arms only: no budget, no bonus
    assert list(p.plain) == ["grpo", "rloo"]
    rloo = p.plain["rloo"]
    # rloo: final pass@1 41.67 (seeds .375, .4375, .4375), 98 − 41.67 = 56.33 points below; entropy .12 of .6
    assert rloo.below_ceiling.value == pytest.approx(98 - 100 * (0.375 + 0.4375 + 0.4375) / 3)
    assert rloo.entropy_collapsed.value == pytest.approx(0.12) and p.held_for("rloo")
    rows = claims.plateau_rows(study.testbeds)
    assert list(rows["arm"]) == ["grpo", "rloo"] and list(rows["plateau"]) == ["holds", "holds"]
    assert "56.3 points" in rows["below the ceiling"][1]


def test_the_setting_is_checked_against_the_rule_on_plain_arms(tmp_path: Path) -> None:
    path = study_file(tmp_path)
    study_yaml = yaml.safe_load(path.read_text())
    # the testbed's own sweep stands in for a settings sweep: its plain arms grpo and rloo both plateau,
    # both with a last-quarter change of 0 points, so the rule keeps the first by name
    study_yaml["selection"] = {"fixpoint": {"dir": study_yaml["testbeds"]["fixpoint"], "kept": "rloo"}}
    path.write_text(yaml.safe_dump(study_yaml))
    study = claims.load_study(path, n_boot=50)
    doc = "\n".join(claims.selection_lines(study))
    assert "### How the fixpoint setting was chosen" in doc
    assert "| grpo | 3 | 0.00 ✓ | 66.8 ✓ | 0.100 ✓ | holds |" in doc
    assert "The rule keeps **grpo**; the study file states `rloo` — **they differ**" in doc


def test_a_study_with_unfinished_sweeps_documents_the_finished_ones_and_names_the_rest(tmp_path: Path) -> None:
    path = study_file(tmp_path)
    study_yaml = yaml.safe_load(path.read_text())
    study_yaml["testbeds"]["maze"] = str(tmp_path / "not_run")  # no directory yet
    study_yaml["long"] = {"fixpoint": {"dir": str(tmp_path / "long_half"), "main_step": 100}}
    half = tmp_path / "long_half"
    half.mkdir()
    (half / "state.json").write_text(json.dumps({"runs": {"grpo/seed_0": {"status": "done", "error": None},
                                                          "grpo/seed_1": {"status": "pending", "error": None}}}))
    path.write_text(yaml.safe_dump(study_yaml))
    study = claims.load_study(path, n_boot=50)
    assert [tb.name for tb in study.testbeds] == ["fixpoint"] and study.long == ()
    assert study.pending == (("testbed maze", f"`{tmp_path / 'not_run'}` does not exist yet"),
                             ("long horizon fixpoint", f"`{half}`: 1 of 2 runs finished"))
    doc = claims.claims_markdown(study, command="rbctl report study.yaml")
    assert "Not in this document yet (the study file names them; each sweep resumes where it stopped): testbed maze" in doc
    assert claims.readme_block(study).endswith(f"- Not in these lines yet: testbed maze (`{tmp_path / 'not_run'}` does "
                                              f"not exist yet); long horizon fixpoint (`{half}`: 1 of 2 runs finished)")
    # no testbed finished: refused, naming why
    study_yaml["testbeds"] = {"maze": str(tmp_path / "not_run")}
    study_yaml.pop("long")
    path.write_text(yaml.safe_dump(study_yaml))
    with pytest.raises(UserError, match="no testbed's sweep has finished"):
        claims.load_study(path, n_boot=50)


def test_setting_by_rule_prefers_a_plateau_then_more_criteria_then_the_smaller_change() -> None:
    from rbctl.report.analyses.plateau import Criterion, PlateauVerdict, setting_by_rule

    def verdict(change, below, collapsed):
        held = change < 2 and below and collapsed
        return PlateauVerdict(Criterion("stalled", change < 2, change, 2.0, ""), Criterion("below_ceiling", below, 20.0, 15.0, ""),
                              Criterion("entropy_collapsed", collapsed, 0.1, 0.2, ""), held, 3)

    assert setting_by_rule({"a": verdict(1.5, True, True), "b": verdict(0.5, True, True)}) == "b"
    assert setting_by_rule({"a": verdict(1.5, True, True), "b": verdict(0.5, False, True)}) == "a"
    assert setting_by_rule({"a": verdict(3.0, True, False), "b": verdict(2.5, True, True)}) == "b"  # 2 criteria beat 1
    assert setting_by_rule({}) is None


def test_claim_e_counts_units_states_the_sign_and_tests_the_lag(tmp_path: Path) -> None:
    study = claims.load_study(study_file(tmp_path), n_boot=50)
    s = claims.sharpening(study.testbeds[0], study.config.expect)
    lagged = s.rows[s.rows["window"].str.startswith("lagged")]
    assert list(lagged["measure"]) == ["κ_eff", "entropy"] and set(s.rows["expected"]) == {"negative", "positive"}
    # 15 runs in 3 units (seeds): N − U − 1 = 11 df; κ_eff at step 1 is 1.1 + 0.01·seed, the same in every arm of
    # a unit, so centred within units it is constant: no correlation to test
    k = s.rows[(s.rows["measure"] == "κ_eff") & s.rows["window"].str.startswith("lagged")].iloc[0]
    assert k["runs"] == 15 and k["units"] == 3 and k["df"] == 11 and math.isnan(k["r"])
    assert s.call.startswith("inconclusive: neither early measure")  # both lagged associations untestable here
    # same time: entropy's last quarter (.10/.05/.25·/.12/.06) against pass@1 within seeds, r < 0, p unadjusted
    e = s.rows[(s.rows["measure"] == "entropy") & s.rows["window"].str.startswith("same")].iloc[0]
    assert e["r"] < 0 and e["p"] < 0.05 and math.isnan(e["p_holm"]) and e["status"] == "opposite (unadjusted)"
    assert "8.0 mixed prompts" in s.mixed  # 0.5 of 16 prompts


def long_sweep(root: Path, margin: float) -> Path:
    arms = ("grpo", "grpo_budget")
    # periodic avg@n at step 100: Δ .30, .27, .30 (t ≈ 29 on 2 df); final (step 400): Δ +1/16, −1/16, +1/16
    at100 = {"grpo": (0.5, 0.55, 0.6), "grpo_budget": (0.8, 0.82, 0.9)}
    periodic = {(a, s): [{"step": 0, "avg@n": 0.4}, {"step": 100, "avg@n": at100[a][s]}, {"step": 400, "avg@n": 0.95}]
                for a in arms for s in range(3)}
    correct = {"grpo": ([4, 4, 4, 3], [4, 4, 4, 4], [4, 4, 3, 4]), "grpo_budget": ([4, 4, 4, 4], [4, 4, 4, 3], [4, 4, 4, 4])}
    return make_sweep(root, correct, {"principal": [["grpo_budget", "grpo"]], "margin": margin}, steps=400,
                      periodic=periodic)


@pytest.mark.parametrize("margin, said", [
    # final Δ mean .0208, sd .0722, se .0417 on 2 df: TOST p at ±20 = P(T2 < (.0208 − .2)/.0417) = 0.025: equivalent
    (20.0, "**faster, same final level**."),
    # at ±10, P(T2 < −1.9) = 0.098: not shown equivalent with 3 units, so the sentence says so
    (10.0, "**ahead at the horizon; final level inconclusive (Δ > 0; detectable ≥ "),
])
def test_long_horizon_same_final_level_only_by_tost(tmp_path: Path, margin: float, said: str) -> None:
    tb = claims.load_testbed("fixpoint (long)", long_sweep(tmp_path / "long", margin), n_boot=50)
    rows, (line,) = claims.long_rows(tb, 100, "principal")
    assert line.startswith("fixpoint (long), grpo_budget − grpo: +29.0 [") and "at step 100 (p " in line
    assert ", +2.1 [" in line and "at the final evaluation (step 400): " in line and said in line
    assert rows.iloc[0]["units"] == 3


def test_kappa_falls_with_k_under_the_budget_and_the_finite_g_identity() -> None:
    k = kappa_by_k(g=8)
    assert [r["grpo + budget"] for r in k] == pytest.approx([1 / K for K in range(1, 8)], rel=1e-6)
    assert [r["dr_grpo"] for r in k] == pytest.approx([1.0] * 7, rel=1e-6)
    assert [r["rloo + budget"] for r in k] == pytest.approx([8 / 7 / K for K in range(1, 8)], rel=1e-6)
    # GRPO: 1/σ̂ with the unbiased std, K = 4 of 8: sqrt(8/7 · 1/4) = 0.5345 -> 1.8708
    assert k[3]["grpo"] == pytest.approx(1 / math.sqrt(8 / 7 * 0.25), rel=1e-5)
    worst, best = finite_g_check(g=6)
    assert worst < 1e-6 < 1e-3 < best


def test_rbctl_report_of_a_study_file_writes_the_claims_document(tmp_path: Path, capsys) -> None:
    from rbctl.cli import run

    study = study_file(tmp_path, margin=15.0, long=True)
    out = tmp_path / "out"
    assert run(["report", str(study), "-o", str(out)]) == 0
    doc = (out / "claims.md").read_text()
    assert capsys.readouterr().out.strip() == str(out / "claims.md")
    assert doc.startswith("# toy: the study's claims") and f"`rbctl report {study} -o {out}`" in doc
    assert "**faster, same final level**" in doc and "no difference" not in doc
    # a study naming a directory that holds no sweep: one line naming it, exit 2
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"testbeds": {"fixpoint": str(tmp_path / "nowhere")}}))
    assert run(["report", str(bad)]) == 2
    assert f"no testbed's sweep has finished (`{tmp_path / 'nowhere'}` does not exist yet)" in capsys.readouterr().err


def test_a_row_prints_the_same_holm_p_in_the_sweeps_report_and_in_the_claims_document(tmp_path: Path) -> None:
    import pandas as pd

    from rbctl.report import make_report

    study = study_file(tmp_path, margin=15.0)
    claims_doc = claims.claims_markdown(claims.load_study(study, n_boot=50))
    report = make_report([tmp_path / "fix"], tmp_path / "report", n_boot=50)
    verdicts = pd.read_csv(report.parent / "tables" / "verdicts.csv").set_index("arm")
    family = pd.read_csv(report.parent / "tables" / "family_entropy_vs_base.csv").set_index("arm")
    text = report.read_text()
    for arm, p in (("grpo_budget", verdicts.loc["grpo_budget", "p_holm"]), ("rloo_budget", verdicts.loc["rloo_budget", "p_holm"]),
                   ("grpo_entropy", family.loc["grpo_entropy", "p_holm"])):
        cell = f"{p:.3f}" if p >= 0.001 else "< 0.001"
        row = next(line for line in claims_doc.splitlines() if f"| {arm} − " in line)
        assert f"| {cell} |" in row, (arm, cell, row)
        assert f"| {cell} |" in next(line for line in text.splitlines() if f"| {arm} − " in line and "|" in line)
    # the sweep's report: the declared family is its own section with its calls; no call says "no difference"
    assert "## Declared family: entropy_vs_base" in text and "no difference" not in text
    assert verdicts.loc["rloo_budget", "call"] == "equivalent within ±15"
    assert "| ±15: 0.025 |" in text  # the TOST column of a family with a margin
    power = pd.read_csv(report.parent / "tables" / "power.csv").set_index("comparison")
    from rbctl.report.power import units_for_tost  # at the planning SD 3.5, a family of 2 at α/2, ±15
    assert power.loc["rloo_budget − rloo", "units_tost_planning"] == units_for_tost(3.5, 15.0, 2, 0.8, 0.05)
    assert "power of TOST at ±15 if Δ = 0" in text
    assert "no difference" not in (report.parent / "report.html").read_text()


def test_a_question_reads_only_its_own_members_of_a_mixed_family(tmp_path: Path) -> None:
    # the main job's shape: one principal family holding the budget's and the entropy bonus's comparisons
    fix = make_sweep(tmp_path / "fix", CORRECT, {"principal": [*BUDGET, ["grpo_entropy", "grpo"]]}, periodic=PLATEAU,
                     ceiling=0.98)
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({"testbeds": {"fixpoint": str(fix)},
                                     "families": {"budget": "principal", "entropy_vs_base": "principal"}}))
    s = claims.load_study(study, n_boot=50)
    (tb,) = s.testbeds
    assert [c.label for c in tb.family("principal")] == ["grpo_budget − grpo", "rloo_budget − rloo", "grpo_entropy − grpo"]
    assert [c.label for c in tb.members("principal", "budget")] == ["grpo_budget − grpo", "rloo_budget − rloo"]
    assert [c.label for c in tb.members("principal", "entropy_vs_base")] == ["grpo_entropy − grpo"]
    assert claims.claim_a(s.testbeds, "principal")[0] == "GRPO on fixpoint: higher; RLOO on fixpoint: inconclusive"
    rows = claims.family_rows(s.testbeds, "principal", "budget")
    assert list(rows["comparison"]) == ["grpo_budget − grpo", "rloo_budget − rloo"]
    # Holm over the family's 3 members, whichever question reads them
    assert tb.members("principal", "budget")[0].p_holm == pytest.approx(3 * p_two_sided([0.25, 0.25, 0.3125]))


def test_several_baselines_needs_two_baselines(tmp_path: Path) -> None:
    only_grpo = {k: v for k, v in CORRECT.items() if k.startswith("grpo")}
    fix = make_sweep(tmp_path / "fix", only_grpo, {"principal": [["grpo_budget", "grpo"]]})
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({"testbeds": {"fixpoint": str(fix)}}))
    s = claims.load_study(study, n_boot=50)
    assert claims.claim_a(s.testbeds, "principal")[1].startswith("not tested: one baseline run (GRPO: ")


def test_the_sweep_report_tests_every_plain_arm(tmp_path: Path, capsys) -> None:
    import pandas as pd

    from rbctl.cli import run
    from rbctl.store.rundir import REPORT_DIR, REPORT_MD, REPORT_TABLES

    sweep = Path(yaml.safe_load(study_file(tmp_path).read_text())["testbeds"]["fixpoint"])
    assert run(["report", str(sweep)]) == 0
    capsys.readouterr()
    table = pd.read_csv(sweep / REPORT_DIR / REPORT_TABLES / "plateau_arms.csv")
    assert list(table["arm"]) == ["grpo", "rloo"] and list(table["plateau"]) == [True, True]
    assert table["below_ceiling_value"].tolist() == pytest.approx([98 - 31.25, 98 - 100 * (0.375 + 0.4375 + 0.4375) / 3])
    assert "Every plain arm (no budget, no bonus, no other variant)" in (sweep / REPORT_DIR / REPORT_MD).read_text()


# held-out walk share at steps 0, 20, …, 100 per seed; the escape lasts 2 more evaluations (hold 2)
WALK = {"grpo": ([.1, .1, .1, .1, .1, .6], [.1] * 6, [.1, .1, .1, .6, .6, .6]),  # T 100, never (100), 60
        "grpo_budget": ([.1, .6, .6, .6, .6, .6], [.1, .1, .6, .6, .6, .6], [.1, .6, .1, .6, .6, .6]),  # 20, 40, 60
        "rloo": ([.1, .1, .6, .6, .6, .6],) * 3,  # 40, 40, 40
        "rloo_budget": ([.1, .6, .6, .6, .6, .6], [.1, .6, .6, .6, .6, .6], [.1, .1, .6, .6, .6, .6])}  # 20, 20, 40


def test_escape_is_the_studys_own_family_in_restricted_steps(tmp_path: Path) -> None:
    periodic = {(a, s): [{"step": 20 * i, "avg@n": 0.3, "label/strategy/walk": w} for i, w in enumerate(ws)]
                for a, per_seed in WALK.items() for s, ws in enumerate(per_seed)}
    fix = make_sweep(tmp_path / "fix", {a: CORRECT[a] for a in WALK}, {"principal": BUDGET}, steps=100,
                     periodic=periodic)
    study = {"name": "toy", "testbeds": {"fixpoint": str(fix)},
             "escape": {"setting": {"metric": "label/strategy/walk", "threshold": 0.5, "signal": "eval", "hold": 2},
                        "margin": 60}}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study))
    members = {m.comparison.arm: m for m in claims.escape_family(claims.load_study(path, n_boot=50))}
    g, r = members["grpo_budget"].comparison, members["rloo_budget"].comparison
    # GRPO: Δ = 20 − 100, 40 − 100, 60 − 60 (the crossing at 20 did not last); RLOO: −20, −20, 0
    assert g.delta.deltas == pytest.approx((-80.0, -60.0, 0.0)) and r.delta.deltas == pytest.approx((-20.0, -20.0, 0.0))
    assert (g.ref_score, g.arm_score, members["grpo_budget"].tau) == pytest.approx((260 / 3, 40.0, 100.0))
    assert (members["grpo_budget"].escaped_ref, members["grpo_budget"].escaped_arm) == (2, 3)
    p_g, p_r = p_two_sided([-80, -60, 0]), p_two_sided([-20, -20, 0])
    assert sorted([g.p_holm, r.p_holm]) == pytest.approx([2 * min(p_g, p_r), max(2 * min(p_g, p_r), p_g, p_r)])  # Holm, m = 2
    # TOST at ±60: RLOO's p = P(T2 > (−13.33 + 60) / 6.667) = P(T2 > 7.0); GRPO's P(T2 > (−46.67 + 60) / 24.04)
    tost_r = float(sps.t.sf((-40 / 3 + 60) / (20 / 3 / math.sqrt(3) * math.sqrt(3)), 2))
    tost_g = float(sps.t.sf((-140 / 3 + 60) / (math.sqrt(5200 / 3) / math.sqrt(3)), 2))
    assert r.p_tost_holm == pytest.approx(2 * tost_r) and g.p_tost_holm == pytest.approx(tost_g)
    assert claims.escape_call(r) == "equivalent within ±60"
    assert claims.escape_call(g).startswith("inconclusive (Δ < 0; detectable ≥ ") and claims.escape_call(g).endswith(" steps)")
