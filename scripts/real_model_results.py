"""Print the measured part of docs/real_model.md: the SmolLM2 addition sweep, from its run directories. (the code: `rbctl.report.documents.real_model`)."""

from rbctl.report.documents.real_model import main

if __name__ == "__main__":
    raise SystemExit(main())
