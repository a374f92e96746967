"""Declared sweeps: arms × seeds, each an independent training run followed by its evaluation.

A sweep file names a base training config, arms (each a set of dotted-key overrides of it),
seeds and an evaluation spec. Every (arm, seed) runs in its own run directory
`SWEEP/runs/<arm>/seed_<s>/` (`rbctl.store.rundir.run_key`) in a worker process; a failed run is recorded with its error and
does not stop the others; `state.json` records each run's status; a second `rbctl ablate` on the
same directory is refused while the first holds its lock; re-running skips finished runs and
resumes partial ones from their last checkpoint.
"""

from __future__ import annotations

import functools
import json
import os
import traceback
from pathlib import Path

from rbctl.config.base import apply_overrides, read_yaml, validate
from rbctl.config.launcher import LauncherCfg
from rbctl.config.sweep import SweepConfig, SweepEval, version_content
from rbctl.config.train import TrainConfig, check_fits_run_engine, for_run
from rbctl.config.presets import find_preset, is_sweep, preset, resolve_config
from rbctl.errors import UserError
from rbctl.store.history import changed_keys, read_history, record_version
from rbctl.store.lock import DirLock
from rbctl.store.read import read_sweep_looks, read_sweep_resolved, read_sweep_state
from rbctl.store.rundir import SUBMITIT, SUMMARY, SWEEP_HISTORY, SWEEP_LOCK, final_eval_dir, parse_run_key, run_key, sweep_run_dir
from rbctl.store.write import write_ceiling, write_error, write_run_meta, write_sweep_file, write_sweep_state
from rbctl.sweep.grid import (arm_metadata, check_equal_compute, check_escape_signal, check_family_configs,
                              check_labels, units, with_warm_start)
from rbctl.sweep.start import check_sweep_start, sweep_dir_problem

DEFAULT_SWEEP = preset("ablate_fixpoint.yaml")  # the main job: the fixpoint task; ablate_quickstart.yaml is the quick sweep


def load_sweep(path: Path, seed_offset: int = 0, arms: list[str] | None = None, seeds: list[int] | None = None,
               overrides: list[str] = ()) -> tuple[SweepConfig, dict[str, TrainConfig]]:
    """Validate the sweep file (a path, or a shipped preset's name) and every arm's resolved training
    config (errors name the arm and key). `seed_offset` is added to every seed (the same sweep on a
    disjoint set of seeds). A selection: `arms` (the stated comparisons keep the pairs within it),
    `seeds` (instead of the file's), and `overrides` (`--set key=value`, applied to every arm after
    its own overrides)."""
    path = resolve_config(path, "sweep file")
    data = read_yaml(path)
    if not is_sweep(data) and set(data) <= set(TrainConfig.model_fields):
        raise UserError(f"{path} is a training config, not a sweep file (it has no base: and no arms:): "
                        f"run it with `rbctl train {path} -o RUN`")
    data = select(data, path, arms, seeds)
    sweep = validate(SweepConfig, data, str(path))
    if seed_offset:
        sweep = sweep.model_copy(update={"seeds": [s + seed_offset for s in sweep.seeds]})
    base = read_yaml(base_path(path, sweep.base))
    configs = {}
    for arm, arm_overrides in sweep.arms.items():
        items = [f"{k}={json.dumps(v)}" for k, v in {**sweep.set, **(arm_overrides or {})}.items()]
        data = apply_overrides(json.loads(json.dumps(base)), items + list(overrides))
        try:
            configs[arm] = validate(TrainConfig, data, f"{path} arm '{arm}'", list(overrides))
        except UserError as e:
            raise UserError(str(e)) from None
    for arm, cfg in configs.items():  # each run's final evaluation is valid for it (engine, vLLM context)
        try:
            check_fits_run_engine(for_run(sweep.eval, cfg), cfg)
        except ValueError as e:
            raise UserError(f"{path}: eval: arm '{arm}': {e}") from None
    if not sweep.allow_unequal_compute:
        check_equal_compute(path, configs)
    if not sweep.same_labels:
        check_labels(path, configs)
    check_family_configs(path, sweep, configs)
    check_escape_signal(path, sweep)
    if sweep.warm_starts:  # each warm start must fit every arm's task settings (one-line error otherwise)
        from rbctl.tasks.shipped import shipped_warm_start
        from rbctl.train.training_data import task_spec, warm_start_spec

        for ws in sweep.warm_starts:
            for arm, cfg in configs.items():
                try:
                    shipped_warm_start(ws, task_spec(cfg), warm_start_spec(cfg))
                except UserError as e:
                    raise UserError(f"{path}: warm_starts entry '{ws}', arm '{arm}': {e}") from None
    return sweep, configs


