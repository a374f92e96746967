"""Declared sweeps: arms × seeds, each an independent training run followed by its evaluation.

A sweep file names a base training config, arms (each a set of dotted-key overrides of it),
seeds and an evaluation spec. Every (arm, seed) runs in its own run directory
`SWEEP/runs/<arm>/seed_<s>/` (`rbctl.store.rundir.run_key`) in a worker process; a failed run is recorded with its error and
does not stop the others; `state.json` records each run's status; a second `rbctl ablate` on the
same directory is refused while the first holds its lock; re-running skips finished runs and
resumes partial ones from their last checkpoint.
"""

from __future__ import annotations

import json
import os
import traceback
from pathlib import Path

from rbctl.algo import registry as methods
from rbctl.config.base import RUN_ONLY_KEYS, apply_overrides, read_yaml, validate
from rbctl.config.launcher import LauncherCfg
from rbctl.config.methods import hooks_on
from rbctl.config.sweep import COMPUTE_KEYS, SweepConfig, SweepEval
from rbctl.config.train import TrainConfig, check_fits_run_engine, for_run
from rbctl.config.presets import find_preset, is_sweep, preset, resolve_config
from rbctl.config.sweep import arm_variant
from rbctl.errors import UserError
from rbctl.store.history import changed_keys, read_history, record_version
from rbctl.store.lock import DirLock
from rbctl.store.read import read_sweep_looks, read_sweep_resolved, read_sweep_state
from rbctl.store.rundir import SUBMITIT, SUMMARY, SWEEP_HISTORY, SWEEP_LOCK, final_eval_dir, parse_run_key, run_key, sweep_run_dir
from rbctl.store.write import write_ceiling, write_error, write_run_meta, write_sweep_file, write_sweep_state

# A sampling hook (rollout.<name>, rbctl.algo.registry) generates more rollouts per step than it trains
# on (`rollout/generated`): at equal steps an arm with one gets more compute than one without, or
# than one with other rounds.
RESAMPLE_KEY = "rollout.max_resample_rounds"
DEFAULT_SWEEP = preset("ablate_fixpoint.yaml")  # the main job: the fixpoint task; ablate_quickstart.yaml is the quick sweep


def _flat_get(d: dict, dotted: str):
    for part in dotted.split("."):
        d = d[part]
    return d


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
        _check_equal_compute(path, configs)
    if not sweep.same_labels:
        _check_labels(path, configs)
    _check_family_configs(path, sweep, configs)
    _check_escape_signal(path, sweep)
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


def _with_warm_start(cfg: TrainConfig, warm_start: str | None) -> TrainConfig:
    """The arm's config starting from shipped warm start `warm_start` (unchanged for None)."""
    if warm_start is None:
        return cfg
    builtin = cfg.data.builtin.model_copy(update={"warm_start": warm_start})
    return cfg.model_copy(update={"data": cfg.data.model_copy(update={"builtin": builtin})})


def units(sweep: SweepConfig) -> list[tuple[str | None, int]]:
    """The units of replication every arm runs: (warm start, seed), warm start None when the sweep
    does not cross warm starts."""
    return [(ws, s) for ws in (sweep.warm_starts or [None]) for s in sweep.seeds]


def _check_equal_compute(path: Path, configs: dict[str, TrainConfig]) -> None:
    """Refuse arms that differ in a compute key, or that mix a sampling hook with fixed batches."""
    first_arm, first = next(iter(configs.items()))
    for arm, cfg in configs.items():
        for key in COMPUTE_KEYS:
            a, b = _flat_get(first.model_dump(), key), _flat_get(cfg.model_dump(), key)
            if a != b:
                raise UserError(f"{path}: arm '{arm}' sets {key}={b} but arm '{first_arm}' has {a}; arms must get "
                                "equal compute (set allow_unequal_compute: true to override)")
        hook_keys = [m.config_key for m in methods.of_kind("sampling_hook")]
        both = hooks_on(first.rollout) and hooks_on(cfg.rollout)
        for key in hook_keys + ([RESAMPLE_KEY] if both else []):
            a, b = _flat_get(first.model_dump(), key), _flat_get(cfg.model_dump(), key)
            if a != b:
                raise UserError(f"{path}: arm '{arm}' sets {key}={b} but arm '{first_arm}' has {a}; a sampling hook "
                                "generates more rollouts per step than it trains on, so equal steps are not equal "
                                "compute: compare such arms in generated rollouts (metric rollout/generated) and set "
                                "allow_unequal_compute: true")


