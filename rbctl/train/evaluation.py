"""Evaluation during a run, as callbacks of the loop (`rbctl.train.callbacks`): the periodic
held-out evaluation (`PeriodicEvaluation`, every `eval.every` steps and of the starting policy),
a worker's memory of the evaluations it made (`EvaluationCache`: a sweep's runs from one warm start
share their step-0 evaluation), and a sweep's final evaluation (`evaluate_final`).

Evaluation during a run evaluates the trainer's in-memory policy through the run's engine: a vLLM
run's own engine instance (its weights are synced after every optimizer step, and vLLM is built
once per process), or an hf engine over the policy with the evaluation's batch limits; generation
runs in the engine's sampling context under the training precision.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from rbctl.config.eval import EvalConfig
from rbctl.config.train import for_run
from rbctl.errors import UserError
from rbctl.eval.pipeline import bench_dir_name, evaluate_policy, load_problems, periodic_eval_lines
from rbctl.rollout.models import LoadedPolicy
from rbctl.store.jsonl import append_jsonl
from rbctl.store.rundir import EVAL_LINES, EVAL_SAMPLES, MODEL, SUMMARY, checkpoint_dir, final_eval_dir, periodic_eval_dir
from rbctl.train.callbacks import Callback, Run, StepRecord
from rbctl.train.training_data import task_spec


@dataclass
class EvalRequest:
    """An evaluation that is due: of the trainer's policy at `step` with `ecfg` (a `for_run`
    config) on `problems`, into `out_dir`."""

    step: int
    ecfg: EvalConfig
    problems: dict
    out_dir: Path


@dataclass
class EvalDone:
    """An evaluation made: its request and its results (benchmark -> summary)."""

    request: EvalRequest
    results: dict


class PeriodicEvaluation(Callback):
    """The held-out evaluation during training, on rank 0, of the starting policy (a run from step 0)
    and every `eval.every` steps and at the last: one line per benchmark in RUN_DIR/eval.jsonl, the
    samples and summaries in RUN_DIR/eval/periodic/step_N/, its wall time as the step's `time/eval_s`.
    Every rank enters `trainer.full_weights()` (under FSDP the gather is collective); the others
    leave it at once and wait at `trainer.dist.barrier()`, which no evaluation length times out
    (`rbctl.train.distributed`). An evaluation another callback recalls
    (`Callback.recall`: `EvaluationCache`) is copied instead of made."""

    def __init__(self):
        self.problems: dict | None = None  # the held-out problems, loaded at the first evaluation
        self.last: EvalDone | None = None  # the last evaluation made (what `evaluate_final` may copy)

    def on_start(self, run: Run) -> None:
        if run.start != 0 or not run.cfg.eval.every:
            return
        show = run.main_rank and run.progress
        if show:  # a real model's step-0 evaluation can take minutes: say what is running
            run.log(f"step 0: evaluating the starting policy on {', '.join(run.cfg.eval.benchmarks)} before training …")
        t0 = time.perf_counter()
        self.evaluate(run, 0, {})  # the curve starts at the warm start
        if show:
            for line in final_heldout_lines(run.run_dir):
                run.log(line.replace("final held-out", "step-0 held-out", 1).replace(" (step 0)", "")
                        + f" ({time.perf_counter() - t0:.0f} s)")

    def on_step_end(self, run: Run, step: StepRecord) -> None:
        every = run.cfg.eval.every
        if every and (step.step % every == 0 or step.step == run.cfg.steps):
            self.evaluate(run, step.step, step.metrics)

    def evaluate(self, run: Run, step: int, metrics: dict) -> None:
        with run.events.phase("periodic_eval"):
            with run.trainer.full_weights():
                if run.main_rank:
                    self._evaluate(run, step, metrics)
            run.trainer.dist.barrier()  # the other ranks wait here, on a wait no evaluation length times out

    def _evaluate(self, run: Run, step: int, metrics: dict) -> None:
        tr = run.trainer
        # rank 0, inside `full_weights()` (`evaluate`)
        ecfg = for_run(run.cfg.eval, run.cfg)
        if self.problems is None:
            self.problems = load_problems(ecfg, task_spec(run.cfg))  # `builtin` = this run's own task
        t = time.perf_counter()
        request = EvalRequest(step, ecfg, self.problems, periodic_eval_dir(run.run_dir, step))
        results = run.events.recall(run, request)
        if results is None:
            results = evaluate_trainer(tr, ecfg, request.out_dir, step, self.problems, tr.base_source)
        run.events.emit("on_evaluated", run, request, results)
        metrics["time/eval_s"] = time.perf_counter() - t
        self.last = EvalDone(request, results)
        for line in periodic_eval_lines(results, step):
            append_jsonl(run.run_dir / EVAL_LINES, line)


def evaluate_trainer(tr, ecfg: EvalConfig, out_dir: Path, step: int, problems, source: str) -> dict:
    """Evaluate the trainer's policy with `ecfg` (a `for_run` config) through the run's engine
    (module docstring); the summaries name `source` as the model."""
    policy = LoadedPolicy(tr.model, tr.tokenizer, source, tr.builtin)
    engine = tr.engine if ecfg.engine == "vllm" else None  # hf: evaluate_policy builds one over the policy
    results = evaluate_policy(policy, ecfg, out_dir, step=step, problems=problems, engine=engine,
                              precision=tr.precision)
    tr.model.train()
    return results


MEMO_MAX_PARAMS = 10_000_000  # hashing the weights is free next to an evaluation up to here


class EvaluationCache(Callback):
    """The evaluations one process made of a small policy, by what decides their samples
    (`evaluation_key`): a sweep's worker runs many runs from one warm start, whose step-0
    evaluations are one evaluation; a later one is a copy (`copy_evaluation`). One per process
    that runs several runs (`rbctl.sweep.ablate`'s worker), given to each run's `train`."""

    def __init__(self):
        self.made: dict[str, tuple[Path, dict]] = {}
        self._key: str | None = None  # of the evaluation due now

    def recall(self, run: Run, request: EvalRequest) -> dict | None:
        self._key = evaluation_key(run.trainer, request)
        seen = self.made.get(self._key) if self._key is not None else None
        if seen is not None and _complete(*seen):
            self._key = None  # a copy: the first one stays the one recalled
            return copy_evaluation(*seen, request.out_dir, run.trainer.base_source)
        return None

    def on_evaluated(self, run: Run, request: EvalRequest, results: dict) -> None:
        if self._key is not None:
            self.made[self._key] = (request.out_dir, results)
            self._key = None


def evaluation_key(tr, request: EvalRequest) -> str | None:
    """What decides an hf evaluation's samples and summary, as a hash: the policy's weights (bytes,
    dtype, device), the evaluation config, the step, the problems, the model and task settings and
    torch's thread count (a summary records it); None where no copy is made (vLLM, FSDP, whose state
    dict holds shards, or a policy over `MEMO_MAX_PARAMS`). The samples draw from generators seeded by the evaluation's own seed
    (`eval.seed`), never the run's, so two runs from one warm start evaluate it identically."""
    import hashlib

    import torch

    ecfg = request.ecfg
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
    h.update(repr((ecfg.model_dump(), request.step, cfg.model.model_dump(), cfg.data.model_dump(), tr.base_source,
                   str(tr.precision), torch.get_num_threads())).encode())
    for name, probs in request.problems.items():
        h.update(repr((name, [(q.id, q.problem, q.answer) for q in probs])).encode())
    return h.hexdigest()