def select(data: dict, path: Path, arms: list[str] | None, seeds: list[int] | None) -> dict:
    """A sweep file's data cut to `arms` (in the file's order; the stated comparisons keep their
    pairs within them, and are dropped when none is left) and run on `seeds`; None keeps it all. A
    sequential design is dropped with `seeds` (its looks count the file's seeds) and with the
    comparisons (`rbctl.sweep.sequential_run.dropped_design` says so in the sweep's log)."""
    data = dict(data)
    if seeds is not None:
        data["seeds"] = list(seeds)
        data.pop("design", None)  # its looks count the file's units: other seeds run as a fixed design
    if arms is None:
        return data
    declared = list((data.get("arms") or {}))
    unknown = [a for a in arms if a not in declared]
    if unknown:
        raise UserError(f"--arms: {path} has no arm {', '.join(repr(a) for a in unknown)} (its arms: {', '.join(declared)})")
    data["arms"] = {a: v for a, v in data["arms"].items() if a in arms}
    comparisons = data.get("comparisons")
    if isinstance(comparisons, dict):
        within = lambda pairs: [p for p in pairs or [] if all(a in arms for a in p)]  # noqa: E731
        comparisons = {**comparisons, "principal": within(comparisons.get("principal"))}
        families = {name: {**f, "pairs": within(f.get("pairs"))} for name, f in (comparisons.get("families") or {}).items()}
        if "families" in comparisons:
            comparisons["families"] = {name: f for name, f in families.items() if f["pairs"]}
        data["comparisons"] = comparisons if comparisons["principal"] else None
        if data["comparisons"] is None:
            data.pop("design", None)  # a design decides declared comparisons: none is left to decide
    return data


def base_path(sweep_path: Path, base: str) -> Path:
    """A sweep file's `base:`: the file relative to the sweep file, else the shipped preset of that
    name (so that a sweep file copied elsewhere still finds a shipped base)."""
    beside = (Path(sweep_path).parent / base).resolve()
    if beside.exists():
        return beside
    found = find_preset(base)
    if found is None:
        raise UserError(f"{sweep_path}: base {base}: neither {beside} nor a preset of that name exists")
    return found


def final_eval_done(run_dir: Path, steps: int, benchmarks: list[str]) -> bool:
    from rbctl.eval.pipeline import bench_dir_name

    ev = final_eval_dir(run_dir, steps)
    return all((ev / bench_dir_name(b) / SUMMARY).exists() for b in benchmarks)


def sweep_lock(sweep_dir: Path, log=print) -> DirLock:
    """The sweep directory's lock: one `rbctl ablate` at a time (its workers lock their run directories)."""
    return DirLock(sweep_dir, "rbctl ablate", log=log, name=SWEEP_LOCK)


# --- worker ---------------------------------------------------------------------------------------


