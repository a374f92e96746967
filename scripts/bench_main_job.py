"""Time the main job the way a new user runs it: `rbctl ablate` (the default sweep, or SWEEP) with an (the code: `rbctl.tools.bench_main_job`)."""

from rbctl.tools.bench_main_job import main

if __name__ == "__main__":
    raise SystemExit(main())