def _check_labels(path: Path, configs: dict[str, TrainConfig]) -> None:
    """Refuse two arms with one (baseline, variant) label: the report pairs arms by label."""
    seen: dict[tuple[str, str], str] = {}
    for arm, cfg in configs.items():
        meta = arm_metadata(cfg)
        label = (meta["baseline"], meta["variant"])
        if label in seen:
            raise UserError(f"{path}: arms '{seen[label]}' and '{arm}' get the same label (baseline {label[0]}, "
                            f"variant {label[1]}), so the report cannot tell them apart: make them differ in a "
                            "method, or set same_labels: true for a sweep over settings")
        seen[label] = arm




def _check_family_configs(path: Path, sweep: SweepConfig, configs: dict[str, TrainConfig]) -> None:
    """Refuse two arms of one declared family that resolve to the same training config: they are one
    treatment counted twice (a comparison of them is no comparison, and the family's Holm m grows)."""
    if sweep.comparisons is None:
        return
    for fam in sweep.comparisons.families_declared():
        arms = list(dict.fromkeys(a for pair in fam.pairs for a in pair if a in configs))
        for i, a in enumerate(arms):
            for b in arms[i + 1:]:
                if same_training(configs[a], configs[b]):
                    raise UserError(f"{path}: arms '{a}' and '{b}' of family '{fam.name}' resolve to the same training "
                                    "(configs equal but for the estimator's name, whose advantages agree), so they are "
                                    "one arm counted twice: make them differ (e.g. each estimator's own algo.loss_agg) "
                                    "or keep one")


def _check_escape_signal(path: Path, sweep: SweepConfig) -> None:
    """Refuse an escape signal no run logs: label shares (`label/…`) come from the periodic evaluation
    only (rbctl.train.metric_names), so `escape.signal: train` on one would give no escape time."""
    e = sweep.escape
    if e is not None and e.signal == "train" and e.metric.startswith("label/"):
        raise UserError(f"{path}: escape.signal: train with escape.metric '{e.metric}': label shares are logged by "
                        "the periodic evaluation only, not by training steps; use escape.signal: eval (and an "
                        "eval.every as fine as the escape times need)")


def same_training(a: TrainConfig, b: TrainConfig) -> bool:
    """Whether two arms train identically by construction: their configs are equal but for the
    run-only keys and the estimator's name, and the two estimators (with each arm's budget and
    parameters) give the same advantages on probe rewards (GRPO + budget and Dr.GRPO + budget do)."""
    da, db = ({k: v for k, v in c.model_dump().items() if k not in RUN_ONLY_KEYS} for c in (a, b))
    if da == db:
        return True
    ea, eb = da["algo"].pop("estimator"), db["algo"].pop("estimator")
    if ea == eb or da != db:
        return False
    import torch

    from rbctl.algo.dispatch import compute_advantages
    from rbctl.config.methods import method_params

    probes = (torch.tensor([[1.0, 0, 0, 0, 1, 0, 0, 0], [1, 1, 1, 0, 0, 0, 0, 1]]),  # [P, G] binary
              torch.tensor([[0.3, 0.9, 0.1, 0.5, 0.0, 1.0, 0.7, 0.2]]))  # graded

    def advantages(c: TrainConfig, r: torch.Tensor) -> torch.Tensor:
        return compute_advantages(r, c.algo.estimator, c.algo.budget, c.algo.shift,
                                  **method_params(c.algo, c.algo.estimator))

    try:
        return all(torch.allclose(advantages(a, r), advantages(b, r), atol=1e-9) for r in probes)
    except (UserError, ValueError):  # an estimator that refuses a probe (binary rewards only): not shown equal
        return False


def arm_metadata(cfg: TrainConfig) -> dict:
    """Baseline and variant of an arm, derived from its config (what the report groups by)."""
    return {"baseline": cfg.algo.estimator, "variant": arm_variant(cfg.algo.model_dump(), cfg.rollout.model_dump())}


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

    phases.begin()  # only with RBCTL_PHASES set (python -m scripts.bench_main_job --split)
    torch.set_num_threads(max(1, threads))
    from rbctl.console import quiet_libraries

    quiet_libraries()
    key = run_key(meta["arm"], meta["seed"], meta.get("warm_start"))
    res = _train_and_evaluate(key, run_dir, cfg_dict, meta, eval_dict, queue)
    phases.end(key, res["status"])
    return res


