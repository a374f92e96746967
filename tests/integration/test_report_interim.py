"""No full-α call from part of a design (rbctl.report.sequential_calls, docs/method.md "Sequential
designs"): a sweep directory with a quarter of its runs finished gets no higher/lower/equivalent; a
runs manifest with a sequential design says which comparisons are decided and which seeds to train
next."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest
import scipy.stats as sps
import yaml

from rbctl.cli import run
from rbctl.report.analyses.comparisons import EQUIVALENT, HIGHER, LOWER, call, call_text
from rbctl.report.data import report_data
from rbctl.report.render.looks import next_lines
from rbctl.report.sequential import efficacy_bounds, t_bound
from tests.integration.report_sweeps import make_sweep

TRIANGLE = [["grpo_budget", "grpo"], ["grpo_entropy_static", "grpo_budget"], ["grpo_entropy_static", "grpo"]]
ARMS = ("grpo", "grpo_budget", "grpo_entropy_static")


def quarter(root: Path, design: dict | None = None, margin: float | None = 50.0) -> Path:
    """A 24-seed sweep of the triangle whose runs of seeds 6-23 have not finished: their directories gone,
    the state saying pending, as a sweep in progress looks."""
    comparisons = {"principal": TRIANGLE, "mde": 5.0, "planning_sd": 7.0, **({"margin": margin} if margin else {})}
    sweep = make_sweep(root, arms=ARMS, seeds=range(24), comparisons=comparisons)
    state = json.loads((sweep / "state.json").read_text())
    for arm in ARMS:
        for s in range(6, 24):
            shutil.rmtree(sweep / "runs" / arm / f"seed_{s}")
            state["runs"][f"{arm}/seed_{s}"] = {"status": "pending", "error": None}
    (sweep / "state.json").write_text(json.dumps(state))
    if design is not None:
        doc = yaml.safe_load((sweep / "sweep.yaml").read_text())
        doc["sweep"]["design"] = design
        (sweep / "sweep.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return sweep


def test_a_quarter_of_a_sweep_gets_no_full_alpha_call(tmp_path, capsys):
    sweep = quarter(tmp_path / "sweep")
    data = report_data([sweep], n_boot=50)
    calls = [call(c) for c in data.verdict.comparisons]
    assert calls == ["interim"] * 3
    # the full-α calls the same numbers would have made: at least one higher (budget's +6 points at 6 seeds)
    full = [c for c in data.verdict.comparisons if c.p_holm < 0.05]
    assert full, "the planted effect should reach full-α significance at 6 seeds (else this test shows nothing)"
    for c in data.verdict.comparisons:
        assert call_text(c) == "interim (6 of 24 units): not a call" and not c.significant and not c.equivalent
        assert math.isfinite(c.delta.mean) and math.isfinite(c.delta.lo)  # the estimate and interval stay
    rc = run(["report", str(sweep), "-o", str(tmp_path / "rep")])
    printed = capsys.readouterr().out
    report = (tmp_path / "rep" / "report.md").read_text()
    assert rc == 0
    for text in (printed, report):
        assert "interim (6 of 24 units): not a call" in text
    # no call word in any call cell: the verdict table and the terminal's call column
    verdicts = pd.read_csv(tmp_path / "rep" / "tables" / "verdicts.csv")
    assert not set(verdicts["verdict"]) & {HIGHER, LOWER, EQUIVALENT}
    assert not any(cell.split(" ")[0] in (HIGHER, LOWER, EQUIVALENT) for cell in verdicts["call"])
    assert "## Interim: not a call" in report


def test_the_whole_sweep_is_called_as_before(tmp_path):
    sweep = make_sweep(tmp_path / "sweep", arms=ARMS, seeds=range(6), comparisons={"principal": TRIANGLE, "mde": 5.0,
                                                                                 "planning_sd": 7.0})
    data = report_data([sweep], n_boot=50)
    assert all(c.sequential is None for c in data.comparisons.comparisons)
    assert data.sequential.units == 6 and data.sequential.interim == []


def test_a_quarter_under_a_sequential_design_is_called_at_its_look(tmp_path):
    """Looks at 6/12/18/24: the report takes look 1 from the 6 seeds (no look is recorded), and calls a
    comparison only where its t crosses look 1's boundary, with the look's number; otherwise interim."""
    sweep = quarter(tmp_path / "sweep", design={"looks": [6, 12, 18, 24], "spending": "pocock", "futility": False},
                    margin=None)
    data = report_data([sweep], n_boot=50)
    seq = data.sequential
    assert len(seq.history) == 1 and seq.history[0].time == ""
    z = efficacy_bounds([0.25, 0.5, 0.75, 1.0], 0.05 / 3 / 2, "pocock", final=False)[0]  # look 1 at α/3
    for c in data.verdict.comparisons:
        t = c.delta.mean / (c.delta.sd / math.sqrt(6))
        entry = next(e for e in seq.history[0].comparisons if (e.arm, e.reference) == (c.arm, c.ref))
        assert entry.t == pytest.approx(t)
        if entry.decision == "continue":
            assert abs(t) < t_bound(z, 6) and call(c) == "interim"
            assert call_text(c).startswith("interim: not decided at look 1 of 4 (6 units")
        else:
            assert call_text(c).startswith(f"{entry.decision} at look 1 of 4 (6 units; superiority at α = ")
            assert call(c) in (HIGHER, LOWER, EQUIVALENT)
    # this plant decides one comparison at look 1 and leaves another open
    assert {e.decision for e in seq.history[0].comparisons} > {"continue"}
    assert next_lines(data)[0] == "next: look 2 of 4 at 12 units needs"


# --- a runs manifest with a design ----------------------------------------------------------------------

def manifest(root: Path, seeds_done: int, effect: float, looks=(4, 8, 12)) -> Path:
    """A W&B-style long table of arms a and b over seeds 0..seeds_done−1 (the rest not trained yet),
    the final held-out accuracy of b = a's + effect + a per-seed wiggle, and its manifest with a design."""
    rows = []
    for seed in range(seeds_done):
        base = 0.30 + 0.01 * (seed % 5)
        for arm, acc in (("a", base), ("b", base + effect + 0.02 * ((seed * 7) % 3 - 1))):
            for step in (1, 2):
                rows += [{"run": f"{arm}-{seed}", "step": step, "key": "eval/acc", "value": acc},
                         {"run": f"{arm}-{seed}", "step": step, "key": "train/reward", "value": 0.1 * step}]
    pd.DataFrame(rows).to_csv(root / "export.csv", index=False)
    data = {"runs_from": "table", "name": "mine", "root": str(root), "table": "export.csv", "path": "{arm}-{seed}",
            "arms": {"a": {"baseline": "grpo", "variant": "base"}, "b": {"baseline": "grpo", "variant": "budget"}},
            "seeds": list(range(looks[-1])), "roles": {"heldout": "eval/acc", "benchmark": "math", "reward": "train/reward"},
            "comparisons": {"principal": [["b", "a"]], "mde": 5.0, "planning_sd": 3.0},
            "design": {"looks": list(looks)}}
    path = root / "manifest.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_manifest_with_a_design_names_the_seeds_to_train_next(tmp_path, capsys):
    path = manifest(tmp_path, seeds_done=6, effect=0.005)  # look 1 (4 seeds) taken; look 2 needs seeds 6, 7 too
    rc = run(["report", str(path), "-o", str(tmp_path / "rep")])
    printed = capsys.readouterr().out
    assert rc == 0
    assert "principal: b − a: interim: not decided at look 1 of 3 (4 units" in printed
    assert "next: look 2 of 3 at 8 units needs\n  a: seeds 6, 7\n  b: seeds 6, 7" in printed
    report = (tmp_path / "rep" / "report.md").read_text()
    assert "## Sequential design" in report and "The next look 2 of 3 at 8 units needs:" in report