def _run_one(run_dir: str, cfg_dict: dict, meta: dict, eval_dict: dict, threads: int, queue) -> dict:
    """One (arm, seed): train (or resume), then evaluate the final checkpoint. Runs in a worker process."""
    import torch

    from rbctl.train import phases

    timer = phases.timer()  # only with RBCTL_PHASES set (python -m scripts.bench_main_job --split)
    torch.set_num_threads(max(1, threads))
    from rbctl.console import quiet_libraries

    quiet_libraries()
    key = run_key(meta["arm"], meta["seed"], meta.get("warm_start"))
    res = _train_and_evaluate(key, run_dir, cfg_dict, meta, eval_dict, queue, [timer] if timer else [])
    if timer:
        timer.write(key, res["status"])
    return res


@functools.cache
def _worker_evaluations():
    """This worker process's `EvaluationCache` (one per process, made at its first run): its runs
    from one warm start evaluate that warm start once."""
    from rbctl.train.evaluation import EvaluationCache

    return EvaluationCache()


def _train_and_evaluate(key: str, run_dir: str, cfg_dict: dict, meta: dict, eval_dict: dict, queue,
                        callbacks: list) -> dict:
    try:
        from rbctl.train.loop import train

        cfg = TrainConfig.model_validate(cfg_dict)
        rd = Path(run_dir)
        rd.mkdir(parents=True, exist_ok=True)
        write_run_meta(rd, meta)

        def on_step(step, m):
            queue.put((key, "step", step, {"reward": m["reward/mean"], "entropy": m["entropy"]}))
            if step == cfg.steps:  # the final evaluation follows the last step
                queue.put((key, "eval", step, {}))

        # the final policy is evaluated in memory, through the run's own engine
        train(cfg, rd, progress=False, log=lambda *a: None, on_step=on_step,
              final_eval=for_run(SweepEval.model_validate(eval_dict), cfg), callbacks=[*callbacks, _worker_evaluations()])
        return {"key": key, "status": "done", "error": None}
    except Exception as e:  # a failed run is reported, never allowed to stop the sweep (SystemExit passes: submitit requeues that way)
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        tb = traceback.format_exc()
        try:
            write_error(Path(run_dir), tb)
        except OSError:
            pass
        return {"key": key, "status": "failed", "error": f"{type(e).__name__}: {msg}"}


# --- the sweep ------------------------------------------------------------------------------------


def run_sweep(sweep_path: Path, sweep_dir: Path, jobs: int | None = None, force: bool = False,
              progress: bool = True, log=print, launcher: str = "local", progress_every: float = 60.0,
              seed_offset: int = 0, arms: list[str] | None = None, seeds: list[int] | None = None,
              overrides: list[str] = ()) -> dict:
    """Run (or resume) every (arm, warm start, seed) of the sweep; returns the final state. After a
    Ctrl-C it raises rbctl.sweep.local.Interrupted, the state recorded (interrupted runs resume on a
    rerun). `seed_offset` shifts every seed (a disjoint replication of the same sweep). `arms`,
    `seeds`, `overrides`: a selection (`load_sweep`); a selection of the sweep a directory holds
    runs there (`_compatible`)."""
    if jobs is not None and jobs < 1:
        raise UserError(f"jobs must be at least 1 (runs in parallel), got {jobs}")
    sweep, configs = load_sweep(sweep_path, seed_offset, arms, seeds, overrides)
    sweep_dir = Path(sweep_dir)
    resolved = resolved_sweep(sweep, configs)
    check_sweep_start(sweep, configs, sweep_dir, resolved, force, machine=launcher == "local")  # before anything is made
    jobs = jobs or sweep.jobs
    sweep_dir.mkdir(parents=True, exist_ok=True)
    from rbctl.sweep.sequential_run import dropped_design

    if (note := dropped_design(sweep_path, sweep, seeds)) is not None:
        log(note)
    with sweep_lock(sweep_dir, log):
        _write_sweep_record(sweep, sweep_dir, resolved, force)
        state = {"runs": read_sweep_state(sweep_dir), **read_sweep_looks(sweep_dir)}
        todo = pending_runs(sweep, configs, sweep_dir, state) if sweep.design is None else []
        write_sweep_state(sweep_dir, state)
        _record_version(sweep_path, sweep_dir, state, log)
        if sweep.design is not None:  # run up to each look, decide there, stop where every comparison is decided
            from rbctl.sweep.sequential_run import run_looks

            launch = lambda todo: _launch(todo, sweep, sweep_dir, state, jobs, progress, progress_every, launcher, log)  # noqa: E731
            run_looks(sweep, configs, sweep_dir, state, lambda arms, upto: pending_runs(sweep, configs, sweep_dir, state, arms, upto),
                      launch, jobs, log)
            return state
        total_runs = len(configs) * len(units(sweep))
        unit = f"{len(sweep.warm_starts)} warm starts × {len(sweep.seeds)} seeds" if sweep.warm_starts else f"{len(sweep.seeds)} seeds"
        log(f"sweep '{sweep.name}': {total_runs} runs ({len(configs)} arms × {unit}), "
            f"{total_runs - len(todo)} already finished, {len(todo)} to run with {jobs} parallel jobs")
        _launch(todo, sweep, sweep_dir, state, jobs, progress, progress_every, launcher, log)
        return state


