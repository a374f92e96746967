"""rbctl against TRL's `GRPOTrainer`, side by side on the embedded default's GRPO workload. (the code: `rbctl.tools.bench_trl`)."""

from rbctl.tools.bench_trl import main

if __name__ == "__main__":
    raise SystemExit(main())