def test_a_manifest_whose_comparison_is_decided_needs_nothing_more(tmp_path, capsys):
    path = manifest(tmp_path, seeds_done=8, effect=0.10)  # +10 points, sd 1.6: decided by look 2
    data = report_data([path], n_boot=50)
    (c,) = data.verdict.comparisons
    seq = data.sequential
    look = next(i for i, r in enumerate(seq.history, 1) if r.comparisons[0].decision != "continue")
    e = seq.history[look - 1].comparisons[0]
    deltas = [0.10 + 0.02 * ((s * 7) % 3 - 1) for s in range(seq.design.looks[look - 1])]
    assert e.t == pytest.approx(sps.ttest_1samp(deltas, 0.0).statistic) and e.decision == HIGHER
    assert call(c) == HIGHER and call_text(c).startswith(f"higher at look {look} of 3 ({e.n} units; superiority")
    assert run(["report", str(path), "-o", str(tmp_path / "rep")]) == 0
    printed = capsys.readouterr().out
    assert f"principal: b − a: higher at look {look} of 3" in printed and "next:" not in printed
    report = (tmp_path / "rep" / "report.md").read_text()
    assert "Every comparison is decided: the design runs" in report


def test_a_manifest_before_its_first_look_gets_no_call(tmp_path, capsys):
    path = manifest(tmp_path, seeds_done=3, effect=0.10)  # +10 points: a fixed test at 3 seeds would call it
    data = report_data([path], n_boot=50)
    (c,) = data.verdict.comparisons
    assert c.p_holm < 0.05 and call(c) == "interim" and not data.sequential.history
    assert call_text(c) == "interim (3 of 12 units): not a call; first look at 4 units"
    assert next_lines(data) == ["next: look 1 of 3 at 4 units needs", "  a: seed 3", "  b: seed 3"]


