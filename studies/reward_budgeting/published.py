"""Published tables the study sets rbctl's arms beside, kept as data files beside this module (not in the
report code): MaxRL's maze table (Tajwar et al. 2026, arXiv 2602.02710), read by studies/reward_budgeting/docs/maze_results.md's
generator (`studies.reward_budgeting.documents.maze_results`)."""

from __future__ import annotations

import json
from pathlib import Path

MAZE_TABLE = Path(__file__).with_name("maxrl_maze_paper.json")


def maze_table() -> dict:
    """The maze table: its source, the pass@k columns (ks), one row per (estimator, variant) with the paper's
    method and scores, the entropy-bonus arm and the budget-like arms its gain is set against."""
    return json.loads(MAZE_TABLE.read_text(encoding="utf-8"))
