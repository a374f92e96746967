"""Print docs/maze_results.md: the maze sweep's arms beside MaxRL's paper table, and plain GRPO's plateau test. (the code: `rbctl.report.documents.maze_results`)."""

from rbctl.report.documents.maze_results import main

if __name__ == "__main__":
    raise SystemExit(main())