def _train_and_evaluate(key: str, run_dir: str, cfg_dict: dict, meta: dict, eval_dict: dict, queue) -> dict:
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
              final_eval=for_run(SweepEval.model_validate(eval_dict), cfg))
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
        saved = read_sweep_resolved(sweep_dir)
        if saved and not force and (problem := sweep_dir_problem(sweep_dir, resolved, force)):
            raise UserError(problem)  # made by a start that ran meanwhile, between the check and the lock
        if not saved or force or set(resolved["configs"]) >= set(saved.get("configs") or {}):
            write_sweep_file(sweep_dir, resolved)  # a selection of the arms leaves the whole sweep's record
        if sweep.ceiling is not None:  # what the report's plateau test reads (rbctl.store.read.read_ceiling_file)
            write_ceiling(sweep_dir, sweep.ceiling.model_dump())
        state = {"runs": read_sweep_state(sweep_dir), **read_sweep_looks(sweep_dir)}
        todo = pending_runs(sweep, configs, sweep_dir, state) if sweep.design is None else []
        write_sweep_state(sweep_dir, state)
        recorded = record_sweep_version(sweep_path, sweep_dir, state)
        if recorded is not None and recorded["changed"]:
            log(f"the sweep file changed since this directory's last start ({', '.join(recorded['changed'][:4])}): "
                f"recorded as a new version after {recorded['runs_finished']} of {recorded['runs_total']} runs had "
                f"finished ({SWEEP_HISTORY}); the report prints each family's declaration from these records")
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
            rcfg = _with_warm_start(cfg, ws).model_copy(update={"seed": seed})
            if final_eval_done(rd, rcfg.steps, sweep.eval.benchmarks) and state["runs"].get(key, {}).get("status") == "done":
                continue
            meta = {"arm": arm, "seed": seed, "sweep": sweep.name, **arm_metadata(rcfg)}
            if ws is not None:
                meta["warm_start"] = ws
            todo.append((key, rd, rcfg, meta))
            state["runs"][key] = {"status": "pending", "error": None}
    return todo


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
    if content.get("design") is None:  # no design: the version recorded before `design:` existed, unchanged
        content.pop("design", None)
    return content, path


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


def check_sweep_start(sweep: SweepConfig, configs: dict[str, TrainConfig], sweep_dir: Path, resolved: dict,
                      force: bool = False, machine: bool = True) -> None:
    """What `rbctl ablate` refuses before it makes or writes anything, and its `--dry-run` with the
    same arguments (`machine` False: the plan states this machine's engine and device): every arm's
    checks (`check_arms_runnable`), then the sweep directory: write access
    (`rbctl.train.preflight.writable_problem`) and the sweep it holds (`sweep_dir_problem`)."""
    from rbctl.train.preflight import writable_problem

    check_arms_runnable(sweep, configs, machine=machine)
    for problem in (writable_problem(sweep_dir), sweep_dir_problem(sweep_dir, resolved, force)):
        if problem is not None:
            raise UserError(problem)


def check_arms_runnable(sweep: SweepConfig, configs: dict[str, TrainConfig], machine: bool = True) -> None:
    """What each run checks before it starts (`rbctl.train.preflight`), on every arm before the sweep
    directory is made: its config (benchmarks of its periodic and final evaluations, model and data
    paths), the data of those benchmarks, reachable from here (`eval_data_problems`, what a run would
    otherwise fail on after its setup), and, with `machine` (local workers; not for jobs submitted to
    other nodes), this machine's engine and device. A `UserError` naming the arm and every problem."""
    from rbctl.train.preflight import benchmark_problems, config_problems, eval_data_problems, machine_problems

    looked: dict[str, list[str]] = {}  # arms that evaluate alike look for their data once (a Hub probe takes seconds)
    for arm, cfg in configs.items():
        final = for_run(sweep.eval, cfg)
        problems = config_problems(cfg) + benchmark_problems(final.benchmarks, cfg, "eval.benchmarks (final)")
        where = json.dumps([cfg.eval.every and (cfg.eval.benchmarks, cfg.eval.data_dir), final.benchmarks, final.data_dir])
        problems += looked.setdefault(where, eval_data_problems(cfg, final)) if not problems else []
        problems += machine_problems(cfg) if machine else []
        if problems:
            raise UserError(f"arm '{arm}': " + "; ".join(dict.fromkeys(problems)))


