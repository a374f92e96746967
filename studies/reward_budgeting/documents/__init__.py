"""The study's result documents, printed from sweep and run directories (studies/reward_budgeting/docs/results.md,
studies/reward_budgeting/docs/maze_results.md, studies/reward_budgeting/docs/real_model.md, studies/reward_budgeting/docs/maze_setting.md, verdicts side by side, the
blocks of the study's README, STUDY_README); each runs as `python -m studies.reward_budgeting.documents.NAME`."""

from pathlib import Path

STUDY_README = Path(__file__).resolve().parents[1] / "README.md"  # where `--write-readme` writes by default
