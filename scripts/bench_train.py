"""Benchmark of the embedded default: `python -m scripts.bench_train [--steps N] [--config PATH]`. (the code: `rbctl.tools.bench_train`)."""

from rbctl.tools.bench_train import main

if __name__ == "__main__":
    raise SystemExit(main())
