"""The GPU check of the paper-scale path (`scripts/gpu_check.py` is its entry point); the benchmarks,
probes, data builders and reference-document generators are in scripts/, outside the package."""
