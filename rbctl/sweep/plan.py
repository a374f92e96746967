"""`rbctl ablate --dry-run`: a sweep's plan, printed before anything runs (nothing is written).

- the design: arms × warm starts × seeds, each run's steps, batch and final evaluation;
- each arm's resolved difference from the base config (after the sweep's `set:` and `--set`, which
  every arm shares and which are listed once);
- the checks each run makes before it starts (`rbctl.train.preflight`), on every arm;
- the stated comparisons and the design's power (`rbctl.report.power`, handed down by the command:
  the paired two-sided t-test over units at α/m, m the principal comparisons);
- a wall-time estimate: per-run time measured on this machine, from finished runs of the same shape
  (the sweep directory's own, else any under runs/: same model, task, P, G, token limit, epochs,
  mini-batches, κ_eff cadence, threads), their steps' `time/step_s` and evaluations' times; else a
  stated per-step assumption for the built-in tasks, labelled as such.
"""

from __future__ import annotations

import json
import math
import shlex
import statistics
from dataclasses import dataclass
from pathlib import Path

from rbctl.config.base import flatten
from rbctl.config.train import TrainConfig
from rbctl.store.rundir import CONFIG, METRICS, RUNS_ROOT, sweep_run_dir, sweep_runs

# Stated, not measured: a built-in task's step of 128 rollouts of at most 20 tokens took 0.20-0.27 s at
# 1 thread on 2 AMD EPYC cores (docs/plateau_task.md; the fixpoint run of configs/fixpoint.yaml: 0.27 s),
# and a periodic evaluation of 256 problems × 8 samples ~1.5 s. Scaled by rollouts × tokens.
ASSUMED_STEP_S = 0.25
ASSUMED_STEP_TOKENS = 128 * 20
ASSUMED_EVAL_S_PER_SAMPLE = 1.5 / (256 * 8)
START_S = 5.0  # a run's start-up (imports, the warm start's load) and its final evaluation's set-up
SHAPE_KEYS = ("model.name", "data.source", "data.builtin", "rollout.prompts_per_step", "rollout.group_size",
              "rollout.max_new_tokens", "algo.ppo_epochs", "algo.ppo_mini_batch_size", "kappa_eff_every", "threads",
              "model.device", "model.lora")


@dataclass
class RunTime:
    step_s: float  # one rollout step
    eval_s_per_sample: float  # evaluation, per sample generated and graded
    source: str  # where the figures come from, in words
    measured: bool


def _get(d: dict, dotted: str):
    for part in dotted.split("."):
        d = d.get(part) if isinstance(d, dict) else None
    return d


def shape(cfg: dict) -> tuple:
    """What decides a run's time per step (`SHAPE_KEYS`), from a config dict."""
    return tuple(json.dumps(_get(cfg, k), sort_keys=True) for k in SHAPE_KEYS)


def _candidate_runs(sweep_dir: Path) -> list[Path]:
    """Run directories to measure: the sweep directory's own runs first, then every run under runs/
    (a run directory there, or a sweep's run)."""
    found = [d for _, d in sweep_runs(sweep_dir)]
    for top in sorted(Path(RUNS_ROOT).glob("*")):
        found += [d for d in [top] + [d for _, d in sweep_runs(top)] if d not in found]
    return [p for p in found if (p / CONFIG).is_file() and (p / METRICS).is_file()]


