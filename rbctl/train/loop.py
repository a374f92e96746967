"""`train`: the loop around the trainer: resume, the run directory's header, the steps, and the
events its callbacks subscribe to (`rbctl.train.callbacks`: the periodic evaluation, the metrics
and samples logs, checkpoints, the progress display, phase timing, a sweep's evaluation cache and
progress messages). Only rank 0 writes the run directory."""

from __future__ import annotations

import os
from contextlib import nullcontext
from pathlib import Path

from rbctl.config.eval import EvalConfig
from rbctl.config.train import TrainConfig
from rbctl.errors import UserError
from rbctl.store.jsonl import read_log, truncate_jsonl
from rbctl.store.lock import DirLock
from rbctl.store.rundir import EVAL_LINES, METRICS, PROVENANCE, SAMPLES
from rbctl.store.write import write_provenance
from rbctl.train.callbacks import (Callback, Checkpointing, Events, MetricsLog, Run, SampleLog, StepFunction,
                                   StepRecord)
from rbctl.train.evaluation import PeriodicEvaluation, evaluate_final
from rbctl.train.interrupt import StopAfterStep
from rbctl.train.progress import ProgressDisplay
from rbctl.train.run_setup import check_run_dir, provenance, started, write_config
from rbctl.train.tracking import Tracker
from rbctl.train.trainer import Trainer


def train(cfg: TrainConfig, run_dir: Path, force: bool = False, progress: bool = True, log=print,
          on_step=None, extend: bool = False, final_eval: EvalConfig | None = None,
          callbacks: list[Callback] = ()) -> list[dict]:
    """Train (or resume) the run in `run_dir`; returns the metrics of the steps run now. `force`
    and `extend`: what a resume may change (`rbctl.train.run_setup.check_run_dir`). `on_step(step,
    metrics)`: called once each step is written (`StepFunction`). `callbacks`: more subscribers to
    the loop's events, before the run's own (a sweep's `EvaluationCache`, a `PhaseTimer`). With
    `final_eval` (a `for_run` evaluation config: a sweep's), rank 0 then evaluates the final policy
    with it, through the run's engine, into RUN_DIR/eval/step_N/ (`evaluate_final`; also when the run
    was already complete).

    Rank 0 holds RUN_DIR/.lock for the whole run: a second `rbctl train` on the same directory is
    refused (one writer per run directory). A first Ctrl-C (SIGINT) ends the step in progress, writes
    its checkpoint and raises KeyboardInterrupt (`rbctl.train.interrupt`): a resume loses no step."""
    run_dir = Path(run_dir)
    main_rank = int(os.environ.get("RANK", "0")) == 0
    made = _first_missing(run_dir) if main_rank else None  # the folder this call creates, if any
    events, periodic = Events(list(callbacks)), PeriodicEvaluation()
    try:
        with DirLock(run_dir, "rbctl train", log=log) if main_rank else nullcontext():
            tr = _start(cfg, run_dir, force, extend, log, main_rank, events)
            done = []
            if tr.resume_step >= tr.cfg.steps:
                log(f"run {run_dir} is already complete ({tr.resume_step} steps)")
            else:
                if tr.resume_step:
                    log(f"resuming {run_dir} from step {tr.resume_step}")
                events.callbacks += _run_callbacks(tr, main_rank, progress, periodic, on_step)
                run = Run(tr, run_dir, main_rank, tr.resume_step, events, log if main_rank else _silent, progress)
                done = _steps(run)
            if final_eval is not None and main_rank:
                with events.phase("final_eval"):
                    evaluate_final(tr, final_eval, periodic.last)
            return done
    except BaseException:
        if made is not None and not started(run_dir):  # failed before its first step: leave nothing behind
            import shutil

            shutil.rmtree(made, ignore_errors=True)
        raise


def _silent(*args) -> None:
    pass


def _first_missing(path: Path) -> Path | None:
    """The outermost folder of `path` that does not exist yet (`path` itself, or a parent), else None."""
    missing = None
    for p in (path, *path.parents):
        if p.exists():
            return missing
        missing = p
    return missing