def _write_sweep_record(sweep: SweepConfig, sweep_dir: Path, resolved: dict, force: bool) -> None:
    """Under the sweep's lock: refuse a directory another start filled meanwhile with another sweep,
    then record the sweep (sweep.yaml; a selection of the arms leaves the whole sweep's record) and
    its ceiling (ceiling.json, what the report's plateau test reads)."""
    saved = read_sweep_resolved(sweep_dir)
    if saved and not force and (problem := sweep_dir_problem(sweep_dir, resolved, force)):
        raise UserError(problem)  # made by a start that ran meanwhile, between the check and the lock
    if not saved or force or set(resolved["configs"]) >= set(saved.get("configs") or {}):
        write_sweep_file(sweep_dir, resolved)
    if sweep.ceiling is not None:  # rbctl.store.read.read_ceiling_file
        write_ceiling(sweep_dir, sweep.ceiling.model_dump())


def pending_runs(sweep: SweepConfig, configs: dict[str, TrainConfig], sweep_dir: Path, state: dict,
                 arms: list[str] | None = None, only: list | None = None) -> list:
    """The runs of ``arms`` (all by default) × ``only`` (units, (warm start, seed); all by default) that
    are not done with their final evaluation, as (key, run dir, config, run.json), each recorded
    pending in ``state``."""
    todo = []
    for arm, cfg in configs.items():
        for ws, seed in units(sweep):
            if (arms is not None and arm not in arms) or (only is not None and (ws, seed) not in only):
                continue
            key = run_key(arm, seed, ws)
            rd = sweep_run_dir(sweep_dir, key)
            rcfg = with_warm_start(cfg, ws).model_copy(update={"seed": seed})
            if final_eval_done(rd, rcfg.steps, sweep.eval.benchmarks) and state["runs"].get(key, {}).get("status") == "done":
                continue
            meta = {"arm": arm, "seed": seed, "sweep": sweep.name, **arm_metadata(rcfg)}
            if ws is not None:
                meta["warm_start"] = ws
            todo.append((key, rd, rcfg, meta))
            state["runs"][key] = {"status": "pending", "error": None}
    return todo


def _record_version(sweep_path: Path, sweep_dir: Path, state: dict, log) -> None:
    """Record the sweep file's version (`record_sweep_version`), saying so when it changed."""
    recorded = record_sweep_version(sweep_path, sweep_dir, state)
    if recorded is not None and recorded["changed"]:
        log(f"the sweep file changed since this directory's last start ({', '.join(recorded['changed'][:4])}): "
            f"recorded as a new version after {recorded['runs_finished']} of {recorded['runs_total']} runs had "
            f"finished ({SWEEP_HISTORY}); the report prints each family's declaration from these records")


