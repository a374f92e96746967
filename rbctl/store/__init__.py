"""Files on disk: atomic writes, JSON-lines run logs, and the run-directory layout (defined once)."""
