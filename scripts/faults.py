"""Fault injection: SIGKILL `rbctl train` / `rbctl ablate` at random moments and resume. (the code: `rbctl.tools.kill_resume`)."""

from rbctl.tools.kill_resume import main

if __name__ == "__main__":
    raise SystemExit(main())
