"""`rbctl report A B` says so on a comparison's row where the two arms' runs differ in compute (a run
extended to 12 steps against a 10-step one), and its tables keep their width when the output is piped."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from rbctl.cli import run
from tests.integration.test_report_loose_runs import make_run


def test_a_comparison_of_runs_with_different_steps_says_so_on_its_row(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)  # piped (capsys is no terminal), no width given
    make_run(tmp_path / "first", 10, (0, 10), [4, 2, 1, 0])
    make_run(tmp_path / "a_budget_arm_with_a_long_name", 12, (0, 12), [4, 3, 2, 1], budget=1.0)
    assert run(["report", str(tmp_path / "first"), str(tmp_path / "a_budget_arm_with_a_long_name"),
                "-o", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out
    rows = pd.read_csv(tmp_path / "cmp" / "tables" / "comparisons.csv")
    assert set(rows["unequal_compute"]) == {"steps 12 ≠ 10"}  # the arm's value first
    verdicts = (tmp_path / "cmp" / "tables" / "verdicts.md").read_text()
    assert "not testable (unequal compute: steps 12 ≠ 10)" in verdicts
    # the terminal's table, piped: one line per comparison, cells whole, wider than Rich's default 80
    line = next(x for x in out.splitlines() if "a_budget_arm_with_a_long_name − first" in x)
    assert "unequal compute: steps 12 ≠ 10" in line and len(line) > 80


def test_equal_compute_adds_nothing_to_the_row(tmp_path: Path, capsys) -> None:
    make_run(tmp_path / "first", 10, (0, 10), [4, 2, 1, 0])
    make_run(tmp_path / "budget", 10, (0, 10), [4, 3, 2, 1], budget=1.0)
    assert run(["report", str(tmp_path / "first"), str(tmp_path / "budget"), "-o", str(tmp_path / "cmp")]) == 0
    assert "unequal compute" not in capsys.readouterr().out
    assert "unequal compute" not in (tmp_path / "cmp" / "tables" / "verdicts.md").read_text()
