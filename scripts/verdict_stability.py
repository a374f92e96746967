"""Whether the same sweep, run on two disjoint sets of seeds, calls its principal comparisons the same. (the code: `rbctl.report.documents.stability`)."""

from rbctl.report.documents.stability import main

if __name__ == "__main__":
    raise SystemExit(main())