def _start(cfg: TrainConfig, run_dir: Path, force: bool, extend: bool, log, main_rank: bool, events: Events) -> Trainer:
    """The trainer, resumed from the newest checkpoint the logs agree with, and the run directory's
    header: its config, its logs cut back to that checkpoint, its provenance."""
    quiet = log if main_rank else _silent
    logged = logged_bound(run_dir, quiet)  # every log read whole first: a corrupt line stops here, nothing rewritten
    cfg = check_run_dir(cfg, run_dir, force, extend)  # every rank, before rank 0 rewrites config.yaml below
    with events.phase("trainer"):
        tr = Trainer(cfg, run_dir, log=quiet, resume_at_most=logged)
    tr.dist.barrier()
    start = tr.resume_step
    if main_rank:  # only rank 0 writes the run directory
        write_config(cfg, run_dir, start)
        # Lines written after the checkpoint we resume from are redone: drop them (and a torn last line).
        # A run that starts over (no checkpoint) redoes everything, its step-0 evaluation included.
        for name in (METRICS, SAMPLES, EVAL_LINES):
            truncate_jsonl(run_dir / name, lambda r: start > 0 and r.get("step", 0) <= start)
        if start == 0 or not (run_dir / PROVENANCE).exists():
            prov = {**provenance(cfg, tr.device), "world_size": tr.dist.world, "cpu_linear": tr.cpu_linear,
                    "logprobs": "fused" if tr.state.fused_logprobs else "softmax"}
            write_provenance(run_dir, prov)
    return tr


def _run_callbacks(tr: Trainer, main_rank: bool, progress: bool, periodic: PeriodicEvaluation, on_step) -> list[Callback]:
    """The run's own subscribers, in the order they hear each event (rbctl.train.callbacks): the
    evaluation, then rank 0's logs, then the checkpoint (after the step's lines, so that none is
    ahead of metrics.jsonl), then the display and `on_step`."""
    cfg = tr.cfg
    own: list[Callback] = [periodic]
    if main_rank:
        tracker = Tracker(tr.run_dir, cfg.log.tensorboard, cfg.log.wandb, cfg.log.wandb_project, cfg.log.wandb_mode,
                          config=cfg.model_dump(mode="json"))
        own += [MetricsLog(tracker), SampleLog()]
    own.append(Checkpointing())
    if main_rank and progress:
        own.append(ProgressDisplay(cfg.steps, tr.resume_step))
    if on_step is not None:
        own.append(StepFunction(on_step))
    return own


def _steps(run: Run) -> list[dict]:
    """The steps from `run.start + 1` to `steps`, each followed by its events; the metrics of each."""
    tr, cfg, events = run.trainer, run.cfg, run.events
    run.stop = StopAfterStep(enabled=tr.dist.world == 1, log=run.log)  # Ctrl-C: this step's checkpoint, then stop
    done: list[dict] = []
    nonfinite_row = 0
    try:
        events.emit("on_start", run)
        with run.stop:
            for step in range(run.start + 1, cfg.steps + 1):
                with events.phase("steps"):
                    metrics, rows = tr.step(step)
                nonfinite_row = nonfinite_row + 1 if metrics["nonfinite/skipped"] else 0
                if nonfinite_row >= cfg.max_nonfinite_steps:
                    raise UserError(f"loss or gradient non-finite for {nonfinite_row} steps in a row at step {step} "
                                    f"(max_nonfinite_steps={cfg.max_nonfinite_steps}); lower optim.lr or check the "
                                    "rewards (those steps were skipped: no checkpoint holds NaN)")
                record = StepRecord(step, metrics, rows)
                events.emit("on_step_end", run, record)  # evaluation, logs, checkpoint
                tr.dist.barrier()
                done.append({"step": step, **metrics})
                events.emit("on_progress", run, record)  # a Ctrl-C may land here, after the save
                if run.stopping:  # this step is complete and saved (now, if the Ctrl-C came after the save point)
                    events.emit("on_interrupt", run, record)
                    raise KeyboardInterrupt
    finally:
        events.emit("on_end", run)
    return done


def logged_bound(run_dir: Path, log) -> int | None:
    """The last step a resume may start from by the run's logs: the last step metrics.jsonl holds
    whole, and before the step of a torn last line of any log (a write a crash cut short; dropped
    with a notice, so that the step is recomputed from the checkpoint before it and no step goes
    missing). None when there is no metrics log (nothing to be consistent with). Reads every log
    whole: an invalid line that is not a torn last line raises `CorruptLog` (one line, the file and
    its line number) before the caller rewrites anything."""
    bound = None
    for name in (METRICS, EVAL_LINES, SAMPLES):
        path = run_dir / name
        lines = read_log(path)
        steps = [int(r.get("step", 0)) for r in lines.records]
        if name == METRICS and path.exists():
            bound = max(steps, default=0)
        if lines.torn is None:
            continue
        # metrics: one line per step, so the torn one is the step after the last; the other logs
        # write several lines per step: the step its fragment names, else (conservatively) the last one's
        torn = max(steps, default=0) + 1 if name == METRICS else lines.torn_step()
        torn = torn if torn is not None else max(steps, default=0)
        bound = torn - 1 if bound is None else min(bound, torn - 1)
        log(f"notice: {path}: dropping its torn last line {lines.torn_line} (a write cut short) and "
            f"recomputing step {torn} from the checkpoint before it")
    return bound