def _launch(todo, sweep: SweepConfig, sweep_dir: Path, state: dict, jobs: int, progress: bool,
            progress_every: float, launcher: str, log) -> None:
    """Run ``todo`` (`pending_runs`) with the launcher; nothing for none."""
    if not todo:
        return
    _prepare_shared({key: cfg for key, _, cfg, _ in todo}, log)
    if launcher == "submitit":
        _execute_submitit(todo, sweep, sweep_dir, state, log)
    else:
        _execute(todo, sweep, sweep_dir, state, jobs, progress, progress_every)


def sweep_file_content(sweep_path: Path) -> tuple[dict, Path]:
    """The sweep file's data as validated (defaults filled in, before any `--arms`/`--seeds`/`--set`
    selection: a selection runs part of the declared sweep, it declares nothing) and its path: the
    version `record_sweep_version` keeps."""
    path = resolve_config(sweep_path, "sweep file")
    content = validate(SweepConfig, read_yaml(path), str(path)).model_dump(mode="json")
    return version_content(content, SweepConfig.LATE_KEYS), path  # no design, no report: the version as before them


def record_sweep_version(sweep_path: Path, sweep_dir: Path, state: dict) -> dict | None:
    """Append the sweep file's version to SWEEP/sweep_history.jsonl unless it is the latest recorded
    (`rbctl.store.history`), with the runs of `state` done by now (what the report's declaration
    lines read, `rbctl.report.declaration`); the record written with ``changed``, the dotted keys that
    differ from the previous version ([] for the first), or None."""
    content, path = sweep_file_content(sweep_path)
    runs, history = state["runs"], Path(sweep_dir) / SWEEP_HISTORY
    done = sum(1 for r in runs.values() if r.get("status") == "done")
    before = read_history(history)
    record = record_version(history, content, str(path), done, len(runs))
    if record is None:
        return None
    return {**record, "changed": changed_keys(before[-1].get("content") or {}, content) if before else []}


def resolved_sweep(sweep: SweepConfig, configs: dict[str, TrainConfig]) -> dict:
    """What a sweep directory records of the sweep (sweep.yaml, less its format version): the sweep
    file as validated and each arm's resolved training config."""
    return {"sweep": sweep.model_dump(mode="json"), "configs": {a: c.model_dump(mode="json") for a, c in configs.items()}}


def _prepare_shared(configs: dict[str, TrainConfig], log) -> None:
    """Build the cached warm start once, before the workers start, instead of in every worker, with the
    torch threads of the runs' config (`threads`; 0 = torch's default), as `rbctl train` builds it:
    torch's default, one thread per core, ran the maze's 400-step SFT 14× slower in CPU time on 2 cores
    that other processes shared (docs/maze_task.md §7)."""
    import torch

    from rbctl.train.training_data import base_model

    done, before = set(), torch.get_num_threads()
    try:
        for cfg in configs.values():
            b = cfg.data.builtin
            key = (b.model_dump_json(), cfg.model.name)
            if cfg.model.name == "builtin" and key not in done:
                done.add(key)
                torch.set_num_threads(cfg.threads or before)
                base_model(cfg, log=log)  # the built-in task's warm start: shipped, cached, or trained once
    finally:
        torch.set_num_threads(before)


