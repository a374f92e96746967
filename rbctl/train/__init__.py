"""Training: run-directory set-up, data and rewards, batches, the trainer, the loop, distribution,
tracking, and the dry-run planner. `rbctl.train.loop.train` is the entry point."""
