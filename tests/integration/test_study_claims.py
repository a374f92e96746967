"""`rbctl report STUDY.yaml` (rbctl.report.study) on hand-made sweep directories (4 problems × n = 4,
3 seeds): families read from the sweep files or declared by the study, each claim called by its
rule, and every number below worked out by hand from the counts."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest
import scipy.stats as sps
import yaml

from rbctl.algo.sharpness import finite_g_check, kappa_by_k
from rbctl.errors import UserError
from rbctl.report import study as claims
from rbctl.report.analyses.comparisons import EQUIVALENT, HIGHER, INCONCLUSIVE, call
from rbctl.report.power import mde_paired
from rbctl.report.study.families import families, match_pairs
from rbctl.report.study.association import association
from rbctl.report.study.rules import decide, Reading
from tests.integration.hand_runs import write_run, write_sweep_files

REPO = Path(__file__).resolve().parents[2]
N = 4
# arm -> (estimator, budget, entropy mode, variant); correct of n = 4 on problems p0..p3 per seed 0, 1, 2
ARMS = {
    "grpo": ("grpo", None, "none", "base"),
    "grpo_budget": ("grpo", 1.0, "none", "budget"),
    "grpo_entropy": ("grpo", None, "static", "entropy_static"),
    "rloo": ("rloo", None, "none", "base"),
    "rloo_budget": ("rloo", 1.0, "none", "budget"),
    "grpo_entropy_static": ("grpo", None, "static", "entropy_static"),
    "grpo_entropy_adaptive": ("grpo", None, "adaptive", "entropy_adaptive"),
}
# avg@4 per seed:                        Δ budget − base per seed
#   grpo         .25   .3125 .375
#   grpo_budget  .5    .5625 .6875        .25, .25, .3125  -> mean .2708, sd .0361, t 13.0, 2 df, p .0059
#   grpo_entropy .3125 .3125 .3125        (− grpo: +.0625, 0, −.0625)
#   rloo         .375  .4375 .4375
#   rloo_budget  .375  .4375 .5           0, 0, .0625      -> mean .0208, sd .0361, t 1.0, p .4226
#   grpo_entropy_adaptive .5625 .625 .6875 (− grpo_budget: .0625, .0625, 0: mean .0417, t 2.0, p .1835)
CORRECT = {
    "grpo": ([4, 0, 0, 0], [4, 1, 0, 0], [4, 2, 0, 0]),
    "grpo_budget": ([4, 4, 0, 0], [4, 4, 1, 0], [4, 4, 2, 1]),
    "grpo_entropy": ([4, 1, 0, 0], [4, 1, 0, 0], [4, 1, 0, 0]),
    "rloo": ([4, 2, 0, 0], [4, 2, 1, 0], [4, 3, 0, 0]),
    "rloo_budget": ([4, 2, 0, 0], [4, 2, 1, 0], [4, 2, 1, 1]),
}
QUICK = {"grpo_budget": CORRECT["grpo_budget"], "grpo_entropy_static": CORRECT["grpo_entropy"],
         "grpo_entropy_adaptive": ([4, 4, 1, 0], [4, 4, 2, 0], [4, 4, 2, 1])}
# entropy logged at steps 1..4 (0.6 at step 1, then this): the last quarter is step 4's value; per seed
# an entropy arm adds 0.05·seed and a budget arm loses 0.01·seed, so their Δs differ between seeds (testable)
ENTROPY = {"grpo": 0.10, "grpo_budget": 0.05, "grpo_entropy": 0.20, "rloo": 0.12, "rloo_budget": 0.06,
           "grpo_entropy_static": 0.20, "grpo_entropy_adaptive": 0.30}


def entropy_of(arm: str, seed: int) -> float:
    _, budget, mode, _ = ARMS[arm]
    return ENTROPY[arm] + (0.05 * seed if mode != "none" else 0.0) - (0.01 * seed if budget else 0.0)


def make_sweep(root: Path, correct: dict, comparisons: dict | None, steps: int = 4, periodic: dict | None = None,
               ceiling: float | None = None, kappa=lambda arm, seed: 0.0) -> Path:
    keys = []
    for arm, per_seed in correct.items():
        estimator, budget, mode, variant = ARMS[arm]
        for seed, c in enumerate(per_seed):
            cfg = {"seed": seed, "steps": steps, "rollout": {"group_size": 8, "prompts_per_step": 16},
                   "algo": {"estimator": estimator, "budget": budget, "entropy": {"mode": mode},
                            "loss_agg": "seq-mean-token-sum-norm" if estimator == "dr_grpo" else "token-mean"}}
            # κ_eff at steps 1..4 (plus ``kappa``'s shift) and the share of mixed prompts; the early quarter is step 1
            metrics = [{"step": s, "entropy": (0.6 if s == 1 else entropy_of(arm, seed)),
                        "kappa_eff": 1.0 + 0.1 * s + 0.01 * seed + kappa(arm, seed), "groups/frac_mixed": 0.5}
                       for s in range(1, steps + 1)]
            write_run(root / "runs" / arm / f"seed_{seed}", cfg=cfg, metrics=metrics, steps=steps, correct=c, n=N,
                      meta={"arm": arm, "seed": seed, "sweep": "s", "baseline": estimator, "variant": variant},
                      evals=(periodic or {}).get((arm, seed), []))
            keys.append(f"{arm}/seed_{seed}")
    sweep = {"name": "s", "seeds": [0, 1, 2], "arms": {a: {} for a in correct}, "eval": {"benchmarks": ["builtin"], "n": N}}
    if comparisons is not None:
        sweep["comparisons"] = {"metric": "avg@n", "mde": 10.0, "planning_sd": 3.5, **comparisons}
    write_sweep_files(root, keys, sweep)
    if ceiling is not None:
        (root / "ceiling.json").write_text(json.dumps({"value": ceiling, "source": "stated in the test"}))
    return root


BUDGET = [["grpo_budget", "grpo"], ["rloo_budget", "rloo"]]
FAMILIES = {"entropy_vs_base": {"pairs": [["grpo_entropy", "grpo"]]}}
# periodic evaluations: GRPO at step 3 equals its final level (stalled), far below a 0.98 ceiling, and its
# entropy falls from 0.6 to 0.1 (< 0.6 / 3): the plateau test holds for plain GRPO
PLATEAU = {("grpo", s): [{"step": 0, "avg@n": 0.2}, {"step": 3, "avg@n": v}] for s, v in enumerate((0.25, 0.3125, 0.375))}
# RLOO's too, at its final level: "stalled" needs two evaluations in the last quarter (steps 3 and 4), never one
PLATEAU.update({("rloo", s): [{"step": 0, "avg@n": 0.2}, {"step": 3, "avg@n": v}]
                for s, v in enumerate((0.375, 0.4375, 0.4375))})
STUDY_FAMILIES = {"budget": {"members": ["{X}_budget − {X}"], "declared": "principal"},
                  "entropy_vs_base": {"members": ["{X}_entropy − {X}"], "declared": "entropy_vs_base"},
                  "budget_entropy": {"members": ["{X}_budget − {X}"], "metric": "last_quarter:entropy"}}
SEVERAL = {"hypothesis": "The budget improves several baselines",
           "rule": {"kind": "calls", "family": "budget", "support": "higher", "count": 2, "contradict": ["lower"]}}


def study_file(tmp_path: Path, margin: float | None = None, ceiling: float | None = 0.98, long: bool = False,
               claims_: dict | None = None, fams: dict | None = None) -> Path:
    comps = {"principal": BUDGET, "families": FAMILIES, **({"margin": margin} if margin else {})}
    fix = make_sweep(tmp_path / "fix", CORRECT, comps, periodic=PLATEAU, ceiling=ceiling)
    study = {"name": "toy", "testbeds": {"fixpoint": str(fix)}, "families": fams or STUDY_FAMILIES,
             "claims": claims_ if claims_ is not None else {"a": SEVERAL}, "readme": "budget"}
    if long:
        study["long"] = {"fixpoint": {"name": "fixpoint_long", "dir": str(long_sweep(tmp_path / "long", 20.0)), "main_step": 100}}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study, allow_unicode=True))
    return path


def p_two_sided(deltas) -> float:
    return float(sps.ttest_1samp(deltas, 0.0).pvalue)


def long_sweep(root: Path, margin: float) -> Path:
    arms = ("grpo", "grpo_budget")
    # periodic avg@n at step 100: Δ .30, .27, .30 (t ≈ 29 on 2 df); final (step 400): Δ +1/16, −1/16, +1/16
    at100 = {"grpo": (0.5, 0.55, 0.6), "grpo_budget": (0.8, 0.82, 0.9)}
    periodic = {(a, s): [{"step": 0, "avg@n": 0.4}, {"step": 100, "avg@n": at100[a][s]}, {"step": 400, "avg@n": 0.95}]
                for a in arms for s in range(3)}
    correct = {"grpo": ([4, 4, 4, 3], [4, 4, 4, 4], [4, 4, 3, 4]), "grpo_budget": ([4, 4, 4, 4], [4, 4, 4, 3], [4, 4, 4, 4])}
    return make_sweep(root, correct, {"principal": [["grpo_budget", "grpo"]], "margin": margin}, steps=400,
                      periodic=periodic)


def test_a_pattern_binds_the_same_text_on_both_sides() -> None:
    arms = ["grpo", "grpo_budget", "rloo", "rloo_budget", "grpo_entropy_static", "maxrl"]
    assert match_pairs(["{X}_budget − {X}"], arms) == [("grpo_budget", "grpo", "grpo"), ("rloo_budget", "rloo", "rloo")]
    assert match_pairs(["grpo_entropy_{m} - grpo_budget"], arms) == [("grpo_entropy_static", "grpo_budget", "static")]
    assert match_pairs(["maxrl − grpo"], arms) == [("maxrl", "grpo", "")]
    with pytest.raises(UserError, match="wildcard"):
        match_pairs(["grpo − {X}"], arms)


def test_the_budget_family_is_the_sweep_files_and_a_claim_reads_its_calls(tmp_path: Path) -> None:
    study = claims.load_study(study_file(tmp_path), n_boot=50)
    fam = families(study)["budget"]
    grpo, rloo = (m.comparison for m in fam.members)
    p_grpo, p_rloo = p_two_sided([0.25, 0.25, 0.3125]), p_two_sided([0.0, 0.0, 0.0625])
    assert grpo.p_holm == pytest.approx(2 * p_grpo) and rloo.p_holm == pytest.approx(p_rloo)  # the sweep's Holm over 2
    assert [call(grpo), call(rloo)] == [HIGHER, INCONCLUSIVE]
    assert [m.binding for m in fam.members] == ["grpo", "rloo"]
    # rloo's detectable effect: power 0.8 at α/2 with its 3 units and sd(Δ) = .0361
    assert rloo.detectable == pytest.approx(mde_paired(0.0625 / math.sqrt(3), 3, 0.025, 0.8), rel=1e-9)
    doc = claims.claims_markdown(study, command="rbctl report study.yaml")
    # "several": 2 members higher needed, 1 is (GRPO, Holm p 2 × .0059 = .012), RLOO inconclusive
    assert ("**inconclusive**: 1 of the 2 needed members called higher; 1 inconclusive" in doc)
    assert "| fixpoint | grpo_budget − grpo | 3 | 31.2 | 58.3 | +27.1 [" in doc and "| Holm p 0.012 |" in doc
    assert "- fixpoint rloo_budget − rloo: inconclusive (Δ > 0; detectable ≥ " in doc
    assert "no difference" not in doc and "nothing" not in doc and "no effect" not in doc
    assert "token-mean" in doc and "at most 2α" in doc


def test_the_p_beside_an_equivalent_call_is_the_tost_p_that_decided_it(tmp_path: Path) -> None:
    # margin 15 points: rloo's TOST p = P(T2 < (.0208 − .15)/.0208) = 0.0125, Holm over 2 -> 0.025: equivalent
    study = claims.load_study(study_file(tmp_path, margin=15.0), n_boot=50)
    grpo, rloo = (m.comparison for m in families(study)["budget"].members)
    se = 0.0625 / math.sqrt(3) / math.sqrt(3)
    p_up = sps.t.cdf((0.0625 / 3 - 0.15) / se, 2)
    assert rloo.p_tost_holm == pytest.approx(2 * p_up, rel=1e-9) and call(rloo) == EQUIVALENT and call(grpo) == HIGHER
    block = claims.readme_block(study)
    # its superiority Holm p (.423) is not the one printed: the TOST Holm p 0.025 decided "equivalent"
    assert "- **rloo_budget − rloo** — fixpoint equivalent within ±15 (+2.1 [-6.9, +11.0], TOST Holm p 0.025)" in block
    assert "- **grpo_budget − grpo** — fixpoint higher (+27.1 [+18.1, +36.0], Holm p 0.012)" in block
    doc = claims.claims_markdown(study)
    # an equivalent member is neither "higher" support nor "lower" contradiction: named as its own finding
    assert ("fixpoint rloo_budget − rloo is called equivalent: a finding of its own, neither support nor "
            "contradiction") in doc


def outcome_claims() -> dict:
    calls = lambda members, support, **kw: {"kind": "calls", "family": "budget", "members": members,  # noqa: E731
                                            "support": support, **kw}
    return {
        # GRPO + budget − GRPO: higher (Holm p .012)
        "s": {"hypothesis": "The budget raises GRPO", "rule": calls(["grpo_budget − grpo"], "higher")},
        "c": {"hypothesis": "The budget lowers GRPO", "rule": calls(["grpo_budget − grpo"], "lower")},
        # RLOO: Δ +.0208, Holm p .423, no margin: inconclusive
        "i": {"hypothesis": "The budget raises RLOO", "rule": calls(["rloo_budget − rloo"], "higher")},
        # both budget arms lowered entropy (Δ −.06 nats): "raised entropy" holds for no member
        "n": {"hypothesis": "Where the budget keeps entropy up it raises pass@1",
              "rule": calls(None, "higher", applies_if={"raised": "entropy"})},
        # the budget's last-quarter entropy below X's where the budget is higher (GRPO only)
        "e": {"hypothesis": "The budget's gains come without preserving entropy",
              "rule": {"kind": "calls", "family": "budget_entropy", "support": "lower",
                       "applies_if": {"called_in": "budget", "called": "higher"}}},
    }


def test_each_rule_outcome_comes_out_of_a_hand_made_study(tmp_path: Path) -> None:
    study = claims.load_study(study_file(tmp_path, claims_=outcome_claims()), n_boot=50)
    fams = families(study)
    from rbctl.report.study.rules import apply_rule

    v = {cid: apply_rule(c, study, fams) for cid, c in study.config.claims.items()}
    assert {cid: x.outcome for cid, x in v.items()} == {"s": "supported", "c": "contradicted", "i": "inconclusive",
                                                       "n": "not applicable", "e": "supported"}
    assert v["s"].reason == "1 of 1 applicable members called higher (1 needed)"
    assert v["c"].reason == "fixpoint grpo_budget − grpo is called higher"
    assert v["i"].reason == "0 of the 1 needed members called higher; 1 inconclusive"
    # entropy Δ per seed: (.05 − .01 s) − .10 = −.05, −.06, −.07: mean −.06, sd .01, t = −10.39 on 2 df, p .0091
    p_ent = p_two_sided([-0.05, -0.06, -0.07])
    assert p_ent == pytest.approx(2 * sps.t.sf(0.06 / (0.01 / math.sqrt(3)), 2))
    # a test that did not reject is "not shown to rise", never "not raised"
    assert v["n"].reason.startswith("no member applies (fixpoint grpo_budget − grpo: entropy not shown to rise: entropy "
                                    f"Δ -0.060 (paired t-test p {p_ent:.3f}, 3 units, unadjusted)")
    assert "not raised" not in v["n"].reason
    # (c)'s rule reads GRPO only (RLOO's budget is not called higher); the family's Holm over both members: RLOO's
    # entropy Δ (.06 − .01 s) − .12 = −.06, −.07, −.08 (t −12.1) has the smaller p, so GRPO's Holm p is
    # max(2 p_rloo, p_grpo) = 2 p_rloo
    grpo_e = fams["budget_entropy"].members[0].comparison
    p_rloo_e = p_two_sided([-0.06, -0.07, -0.08])
    assert grpo_e.p_holm == pytest.approx(max(2 * p_rloo_e, p_ent)) == pytest.approx(2 * p_rloo_e)
    assert call(grpo_e) == "lower"
    assert [r.call for r in v["e"].readings] == ["lower", None]
    assert v["e"].readings[1].why == "called inconclusive (Δ > 0; detectable ≥ " + \
        f"{100 * fams['budget'].members[1].comparison.detectable:.1f} points) in `budget`, not higher"
    doc = claims.claims_markdown(study)
    assert "Rule: family `budget` (rloo_budget − rloo): supported when every applicable member is called higher; " \
           "contradicted when any is called lower; else inconclusive." in doc


def test_decide_counts_members_sharing_runs_once() -> None:
    r = lambda where, c, g: Reading(where, c, "", g)  # noqa: E731
    # two readings of one group (the same runs on a testbed and its long horizon) and one other
    rs = [r("a", "higher", "g1"), r("a_long", "higher", "g1"), r("b", "inconclusive", "g2")]
    assert decide(rs, "higher", 2, ["lower"])[0] == "inconclusive"  # 1 group of the 2 needed
    assert decide(rs[:2], "higher", 2, ["lower"]) == ("not applicable", "the rule needs 2 applicable members (runs "
                                                      "shared count once); 1 apply")
    assert decide(rs, "higher", 1, ["lower"])[0] == "supported"
    # a group counts as support only when every reading of it supports
    assert decide([r("a", "higher", "g1"), r("a_long", "inconclusive", "g1")], "higher", "all", [])[0] == "inconclusive"


def test_raising_entropy_is_read_only_where_the_plateau_holds_and_the_bonus_raised_it(tmp_path: Path) -> None:
    b = {"hypothesis": "Raising entropy does not reliably move the plateau",
         "rule": {"kind": "calls", "family": "entropy_vs_base", "support": "equivalent", "contradict": ["higher"],
                  "applies_if": {"plateau": True, "raised": "entropy"}}}
    study = claims.load_study(study_file(tmp_path, claims_={"b": b}), n_boot=50)
    (tb,) = study.testbeds
    assert tb.plateau_held("grpo")  # stalled (change 0), 98 − 31.25 ≥ 15 points below, entropy 0.1 < 0.6/3
    doc = claims.claims_markdown(study)
    # entropy Δ per seed: .20 − .10, .25 − .10, .30 − .10 = .10, .15, .20: mean .15, t 5.2 on 2 df, p .035;
    # Δ pass@1: +.0625, 0, −.0625: inconclusive, so "does not move" is not shown
    assert "- fixpoint grpo_entropy − grpo: inconclusive (Δ = 0; detectable ≥ " in doc
    assert "entropy Δ +0.150 (paired t-test p 0.035, 3 units, unadjusted)" in doc
    assert "Call: **inconclusive** — 0 of the 1 needed members called equivalent; 1 inconclusive." in doc
    # without a stated ceiling the plateau test cannot hold: not applicable
    other = claims.load_study(study_file(tmp_path / "no_ceiling", ceiling=None, claims_={"b": b}), n_boot=50)
    doc = claims.claims_markdown(other)
    assert ("Call: **not applicable** — no member applies (fixpoint grpo_entropy − grpo: no stated ceiling, so the "
            "plateau test cannot hold).") in doc


def test_within_arm_association_by_hand() -> None:
    # three arms × three runs sharing no unit; within arms x − x̄_arm = (−1, 0, 1) in each arm, y − ȳ_arm = (−1, 1, 0),
    # (−.5, .5, 0), (−.5, 0, .5): Σxy = 1 + .5 + 1 = 2.5, Σx² = 6, Σy² = 3, r = 2.5/√18 = .5893. The test permutes y
    # within each arm (6³ = 216 orderings): over an arm's 6 orderings x·y takes a: 2, 1, 1, −1, −1, −2; b: half a's;
    # c: 1, .5, .5, −.5, −.5, −1. Sums ≥ 2.5: a = 2 with b + c ≥ .5 (13 of 36), a = 1 (2 ways) with b + c ≥ 1.5
    # (5 each): 23; by symmetry 23 more ≤ −2.5: p = 46/216
    x = [1, 2, 3, 10, 11, 12, 5, 6, 7]
    y = [1, 3, 2, 0, 1, 0.5, 4, 4.5, 5]
    arms = ["a"] * 3 + ["b"] * 3 + ["c"] * 3
    c = association(x, y, arms, "within_arm")
    assert (c.r, c.p, c.orderings) == (pytest.approx(2.5 / math.sqrt(18)), pytest.approx(46 / 216), 216)
    # arm means (2, 11, 6) and (2, .5, 4.5): Σdxdy = −7.833, Σdx² = 40.67, Σdy² = 8.167, r = −.4298 on 1 df
    m = association(x, y, arms, "arm_means")
    assert (m.r, m.df) == (pytest.approx(-7.8333 / math.sqrt(40.6667 * 8.1667), rel=1e-4), 1)


def test_association_between_arms_only_is_not_shown_within_arms(tmp_path: Path) -> None:
    # κ_eff's arm means are −10 × the arm's mean pass@1 (r = −1 over the 5 arm means); within arms its seed
    # pattern is (0, .01, 0) (make_sweep's 0.01·seed taken out), centred (−1/300, 2/300, −1/300), against pass@1
    # centred per arm: grpo (−1/16, 0, 1/16) → 0; grpo_budget (−.0833, −.0208, .1042) → −.000208; grpo_entropy 0;
    # rloo (−.0417, .0208, .0208) → +.000208; rloo_budget (−1/16, 0, 1/16) → 0: Σxy = 0, r = 0. Permuted over the
    # 3 units' 6 orderings no p can fall below 1/6 > α: not testable, and said why
    level = {a: np.mean([sum(c) / 16 for c in per]) for a, per in CORRECT.items()}
    fix = make_sweep(tmp_path / "fix", CORRECT, {"principal": BUDGET},
                     kappa=lambda arm, seed: -10 * level[arm] - 0.01 * seed + (0.01 if seed == 1 else 0.0))
    e = {"hypothesis": "Early κ_eff predicts a lower final level",
         "rule": {"kind": "association", "predictor": "kappa_eff", "sign": "negative", "unit": "within_arm"}}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({"testbeds": {"fixpoint": str(fix)}, "claims": {"e": e}}))
    study = claims.load_study(path, n_boot=50)
    from rbctl.report.study.association import association_reading
    from rbctl.report.study.rules import apply_rule

    v = apply_rule(study.config.claims["e"], study, {})
    row = v.table.iloc[0]
    assert (row["blocks"], row["orderings"], row["level"]) == (3, 6, "unit") and math.isnan(row["p"])
    assert abs(row["r"]) < 1e-6 and row["other_r"] == pytest.approx(-1.0)
    assert v.readings[0].text == ("not testable: r +0.00 over 3 units, whose 6 orderings cannot give a p below 0.17 > "
                                  "α 0.05")
    # with units enough: an inconclusive test within arms beside a significant r over the arm means is said to be
    # shown across the arms' means only
    shown = row.copy()
    shown["p"], shown["p_holm"], shown["orderings"], shown["other_p"] = 0.4, 0.4, 120, 0.001
    word, text, apart = association_reading(shown, study.config.claims["e"].rule)
    assert (word, apart) == ("inconclusive", True) and text.endswith(
        "— across the arms' means only (unadjusted, and that test holds α only where the arms' means are about "
        "equally noisy): within arms it is inconclusive")
    # the same data read on the arm means: significant, negative, and said to carry the arms' effects
    e["rule"]["unit"] = "arm_means"
    path.write_text(yaml.safe_dump({"testbeds": {"fixpoint": str(fix)}, "claims": {"e": e}}))
    study = claims.load_study(path, n_boot=50)
    v = apply_rule(study.config.claims["e"], study, {})
    assert v.outcome == "supported" and "the arms' own effects on both are part of it" in v.readings[0].text


def test_no_baseline_arm_variant_claim_letter_or_paper_table_is_named_in_the_report_code() -> None:
    found = subprocess.run(["grep", "-rnE", "claim_[a-g]|BASELINES|entropy_static|maxrl_maze_paper", "rbctl/report"],
                           cwd=REPO, capture_output=True, text=True)
    assert found.returncode == 1 and found.stdout == "", found.stdout


def walk_sweep(tmp_path: Path) -> Path:
    periodic = {(a, s): [{"step": 20 * i, "avg@n": 0.3, "label/strategy/walk": w} for i, w in enumerate(ws)]
                for a, per_seed in WALK.items() for s, ws in enumerate(per_seed)}
    return make_sweep(tmp_path / "fix", {a: CORRECT[a] for a in WALK}, {"principal": BUDGET}, steps=100,
                      periodic=periodic)


# held-out walk share at steps 0, 20, …, 100 per seed; an escape lasts 2 more evaluations (hold 2)
WALK = {"grpo": ([.1, .1, .1, .1, .1, .6], [.1] * 6, [.1, .1, .1, .6, .6, .6]),  # censored, censored, 60
        "grpo_budget": ([.1, .6, .6, .6, .6, .6], [.1, .1, .6, .6, .6, .6], [.1, .6, .1, .6, .6, .6]),  # 20, 40, 60
        "rloo": ([.1, .1, .6, .6, .6, .6],) * 3,  # 40, 40, 40
        "rloo_budget": ([.1, .6, .6, .6, .6, .6], [.1, .6, .6, .6, .6, .6], [.1, .1, .6, .6, .6, .6])}  # 20, 20, 40
ESCAPE = {"members": ["{X}_budget − {X}"], "metric": "escape", "margin": 60,
          "escape": {"metric": "label/strategy/walk", "threshold": 0.5, "signal": "eval", "hold": 2}}


def test_escape_is_a_study_family_in_restricted_steps_and_an_unheld_crossing_is_censored(tmp_path: Path) -> None:
    fix = walk_sweep(tmp_path)
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({"name": "toy", "testbeds": {"fixpoint": str(fix)}, "families": {"escape": ESCAPE}},
                                   allow_unicode=True))
    study = claims.load_study(path, n_boot=50)
    members = {m.comparison.arm: m for m in families(study)["escape"].members}
    g, r = members["grpo_budget"].comparison, members["rloo_budget"].comparison
    # GRPO: seed 0 crosses at 100, the last evaluation, with no 2 evaluations after it: censored at 100 (τ), not
    # an escape; Δ = 20 − 100, 40 − 100, 60 − 60; RLOO: −20, −20, 0
    assert g.delta.deltas == pytest.approx((-80.0, -60.0, 0.0)) and r.delta.deltas == pytest.approx((-20.0, -20.0, 0.0))
    assert (g.ref_score, g.arm_score, members["grpo_budget"].extra["tau"]) == pytest.approx((260 / 3, 40.0, 100.0))
    assert (members["grpo_budget"].extra["escaped_ref"], members["grpo_budget"].extra["escaped_arm"]) == (1, 3)
    p_g, p_r = p_two_sided([-80, -60, 0]), p_two_sided([-20, -20, 0])
    assert sorted([g.p_holm, r.p_holm]) == pytest.approx([2 * min(p_g, p_r), max(2 * min(p_g, p_r), p_g, p_r)])  # Holm, m = 2
    # TOST at ±60: RLOO's p = P(T2 > (−13.33 + 60) / 6.667) = P(T2 > 7.0); GRPO's P(T2 > (−46.67 + 60) / 24.04)
    tost_r = float(sps.t.sf((-40 / 3 + 60) / (20 / 3 / math.sqrt(3) * math.sqrt(3)), 2))
    tost_g = float(sps.t.sf((-140 / 3 + 60) / (math.sqrt(5200 / 3) / math.sqrt(3)), 2))
    assert r.p_tost_holm == pytest.approx(2 * tost_r) and g.p_tost_holm == pytest.approx(tost_g)
    doc = claims.claims_markdown(study)
    assert "| equivalent within ±60 |" in doc and "| 1 / 3 of 3 | 100 |" in doc


def test_members_on_a_testbed_and_its_long_horizon_share_runs_and_are_marked_dependent(tmp_path: Path) -> None:
    fams = {**STUDY_FAMILIES, "final": {"members": ["grpo_budget − grpo"], "sweeps": ["fixpoint", "fixpoint_long"],
                                        "metric": "avg@n"}}
    study = claims.load_study(study_file(tmp_path, long=True, fams=fams), n_boot=50)
    fix, long = families(study)["final"].members
    # the long sweep's runs have the testbed's config but for steps: the same runs up to step 4
    assert fix.group == long.group
    assert fix.shares == "dependent: shares its runs with fixpoint_long grpo_budget − grpo up to step 4"
    # a cosine schedule over the run's own steps: the learning rate differs from step 1, not the same runs
    from rbctl.report.study.families import _identity

    short, longer = study.testbeds[0].data.sweep.by_arm["grpo"][0], study.long[0][0].data.sweep.by_arm["grpo"][0]
    assert _identity(short) == _identity(longer)
    for r in (short, longer):
        r.config["optim"] = {"schedule": "cosine", "schedule_steps": None}
    assert _identity(short) != _identity(longer)


def test_the_quickstart_study_writes_its_own_claims_document(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    make_sweep(tmp_path / "runs" / "ablate_quickstart", QUICK, None)
    study = tmp_path / "study_quickstart.yaml"
    study.write_text((REPO / "configs" / "study_quickstart.yaml").read_text())
    path = claims.make_study_report(study, n_boot=50)
    assert path == Path("runs") / "study_quickstart" / "claims.md"
    doc = path.read_text()
    assert doc.startswith("# study_quickstart: the study's claims")
    # adaptive − budget: Δ .0625, .0625, 0 (mean 4.2 points, t 2.0, p .184; Holm over 2 members); its entropy Δ
    # (.30 + .05 s) − (.05 − .01 s) = .25, .31, .37 (t 8.95, p .012): the bonus did raise entropy, so the claim reads it
    assert "### (adaptive-beats-budget) An adaptive entropy bonus beats GRPO + budget on held-out pass@1" in doc
    assert "- quickstart grpo_entropy_adaptive − grpo_budget: inconclusive (Δ > 0; detectable ≥ " in doc
    assert "Call: **inconclusive** — 0 of the 1 needed members called higher; 1 inconclusive." in doc
    # static: (.20 + .05 s) − (.05 − .01 s) = .15, .21, .27 (p .026); Holm over the two: .012 × 2 = .025, .026
    p_a, p_s = p_two_sided([0.25, 0.31, 0.37]), p_two_sided([0.15, 0.21, 0.27])
    fams = families(claims.load_study(study, n_boot=50))
    assert sorted(m.comparison.p_holm for m in fams["bonus_entropy"].members) == pytest.approx(sorted([2 * p_a, p_s]))
    assert "### (bonus-keeps-entropy) " in doc and "Call: **supported** — 2 of 2 applicable members called higher" in doc


def test_the_plateau_test_of_every_plain_baseline(tmp_path: Path) -> None:
    study = claims.load_study(study_file(tmp_path), n_boot=50)
    p = study.testbeds[0].data.plateau
    # the plain arms only: no budget, no bonus
    assert list(p.plain) == ["grpo", "rloo"]
    rloo = p.plain["rloo"]
    # rloo: final pass@1 41.67 (seeds .375, .4375, .4375), 98 − 41.67 = 56.33 points below; entropy .12 of .6
    assert rloo.below_ceiling.value == pytest.approx(98 - 100 * (0.375 + 0.4375 + 0.4375) / 3)
    assert rloo.entropy_collapsed.value == pytest.approx(0.12) and p.held_for("rloo")
    from rbctl.report.study.claims_document import plateau_rows

    rows = plateau_rows(list(study.testbeds))
    assert list(rows["arm"]) == ["grpo", "rloo"] and list(rows["plateau"]) == ["holds", "holds"]
    assert "56.3 points" in rows["below the ceiling"][1]




def test_the_setting_is_checked_against_the_rule_on_plain_arms(tmp_path: Path) -> None:
    path = study_file(tmp_path)
    study_yaml = yaml.safe_load(path.read_text())
    # the testbed's own sweep stands in for a settings sweep: its plain arms grpo and rloo both plateau,
    # both with a last-quarter change of 0 points, so the rule keeps the first by name
    study_yaml["selection"] = {"fixpoint": {"dir": study_yaml["testbeds"]["fixpoint"], "rule": "plateau", "kept": "rloo"}}
    path.write_text(yaml.safe_dump(study_yaml))
    study = claims.load_study(path, n_boot=50)
    from rbctl.report.study.claims_document import selection_lines

    doc = "\n".join(selection_lines(study))
    assert "### How the fixpoint setting was chosen" in doc
    # the guard: final (25 + 31.25 + 37.5)/3 = 31.25 − step 0's 20 = +11.25 points (printed 11.2)
    assert "| grpo | 3 | 0.00 ✓ | 66.8 ✓ | 0.100 ✓ | 11.2 ✓ | holds |" in doc
    assert "never one whose plain arm ended at or below its step-0 pass@1 (diverged)" in doc
    assert "The rule keeps **grpo**; the study file states `rloo` — **they differ**" in doc




def test_a_study_with_unfinished_sweeps_documents_the_finished_ones_and_names_the_rest(tmp_path: Path) -> None:
    path = study_file(tmp_path)
    study_yaml = yaml.safe_load(path.read_text())
    study_yaml["testbeds"]["maze"] = str(tmp_path / "not_run")  # no directory yet
    study_yaml["long"] = {"fixpoint": {"name": "fixpoint_long", "dir": str(tmp_path / "long_half"), "main_step": 100}}
    half = tmp_path / "long_half"
    half.mkdir()
    (half / "state.json").write_text(json.dumps({"runs": {"grpo/seed_0": {"status": "done", "error": None},
                                                          "grpo/seed_1": {"status": "pending", "error": None}}}))
    path.write_text(yaml.safe_dump(study_yaml))
    study = claims.load_study(path, n_boot=50)
    assert [tb.name for tb in study.testbeds] == ["fixpoint"] and study.long == ()
    assert study.pending == (("testbed maze", f"`{tmp_path / 'not_run'}` does not exist yet"),
                             ("long horizon fixpoint_long", f"`{half}`: 1 of 2 runs finished"))
    doc = claims.claims_markdown(study, command="rbctl report study.yaml")
    assert "Not in this document yet (the study file names them; each sweep resumes where it stopped): testbed maze" in doc
    assert claims.readme_block(study).endswith(f"- Not in these lines yet: testbed maze (`{tmp_path / 'not_run'}` does "
                                              f"not exist yet); long horizon fixpoint_long (`{half}`: 1 of 2 runs finished)")
    # a sweep directory the study's declaration made before its sweep ran (only study_history/): no runs yet
    from rbctl.report.study.sweeps import unfinished

    (tmp_path / "declared_only" / "study_history").mkdir(parents=True)
    assert unfinished(tmp_path / "declared_only") == f"`{tmp_path / 'declared_only'}` has no runs yet"
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




def test_kappa_falls_with_k_under_the_budget_and_the_finite_g_identity() -> None:
    k = kappa_by_k(g=8)
    assert [r["grpo + budget"] for r in k] == pytest.approx([1 / K for K in range(1, 8)], rel=1e-6)
    assert [r["dr_grpo"] for r in k] == pytest.approx([1.0] * 7, rel=1e-6)
    assert [r["rloo + budget"] for r in k] == pytest.approx([8 / 7 / K for K in range(1, 8)], rel=1e-6)
    # GRPO: 1/σ̂ with the unbiased std, K = 4 of 8: sqrt(8/7 · 1/4) = 0.5345 -> 1.8708
    assert k[3]["grpo"] == pytest.approx(1 / math.sqrt(8 / 7 * 0.25), rel=1e-5)
    worst, best = finite_g_check(g=6)
    assert worst < 1e-6 < 1e-3 < best



def test_a_study_names_its_own_exact_checks_in_a_python_file(tmp_path: Path) -> None:
    from rbctl.report.study.rules import apply_rule

    (tmp_path / "my_checks.py").write_text(
        "def sums_to_one():\n"
        "    \"\"\"Three thirds make one.\"\"\"\n"
        "    return '1/3 + 1/3 + 1/3 = 1', abs(3 * (1 / 3) - 1) < 1e-12, None\n")
    rules = {"own": {"kind": "exact", "check": "sums_to_one"}, "builtin": {"kind": "exact", "check": "finite_g_gradient"},
             "missing": {"kind": "exact", "check": "nowhere"}}
    path = study_file(tmp_path, claims_={k: {"hypothesis": k, "rule": r} for k, r in rules.items()})
    data = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**data, "checks": "my_checks.py"}, allow_unicode=True))
    study = claims.load_study(path, n_boot=50)
    own = apply_rule(study.config.claims["own"], study, {})
    assert (own.outcome, own.reason, own.rule) == ("supported", "1/3 + 1/3 + 1/3 = 1", "exact check `sums_to_one`: Three thirds make one")
    assert apply_rule(study.config.claims["builtin"], study, {}).outcome == "supported"  # rbctl's own, by name
    with pytest.raises(UserError, match=r"exact check 'nowhere' is neither a function of .*my_checks.py or one of finite_g_gradient"):
        apply_rule(study.config.claims["missing"], study, {})
    path.write_text(yaml.safe_dump({**data, "long": {"fixpoint": {"name": "fixpoint", "dir": "x", "main_step": 1}}},
                                   allow_unicode=True))
    with pytest.raises(UserError, match="sweep name fixpoint given to more than one sweep"):
        claims.load_study(path, n_boot=50)




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





@pytest.mark.parametrize("margin, said", [
    # final Δ mean .0208, sd .0722, se .0417 on 2 df: TOST p at ±20 = P(T2 < (.0208 − .2)/.0417) = 0.025: equivalent
    (20.0, "**faster, same final level**."),
    # at ±10, P(T2 < −1.9) = 0.098: not shown equivalent with 3 units, so the sentence says so
    (10.0, "**ahead at the horizon; final level inconclusive (Δ > 0; detectable ≥ "),
])
def test_faster_only_from_a_declared_family_at_the_horizon(tmp_path: Path, margin: float, said: str) -> None:
    from rbctl.report.study.claims_document import ahead_family
    from rbctl.report.study.long_horizons import long_rows

    fix = make_sweep(tmp_path / "fix", CORRECT, {"principal": BUDGET})
    long = long_sweep(tmp_path / "long", margin)
    ahead = {"members": ["grpo_budget − grpo"], "sweeps": ["fixpoint_long"], "metric": "avg@n", "step": 100}
    study = {"testbeds": {"fixpoint": str(fix)}, "long": {"fixpoint": {"dir": str(long), "main_step": 100, "name": "fixpoint_long"}},
             "families": {"ahead": ahead}}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study, allow_unicode=True))
    s = claims.load_study(path, n_boot=50)
    tb = s.long[0][0]
    # without a family that reads step 100, Δ there (.30, .27, .30: t 29 on 2 df) is exploratory: no "ahead", no "faster"
    rows, (line,) = long_rows(tb, 100, "principal")
    assert line.startswith("fixpoint_long, grpo_budget − grpo: +29.0 [") and "at step 100 (p 0.001, unadjusted, " \
        "exploratory: no declared family reads this step)" in line
    assert ", +2.1 [" in line and "at the final evaluation (step 400), " in line
    assert "faster" not in line and "ahead" not in line and rows.iloc[0]["units"] == 3
    # the study family `ahead` reads the periodic evaluation at step 100 and calls the member higher (Holm over 1)
    study["long"]["fixpoint"]["ahead_family"] = "ahead"
    path.write_text(yaml.safe_dump(study, allow_unicode=True))
    s = claims.load_study(path, n_boot=50)
    fams = families(s)
    (m,) = fams["ahead"].members
    assert m.comparison.delta.deltas == pytest.approx((0.30, 0.27, 0.30)) and call(m.comparison) == HIGHER
    assert m.comparison.p_holm == pytest.approx(p_two_sided([0.30, 0.27, 0.30]))
    _, (line,) = long_rows(s.long[0][0], 100, "principal", ahead_family(s, s.long[0][0], fams))
    assert "; `ahead` higher, Holm p 0.001)" in line and said in line
    # an ahead family that is not at the horizon's step is refused
    study["families"]["ahead"]["step"] = 50
    path.write_text(yaml.safe_dump(study, allow_unicode=True))
    with pytest.raises(UserError, match="ahead_family 'ahead' must be a study family on fixpoint_long whose step is 100"):
        claims.load_study(path)


def test_a_row_prints_the_same_holm_p_in_the_sweeps_report_and_in_the_claims_document(tmp_path: Path) -> None:
    import pandas as pd

    from rbctl.report import make_report

    fams = {**STUDY_FAMILIES, "entropy_vs_base": {"members": ["grpo_entropy − grpo"], "declared": "entropy_vs_base"}}
    study = study_file(tmp_path, margin=15.0, fams=fams)
    claims_doc = claims.claims_markdown(claims.load_study(study, n_boot=50))
    report = make_report([tmp_path / "fix"], tmp_path / "report", n_boot=50)
    verdicts = pd.read_csv(report.parent / "tables" / "verdicts.csv").set_index("arm")
    family = pd.read_csv(report.parent / "tables" / "family_entropy_vs_base.csv").set_index("arm")
    text = report.read_text()
    for arm, p in (("grpo_budget", verdicts.loc["grpo_budget", "p_holm"]), ("rloo_budget", verdicts.loc["rloo_budget", "p_holm"]),
                   ("grpo_entropy", family.loc["grpo_entropy", "p_holm"])):
        cell = f"{p:.3f}" if p >= 0.001 else "< 0.001"
        assert f"| {cell} |" in next(line for line in text.splitlines() if f"| {arm} − " in line and "|" in line)
        row = next(line for line in claims_doc.splitlines() if f"| {arm} − " in line)
        if arm == "rloo_budget":  # equivalent: the TOST Holm p decided it, and that is the p beside the call
            tost = verdicts.loc[arm, "p_tost_holm"]
            assert f"| TOST Holm p {tost:.3f} |" in row and f"| ±15: {tost:.3f} |" in row, row
        else:
            assert f"| Holm p {cell} |" in row, (arm, cell, row)
    # the sweep's report: the declared family is its own section with its calls; no call says "no difference"
    assert "## Declared family: entropy_vs_base" in text and "no difference" not in text
    assert verdicts.loc["rloo_budget", "call"] == "equivalent within ±15"
    assert "| ±15: 0.025 |" in text  # the TOST column of a family with a margin
    power = pd.read_csv(report.parent / "tables" / "power.csv").set_index("comparison")
    from rbctl.report.power import units_for_tost  # at the planning SD 3.5, a family of 2 at α/2, ±15
    assert power.loc["rloo_budget − rloo", "units_tost_planning"] == units_for_tost(3.5, 15.0, 2, 0.8, 0.05)
    assert "power of TOST at ±15 if Δ = 0" in text
    assert "no difference" not in (report.parent / "report.html").read_text()




def test_a_call_over_warm_start_seed_units_says_which_population_it_holds_for(tmp_path: Path) -> None:
    from tests.integration.report_sweeps import make_sweep as make_study_sweep

    sweep = make_study_sweep(tmp_path / "ws", arms=("grpo", "grpo_budget"), seeds=range(3),
                             warm_starts=("ws0", "ws1", "ws2"))
    fam = {"final": {"members": ["grpo_budget − grpo"], "metric": "avg@n", "margin": 5}}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({"testbeds": {"ws": str(sweep)}, "families": fam}, allow_unicode=True))
    (m,) = families(claims.load_study(path, n_boot=50))["final"].members
    assert call(m.comparison) == HIGHER
    # the warm start as the unit: the mean Δ of each warm start's 3 seeds, a t-interval over the 3 means on 2 df
    per_ws = [np.mean([d for (ws, _), d in zip(m.comparison.delta.units, m.comparison.delta.deltas) if ws == w])
              for w in ("ws0", "ws1", "ws2")]
    half = sps.t.ppf(0.975, 2) * np.std(per_ws, ddof=1) / math.sqrt(3)
    from rbctl.report.study.rules import member_text

    text = member_text(m)
    assert (f"holds for these 3 warm starts (units: (warm start, seed)); with the warm start as the unit Δ "
            f"{100 * np.mean(per_ws):+.1f} [{100 * max(np.mean(per_ws) - half, -1):+.1f}, "
            f"{100 * min(np.mean(per_ws) + half, 1):+.1f}]") in text


def test_each_family_and_claim_prints_when_it_was_declared_from_the_records(tmp_path: Path) -> None:
    from rbctl.config.base import read_yaml, validate
    from rbctl.config.study import StudyConfig
    from rbctl.store.history import record_version
    from rbctl.store.rundir import SWEEP_HISTORY, study_history_path

    path = study_file(tmp_path, margin=15.0)  # sweep.yaml: the second version below, the one in force
    fix = tmp_path / "fix"
    design = {"principal": BUDGET, "metric": "avg@n", "mde": 10.0, "planning_sd": 3.5, "families": FAMILIES}
    # the sweep file before any run, then its principal margin set after 1 of the 15 runs had finished
    record_version(fix / SWEEP_HISTORY, {"comparisons": design}, "sweep.yaml", 0, 15, now="2026-12-01T00:00:00Z")
    record_version(fix / SWEEP_HISTORY, {"comparisons": {**design, "margin": 15.0}}, "sweep.yaml", 1, 15,
                   now="2026-12-02T00:00:00Z")
    # the study file, recorded before any run
    content = validate(StudyConfig, read_yaml(path), str(path)).model_dump(mode="json")
    record_version(study_history_path(fix, "study"), content, str(path), 0, 15, now="2026-12-01T00:00:00Z")
    doc = claims.claims_markdown(claims.load_study(path, n_boot=50))
    fams = {part.split("`")[1]: part for part in doc.split("### Family ")[1:]}
    # the runs started on 2026-12-05 (their provenance), after both versions
    both = "Declared (the study file and the sweep files): "
    assert both + "declared after 1 of 15 runs had finished" in fams["budget"]  # the margin
    assert both + "declared before any run in this directory finished" in fams["entropy_vs_base"]  # unchanged
    assert "Declared (the study file): declared before any run in this directory finished" in fams["budget_entropy"]
    # claim (a) reads the budget family: in force only once the family was, after 1 of 15 runs
    claim = doc.split("### (a) ")[1]
    assert both + "declared after 1 of 15 runs had finished (every sweep it reads)." in claim
    assert "before the first result" not in doc


def test_a_joint_adjustment_holds_the_family_wise_error_over_both_kinds_of_call(tmp_path: Path) -> None:
    joint = {"members": ["{X}_budget − {X}"], "metric": "avg@n", "margin": 15, "adjust": "joint"}
    study = claims.load_study(study_file(tmp_path, fams={**STUDY_FAMILIES, "joint": joint}), n_boot=50)
    grpo, rloo = (m.comparison for m in families(study)["joint"].members)
    # the 4 p-values: superiority GRPO .0059, RLOO .4226; TOST at ±15 GRPO P(T2 < (.2708 − .15)/.0208) = .986,
    # RLOO P(T2 < (.0208 − .15)/.0208) = .0125. Holm over the 4: .0059 × 4, .0125 × 3, .4226 × 2, .986 × 1
    se = 0.0625 / math.sqrt(3) / math.sqrt(3)
    p_g, p_r = p_two_sided([0.25, 0.25, 0.3125]), p_two_sided([0.0, 0.0, 0.0625])
    t_g, t_r = sps.t.cdf((0.8125 / 3 - 0.15) / se, 2), sps.t.cdf((0.0625 / 3 - 0.15) / se, 2)
    assert (grpo.p_holm, rloo.p_tost_holm) == pytest.approx((4 * p_g, 3 * t_r))
    assert (rloo.p_holm, grpo.p_tost_holm) == pytest.approx((2 * p_r, t_g))
    assert call(grpo) == HIGHER and call(rloo) == EQUIVALENT
    doc = claims.claims_markdown(study)
    assert ("one Holm over the 2 testable members' superiority and TOST p-values together at α 0.05 (family-wise "
            "error at most α = 0.05 over both kinds of call; the detectable effect at α/4, Holm's first step)") in doc
    # Holm's first step over the 2m = 4 p-values is α/4: the detectable effect is stated at that level
    assert grpo.detectable == pytest.approx(mde_paired(grpo.delta.sd, 3, 0.05 / 4, 0.8))


def test_the_shipped_study_file_is_valid_in_the_vocabulary() -> None:
    from rbctl.config.base import read_yaml, validate
    from rbctl.config.study import StudyConfig

    path = REPO / "configs" / "study_quickstart.yaml"
    cfg = validate(StudyConfig, read_yaml(path), str(path))
    assert cfg.claims and cfg.families and read_yaml(path)["name"] == "study_quickstart"


def test_a_trend_rule_reads_the_slope_of_the_members_deltas_over_a_setting(tmp_path: Path) -> None:
    levels = ["grpo_budget − grpo", "rloo_budget − rloo", "grpo_entropy − grpo"]
    fams = {**STUDY_FAMILIES, "levels": {"members": levels, "metric": "avg@n"}}
    rule = {"kind": "trend", "family": "levels", "over": "rollout.group_size", "x": "log2", "sign": "positive"}
    path = study_file(tmp_path, fams=fams, claims_={"t": {"hypothesis": "Δ grows with G", "rule": rule}})
    # the members' arms ran G = 8, 16, 32 (x = log2 G = 3, 4, 5): grpo_budget 8, rloo_budget 16, grpo_entropy 32
    for arm, g in (("rloo_budget", 16), ("grpo_entropy", 32)):
        for seed in range(3):
            cfg_path = tmp_path / "fix" / "runs" / arm / f"seed_{seed}" / "config.yaml"
            cfg = yaml.safe_load(cfg_path.read_text())
            cfg["rollout"]["group_size"] = g
            cfg_path.write_text(yaml.safe_dump(cfg))
    study = claims.load_study(path, n_boot=50)
    from rbctl.report.study.rules import apply_rule

    v = apply_rule(study.config.claims["t"], study, families(study))
    # Δ per seed at x = 3, 4, 5: seed 0 (.25, 0, .0625), 1 (.25, 0, 0), 2 (.3125, .0625, −.0625); slopes
    # Σ(x − 4)(Δ − Δ̄)/2 = −.09375, −.125, −.1875: mean −.1354, sd .0477, t = −4.92 on 2 df
    slopes = [-0.09375, -0.125, -0.1875]
    p = p_two_sided(slopes)
    lo, hi = sps.t.interval(0.95, 2, loc=np.mean(slopes), scale=np.std(slopes, ddof=1) / math.sqrt(3))
    assert v.outcome == "contradicted" and v.reason == "fixpoint is called negative"
    assert v.readings[0].text == (f"negative: slope of Δ on log2 `rollout.group_size` (8, 16, 32) "
                                  f"{100 * np.mean(slopes):+.2f} [{100 * lo:+.2f}, {100 * hi:+.2f}] per doubling, "
                                  f"3 units, Holm p {p:.3f}")


def test_the_entropy_bonus_is_told_from_other_entropy_methods_without_naming_it_in_the_report() -> None:
    from rbctl.report.analyses.comparisons import stated_pairs

    info = {"grpo": ("grpo", "base"), "grpo_bonus": ("grpo", "entropy_adaptive"), "grpo_mask": ("grpo", "entropy_mask")}
    kinds = {(arm, ref): kind for kind, _, arm, ref in stated_pairs(info)}
    # the bonus is compared as the entropy bonus; the high-entropy token mask as any other arm
    assert kinds == {("grpo_bonus", "grpo"): "entropy_vs_base", ("grpo_mask", "grpo"): "arm_vs_base"}


def test_a_calls_rule_with_crossing_reports_when_the_mean_curves_cross(tmp_path: Path) -> None:
    # periodic avg@n at steps 0, 1, 2 of 3 seeds: grpo_budget − grpo per seed (0, −.1, +.1), (0, +.1, +.1),
    # (0, −.05, −.05); the mean curve (0, −.0167, +.05) stays above from step 2 on
    curves = {"grpo": ((0.3, 0.4, 0.3), (0.3, 0.3, 0.3), (0.3, 0.35, 0.4)),
              "grpo_budget": ((0.3, 0.3, 0.4), (0.3, 0.4, 0.4), (0.3, 0.3, 0.35))}
    periodic = {(arm, s): [{"step": st, "avg@n": v} for st, v in zip((0, 1, 2), curves[arm][s])]
                for arm in curves for s in range(3)}
    comps = {"principal": BUDGET, "families": FAMILIES}
    fix = make_sweep(tmp_path / "fix", CORRECT, comps, periodic=periodic)
    rule = {"kind": "calls", "family": "budget", "members": ["grpo_budget − grpo"], "support": "higher",
            "contradict": ["lower"], "crossing": True}
    study = {"name": "toy", "testbeds": {"fixpoint": str(fix)}, "families": STUDY_FAMILIES,
             "claims": {"x": {"hypothesis": "The budget ends above GRPO", "rule": rule}}}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study, allow_unicode=True))
    s = claims.load_study(path, n_boot=50)
    from rbctl.report.study.rules import apply_rule

    v = apply_rule(s.config.claims["x"], s, families(s))
    # all 27 resamples of the 3 units: the mean at step 2 of the picks of (+.1, +.1, −.05) is > 0 unless two or
    # three picks are seed 2 (3·2 + 1 = 7 resamples): 20 of 27 (74%) cross; the earliest, step 1, where the
    # picks' step-1 mean is > 0 too (e.g. seed 1 thrice); the 97.5th percentile is a resample that never crosses
    assert v.outcome == "supported"
    assert v.readings[0].text.endswith(
        "; crossing of the mean avg@n curves: step 2 (95% bootstrap interval over 3 units, every resample: step 1 to "
        "none within the horizon; 74% of resamples cross by step 2)")
    # the same study asks for the curves: one figure per metric, drawn where the document is written
    study["curves"] = [{"sweep": "fixpoint", "metrics": ["avg@n", "entropy"], "arms": ["grpo", "grpo_budget"]}]
    study["note"] = "Written after a pilot of the same design had been seen."
    path.write_text(yaml.safe_dump(study, allow_unicode=True))
    doc = claims.make_study_report(path, tmp_path / "out", n_boot=50).read_text()
    assert ("The study file's note (its author's words, not a record): Written after a pilot of the same design had "
            "been seen.") in doc
    assert "![fixpoint: held-out avg@n](figures/study_fixpoint_avg_n.png)" in doc
    assert (tmp_path / "out" / "figures" / "study_fixpoint_avg_n.png").stat().st_size > 10_000
    # a training curve of the metrics log: the sweep report's entropy figure, per arm over steps
    assert "![fixpoint: Token entropy (pre-update policy)](figures/study_fixpoint_entropy.png)" in doc
    assert (tmp_path / "out" / "figures" / "study_fixpoint_entropy.png").stat().st_size > 10_000
    study["curves"] = [{"sweep": "fixpoint", "metrics": ["entropy_mean"]}]
    path.write_text(yaml.safe_dump(study, allow_unicode=True))
    with pytest.raises(UserError, match="curve metric 'entropy_mean' is none of avg@n, pass@k, reward/mean, entropy"):
        claims.load_study(path)
    study["curves"] = [{"sweep": "nowhere"}]
    path.write_text(yaml.safe_dump(study, allow_unicode=True))
    with pytest.raises(UserError, match="curves: sweep 'nowhere' is not one of the study's"):
        claims.load_study(path)
