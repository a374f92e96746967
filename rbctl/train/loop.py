"""`train`: the loop around the trainer: resume, checkpoints, metrics, samples, periodic evaluation,
the progress display. Only rank 0 writes the run directory.

Evaluation during a run (periodic, and a sweep's final evaluation, `evaluate_final`) evaluates the
trainer's in-memory policy through the run's engine: a vLLM run's own engine instance (its weights
are synced after every optimizer step, and vLLM is built once per process), or an hf engine over
the policy with the evaluation's batch limits; generation runs in the engine's sampling context
under the training precision."""

from __future__ import annotations

import os
import time
from contextlib import nullcontext
from pathlib import Path

from rbctl.config.train import TrainConfig, for_run
from rbctl.errors import UserError
from rbctl.config.eval import EvalConfig
from rbctl.eval.pipeline import evaluate_policy, load_problems, periodic_eval_lines
from rbctl.rollout.models import LoadedPolicy
from rbctl.store.checkpoint import save_checkpoint
from rbctl.store.lock import DirLock
from rbctl.store.rundir import (BUILTIN_MARKER, EVAL_LINES, METRICS, MODEL, PROVENANCE, SAMPLES, SUMMARY,
                                checkpoint_dir, final_eval_dir, periodic_eval_dir)
from rbctl.store.write import write_provenance
from rbctl.train.interrupt import StopAfterStep
from rbctl.train.training_data import task_spec
from rbctl.train.run_setup import check_run_dir, provenance, started, write_config
from rbctl.store.jsonl import append_jsonl, read_log, truncate_jsonl
from rbctl.train.tracking import Tracker
from rbctl.train.trainer import Trainer


def train(cfg: TrainConfig, run_dir: Path, force: bool = False, progress: bool = True, log=print,
          on_step=None, extend: bool = False, final_eval: EvalConfig | None = None) -> list[dict]:
    """Train (or resume) the run in `run_dir`; returns the metrics of the steps run now. `force`
    and `extend`: what a resume may change (`rbctl.train.run_setup.check_run_dir`). With `final_eval`
    (a `for_run` evaluation config: a sweep's), rank 0 then evaluates the final policy with it,
    through the run's engine, into RUN_DIR/eval/step_N/ (`evaluate_final`; also when the run was
    already complete).

    Rank 0 holds RUN_DIR/.lock for the whole run: a second `rbctl train` on the same directory is
    refused (one writer per run directory). A first Ctrl-C (SIGINT) ends the step in progress, writes
    its checkpoint and raises KeyboardInterrupt (`rbctl.train.interrupt`): a resume loses no step."""
    run_dir = Path(run_dir)
    main_rank = int(os.environ.get("RANK", "0")) == 0
    made = _first_missing(run_dir) if main_rank else None  # the folder this call creates, if any
    try:
        with DirLock(run_dir, "rbctl train", log=log) if main_rank else nullcontext():
            tr, done = _train(cfg, run_dir, force, extend, progress, log, on_step, main_rank)
            if final_eval is not None and main_rank:
                evaluate_final(tr, final_eval)
            return done
    except BaseException:
        if made is not None and not started(run_dir):  # failed before its first step: leave nothing behind
            import shutil

            shutil.rmtree(made, ignore_errors=True)
        raise


def _first_missing(path: Path) -> Path | None:
    """The outermost folder of `path` that does not exist yet (`path` itself, or a parent), else None."""
    missing = None
    for p in (path, *path.parents):
        if p.exists():
            return missing
        missing = p
    return missing


