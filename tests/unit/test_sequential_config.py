"""The `design:` block of a sweep file and of a runs manifest (rbctl.config.sweep.SequentialDesign):
validated like every other key, with one-line errors naming it."""

import pytest

from rbctl.config.base import validate
from rbctl.config.manifest import RunsManifest
from rbctl.config.sweep import SweepConfig
from rbctl.errors import UserError
from rbctl.report.sequential_looks import Design, unit_order

COMPARISONS = {"principal": [["b", "a"]], "mde": 5.0, "planning_sd": 7.0}
SWEEP = {"base": "x.yaml", "seeds": list(range(24)), "arms": {"a": {}, "b": {}}, "comparisons": COMPARISONS}
MANIFEST = {"runs_from": "trl", "arms": {"a": {}, "b": {}}, "seeds": [0, 1, 2, 3, 4, 5], "comparisons": COMPARISONS}


def sweep(**design):
    return validate(SweepConfig, {**SWEEP, "design": design}, "s.yaml")


def test_a_design_validates_with_defaults_and_gives_the_library_design():
    cfg = sweep(looks=[6, 12, 18, 24])
    assert (cfg.design.spending, cfg.design.futility) == ("obrien_fleming", False)
    assert Design.of(cfg.design) == Design((6, 12, 18, 24), "obrien_fleming", False)
    assert Design.of({"looks": [6, 24], "spending": "pocock", "futility": True}).futility
    assert validate(SweepConfig, SWEEP, "s.yaml").design is None


@pytest.mark.parametrize("design,message", [
    ({"looks": [6, 12, 18, 20]}, "config key 'design.looks': the last look (20) must be the design's units, 24 (24 seeds)"),
    ({"looks": [6, 6, 24]}, "config key 'design.looks': looks must increase: look 2 (6) is not after look 1 (6)"),
    ({"looks": [12, 6, 24]}, "look 2 (6) is not after look 1 (12)"),
    ({"looks": [2, 24]}, "config key 'design.looks': the first look needs at least 3 units"),
    ({"looks": []}, "config key 'design.looks'"),
    ({"looks": [6, 24], "spending": "linear"}, "config key 'design.spending'"),
    ({"looks": [6, 24], "futility": "maybe"}, "config key 'design.futility'"),
    ({"looks": [6, 24], "alpha": 0.01}, "unknown config key 'design.alpha'"),
    ({"spending": "pocock"}, "config key 'design.looks' is required"),
])
def test_a_bad_design_is_one_line_naming_the_key(design, message):
    with pytest.raises(UserError) as err:
        sweep(**design)
    assert message in str(err.value) and "\n" not in str(err.value) and str(err.value).startswith("s.yaml: ")


def test_the_last_look_counts_warm_starts_and_a_design_needs_comparisons():
    data = {**SWEEP, "warm_starts": ["w1", "w2"], "design": {"looks": [12, 48]}}
    assert validate(SweepConfig, data, "s.yaml").design.looks == [12, 48]
    with pytest.raises(UserError, match="must be the design's units, 48 \\(2 warm starts × 24 seeds\\)"):
        validate(SweepConfig, {**data, "design": {"looks": [12, 24]}}, "s.yaml")
    no_comparisons = {k: v for k, v in SWEEP.items() if k != "comparisons"}
    with pytest.raises(UserError, match="config key 'design': a sequential design decides declared comparisons"):
        validate(SweepConfig, {**no_comparisons, "design": {"looks": [6, 24]}}, "s.yaml")


def test_a_manifest_may_carry_a_design_over_its_units():
    cfg = validate(RunsManifest, {**MANIFEST, "design": {"looks": [3, 6], "spending": "pocock"}}, "m.yaml")
    assert cfg.design.looks == [3, 6] and cfg.units() == [(None, s) for s in range(6)]
    with pytest.raises(UserError, match="m.yaml: config key 'design.looks': the last look \\(5\\) must be the design's units, 6 \\(6 seeds\\)"):
        validate(RunsManifest, {**MANIFEST, "design": {"looks": [3, 5]}}, "m.yaml")
    runs = [{"arm": a, "seed": s, "path": f"{a}{s}"} for s in (4, 2, 9) for a in ("a", "b")]
    by_hand = validate(RunsManifest, {**MANIFEST, "runs": runs, "design": {"looks": [3]}}, "m.yaml")
    assert by_hand.units() == [(None, 4), (None, 2), (None, 9)]  # the order `runs` names them
    with pytest.raises(UserError, match="3 \\(the units `runs` names\\)"):
        validate(RunsManifest, {**MANIFEST, "runs": runs, "design": {"looks": [3, 4]}}, "m.yaml")


def test_a_manifest_runs_units_in_the_design_order():
    cfg = validate(RunsManifest, {**MANIFEST, "seeds": [0, 1], "warm_starts": ["w1", "w2"],
                                  "design": {"looks": [3, 4]}}, "m.yaml")
    assert cfg.units() == unit_order([0, 1], ["w1", "w2"])
