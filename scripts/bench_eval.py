"""Throughput of evaluation on this machine: answers graded per second, and tokens generated per (the code: `rbctl.tools.bench_eval`)."""

from rbctl.tools.bench_eval import main

if __name__ == "__main__":
    raise SystemExit(main())