def _train(cfg: TrainConfig, run_dir: Path, force: bool, extend: bool, progress: bool, log, on_step,
           main_rank: bool) -> tuple[Trainer, list[dict]]:
    quiet = log if main_rank else (lambda *a: None)
    logged = logged_bound(run_dir, quiet)  # every log read whole first: a corrupt line stops here, nothing rewritten
    cfg = check_run_dir(cfg, run_dir, force, extend)  # every rank, before rank 0 rewrites config.yaml below
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
    if start >= cfg.steps:
        log(f"run {run_dir} is already complete ({start} steps)")
        return tr, []
    if start:
        log(f"resuming {run_dir} from step {start}")
    tracker = None
    if main_rank:
        tracker = Tracker(run_dir, cfg.log.tensorboard, cfg.log.wandb, cfg.log.wandb_project, cfg.log.wandb_mode,
                          config=cfg.model_dump(mode="json"))
    held_out = None  # the held-out problems, loaded at the first periodic evaluation
    if start == 0 and cfg.eval.every:
        if main_rank and progress:  # a real model's step-0 evaluation can take minutes: say what is running
            log(f"step 0: evaluating the starting policy on {', '.join(cfg.eval.benchmarks)} before training …")
        t0 = time.perf_counter()
        held_out = _periodic_eval(tr, cfg, run_dir, 0, {}, main_rank, held_out)  # the curve starts at the warm start
        if main_rank and progress:
            for line in final_heldout_lines(run_dir):
                log(line.replace("final held-out", "step-0 held-out", 1).replace(" (step 0)", "")
                    + f" ({time.perf_counter() - t0:.0f} s)")
    marker = Path(tr.base_source) / BUILTIN_MARKER if tr.builtin is not None else None
    done: list[dict] = []
    display = _Display(cfg.steps, start, enabled=progress and main_rank)
    stop = StopAfterStep(enabled=tr.dist.world == 1, log=log)  # Ctrl-C: this step's checkpoint, then stop
    nonfinite_row = 0
    try:
        with display, stop:
            for step in range(start + 1, cfg.steps + 1):
                metrics, rows = tr.step(step)
                nonfinite_row = nonfinite_row + 1 if metrics["nonfinite/skipped"] else 0
                if nonfinite_row >= cfg.max_nonfinite_steps:
                    raise UserError(f"loss or gradient non-finite for {nonfinite_row} steps in a row at step {step} "
                                    f"(max_nonfinite_steps={cfg.max_nonfinite_steps}); lower optim.lr or check the "
                                    "rewards (those steps were skipped: no checkpoint holds NaN)")
                if cfg.eval.every and (step % cfg.eval.every == 0 or step == cfg.steps):
                    held_out = _periodic_eval(tr, cfg, run_dir, step, metrics, main_rank, held_out)
                if main_rank:
                    tracker.log(step, metrics)
                    if step % cfg.sample_every == 0 or step == 1:
                        for r in rows[: cfg.samples_per_log]:
                            append_jsonl(run_dir / SAMPLES, r)
                # after the step's lines, so that no checkpoint is ahead of metrics.jsonl; on every rank:
                # under FSDP the checkpoint gathers the shards
                saved = step % cfg.save_every == 0 or step == cfg.steps or stop.requested
                if saved:
                    _save(tr, run_dir, step, cfg.keep_checkpoints, marker, main_rank)
                tr.dist.barrier()
                done.append({"step": step, **metrics})
                display.update(step, metrics)
                if on_step is not None:
                    on_step(step, metrics)  # a sweep's progress message: a Ctrl-C may land in it, after the save above
                if stop.requested:  # this step is complete; saved (now, if the Ctrl-C came after the save above):
                    if not saved:   # a resume redoes nothing
                        _save(tr, run_dir, step, cfg.keep_checkpoints, marker, main_rank)
                    raise KeyboardInterrupt
    finally:
        if tracker is not None:
            tracker.close()
    return tr, done


def _save(tr: Trainer, run_dir: Path, step: int, keep: int, marker: Path | None, main_rank: bool) -> None:
    """Checkpoint `step`: the state on every rank (under FSDP it gathers the shards), written by rank 0."""
    weights, state = tr.checkpoint(step)
    if main_rank:
        save_checkpoint(run_dir, step, tr.model, tr.tokenizer, state, keep, marker, weights=weights)


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


def _periodic_eval(tr: Trainer, cfg: TrainConfig, run_dir: Path, step: int, metrics: dict, main_rank: bool,
                   problems: dict | None) -> dict | None:
    """Held-out evaluation during training, on rank 0; one line per benchmark in RUN_DIR/eval.jsonl.
    `problems`: the held-out problems an earlier evaluation loaded (None: load them); returns them.
    Every rank enters `tr.full_weights()` (under FSDP the gather is collective); the others leave
    it at once and wait at `tr.dist.barrier()`, which no evaluation length times out
    (`rbctl.train.distributed`)."""
    with tr.full_weights():
        if main_rank:
            problems = _evaluate_on_main(tr, cfg, run_dir, step, metrics, problems)
    tr.dist.barrier()
    return problems


