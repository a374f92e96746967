"""Tools behind the project's documents and checks: benchmarks, probes, data builders and the
reference-document generators. `scripts/` holds one short entry point for each."""