def measured_time(cfg: TrainConfig, sweep_dir: Path, limit: int = 12) -> RunTime | None:
    """Per-step and per-evaluation-sample times of finished runs of `cfg`'s shape on this machine:
    the median over up to `limit` runs of each run's median `time/step_s`, and of its evaluations'
    time per sample (`time/eval_s` of the periodic evaluations; the final evaluation's `time_s`)."""
    import yaml

    from rbctl.store.read import final_summaries

    want = shape(cfg.model_dump(mode="json"))
    steps, evals, where = [], [], []
    for run in _candidate_runs(sweep_dir):
        try:
            if shape(yaml.safe_load((run / CONFIG).read_text()) or {}) != want:
                continue
            rows = [json.loads(line) for line in (run / METRICS).read_text().splitlines() if line.strip()]
        except (OSError, ValueError, yaml.YAMLError):
            continue
        step_s = [r["time/step_s"] for r in rows if isinstance(r.get("time/step_s"), (int, float))]
        if len(step_s) < 3:
            continue
        steps.append(statistics.median(step_s))
        run_cfg = yaml.safe_load((run / CONFIG).read_text())
        ev = run_cfg.get("eval") or {}
        per_eval = (ev.get("n") or 1) * (ev.get("limit") or 256)
        eval_s = [r["time/eval_s"] for r in rows if isinstance(r.get("time/eval_s"), (int, float))]
        if eval_s and per_eval:
            evals.append(statistics.median(eval_s) / per_eval)
        try:
            finals = final_summaries(run)[1].values()
        except Exception:  # an unreadable final evaluation: its time is not measured
            finals = []
        for s in finals:
            try:
                evals.append(s["time_s"] / (s["num_problems"] * s["n"]))
            except (KeyError, TypeError, ZeroDivisionError):
                pass
        where.append(run)
        if len(where) >= limit:
            break
    if not steps:
        return None
    inside = sum(1 for w in where if Path(sweep_dir) in w.parents)
    src = (f"measured on this machine: {len(where)} finished run(s) of this shape"
           + (f" in {sweep_dir}" if inside == len(where) else f" under {RUNS_ROOT}/" if not inside else f" in {sweep_dir} and {RUNS_ROOT}/"))
    return RunTime(statistics.median(steps), statistics.median(evals) if evals else ASSUMED_EVAL_S_PER_SAMPLE, src, True)


def assumed_time(cfg: TrainConfig) -> RunTime | None:
    """A stated per-step estimate for a built-in task (`ASSUMED_STEP_S`), else None (unknown)."""
    if cfg.model.name != "builtin":
        return None
    scale = cfg.rollout.prompts_per_step * cfg.rollout.group_size * cfg.rollout.max_new_tokens / ASSUMED_STEP_TOKENS
    return RunTime(ASSUMED_STEP_S * scale, ASSUMED_EVAL_S_PER_SAMPLE,
                   f"an assumption, not measured here: {ASSUMED_STEP_S} s per step of 128 rollouts × 20 tokens "
                   "(a built-in task at 1 thread on 2 CPU cores), scaled by rollouts × tokens", False)


