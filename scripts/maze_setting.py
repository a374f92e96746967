"""Print docs/maze_setting.md: where MaxRL's published ordering (MaxRL above GRPO on pass@1) holds on (the code: `rbctl.report.documents.maze_setting`)."""

from rbctl.report.documents.maze_setting import main

if __name__ == "__main__":
    raise SystemExit(main())
