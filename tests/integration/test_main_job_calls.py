"""scripts/main_job_calls.py, the generator of docs/main_job.md (whose table the README copies), over a
hand-made sweep: the runs it counts, the commit and the calls table as `rbctl ablate` renders it at 80
columns, its Δ the report's."""

from __future__ import annotations

import io

from rich.console import Console

from rbctl.report import report_data
from rbctl.report.render.terminal import calls_table
from scripts.main_job_calls import main, markdown
from tests.integration.report_sweeps import make_sweep


def test_the_document_is_the_calls_rbctl_ablate_prints_with_its_runs_and_commit(tmp_path):
    sweep = make_sweep(tmp_path / "s", arms=("grpo", "grpo_budget"), seeds=range(4),
                       comparisons={"principal": [["grpo_budget", "grpo"]], "mde": 5, "planning_sd": 5})
    text = markdown(sweep)
    assert "8 runs (grpo 4, grpo_budget 4), code commit `abc1234` (8 of 8 runs record no dirty flag: unknown)" in text
    printed = text.split("\n```\n", 1)[1].split("```", 1)[0].splitlines()
    data = report_data([sweep], n_boot=50)
    console = Console(width=80, record=True, file=io.StringIO(), color_system=None)
    console.print(calls_table(data))
    assert printed == [line.rstrip() for line in console.export_text().splitlines()]  # no sequential design: no look lines
    assert max(map(len, printed)) <= 80
    row = data.verdict.rows.iloc[0]
    line = next(x for x in printed if x.startswith(" grpo_budget − grpo"))
    assert f"{100 * row.delta:+.1f} [{100 * row.delta_lo:+.1f}, {100 * row.delta_hi:+.1f}]" in line
    assert row.call.split()[0] in line.split()  # the call's first word, on the row's first line


def test_a_sweep_without_a_call_is_one_line(tmp_path, capsys):
    sweep = make_sweep(tmp_path / "s", arms=("grpo",), seeds=range(2))
    assert main([str(sweep)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "no call to print" in err and len(err.splitlines()) == 1