def run_seconds(cfg: TrainConfig, final_samples: int, t: RunTime, final_eval=None) -> float:
    """One run's wall time: its steps, its periodic evaluations, its final evaluation, its start.
    `final_eval` (the sweep's eval section): a final evaluation with the config of the periodic one
    at the last step costs nothing, it is a copy of it (`rbctl.train.evaluation.evaluate_final`)."""
    from rbctl.config.train import for_run

    ev = cfg.eval
    periodic = (cfg.steps // ev.every + 1) * ev.n * (ev.limit or 256) if ev.every else 0
    if ev.every and final_eval is not None and for_run(final_eval, cfg).model_dump() == for_run(ev, cfg).model_dump():
        final_samples = 0
    return START_S + cfg.steps * t.step_s + (periodic + final_samples) * t.eval_s_per_sample


def differences(a: TrainConfig, b: TrainConfig) -> list[str]:
    """`key: a -> b` for every resolved key where `b` differs from `a` (seed aside)."""
    fa, fb = flatten(a.model_dump(mode="json")), flatten(b.model_dump(mode="json"))
    return [f"{k}: {json.dumps(fa.get(k))} -> {json.dumps(fb.get(k))}" for k in fb if k != "seed" and fa.get(k) != fb.get(k)]


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


@dataclass(frozen=True)
class Estimate:
    """The wall time `rbctl ablate --dry-run` states for the runs a sweep has left."""

    wall_s: float
    todo: int  # runs left to run
    per_run_s: float  # the longest arm's run
    time: RunTime


def wall_estimate(sweep, configs: dict[str, TrainConfig], sweep_dir: Path, jobs: int) -> Estimate | None:
    """The wall time of the runs of ``sweep`` not done in ``sweep_dir`` (done: recorded done with their
    final evaluation), ``jobs`` at a time in waves of the longest arm's run time (`run_seconds`, from
    `measured_time` or `assumed_time`); None when neither knows this shape."""
    from rbctl.store.read import read_sweep_state
    from rbctl.store.rundir import run_key
    from rbctl.sweep.ablate import final_eval_done, units

    the_units, ev = units(sweep), sweep.eval
    state = read_sweep_state(sweep_dir) if Path(sweep_dir).is_dir() else {}
    done = sum(1 for arm, cfg in configs.items() for w, s in the_units
               if state.get(run_key(arm, s, w), {}).get("status") == "done"
               and final_eval_done(sweep_run_dir(sweep_dir, run_key(arm, s, w)), cfg.steps, ev.benchmarks))
    first = next(iter(configs.values()))
    t = measured_time(first, sweep_dir) or assumed_time(first)
    if t is None:
        return None
    final_samples = ev.n * (ev.limit or 256) * len(ev.benchmarks)  # an unlimited built-in test split is 256 problems
    per_run = max(run_seconds(cfg, final_samples, t, sweep.eval) for cfg in configs.values())
    todo = len(configs) * len(the_units) - done
    return Estimate(math.ceil(todo / jobs) * per_run if todo else 0.0, todo, per_run, t)


def sweep_estimate(sweep_path, sweep_dir: Path, jobs: int | None = None, seed_offset: int = 0,
                   arms: list[str] | None = None, seeds: list[int] | None = None,
                   overrides: list[str] = ()) -> Estimate | None:
    """`wall_estimate` of a sweep file with `rbctl ablate`'s selection: what its --dry-run states, for
    the command to print beside the time the sweep took."""
    from rbctl.sweep.ablate import load_sweep

    sweep, configs = load_sweep(sweep_path, seed_offset, arms, seeds, overrides)
    return wall_estimate(sweep, configs, Path(sweep_dir), jobs or sweep.jobs)


def time_line(measured_s: float, est: Estimate | None) -> str:
    """The time a sweep took beside what its --dry-run estimated before it ran:
    ``time: 10.1 min measured, ≈ 8.3 min estimated for 72 runs (per-run time measured on this machine: …)``."""
    if est is None:
        return f"time: {minutes(measured_s)} measured; --dry-run had no estimate (no finished run of this shape)"
    return (f"time: {minutes(measured_s)} measured, ≈ {minutes(est.wall_s)} estimated by --dry-run for {est.todo} "
            f"runs (per-run time {est.time.source})")


def sweep_plan(sweep_path, sweep_dir: Path, power, jobs: int | None = None, arms: list[str] | None = None,
               seeds: list[int] | None = None, overrides: list[str] = (), seed_offset: int = 0,
               force: bool = False) -> str:
    """The printable plan of a sweep (module docstring). Raises `UserError` as `rbctl ablate` would
    (`check_sweep_start`, the start's own check): on the sweep file, on any arm's config, on a check
    any run would fail before its first step (benchmark data included), and on the sweep directory
    (write access; another sweep in it, unless `force`).
    `power`: the module of the power functions (`rbctl.report.power`, a layer above the sweep: the
    caller hands it down)."""
    from rbctl.config.presets import resolve_config
    from rbctl.sweep.ablate import load_sweep, resolved_sweep, units
    from rbctl.sweep.sequential_run import plan_lines
    from rbctl.sweep.start import check_sweep_start
    from rbctl.train.preflight import machine_problems

    path = resolve_config(sweep_path, "sweep file")
    sweep, configs = load_sweep(path, seed_offset, arms, seeds, overrides)
    jobs = jobs or sweep.jobs
    design = _design_lines(path, sweep, configs, jobs, overrides)  # the base's and the shared config's checks first
    check_sweep_start(sweep, configs, Path(sweep_dir), resolved_sweep(sweep, configs), force,
                      machine=False)  # what the start checks before it writes anything; this machine below
    lines = [f"rbctl ablate dry run: {path} (nothing is run, nothing is written)", ""] + design
    lines += [""] + _power_lines(sweep, len(units(sweep)), power)
    lines += plan_lines(path, sweep, list(configs), seeds)  # a sequential design: looks, boundaries, expected runs
    lines += [""] + _time_lines(sweep, configs, sweep_dir, jobs, _base_file(path, sweep))
    machine = list(dict.fromkeys(p for cfg in configs.values() for p in machine_problems(cfg)))
    lines.append(_row("this machine", "cannot run it: " + "; ".join(machine) if machine else
                      "can run it (every arm's checks passed: benchmarks and their data, model and data paths, engine, "
                      "device, the sweep directory)"))
    lines.append("\nrun it: " + shlex.join(["rbctl", "ablate", str(sweep_path), "-o", str(sweep_dir),
                                           *_selection_args(arms, seeds, overrides, seed_offset),
                                           *(["--force"] if force else [])]))
    return "\n".join(lines) + "\n"


def _row(label: str, text: str) -> str:
    return f"{label:<14}{text}"


def _base_file(path: Path, sweep) -> Path:
    from rbctl.sweep.ablate import base_path

    return base_path(path, sweep.base)


def _design_lines(path: Path, sweep, configs: dict[str, TrainConfig], jobs: int, overrides) -> list[str]:
    """The sweep, its design, each run, the seeds, what every arm shares, and each arm's resolved
    difference from that."""
    from rbctl.config.base import apply_overrides, read_yaml, validate
    from rbctl.sweep.ablate import units

    base_file = _base_file(path, sweep)
    base = validate(TrainConfig, read_yaml(base_file), str(base_file))
    shared_items = [f"{k}={json.dumps(v)}" for k, v in sweep.set.items()] + list(overrides)
    shared = validate(TrainConfig, apply_overrides(read_yaml(base_file), shared_items), str(base_file), list(overrides))
    first, ev = next(iter(configs.values())), sweep.eval
    total = len(configs) * len(units(sweep))
    ws = f"{len(sweep.warm_starts)} warm starts × " if sweep.warm_starts else ""
    lines = [_row("sweep", f"'{sweep.name}', base {sweep.base} ({base_file})"),
             _row("design", f"{len(configs)} arms × {ws}{len(sweep.seeds)} seeds = {total} runs, {jobs} in parallel"),
             _row("each run", f"{first.steps} steps of P {first.rollout.prompts_per_step} × G {first.rollout.group_size} "
                              f"rollouts (≤ {first.rollout.max_new_tokens} tokens), then a final evaluation on "
                              f"{', '.join(ev.benchmarks)} (n {ev.n}, temperature {ev.temperature:g})"),
             _row("seeds", ", ".join(map(str, sweep.seeds))
                  + (f"; warm starts {', '.join(sweep.warm_starts)}" if sweep.warm_starts else ""))]
    common = differences(base, shared)
    if common:
        lines.append(_row("every arm", "; ".join(common) + " (the sweep's set:" + (" and --set" if overrides else "") + ")"))
    lines += ["", "arms (each one's resolved difference from the base, beside what every arm shares):"]
    width = max(map(len, configs))
    for arm, cfg in configs.items():
        diff = differences(shared, cfg)
        lines.append(f"  {arm:<{width}}  {'; '.join(diff) if diff else '(the base as it is)'}")
    return lines


def _time_lines(sweep, configs: dict[str, TrainConfig], sweep_dir: Path, jobs: int, base_file: Path) -> list[str]:
    """The wall-time estimate of the runs left (`wall_estimate`), or how to time one."""
    from rbctl.sweep.ablate import units

    est = wall_estimate(sweep, configs, Path(sweep_dir), jobs)
    if est is None:
        return [_row("time", f"unknown: no finished run of this shape on this machine (in {sweep_dir} or under "
                             f"{RUNS_ROOT}/); time one: rbctl train {base_file} -o {RUNS_ROOT}/probe --set steps=5, "
                             "then plan again")]
    total = len(configs) * len(units(sweep))
    lines = [_row("time", f"≈ {minutes(est.wall_s)} wall for {est.todo} runs ({total - est.todo} of {total} already done "
                          f"in {sweep_dir}): ≈ {est.per_run_s:.0f} s a run ({est.time.step_s:.3g} s a step), {jobs} at a time"),
             _row("", f"per-run time {est.time.source}")]
    if jobs > 1:
        lines.append(_row("", "parallel runs share the cores: on a machine with fewer free cores than jobs, runs slow down"))
    return lines


def _selection_args(arms, seeds, overrides, seed_offset) -> list[str]:
    """The options of `rbctl ablate` that make this selection."""
    out = ["--arms", ",".join(arms)] if arms else []
    out += ["--seeds", ",".join(map(str, seeds))] if seeds is not None else []
    out += [a for item in overrides for a in ("--set", item)]
    return out + (["--seed-offset", str(seed_offset)] if seed_offset else [])


def _power_lines(sweep, n_units: int, power_module) -> list[str]:
    """Each declared family (the principal one, then `comparisons.families`) and the design's power at its
    planning values (`rbctl.report.power`'s `power_paired`, `mde_paired`, `units_for_power`, and with a
    margin `power_tost`, `units_for_tost`, from `power_module`)."""
    pm = power_module
    c = sweep.comparisons
    unit = "(warm start, seed) pairs" if sweep.warm_starts else "seeds"
    if c is None:
        return ["comparisons   none stated (the report tests the pairs it forms as one Holm family); no power to "
                "compute: state comparisons.principal, mde and planning_sd"]
    out = []
    for fam in c.families_declared():
        m = len(fam.pairs)
        bench = fam.benchmark or sweep.eval.benchmarks[0]
        pairs = ", ".join(f"{a} − {b}" for a, b in fam.pairs)
        margin = f"; equivalent within ±{fam.margin:g} by TOST" if fam.margin is not None else ""
        out.append(f"comparisons   {fam.name} ({m}, Holm at α {fam.alpha:g}): {pairs}; {fam.metric} on {bench}{margin}")
        level = fam.alpha / m
        power = pm.power_paired(fam.mde, fam.planning_sd, n_units, level)
        detectable = pm.mde_paired(fam.planning_sd, n_units, level, fam.power)
        try:
            needed = str(pm.units_for_power(fam.planning_sd, fam.mde, m, fam.power, fam.alpha))
        except ValueError:
            needed = "more than can be run"
        if math.isnan(power):
            out.append(f"power         none: {n_units} unit(s); a paired t-test needs at least 2")
            continue
        out.append(f"power         {power:.2f} to detect Δ = {fam.mde:g} points (planning SD {fam.planning_sd:g}) with "
                   f"{n_units} {unit}, paired two-sided t-test at α/m = {level:.3g}; power {fam.power:g} needs {needed} "
                   f"units; with {n_units} the detectable Δ at power {fam.power:g} is {detectable:.1f} points")
        if fam.margin is not None:
            tost = pm.power_tost(fam.margin, fam.planning_sd, n_units, level)
            try:
                tost_needed = str(pm.units_for_tost(fam.planning_sd, fam.margin, m, fam.power, fam.alpha))
            except ValueError:
                tost_needed = "more than can be run"
            out.append(f"              equivalence: power {tost:.2f} to call a true Δ = 0 equivalent within "
                       f"±{fam.margin:g} (TOST at α/m); power {fam.power:g} needs {tost_needed} units")
    return out
