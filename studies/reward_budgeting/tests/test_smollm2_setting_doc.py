"""The SmolLM2 setting document (documents/smollm2_setting.py) over a hand-made settings sweep: every
setting's plateau numbers as rbctl computes them, from finished runs only, and a sweep not yet finished
said to be one, its kept setting provisional."""

from __future__ import annotations

import json

import pytest

from studies.reward_budgeting.documents.smollm2_setting import markdown
from tests.integration.report_sweeps import make_sweep


def test_a_partial_settings_sweep_is_tested_on_its_finished_runs_and_says_so(tmp_path):
    sweep = make_sweep(tmp_path / "sweep", arms=("grpo",), seeds=range(2))
    (sweep / "ceiling.json").write_text(json.dumps({"value": 0.98, "source": "stated in the test"}))
    state = json.loads((sweep / "state.json").read_text())
    state["runs"]["grpo/seed_1"]["status"] = "running"
    (sweep / "state.json").write_text(json.dumps(state))
    text = markdown(sweep, tmp_path / "no_probe", tmp_path / "no_ceiling")

    assert "(no probe results under" in text and "(no evaluation of the SFT policy under" in text
    assert "## 4. The setting kept (provisional: the sweep has not finished)" in text
    assert "1 runs done; not done, so not tested: sweep/grpo/seed_1." in text
    evals = {json.loads(x)["step"]: json.loads(x)["avg@n"]
             for x in (sweep / "runs" / "grpo" / "seed_0" / "eval.jsonl").read_text().splitlines()}
    change, gap = abs(evals[160] - evals[120]) * 100, 98 - 100 * evals[160]  # seed 0 alone: ¾T = 120, T = 160
    row = next(line for line in text.splitlines() if line.startswith("| grpo |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:6] == ["grpo", "1", f"{change:.2f}", "False", f"{gap:.2f}", "True"]
    assert change == pytest.approx(2.5)  # 0.1 · 40/160 points: not stalled (≥ 2)


def test_a_finished_settings_sweep_keeps_its_setting_outright(tmp_path):
    sweep = make_sweep(tmp_path / "sweep", arms=("grpo",), seeds=range(2))
    text = markdown(sweep, tmp_path / "no_probe", tmp_path / "no_ceiling")
    assert "## 4. The setting kept\n" in text and "not done" not in text
    assert "By the rule stated in the sweep file before it ran: **grpo**" in text


def test_a_setting_that_ended_below_its_start_diverged_and_is_not_kept(tmp_path):
    sweep = make_sweep(tmp_path / "sweep", arms=("grpo",), seeds=range(2), twin="grpo_lr")  # two plain settings
    assert "diverged" not in markdown(sweep, tmp_path / "no_probe", tmp_path / "no_ceiling")  # both rose
    starts = []
    for s in range(2):
        path = sweep / "runs" / "grpo" / f"seed_{s}" / "eval.jsonl"
        lines = [json.loads(x) for x in path.read_text().splitlines()]
        starts.append(lines[0]["avg@n"])
        for x in lines[1:]:
            x["avg@n"] = 0.0  # a policy collapsed to no right answer: it "stalls" far below any ceiling
        path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    text = markdown(sweep, tmp_path / "no_probe", tmp_path / "no_ceiling")
    ends = ", ".join(f"{100 * a:.1f} → 0.0" for a in starts)
    assert f"- **grpo diverged**: its held-out pass@1 ended at or below step 0's (per unit {ends})." in text
    assert "the divergence guard does: a diverged setting is not kept." in text
    # grpo "stalled" with a change of 0 and would win on the smallest change; the guard keeps grpo_lr
    assert "By the rule stated in the sweep file before it ran: **grpo_lr**" in text
    assert text.endswith("Without the guard the rule would keep **grpo** (1 criterion held, a change of 0.00 points), which diverged.")  # stalled only
    row = next(line for line in text.splitlines() if line.startswith("| grpo |"))
    assert "| 0.00 | True |" in row  # stalled (change 0.00, held) ...
    assert f"| {-50 * sum(starts):.2f} | False |" in row  # ... and final − step 0 = −(mean start) points: diverged


def test_every_setting_diverged_keeps_none(tmp_path):
    sweep = make_sweep(tmp_path / "sweep", arms=("grpo",), seeds=range(1))
    path = sweep / "runs" / "grpo" / "seed_0" / "eval.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    path.write_text("\n".join(json.dumps({**x, "avg@n": 0.0 if x["step"] else x["avg@n"]}) for x in lines) + "\n")
    text = markdown(sweep, tmp_path / "no_probe", tmp_path / "no_ceiling")
    assert "Every setting diverged: the rule keeps none, and this testbed has no setting." in text


def _plateau(sweep, arm: str, seeds) -> None:
    """Make `arm`'s runs a plateau: held-out pass@1 flat from ¾T (step 120) on, entropy falling to 5% of its start."""
    for s in seeds:
        run = sweep / "runs" / arm / f"seed_{s}"
        evals = [json.loads(x) for x in (run / "eval.jsonl").read_text().splitlines()]
        at = next(x["avg@n"] for x in evals if x["step"] == 120)
        (run / "eval.jsonl").write_text("\n".join(json.dumps({**x, "avg@n": at if x["step"] >= 120 else x["avg@n"]})
                                                  for x in evals) + "\n")
        rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        (run / "metrics.jsonl").write_text("\n".join(json.dumps({**r, "entropy": 0.36 * (1 - 0.95 * r["step"] / 160)})
                                                     for r in rows) + "\n")


def test_a_second_settings_sweep_keeps_a_setting_only_where_its_plateau_holds(tmp_path):
    first = make_sweep(tmp_path / "first", arms=("grpo",), seeds=range(2))
    second = make_sweep(tmp_path / "second", arms=("grpo",), seeds=range(2), twin="grpo_lr")
    for d in (first, second):
        (d / "ceiling.json").write_text(json.dumps({"value": 0.98, "source": "stated in the test"}))
    text = markdown(first, tmp_path / "no_probe", tmp_path / "no_ceiling", later=(second,))
    assert "## 5. The second settings sweep" in text
    # neither setting of the second sweep stalls (its pass@1 still rises 2.5 points a quarter): the first stands
    assert text.endswith("No setting of this sweep passes all three criteria and the guard: the selection standing, "
                         "**grpo**, stands, and the claims that speak of \"the plateau\" are not called on this testbed.")
    _plateau(second, "grpo_lr", range(2))
    text = markdown(first, tmp_path / "no_probe", tmp_path / "no_ceiling", later=(second,))
    row = next(line for line in text.split("## 5.")[1].splitlines() if line.startswith("| grpo_lr |"))
    assert "| 0.00 | True |" in row  # stalled: pass@1 at T equals pass@1 at ¾T in both units
    assert text.endswith("Kept: **grpo_lr**, whose plateau test holds on all three criteria and the guard; the "
                         "comparison is declared at it before any of its arms but plain GRPO runs there.")


def test_each_later_sweep_gets_its_section_and_the_selection_standing_carries_from_one_to_the_next(tmp_path):
    first = make_sweep(tmp_path / "first", arms=("grpo",), seeds=range(2))
    second = make_sweep(tmp_path / "second", arms=("grpo",), seeds=range(2), twin="grpo_lr")
    third = make_sweep(tmp_path / "third", arms=("grpo",), seeds=range(2), twin="grpo_long")
    for d in (first, second, third):
        (d / "ceiling.json").write_text(json.dumps({"value": 0.98, "source": "stated in the test"}))
    _plateau(second, "grpo_lr", range(2))  # the second sweep keeps grpo_lr; the third's settings do not stall
    text = markdown(first, tmp_path / "no_probe", tmp_path / "no_ceiling", later=(second, third))
    fifth, sixth = text.split("## 5. The second settings sweep")[1].split("## 6. The third settings sweep")
    assert "Kept: **grpo_lr**" in fifth
    assert sixth.endswith("the selection standing, **grpo_lr**, stands, and the claims that speak of \"the plateau\" "
                          "are not called on this testbed.")
    _plateau(third, "grpo_long", range(2))
    text = markdown(first, tmp_path / "no_probe", tmp_path / "no_ceiling", later=(second, third))
    assert text.split("## 6. The third settings sweep")[1].endswith("Kept: **grpo_long**, whose plateau test holds on "
                                                                    "all three criteria and the guard; the comparison is "
                                                                    "declared at it before any of its arms but plain "
                                                                    "GRPO runs there.")


def test_a_setting_one_of_whose_units_diverged_says_so_though_its_mean_rose(tmp_path):
    sweep = make_sweep(tmp_path / "sweep", arms=("grpo",), seeds=range(2), twin="grpo_lr")
    assert "units diverged" not in markdown(sweep, tmp_path / "no_probe", tmp_path / "no_ceiling")
    path = sweep / "runs" / "grpo" / "seed_0" / "eval.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    path.write_text("\n".join(json.dumps({**x, "avg@n": 0.0 if x["step"] else x["avg@n"]}) for x in lines) + "\n")
    path1 = sweep / "runs" / "grpo" / "seed_1" / "eval.jsonl"
    other = [json.loads(x) for x in path1.read_text().splitlines()]
    other = [{**x, "avg@n": x["avg@n"] + 0.35 if x["step"] else 0.05} for x in other]  # seed 1 from 5% to ~100%
    path1.write_text("\n".join(json.dumps(x) for x in other) + "\n")
    assert other[-1]["avg@n"] > other[0]["avg@n"] + lines[0]["avg@n"]  # seed 1's rise outweighs seed 0's fall
    text = markdown(sweep, tmp_path / "no_probe", tmp_path / "no_ceiling")
    assert "- **grpo diverged**" not in text  # the guard reads the mean over units, which rose
    pairs = f"{100 * lines[0]['avg@n']:.1f} → 0.0, {100 * other[0]['avg@n']:.1f} → {100 * other[-1]['avg@n']:.1f}"
    assert f"- **grpo: 1 of its 2 units diverged** (per unit {pairs}). The guard reads the mean over units" in text
    assert "grpo_lr: " not in text  # both of its units rose