def sweep_dir_problem(sweep_dir: Path, resolved: dict, force: bool = False) -> str | None:
    """Why `sweep_dir` cannot take the sweep `resolved` (`resolved_sweep`), else None: it holds
    another sweep (`_compatible`), named by the keys that differ; `force` takes it all the same."""
    saved = read_sweep_resolved(sweep_dir) if Path(sweep_dir).is_dir() else {}
    if not saved or force or _compatible(saved, resolved):
        return None
    return (f"sweep directory {sweep_dir} holds a different sweep: {'; '.join(sweep_differences(saved, resolved))}; "
            "use another -o or --force")


def sweep_differences(saved: dict, resolved: dict, most: int = 4) -> list[str]:
    """What makes `resolved` another sweep than `saved` (`_compatible`), at most `most` items:
    ``arms.grpo.steps 100 ≠ 120``, ``eval.n 8 ≠ 16``, ``name 'a' ≠ 'b'``, an arm one of them lacks."""
    from rbctl.config.base import flatten
    from rbctl.store.rundir import SWEEP_FILE

    a, b = _comparable(saved), _comparable(resolved)
    if a is None:
        return [f"its recorded sweep ({SWEEP_FILE}) no longer validates"]
    show = lambda v: json.dumps(v) if isinstance(v, (dict, list)) or v is None else (repr(v) if isinstance(v, str) else str(v))  # noqa: E731
    out = []
    names = [(saved.get("sweep") or {}).get("name"), (resolved.get("sweep") or {}).get("name")]
    if names[0] != names[1]:
        out.append(f"name {show(names[0])} ≠ {show(names[1])}")
    fa, fb = flatten(a["eval"]), flatten(b["eval"])
    out += [f"eval.{k} {show(fa.get(k))} ≠ {show(fb.get(k))}" for k in dict.fromkeys([*fa, *fb]) if fa.get(k) != fb.get(k)]
    shared = [arm for arm in b["configs"] if arm in a["configs"]]
    for arm in shared:
        ca, cb = flatten(a["configs"][arm]), flatten(b["configs"][arm])
        out += [f"arms.{arm}.{k} {show(ca.get(k))} ≠ {show(cb.get(k))}" for k in dict.fromkeys([*ca, *cb])
                if ca.get(k) != cb.get(k)]
    if not shared:
        out.append(f"no arm in common (it holds {', '.join(a['configs'])}; this sweep has {', '.join(b['configs'])})")
    return out[:most] + ([f"and {len(out) - most} more"] if len(out) > most else [])


def _compatible(saved: dict, resolved: dict) -> bool:
    """Whether `resolved` is the sweep a directory holds (`saved`), or a selection of its arms: the
    same name and evaluation, and each arm they share configured alike (`_comparable`). What the
    report reads but no run does (comparisons: families, margins, design; escape; ceiling) may
    change on resume: the new version is recorded in sweep_history.jsonl with the runs finished by
    then, and the report says so beside each family (`rbctl.report.declaration`)."""
    a, b = _comparable(saved), _comparable(resolved)
    if a is None or b is None:
        return False
    if a == b:
        return True
    shared = set(a["configs"]) & set(b["configs"])
    return (bool(shared) and a["eval"] == b["eval"] and all(a["configs"][k] == b["configs"][k] for k in shared)
            and (saved.get("sweep") or {}).get("name") == (resolved.get("sweep") or {}).get("name"))


def _comparable(resolved: dict) -> dict | None:
    """What must match for a sweep directory to be resumed: each arm's config and the evaluation,
    read through today's schemas (as a run directory's config is on resume), so that a key added
    since the directory was made, at its default, does not make it another sweep. None when the
    saved sweep no longer validates."""
    from pydantic import ValidationError

    try:
        return {"configs": {a: TrainConfig.model_validate(c).model_dump(mode="json")
                            for a, c in (resolved.get("configs") or {}).items()},
                "eval": SweepEval.model_validate((resolved.get("sweep") or {}).get("eval") or {}).model_dump(mode="json")}
    except ValidationError:
        return None


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

    threads = max(1, (os.cpu_count() or 1) // min(jobs, len(todo)))
    work = [(key, cfg.steps, (str(rd), cfg.model_dump(mode="json"), meta, sweep.eval.model_dump(mode="json"), threads))
            for key, rd, cfg, meta in todo]

    def record(key, res):
        state["runs"][key] = {"status": res["status"], "error": res["error"]}
        write_sweep_state(sweep_dir, state)

    if progress and sys.stdout.isatty():
        display = local.RichDisplay()
    elif progress:  # a log file or a Slurm job: plain lines, not a live display
        display = local.PlainDisplay(every=progress_every)
    else:
        display = local.RichDisplay(enabled=False)
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
