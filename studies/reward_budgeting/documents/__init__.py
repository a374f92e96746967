"""The study's result documents, printed from sweep and run directories (studies/reward_budgeting/docs/results.md,
studies/reward_budgeting/docs/maze_results.md, studies/reward_budgeting/docs/real_model.md, studies/reward_budgeting/docs/maze_setting.md, verdicts side by side, the README's
claims block); each runs as `python -m studies.reward_budgeting.documents.NAME`."""
