"""`rbctl report A B` over runs that `rbctl train` made (no sweep, no final evaluation of their own): a
run's final score is its evaluation at its last step, the periodic one when nothing else wrote one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rbctl.report.data import sweep_data
from rbctl.store.read import final_summaries


def make_run(d: Path, steps: int, periodic_steps: tuple[int, ...], correct: list[int], budget=None) -> Path:
    cfg = {"seed": 0, "steps": steps, "rollout": {"group_size": 8}, "algo": {"estimator": "grpo", "budget": budget}}
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    (d / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "entropy": 0.2}) + "\n" for s in range(1, steps + 1)))
    lines = []
    for s in periodic_steps:
        out = d / "eval" / "periodic" / f"step_{s:06d}" / "builtin"
        out.mkdir(parents=True)
        pp = [{"id": f"p{i}", "n": 4, "correct": c} for i, c in enumerate(correct)]
        (out / "summary.json").write_text(json.dumps({"benchmark": "builtin", "step": s, "n": 4,
                                                      "num_problems": len(pp), "per_problem": pp}))
        lines.append(json.dumps({"step": s, "benchmark": "builtin", "n": 4, "avg@n": sum(correct) / (4 * len(correct))}))
    (d / "eval.jsonl").write_text("\n".join(lines) + "\n")
    return d


def test_the_periodic_evaluation_at_the_last_step_is_a_train_runs_final_score(tmp_path: Path) -> None:
    plain = make_run(tmp_path / "first", 10, (0, 10), [4, 2, 1, 0])
    budget = make_run(tmp_path / "budget", 10, (0, 10), [4, 3, 2, 1], budget=1.0)
    assert final_summaries(plain, 10)[0] == 10 and final_summaries(plain)[0] is None
    sw = sweep_data([plain, budget], n_boot=50)
    assert sorted(a for a, _ in sw.scores) == ["budget", "first"]  # both runs scored: none dropped
    assert not [i for i in sw.issues if i.status == "no final evaluation"]
    assert list(sw.scores["budget", "builtin"].per_unit("avg", 4).values()) == pytest.approx([10 / 16])


def test_an_earlier_periodic_evaluation_is_never_a_final_score(tmp_path: Path) -> None:
    cut = make_run(tmp_path / "cut", 10, (0, 5), [4, 2, 1, 0])  # stopped before its last step
    assert final_summaries(cut, 10) == (None, {})
    sw = sweep_data([cut], n_boot=50)
    assert [i.status for i in sw.issues] == ["no final evaluation"]


def test_a_single_fixpoint_runs_plateau_test_uses_the_tasks_stated_ceiling(tmp_path: Path) -> None:
    from rbctl.report.data import analyse

    run = make_run(tmp_path / "first", 10, (0, 5, 8, 10), [4, 3, 3, 3])
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    (run / "config.yaml").write_text(yaml.safe_dump({**cfg, "data": {"builtin": {"task": "fixpoint"}}}))
    p = analyse(sweep_data([run], n_boot=50)).plateau
    assert p.ceiling.value == 0.98 and p.ceiling.declared  # rbctl.tasks.ceilings, not the run's own 81.2
    assert p.verdict.below_ceiling.value == pytest.approx(98.0 - 100 * 13 / 16)


def test_rbctl_report_a_b_shows_both_arms_and_a_verdict_line_in_80_columns(tmp_path: Path, capsys, monkeypatch) -> None:
    from rbctl.cli import run

    monkeypatch.setenv("COLUMNS", "80")
    make_run(tmp_path / "first", 10, (0, 10), [4, 2, 1, 0])
    make_run(tmp_path / "a_budget_arm_with_a_long_name", 10, (0, 10), [4, 3, 2, 1], budget=1.0)
    cut = make_run(tmp_path / "cut", 10, (0, 5), [4, 2, 1, 0])
    assert run(["report", str(tmp_path / "first"), str(tmp_path / "a_budget_arm_with_a_long_name"), str(cut),
                "-o", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines() if not line.startswith("report: ")) <= 80  # a path cannot fold
    first_cells = "".join(line.split("│")[1].strip() for line in out.splitlines() if line.startswith("│"))
    assert "a_budget_arm_with_a_long_name" in first_cells and "first" in first_cells  # folded over lines, not cut
    calls = out[out.index("calls: "):].splitlines()
    assert calls[4].split() == ["a_budget_arm_with_a_long_name", "−", "first", "+18.8", "[n/a]", "1", "–", "not",
                                "testable"] and calls[5].strip() == "(avg@n)"  # the call of the pair, last
    flat = " ".join(out.split())
    assert "calls: stated pairs, one Holm family (none declared)" in flat and "not testable" in flat  # 1 unit each
    assert "incomplete: cut: 1 of 1 seed without a final evaluation" in out
    text = (tmp_path / "cmp" / "report.md").read_text()
    assert "These runs come from no sweep file" in text and "The sweep file states no" not in text


@pytest.mark.slow  # a subprocess of rbctl report
def test_report_screens_captures_the_terminal_at_80_columns(tmp_path: Path) -> None:
    from scripts.report_screens import main

    make_run(tmp_path / "first", 10, (0, 10), [4, 2, 1, 0])
    make_run(tmp_path / "a_budget_arm_with_a_long_name", 10, (0, 10), [4, 3, 2, 1], budget=1.0)
    out = tmp_path / "screens"
    assert main([str(tmp_path / "first"), str(tmp_path / "a_budget_arm_with_a_long_name"), "-o", str(out), "--no-png"]) == 0
    text = (out / "terminal.txt").read_text()
    lines = text.splitlines()
    assert [x for x in lines if x.startswith("report: ")][0].endswith("report.md")  # the report's path, which cannot fold
    assert max(len(x) for x in lines if not x.startswith("report: ")) <= 80 and "not testable" in text
    assert (out / "report" / "report.html").is_file()