def _execute(todo, sweep: SweepConfig, sweep_dir: Path, state: dict, jobs: int, progress: bool,
             progress_every: float = 60.0) -> None:
    """Run the jobs as local worker processes (rbctl.sweep.local); raises local.Interrupted after Ctrl-C."""
    import sys

    from rbctl.sweep import local
    from rbctl.sweep.display import PlainDisplay, RichDisplay

    threads = max(1, (os.cpu_count() or 1) // min(jobs, len(todo)))
    work = [(key, cfg.steps, (str(rd), cfg.model_dump(mode="json"), meta, sweep.eval.model_dump(mode="json"), threads))
            for key, rd, cfg, meta in todo]

    def record(key, res):
        state["runs"][key] = {"status": res["status"], "error": res["error"]}
        write_sweep_state(sweep_dir, state)

    parallel = min(jobs, len(todo))
    if progress and sys.stdout.isatty():
        display = RichDisplay(jobs=parallel)
    elif progress:  # a log file or a Slurm job: plain lines, not a live display
        display = PlainDisplay(every=progress_every, jobs=parallel)
    else:
        display = RichDisplay(enabled=False)
    local.execute(_run_one, work, jobs, record, display, alone={key for key, _, cfg, _ in todo if not on_cpu(cfg)})


def on_cpu(cfg: TrainConfig) -> bool:
    """Whether a run trains on the CPU with the hf engine (a local worker may run it after
    another run); a GPU or vLLM run gets a worker process of its own (`rbctl.sweep.local.execute`)."""
    if cfg.rollout.engine == "vllm":
        return False
    if cfg.model.device == "cpu":
        return True
    import torch

    return cfg.model.device == "auto" and not torch.cuda.is_available()


def _execute_submitit(todo, sweep: SweepConfig, sweep_dir: Path, state: dict, log) -> None:
    """Run the jobs through submitit (Slurm, or its local/debug executors) instead of the process pool."""
    from rbctl.sweep.launchers import NullQueue, submit_runs

    lcfg = sweep.launcher or LauncherCfg()
    jobs = [(key, _run_one, (str(rd), cfg.model_dump(mode="json"), meta, sweep.eval.model_dump(mode="json"),
                             lcfg.cpus_per_task, NullQueue())) for key, rd, cfg, meta in todo]

    def record(key, res):
        state["runs"][key] = {"status": res["status"], "error": res["error"]}
        write_sweep_state(sweep_dir, state)
        log(f"{key}: {res['status']}" + (f" ({res['error']})" if res["error"] else ""))

    submit_runs(jobs, lcfg, folder=Path(lcfg.folder) if lcfg.folder else sweep_dir / SUBMITIT, on_result=record, log=log)


def summarize_state(state: dict) -> tuple[int, int, list[tuple[str, str]]]:
    runs = state["runs"]
    done = sum(1 for r in runs.values() if r["status"] == "done")
    failed = [(k, r["error"]) for k, r in runs.items() if r["status"] == "failed"]
    return done, len(runs), failed


def arm_final_lines(sweep_dir: Path, state: dict) -> list[str]:
    """Per arm and benchmark, the mean over its finished runs (seeds, and warm starts where the sweep
    crosses them) of the final held-out avg@n (RUN/eval/step_N/BENCH/summary.json):
    ``final held-out builtin avg@8 grpo 51.2% (mean over 3 seeds, step 100)``, in the arms' order."""
    from rbctl.store.read import final_summaries

    scores: dict[tuple[str, str, int], list[float]] = {}
    steps: dict[tuple[str, str, int], set] = {}
    for key, run in state["runs"].items():
        if run.get("status") != "done":
            continue
        step, finals = final_summaries(sweep_run_dir(sweep_dir, key))
        for bench, summary in finals.items():
            value = (summary.get("metrics", {}).get("avg@n") or {}).get("value")
            if value is None:
                continue
            k = (bench, parse_run_key(key).arm, summary.get("n"))
            scores.setdefault(k, []).append(value)
            steps.setdefault(k, set()).add(step)
    crossed = any(parse_run_key(key).warm_start is not None for key in state["runs"])
    out = []
    for (bench, arm, n), values in scores.items():
        at = steps[(bench, arm, n)]
        where = f"step {next(iter(at))}" if len(at) == 1 else "steps " + ", ".join(map(str, sorted(at)))
        unit = ("run" if crossed else "seed") + ("s" if len(values) != 1 else "") + (" (seeds × warm starts)" if crossed else "")
        out.append(f"final held-out {bench} avg@{n} {arm} {100 * sum(values) / len(values):.1f}% "
                   f"(mean over {len(values)} {unit}, {where})")
    return out
