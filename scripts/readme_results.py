"""Print docs/results.md: a dated, self-describing Markdown document of a sweep's results. (the code: `rbctl.report.documents.results`)."""

from rbctl.report.documents.results import main

if __name__ == "__main__":
    raise SystemExit(main())
