"""The population calculation of docs/plateau_task.md, §6.2 ("Why plain GRPO locks in"): the exact (the code: `rbctl.tools.fixpoint_population`)."""

from rbctl.tools.fixpoint_population import main

if __name__ == "__main__":
    raise SystemExit(main())