def test_the_calls_in_detail_under_a_sequential_design_print_each_looks_test_not_a_fixed_p(tmp_path):
    """With a sequential design the "Calls in detail" paragraph says the calls are the looks' (the
    looks, the spending, the multiplicity), and where a table or sentence prints the test that decided
    a call, it is the look's |t| against its boundary: the fixed-design Holm p over the units at hand,
    which decided nothing, is printed beside no call (report.md, summary.md, the terminal)."""
    from rbctl.report.render.answer import LOOK_P, verdict_table
    from rbctl.report.render.tables import pval

    sweep = quarter(tmp_path / "sweep", design={"looks": [6, 12, 18, 24], "spending": "pocock", "futility": False},
                    margin=5.0)
    data = report_data([sweep], n_boot=50)
    # Pocock-type boundaries at look 1 of 4 on the paired t with 5 df (graphical Holm over the 3 comparisons):
    # superiority at α/3 (two-sided) before a rejection, α/2 after one; TOST at α/3 (one-sided)
    sup3, sup2, tost3 = (t_bound(efficacy_bounds([0.25, 0.5, 0.75, 1.0], a, "pocock", final=False)[0], 6)
                         for a in (0.05 / 3 / 2, 0.05 / 2 / 2, 0.05 / 3))
    expected = {}
    for c in data.verdict.comparisons:
        mean, se = 100 * c.delta.mean, 100 * c.delta.sd / math.sqrt(6)
        if call(c) in (HIGHER, LOWER):
            expected[c.label] = f"look 1: |t| {abs(mean / se):.2f} ≥ {sup3:.2f}"
        elif call(c) == EQUIVALENT:
            expected[c.label] = f"look 1: TOST, |Δ̄| {abs(mean):.2f} ≤ {5.0 - tost3 * se:.2f}"
        else:
            expected[c.label] = f"look 1: |t| {abs(mean / se):.2f} < {sup2:.2f}"
    # this plant decides one comparison by superiority and one by equivalence at look 1, and leaves one open
    assert sorted(call(c) for c in data.verdict.comparisons) == [EQUIVALENT, "interim", LOWER]
    shown = verdict_table(data.verdict.rows)
    assert "Holm p" not in shown.columns and dict(zip(shown["comparison"], shown[LOOK_P])) == expected
    assert set(shown.iloc[:, -2]) == {"±5: TOST's boundary at each look"}  # no TOST Holm p either

    assert run(["report", str(sweep), "-o", str(tmp_path / "rep")]) == 0
    report = (tmp_path / "rep" / "report.md").read_text()
    detail = report.split("## Calls in detail", 1)[1].split("\n## ", 1)[0]
    assert ("called at the looks of the sequential design (at 6, 12, 18, 24 units, Pocock-type α-spending; graphical "
            "Holm over these 3 comparisons at α = 0.05)") in detail
    assert "Holm–Bonferroni over" not in detail
    answer = report.split("## The answer", 1)[1].split("**Design.**", 1)[0]
    assert "Holm p" not in answer and "Each call is made at a look of the sequential design" in answer
    summary = (tmp_path / "rep" / "summary.md").read_text()
    assert "| decides the call |" in summary and "(Holm p)" not in summary
    for c in data.verdict.comparisons:
        cell = expected[c.label].replace("|", "\\|")  # as a Markdown table writes it
        row = next(line for line in detail.splitlines() if line.startswith(f"| {c.label} |"))
        assert f"| {cell} |" in row and f"| {pval(c.p_holm)} |" not in row
        assert f"| {cell} |" in next(x for x in summary.splitlines() if f"| {c.label} |" in x)


def test_an_interim_comparison_without_a_design_shows_no_p_as_deciding(tmp_path):
    """Without a sequential design, a comparison read from fewer units than the design's is not a call:
    its row prints no Holm p as if one had decided it."""
    from rbctl.report.render.answer import INTERIM_P, verdict_table

    data = report_data([quarter(tmp_path / "sweep", margin=None)], n_boot=50)
    shown = verdict_table(data.verdict.rows)
    assert set(shown[INTERIM_P]) == {"no test: interim"}
