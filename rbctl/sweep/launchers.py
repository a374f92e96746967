"""Running a sweep's (arm, seed) jobs through submitit instead of local worker processes.

`submit_runs(jobs, launcher_cfg)` takes `(key, fn, args)` triples, runs `fn(*args)` as one job each
and returns `{key: {"key", "status", "error"}}`, the dicts `ablate._run_one` returns. Where the jobs
run is `launcher_cfg.cluster`:
- `slurm` (or `auto` where `srun` exists): one Slurm job array, `slurm_*` options from the sweep's
  `launcher:` section (partition, gpus_per_node, cpus_per_task, mem_gb, timeout_min, ...);
- `local`: submitit's local executor, one subprocess per job on this machine;
- `debug`: submitit's debug executor, in this process one job after another (tests, pdb).

How a job can fail, and what the result then says:
1. `fn` raises: the job catches it on the node and returns a failed result (never submitit's pdb
   hook, never a lost job), so a failing run does not stop the others.
2. The job dies (killed, out of memory, a node failure): submitit raises when the result is read;
   the result is failed, with the error's first line and where the job's logs are.
3. Timeout or preemption on Slurm: submitit requeues the job (up to `max_requeues` times) with the
   same arguments, and the run resumes from its last checkpoint (rbctl's runs resume on their own).
   For this the job function must let `SystemExit` through (submitit exits the job that way after
   requeueing it): catch `Exception`, not `BaseException`.

Wiring into `ablate` (the process pool's replacement when `--launcher submitit` is given):

    jobs = [(key, _run_one, (str(rd), cfg.model_dump(mode="json"), meta, eval_dict, cfg_l.cpus_per_task, NullQueue()))
            for key, rd, cfg, meta in todo]
    submit_runs(jobs, cfg_l, folder=sweep_dir / "submitit", on_result=record_in_state_json)
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Hashable

from rbctl.config.launcher import LauncherCfg
from rbctl.errors import UserError

SUBMITIT_MISSING = "--launcher submitit needs submitit: pip install submitit"


class NullQueue:
    """A progress queue that drops everything: jobs on other machines cannot reach this process's
    queue (progress is in each run directory's metrics.jsonl)."""

    def put(self, *args, **kwargs) -> None:
        pass


class _Guarded:
    """`fn(*args)` with exceptions turned into a failed result on the node. Its `checkpoint` (what
    submitit calls on timeout or preemption) resubmits the same call: the run resumes from disk."""

    def __call__(self, key, fn, args):
        try:
            return fn(*args)
        except Exception as e:  # not BaseException: submitit's requeue exits with SystemExit
            return failed(key, f"{type(e).__name__}: {_first_line(e)}")

    def checkpoint(self, *args, **kwargs):
        from submitit.helpers import DelayedSubmission

        return DelayedSubmission(self, *args, **kwargs)


def _first_line(e: BaseException) -> str:
    s = str(e).strip()
    return s.splitlines()[0] if s else type(e).__name__


def _state(job) -> str:
    try:
        return str(job.state)  # Slurm: TIMEOUT, OUT_OF_MEMORY, CANCELLED, NODE_FAIL, ...
    except Exception:
        return "unknown"


def failed(key, error: str) -> dict:
    return {"key": key, "status": "failed", "error": error}


def make_executor(cfg: LauncherCfg, folder: Path):
    """A configured `submitit.AutoExecutor` (raises UserError without submitit)."""
    try:
        import submitit
    except ImportError:
        raise UserError(SUBMITIT_MISSING) from None
    cluster = None if cfg.cluster == "auto" else cfg.cluster
    try:
        ex = submitit.AutoExecutor(folder=str(Path(folder) / "%j"), cluster=cluster,
                                   slurm_max_num_timeout=cfg.max_requeues, local_max_num_timeout=cfg.max_requeues)
    except RuntimeError as e:  # e.g. cluster 'slurm' on a machine without srun
        raise UserError(f"launcher.cluster '{cfg.cluster}': {_first_line(e)}") from None
    params: dict[str, Any] = dict(name=cfg.job_name, timeout_min=cfg.timeout_min, gpus_per_node=cfg.gpus_per_node,
                                  cpus_per_task=cfg.cpus_per_task, mem_gb=cfg.mem_gb,
                                  slurm_partition=cfg.partition, slurm_account=cfg.account, slurm_qos=cfg.qos,
                                  slurm_constraint=cfg.constraint, slurm_array_parallelism=cfg.max_parallel)
    if cfg.setup:
        params.update(slurm_setup=list(cfg.setup), local_setup=list(cfg.setup))
    if cfg.slurm_additional:
        params["slurm_additional_parameters"] = dict(cfg.slurm_additional)
    ex.update_parameters(**{k: v for k, v in params.items() if v is not None})
    return ex


def submit_runs(jobs: list[tuple[Hashable, Callable, tuple]], launcher_cfg: LauncherCfg | dict, *,
                folder: str | Path | None = None, on_result: Callable[[Hashable, dict], None] | None = None,
                log=print) -> dict[Hashable, dict]:
    """Run `fn(*args)` for every `(key, fn, args)` as a submitit job; wait for all of them.

    `fn` and `args` must be picklable (a module-level function, plain data). `fn` returns a result
    dict {"key", "status", "error"}. Returns {key: result} in the order of `jobs`; `on_result(key,
    result)` is called as each one finishes (to record it in state.json at once).
    """
    cfg = launcher_cfg if isinstance(launcher_cfg, LauncherCfg) else LauncherCfg.model_validate(launcher_cfg)
    keys = [k for k, _, _ in jobs]
    if len(set(keys)) != len(keys):
        raise ValueError("submit_runs: job keys must be unique")
    folder = Path(folder or cfg.folder or "submitit")
    ex = make_executor(cfg, folder)
    guarded = _Guarded()
    results: dict[Hashable, dict] = {}
    running: dict[Hashable, Any] = {}  # key -> submitit Job

    def finish(key, job) -> None:
        try:
            res = job.result()
        except Exception as e:  # the job itself died: killed, out of memory, too many requeues
            logs = getattr(getattr(job, "paths", None), "stderr", None)
            res = failed(key, f"job {job.job_id} died without a result (state {_state(job)}, {type(e).__name__})"
                              + (f"; logs: {logs}" if logs else ""))
        if not isinstance(res, dict) or "status" not in res:
            res = failed(key, f"job returned {type(res).__name__}, not a result dict")
        results[key] = res
        if on_result is not None:
            on_result(key, res)

    if ex.cluster == "slurm":
        # one array; Slurm enforces max_parallel (slurm_array_parallelism)
        with ex.batch():
            running = {key: ex.submit(guarded, key, fn, tuple(args)) for key, fn, args in jobs}
        todo = []
        log(f"submitted {len(running)} Slurm jobs (array {next(iter(running.values())).job_id.split('_')[0]}), "
            f"logs in {folder}" if running else "nothing to submit")
    else:
        todo = list(jobs)
    limit = cfg.max_parallel or max(1, len(jobs))
    while todo or running:
        while todo and len(running) < limit:
            key, fn, args = todo.pop(0)
            running[key] = ex.submit(guarded, key, fn, tuple(args))
        done = [k for k, job in running.items() if job.done()]
        for key in done:
            finish(key, running.pop(key))
        if running and not done and ex.cluster != "debug":
            time.sleep(cfg.poll_s)
    return {k: results[k] for k in keys}
