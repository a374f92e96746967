"""Write the single-digit addition task of the real-model demo as JSONL (a benchmark is data). (the code: `rbctl.tools.make_arithmetic`)."""

from rbctl.tools.make_arithmetic import main

if __name__ == "__main__":
    raise SystemExit(main())