def _evaluate_on_main(tr: Trainer, cfg: TrainConfig, run_dir: Path, step: int, metrics: dict,
                      problems: dict | None) -> dict:
    """`_periodic_eval`'s work on rank 0."""
    ecfg = for_run(cfg.eval, cfg)
    if problems is None:
        problems = load_problems(ecfg, task_spec(cfg))  # `builtin` = this run's own task
    t = time.perf_counter()
    out_dir = periodic_eval_dir(run_dir, step)
    key = _evaluation_key(tr, ecfg, step, problems)
    seen = _EVALUATED.get(key) if key is not None else None
    if seen is not None and _complete(*seen):
        results = _copy_evaluation(*seen, out_dir, tr.base_source)
    else:
        results = _evaluate(tr, ecfg, out_dir, step, problems, tr.base_source)
        if key is not None:
            _EVALUATED[key] = (out_dir, results)
    metrics["time/eval_s"] = time.perf_counter() - t
    tr.last_eval = (step, ecfg, periodic_eval_dir(run_dir, step), results)
    for line in periodic_eval_lines(results, step):
        append_jsonl(run_dir / EVAL_LINES, line)
    return problems


# Evaluations this process made of a small policy, by what decides their samples (`_evaluation_key`):
# a sweep's worker runs many runs from one warm start, whose step-0 evaluations are one evaluation.
_EVALUATED: dict[str, tuple[Path, dict]] = {}
MEMO_MAX_PARAMS = 10_000_000  # hashing the weights is free next to an evaluation up to here