def _complete(out_dir: Path, results: dict) -> bool:
    """Whether an earlier evaluation's files are all still there to copy."""
    return all((out_dir / bench_dir_name(b) / EVAL_SAMPLES).is_file() for b in results)


def evaluate_final(tr, ecfg: EvalConfig, last: EvalDone | None = None) -> dict:
    """Evaluate a complete run's policy (step `steps`) with `ecfg` into RUN_DIR/eval/step_N/ (where
    `report` looks), in memory through the run's engine (module docstring); the summaries name the
    final checkpoint as the model. When `last` (the run's last periodic evaluation, in this process)
    is of that policy with the same config (the main job's), its results are copied instead
    (`copy_evaluation`)."""
    cfg, step = tr.cfg, tr.cfg.steps
    if tr.resume_step > step:
        raise UserError(f"run directory {tr.run_dir} holds checkpoints past steps={step} (step {tr.resume_step}); "
                        "its final policy is not the one of this config")
    model = str(checkpoint_dir(tr.run_dir, step) / MODEL)
    if last is not None and last.request.step == step and last.request.ecfg.model_dump() == ecfg.model_dump():
        return copy_evaluation(last.request.out_dir, last.results, final_eval_dir(tr.run_dir, step), model)
    problems = load_problems(ecfg, task_spec(cfg))  # `builtin` = the run's own task
    return evaluate_trainer(tr, ecfg, final_eval_dir(tr.run_dir, step), step, problems, model)


def copy_evaluation(src: Path, results: dict, dst: Path, model: str) -> dict:
    """An evaluation as a copy of one already made of the same policy with the same config: the final
    evaluation of the periodic one at the same step, a periodic one of another run's with the same
    weights (`evaluation_key`). The same policy, problems, seeds and engine give the same samples
    (the evaluation would redo every sample of it); the summaries name `model`. Per benchmark, its samples, then its
    summary (written last, as `evaluate_policy` writes it: a copy cut short is redone on resume)."""
    import shutil

    from rbctl.eval import partial
    from rbctl.store.atomic import atomic_output

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
