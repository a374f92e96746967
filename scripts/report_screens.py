"""Look at a report as a reader does: an 80-column terminal capture of `rbctl report` and headless (the code: `rbctl.tools.report_screens`)."""

from rbctl.tools.report_screens import main

if __name__ == "__main__":
    raise SystemExit(main())
