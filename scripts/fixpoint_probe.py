"""Probe a fixpoint policy (a warm start folder, or a run directory's newest checkpoint) on the task's (the code: `rbctl.tools.fixpoint_probe`)."""

from rbctl.tools.fixpoint_probe import main

if __name__ == "__main__":
    raise SystemExit(main())
