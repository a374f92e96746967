"""Result documents printed from sweep and run directories (docs/results.md, docs/maze_results.md,
docs/real_model.md, docs/maze_setting.md, verdicts side by side); `scripts/` holds their entry points."""