def _evaluation_key(tr: Trainer, ecfg: EvalConfig, step: int, problems: dict) -> str | None:
    """What decides an hf evaluation's samples and summary, as a hash: the policy's weights (bytes,
    dtype, device), the evaluation config, the step, the problems, the model and task settings and
    torch's thread count (a summary records it); None where no copy is made (vLLM, FSDP, whose
    state dict holds shards, or a policy over `MEMO_MAX_PARAMS`). The samples draw from generators seeded by the evaluation's own seed
    (`eval.seed`), never the run's, so two runs from one warm start evaluate it identically."""
    import hashlib

    import torch

    if ecfg.engine != "hf" or tr.parallel.sharded:  # FSDP: `state_dict()` would turn the gathered parameters
        return None                                  # back into shards, and every evaluation forward would all-gather
    params = list(tr.model.state_dict().items())
    if sum(p.numel() for _, p in params) > MEMO_MAX_PARAMS:
        return None
    h = hashlib.sha256()
    for name, p in params:
        h.update(f"{name}:{p.dtype}:{p.device}:{tuple(p.shape)}".encode())
        h.update(p.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    cfg = tr.cfg
    h.update(repr((ecfg.model_dump(), step, cfg.model.model_dump(), cfg.data.model_dump(), tr.base_source,
                   str(tr.precision), torch.get_num_threads())).encode())
    for name, probs in problems.items():
        h.update(repr((name, [(q.id, q.problem, q.answer) for q in probs])).encode())
    return h.hexdigest()


def _complete(out_dir: Path, results: dict) -> bool:
    """Whether an earlier evaluation's files are all still there to copy."""
    from rbctl.eval.pipeline import bench_dir_name
    from rbctl.store.rundir import EVAL_SAMPLES

    return all((out_dir / bench_dir_name(b) / EVAL_SAMPLES).is_file() for b in results)


def _evaluate(tr: Trainer, ecfg: EvalConfig, out_dir: Path, step: int, problems, source: str) -> dict:
    """Evaluate the trainer's policy with `ecfg` (a `for_run` config) through the run's engine (module
    docstring); the summaries name `source` as the model."""
    policy = LoadedPolicy(tr.model, tr.tokenizer, source, tr.builtin)
    engine = tr.engine if ecfg.engine == "vllm" else None  # hf: evaluate_policy builds one over the policy
    results = evaluate_policy(policy, ecfg, out_dir, step=step, problems=problems, engine=engine,
                              precision=tr.precision)
    tr.model.train()
    return results


def evaluate_final(tr: Trainer, ecfg: EvalConfig) -> dict:
    """Evaluate a complete run's policy (step `steps`) with `ecfg` into RUN_DIR/eval/step_N/ (where
    `report` looks), in memory through the run's engine (module docstring); the summaries name the
    final checkpoint as the model. When this process has just evaluated that policy with the same
    config (the periodic evaluation at the last step: the main job's), its results are copied
    instead (`_copy_evaluation`)."""
    cfg, step = tr.cfg, tr.cfg.steps
    if tr.resume_step > step:
        raise UserError(f"run directory {tr.run_dir} holds checkpoints past steps={step} (step {tr.resume_step}); "
                        "its final policy is not the one of this config")
    model = str(checkpoint_dir(tr.run_dir, step) / MODEL)
    last = tr.last_eval
    if last is not None and last[0] == step and last[1].model_dump() == ecfg.model_dump():
        return _copy_evaluation(last[2], last[3], final_eval_dir(tr.run_dir, step), model)
    problems = load_problems(ecfg, task_spec(cfg))  # `builtin` = the run's own task
    return _evaluate(tr, ecfg, final_eval_dir(tr.run_dir, step), step, problems, model)


def _copy_evaluation(src: Path, results: dict, dst: Path, model: str) -> dict:
    """An evaluation as a copy of one already made of the same policy with the same config: the final
    evaluation of the periodic one at the same step, a periodic one of another run's with the same
    weights (`_evaluation_key`). The same policy, problems, seeds and engine give the same samples
    (the evaluation would redo every sample of it); the summaries name `model`. Per benchmark, its samples, then its
    summary (written last, as `evaluate_policy` writes it: a copy cut short is redone on resume)."""
    import shutil

    from rbctl.eval import partial
    from rbctl.eval.pipeline import bench_dir_name
    from rbctl.store.atomic import atomic_output
    from rbctl.store.rundir import EVAL_SAMPLES

    out = {}
    for name, summary in results.items():
        bench = bench_dir_name(name)
        (dst / bench).mkdir(parents=True, exist_ok=True)
        (dst / bench / SUMMARY).unlink(missing_ok=True)
        with atomic_output(dst / bench / EVAL_SAMPLES) as tmp:
            shutil.copyfile(src / bench / EVAL_SAMPLES, tmp)
        out[name] = {**summary, "model": model}
        partial.finish(dst / bench, out[name])
    return out


def final_heldout_lines(run_dir: Path) -> list[str]:
    """One line per benchmark of the run's last periodic evaluation (RUN_DIR/eval.jsonl):
    ``final held-out builtin avg@8 51.2% (step 100)`` (percent, as eval and report print scores); none
    when the run has no such evaluation."""
    from rbctl.store.read import read_lines

    lines = read_lines(Path(run_dir) / EVAL_LINES)
    if not lines:
        return []
    last = max(int(x.get("step", 0)) for x in lines)
    return [f"final held-out {x['benchmark']} avg@{x.get('n', '?')} {100 * x['avg@n']:.1f}% (step {last})"
            for x in lines if int(x.get("step", 0)) == last and x.get("avg@n") is not None]


PLAIN_EVERY_S = 30.0  # when output is not a terminal: a plain progress line at most this often (and at the end)


class _Display:
    """A Rich progress bar with live reward, entropy and κ_eff; when output is not a terminal (a log
    file, a Slurm job), plain lines instead: one every `every` seconds and one at the last step,
    each flushed."""

    def __init__(self, total: int, start: int, enabled: bool, plain: bool | None = None,
                 every: float = PLAIN_EVERY_S, out=None):
        import sys

        self.enabled = enabled
        self.total, self.start = total, start
        self.last_keff = None
        self.out = out or sys.stdout
        self.plain = (not self.out.isatty()) if plain is None else plain
        self.every = every
        self.t0 = self.last = time.monotonic()

    def __enter__(self):
        if self.enabled and not self.plain:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

            self.progress = Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(),
                                     TextColumn("{task.fields[info]}"), TimeElapsedColumn(), TimeRemainingColumn())
            self.progress.__enter__()
            self.task = self.progress.add_task("train", total=self.total, completed=self.start, info="")
        return self

    def update(self, step: int, m: dict) -> None:
        if not self.enabled:
            return
        if m.get("kappa_eff") is not None:
            self.last_keff = m["kappa_eff"]
        keff = f"{self.last_keff:.3g}" if self.last_keff is not None else "–"
        info = f"reward {m['reward/mean']:.3f}  entropy {m['entropy']:.3f}  κ_eff {keff}"
        if not self.plain:
            self.progress.update(self.task, completed=step, info=info)
            return
        now = time.monotonic()
        if now - self.last >= self.every or step == self.total:
            self.last = now
            print(f"[{time.strftime('%H:%M:%S')}] train step {step}/{self.total}  {info}  "
                  f"({(now - self.t0) / 60:.1f} min)", file=self.out, flush=True)

    def __exit__(self, *exc):
        if self.enabled and not self.plain:
            self.progress.__exit__(*exc)
