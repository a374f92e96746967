"""The training loop's events and the callbacks that subscribe to them (Keras' and Lightning's
callbacks, TRL's `TrainerCallback`): what a run writes and shows besides its steps lives here and
in `rbctl.train.evaluation`, never as state of the loop.

The loop (`rbctl.train.loop`) emits, in this order:

- `on_start(run)`: the run directory's header is written and the steps are about to begin (from
  `run.start`); the starting policy's evaluation is due here when the run starts from step 0;
- `on_step_end(run, step)` after each step, on every rank, the subscribers in their order: the
  periodic evaluation (`rbctl.train.evaluation.PeriodicEvaluation`), the metrics line
  (`MetricsLog`), the samples (`SampleLog`), the checkpoint (`Checkpointing`; after the step's lines,
  so that no checkpoint is ahead of metrics.jsonl);
- `on_progress(run, step)` once the step is written on every rank: the progress display, a sweep's
  progress message (`StepFunction`); a Ctrl-C may land in one;
- `on_interrupt(run, step)` when a Ctrl-C asked to stop after this step (`Checkpointing` saves it
  unless it has);
- `on_end(run)` always, last (trackers close).

The work is timed by phase (`Events.phase`; `rbctl.train.phases` reports it): the loop times the
trainer's set-up ("trainer"), the steps ("steps") and the final evaluation ("final_eval"), the
callbacks their own work ("periodic_eval", "logs", "checkpoint").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rbctl.store.checkpoint import save_checkpoint
from rbctl.store.jsonl import append_jsonl
from rbctl.store.rundir import BUILTIN_MARKER, SAMPLES

if TYPE_CHECKING:
    from rbctl.config.train import TrainConfig
    from rbctl.train.interrupt import StopAfterStep
    from rbctl.train.tracking import Tracker
    from rbctl.train.trainer import Trainer


class Callback:
    """A subscriber to the loop's events (module docstring); every hook does nothing by default."""

    def on_start(self, run: Run) -> None:
        pass

    def on_step_end(self, run: Run, step: StepRecord) -> None:
        pass

    def on_progress(self, run: Run, step: StepRecord) -> None:
        pass

    def on_interrupt(self, run: Run, step: StepRecord) -> None:
        pass

    def on_end(self, run: Run) -> None:
        pass

    def on_phase_end(self, name: str, wall_s: float, cpu_s: float) -> None:
        """A timed phase ended (`Events.phase`): `name`, its wall and CPU seconds."""

    def recall(self, run: Run, request) -> dict | None:
        """An evaluation is due (`rbctl.train.evaluation.EvalRequest`): its results, if this
        subscriber holds an equal one it has copied into the request's folder, else None."""
        return None

    def on_evaluated(self, run: Run, request, results: dict) -> None:
        """An evaluation was made (or recalled) into `request.out_dir` with `results`."""


@dataclass
class StepRecord:
    """One finished step as the callbacks see it: its metrics line (a subscriber may add a key, as
    the periodic evaluation adds its time) and its rows of samples.jsonl."""

    step: int
    metrics: dict
    rows: list[dict]
    saved: bool = False  # its checkpoint is written


class Events:
    """The callbacks of one run, called in order for each event; times the phases (`phase`)."""

    def __init__(self, callbacks: list[Callback]):
        self.callbacks = list(callbacks)
        self._inside = False  # a phase in progress: what runs inside it is its time, not another phase's

    @contextmanager
    def phase(self, name: str):
        """Time the block as phase `name` and tell every callback (`on_phase_end`); a phase inside
        another is the outer one's time."""
        if self._inside:
            yield
            return
        wall, cpu = time.perf_counter(), time.process_time()
        self._inside = True
        try:
            yield
        finally:
            self._inside = False
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            for cb in self.callbacks:
                cb.on_phase_end(name, wall, cpu)

    def emit(self, hook: str, run: Run, *args) -> None:
        """Call `hook` of every callback, in order."""
        for cb in self.callbacks:
            getattr(cb, hook)(run, *args)

    def recall(self, run: Run, request) -> dict | None:
        """The first callback's answer to `Callback.recall`, else None."""
        for cb in self.callbacks:
            if (results := cb.recall(run, request)) is not None:
                return results
        return None


@dataclass
class Run:
    """What the callbacks see of the run: the trainer (policy, engine, config), where it writes,
    whether this process is rank 0 (the one that writes), the step it started from, the Ctrl-C
    handler, the log and whether progress is shown."""

    trainer: Trainer
    run_dir: Path
    main_rank: bool
    start: int
    events: Events
    log: Callable = print
    progress: bool = False
    stop: StopAfterStep | None = None

    @property
    def cfg(self) -> TrainConfig:
        return self.trainer.cfg

    @property
    def stopping(self) -> bool:
        """A Ctrl-C asked the loop to stop after the step in progress."""
        return self.stop is not None and self.stop.requested


class MetricsLog(Callback):
    """Each step's metrics line through the tracker (metrics.jsonl; TensorBoard, W&B), rank 0."""

    def __init__(self, tracker: Tracker):
        self.tracker = tracker

    def on_step_end(self, run: Run, step: StepRecord) -> None:
        with run.events.phase("logs"):
            self.tracker.log(step.step, step.metrics)

    def on_end(self, run: Run) -> None:
        self.tracker.close()


class SampleLog(Callback):
    """The first `samples_per_log` rows of step 1 and of every `sample_every`-th step, rank 0."""

    def on_step_end(self, run: Run, step: StepRecord) -> None:
        cfg = run.cfg
        if step.step % cfg.sample_every == 0 or step.step == 1:
            with run.events.phase("logs"):
                for r in step.rows[: cfg.samples_per_log]:
                    append_jsonl(run.run_dir / SAMPLES, r)


class Checkpointing(Callback):
    """A checkpoint every `save_every` steps, at the last step and at a step a Ctrl-C stops after;
    on every rank (under FSDP the checkpoint gathers the shards), written by rank 0, the newest
    `keep_checkpoints` kept."""

    def on_step_end(self, run: Run, step: StepRecord) -> None:
        cfg = run.cfg
        if step.step % cfg.save_every == 0 or step.step == cfg.steps or run.stopping:
            self.save(run, step)

    def on_interrupt(self, run: Run, step: StepRecord) -> None:
        if not step.saved:  # the Ctrl-C came after the save point: a resume redoes nothing all the same
            self.save(run, step)

    def save(self, run: Run, step: StepRecord) -> None:
        tr = run.trainer
        with run.events.phase("checkpoint"):
            weights, state = tr.checkpoint(step.step)
            if run.main_rank:
                marker = Path(tr.base_source) / BUILTIN_MARKER if tr.builtin is not None else None
                save_checkpoint(run.run_dir, step.step, tr.model, tr.tokenizer, state, run.cfg.keep_checkpoints,
                                marker, weights=weights)
        step.saved = True


@dataclass
class StepFunction(Callback):
    """`fn(step, metrics)` once each step is written: a sweep's progress message, a test's probe."""

    fn: Callable[[int, dict], None]

    def on_progress(self, run: Run, step: StepRecord) -> None:
        self.fn(step.step, step.metrics)
