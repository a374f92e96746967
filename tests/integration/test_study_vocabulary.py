"""The study vocabulary (rbctl.config.study) on hand-made sweeps (tests/integration/test_study_claims.py's:
4 problems × n = 4, seeds 0-2): each mistake a study file can make is refused in one line naming the key and
the nearest valid name; non-inferiority, an interaction, the warm start as the unit and a metric at a stated
step are expressible, each with hand-worked numbers; and the words each rule prints are no stronger than it."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import scipy.stats as sps
import yaml

from rbctl.errors import UserError
from rbctl.report import study as claims
from rbctl.report.analyses.comparisons import HIGHER, INCONCLUSIVE, NONINFERIOR, call
from rbctl.report.study.families import families
from rbctl.report.study.rules import apply_rule
from tests.integration.test_study_claims import BUDGET, CORRECT, FAMILIES, STUDY_FAMILIES, make_sweep, p_two_sided


def study(tmp_path: Path, fams: dict | None = None, claims_: dict | None = None, periodic=None, margin=None) -> Path:
    comps = {"principal": BUDGET, "families": FAMILIES, **({"margin": margin} if margin else {})}
    fix = tmp_path / "fix"
    if not fix.exists():
        make_sweep(fix, CORRECT, comps, periodic=periodic)
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({"name": "v", "testbeds": {"fixpoint": str(fix)}, "families": fams or STUDY_FAMILIES,
                                    "claims": claims_ or {}}, allow_unicode=True))
    return path


def verdict(path: Path, cid: str):
    s = claims.load_study(path, n_boot=20)
    return apply_rule(s.config.claims[cid], s, families(s))


@pytest.mark.parametrize("fams, claim, message", [
    ({"f": {"members": ["{X}_budget − {X}"], "metric": "last_quarter:entropi"}}, None,
     "family 'f': metric last_quarter:entropi: no run of fixpoint logs 'entropi' in metrics.jsonl (did you mean 'entropy'?)"),
    ({"f": {"members": ["grpo_bugdet − grpo"]}}, None,
     "family 'f': member 'grpo_bugdet − grpo' matches no arm of fixpoint (did you mean 'grpo_budget'?)"),
    (None, {"kind": "association", "predictor": "kappa_efff", "sign": "negative"},
     "association: predictor 'kappa_efff': no run of fixpoint logs it (did you mean 'kappa_eff'?)"),
    (None, {"kind": "trend", "family": "budget", "over": "rollout.group_sise", "sign": "positive"},
     "trend over 'rollout.group_sise': the runs' configs on fixpoint have no such key (did you mean 'rollout.group_size'?)"),
    (None, {"kind": "trend", "family": "budget", "over": "algo.estimator", "sign": "positive"},
     "trend over 'algo.estimator': its value on fixpoint is 'grpo', not a number (a trend needs numeric levels)"),
    (None, {"kind": "calls", "family": "budget", "support": "higher", "applies_if": {"raised": "entropie"}},
     "applies_if.raised 'entropie': no run of fixpoint logs it (did you mean 'entropy'?)"),
])
def test_a_study_file_mistake_is_refused_in_one_line(tmp_path: Path, fams, claim, message: str) -> None:
    path = study(tmp_path, fams, {"x": {"hypothesis": "h", "rule": claim}} if claim else None)
    with pytest.raises(UserError) as e:
        s = claims.load_study(path, n_boot=20)
        claims.claims_markdown(s)
    assert str(e.value) == message


def test_non_inferiority_is_one_one_sided_test_per_member(tmp_path: Path) -> None:
    # Δ budget − base per seed: GRPO .25, .25, .3125 (mean .2708); RLOO 0, 0, .0625 (mean .0208); sd .0361, se
    # .0361/√3 = .0208 both. Not worse than −5 points: t = (Δ̄ + .05)/se, p = P(T2 > t): RLOO (.0208 + .05)/.0208 = 3.4
    ni = {"members": ["{X}_budget − {X}"], "test": "noninferiority", "margin": 5}
    rule = {"kind": "calls", "family": "ni", "support": "non-inferior"}
    path = study(tmp_path, {**STUDY_FAMILIES, "ni": ni}, {"x": {"hypothesis": "The budget is not worse", "rule": rule}})
    s = claims.load_study(path, n_boot=20)
    grpo, rloo = (m.comparison for m in families(s)["ni"].members)
    se = 0.0625 / math.sqrt(3) / math.sqrt(3)
    p_g, p_r = sps.t.sf((0.8125 / 3 + 0.05) / se, 2), sps.t.sf((0.0625 / 3 + 0.05) / se, 2)
    assert (grpo.p_tost, rloo.p_tost) == pytest.approx((p_g, p_r))
    assert rloo.p_tost_holm == pytest.approx(max(2 * min(p_g, p_r), p_r)) == pytest.approx(p_r)  # Holm over 2
    assert call(grpo) == call(rloo) == NONINFERIOR
    v = apply_rule(s.config.claims["x"], s, families(s))
    assert v.outcome == "supported"
    assert v.readings[1].text.startswith(f"non-inferior (Δ > −5 points) (Δ +2.1 [-6.9, +11.0], non-inferiority Holm p "
                                         f"{p_r:.3f})")
    doc = claims.claims_markdown(s)
    assert "non-inferiority: one one-sided t-test per member of Δ > −5, Holm over the 2 testable members" in doc
    # at a 1-point margin RLOO is not shown non-inferior: t = (.0208 + .01)/.0208 = 1.48, p = .138
    ni["margin"] = 1
    s = claims.load_study(study(tmp_path, {**STUDY_FAMILIES, "ni": ni}), n_boot=20)
    rloo = families(s)["ni"].members[1].comparison
    assert call(rloo) == INCONCLUSIVE and rloo.p_tost == pytest.approx(sps.t.sf((0.0625 / 3 + 0.01) / se, 2))
    assert "inconclusive (not shown Δ > −1 points)" in claims.claims_markdown(s)


def test_an_interaction_is_the_difference_of_two_members_deltas_over_shared_units(tmp_path: Path) -> None:
    # (grpo_budget − grpo) − (grpo_entropy − grpo) per seed: (.25 − .0625, .25 − 0, .3125 + .0625) = .1875, .25, .375:
    # mean .2708, sd .0955, t 4.91 on 2 df
    inter = {"members": ["(grpo_budget − grpo) − (grpo_entropy − grpo)"]}
    rule = {"kind": "calls", "family": "inter", "support": "higher"}
    path = study(tmp_path, {**STUDY_FAMILIES, "inter": inter},
                 {"x": {"hypothesis": "The budget moves GRPO more than the bonus does", "rule": rule}})
    s = claims.load_study(path, n_boot=20)
    (m,) = families(s)["inter"].members
    c = m.comparison
    assert m.interaction and c.label == "(grpo_budget − grpo) − (grpo_entropy − grpo)"
    assert c.delta.deltas == pytest.approx((0.1875, 0.25, 0.375))
    assert c.p_holm == pytest.approx(p_two_sided([0.1875, 0.25, 0.375])) and call(c) == HIGHER
    assert apply_rule(s.config.claims["x"], s, families(s)).outcome == "supported"
    # a wildcard binds all four names: "({X}_budget − {X}) − (rloo_budget − rloo)" is GRPO's interaction with RLOO
    # (RLOO's own is left out: its two pairs are the same)
    inter["members"] = ["({X}_budget − {X}) − (rloo_budget − rloo)"]
    s = claims.load_study(study(tmp_path, {**STUDY_FAMILIES, "inter": inter}), n_boot=20)
    labels = [m.comparison.label for m in families(s)["inter"].members]
    assert labels == ["(grpo_budget − grpo) − (rloo_budget − rloo)"]


def test_a_metric_at_a_stated_step_reads_the_periodic_evaluation_there(tmp_path: Path) -> None:
    # periodic avg@n at steps 0, 1, 2: grpo_budget − grpo per seed at step 2: +.1, +.1, −.05 (mean .05, sd .0866,
    # t 1.0 on 2 df, p .4226); at step 1: −.1, +.1, −.05
    curves = {"grpo": ((0.3, 0.4, 0.3), (0.3, 0.3, 0.3), (0.3, 0.35, 0.4)),
              "grpo_budget": ((0.3, 0.3, 0.4), (0.3, 0.4, 0.4), (0.3, 0.3, 0.35))}
    periodic = {(arm, s): [{"step": st, "avg@n": v} for st, v in zip((0, 1, 2), curves[arm][s])]
                for arm in curves for s in range(3)}
    at = {"members": ["grpo_budget − grpo"], "step": 2}
    s = claims.load_study(study(tmp_path, {**STUDY_FAMILIES, "at": at}, periodic=periodic), n_boot=20)
    fam = families(s)["at"]
    (m,) = fam.members
    assert m.comparison.delta.deltas == pytest.approx((0.1, 0.1, -0.05))
    assert m.comparison.p_holm == pytest.approx(2 * sps.t.sf(1.0, 2))
    assert fam.measure == "avg@n of the periodic held-out evaluation at step 2"
    at["step"] = 1
    s = claims.load_study(study(tmp_path, {**STUDY_FAMILIES, "at": at}, periodic=periodic), n_boot=20)
    assert families(s)["at"].members[0].comparison.delta.deltas == pytest.approx((-0.1, 0.1, -0.05))
    with pytest.raises(UserError, match="a metric at a stated step is a held-out avg@n or pass@k"):
        claims.load_study(study(tmp_path, {"at": {"members": ["grpo_budget − grpo"], "step": 2,
                                                   "metric": "last_quarter:entropy"}}))


def test_the_warm_start_as_the_unit_of_a_family(tmp_path: Path) -> None:
    from tests.integration.report_sweeps import make_sweep as make_ws_sweep

    sweep = make_ws_sweep(tmp_path / "ws", arms=("grpo", "grpo_budget"), seeds=range(3), warm_starts=("ws0", "ws1", "ws2"))
    fam = {"final": {"members": ["grpo_budget − grpo"], "margin": 5},
           "by_ws": {"members": ["grpo_budget − grpo"], "margin": 5, "unit": "warm_start"}}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({"testbeds": {"ws": str(sweep)}, "families": fam}, allow_unicode=True))
    s = claims.load_study(path, n_boot=20)
    fams = families(s)
    (pooled,), (by_ws,) = fams["final"].members, fams["by_ws"].members
    # each warm start's mean Δ over its 3 seeds; the t-test over those 3 means (2 df) is the member's test
    d = pooled.comparison.delta
    means = [np.mean([x for (w, _), x in zip(d.units, d.deltas) if w == ws]) for ws in ("ws0", "ws1", "ws2")]
    assert by_ws.comparison.delta.deltas == pytest.approx(means) and by_ws.comparison.delta.n == 3
    assert by_ws.comparison.p_holm == pytest.approx(p_two_sided(means)) and by_ws.level == "warm_start"
    assert by_ws.over_warm_starts is None and pooled.over_warm_starts is not None
    from rbctl.report.study.rules import member_text

    assert "units: the 3 warm starts (each its seeds' mean Δ)" in member_text(by_ws)
    no_ws = {"f": {"members": ["{X}_budget − {X}"], "unit": "warm_start"}}
    with pytest.raises(UserError, match="family 'f': unit warm_start, but the runs of fixpoint carry no warm start"):
        claims.claims_markdown(claims.load_study(study(tmp_path, no_ws), n_boot=20))


def test_an_opposite_call_the_contradict_list_leaves_out_is_named_as_such(tmp_path: Path) -> None:
    # the budget's last-quarter entropy is significantly lower (Holm p .027); a claim that it does not move entropy
    # (support equivalent) that counts only "higher" against it
    rule = {"kind": "calls", "family": "budget_entropy", "support": "equivalent", "contradict": ["higher"],
            "members": ["grpo_budget − grpo"]}
    v = verdict(study(tmp_path, claims_={"x": {"hypothesis": "The budget leaves entropy where it is", "rule": rule}}), "x")
    assert v.outcome == "inconclusive"
    assert v.reason.endswith("fixpoint grpo_budget − grpo is called lower, the opposite of the claim, which the study "
                             "file's `contradict` leaves out: counted neither way")
    assert ("a member called lower (the opposite of the claim) is counted neither way: the study file's `contradict` "
            "leaves it out") in v.rule
    # by default an equivalence claim is contradicted by either direction
    del rule["contradict"]
    v = verdict(study(tmp_path, claims_={"x": {"hypothesis": "h", "rule": rule}}), "x")
    assert v.outcome == "contradicted" and v.reason == "fixpoint grpo_budget − grpo is called lower"


def test_the_p_beside_a_member_read_as_equivalent_is_the_tost_p(tmp_path: Path) -> None:
    # GRPO's budget entropy Δ −.06 [−.085, −.035] (Holm p .027) lies within ±0.1: "lower (within ±0.1)"; an
    # equivalence rule reads it as equivalent, decided by TOST: t_low = (−.06 + .1)/(.01/√3) = 6.93, p = P(T2 > 6.93)
    fams = {**STUDY_FAMILIES, "budget_entropy": {**STUDY_FAMILIES["budget_entropy"], "margin": 0.1}}
    rule = {"kind": "calls", "family": "budget_entropy", "support": "equivalent", "members": ["grpo_budget − grpo"]}
    v = verdict(study(tmp_path, fams, {"x": {"hypothesis": "h", "rule": rule}}), "x")
    p_low = [sps.t.sf((-0.06 + 0.1) / (0.01 / math.sqrt(3)), 2), sps.t.sf((-0.07 + 0.1) / (0.01 / math.sqrt(3)), 2)]
    tost_holm = max(2 * min(p_low), p_low[0])
    assert v.outcome == "supported" and v.readings[0].call == "equivalent"
    assert v.readings[0].text.startswith(f"lower (within ±0.1) (Δ -0.060 [-0.085, -0.035], TOST Holm p {tost_holm:.3f})")


def test_a_crossing_step_only_where_the_arm_is_shown_to_end_higher(tmp_path: Path) -> None:
    rule = {"kind": "calls", "family": "budget", "members": ["rloo_budget − rloo"], "support": "higher", "crossing": True}
    v = verdict(study(tmp_path, claims_={"x": {"hypothesis": "h", "rule": rule}}), "x")
    assert v.readings[0].text.endswith("; crossing step: not reported (the arm is not shown to end higher: inconclusive)")


def test_the_readme_block_keeps_the_warm_start_caveat_of_an_equivalence(tmp_path: Path) -> None:
    from tests.integration.report_sweeps import make_sweep as make_ws_sweep

    sweep = make_ws_sweep(tmp_path / "ws", arms=("grpo", "grpo_budget"), seeds=range(3), warm_starts=("ws0", "ws1", "ws2"))
    fam = {"final": {"members": ["grpo_budget − grpo"], "margin": 30}}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({"testbeds": {"ws": str(sweep)}, "families": fam, "readme": "final"},
                                   allow_unicode=True))
    s = claims.load_study(path, n_boot=20)
    (m,) = families(s)["final"].members
    assert m.comparison.significant and m.comparison.equivalent  # higher (within ±30)
    block = claims.readme_block(s)
    assert "holds for these 3 warm starts (units: (warm start, seed)); with the warm start as the unit Δ " in block
