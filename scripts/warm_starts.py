"""Make, check and probe the warm starts shipped inside the package (rbctl/tasks/warm_starts/). (the code: `rbctl.tools.build_warm_starts`)."""

from rbctl.tools.build_warm_starts import main

if __name__ == "__main__":
    raise SystemExit(main())
