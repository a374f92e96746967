"""What `rbctl ablate` refuses before it makes or writes anything, and its `--dry-run` alike
(`check_sweep_start`): every arm's checks, write access, a directory that holds another sweep
(`sweep_dir_problem`), and, with `--force`, runs in it that the changed sweep cannot carry over
(`forced_runs_problem`).
"""

from __future__ import annotations

import json
from pathlib import Path

from rbctl.config.base import RUN_ONLY_KEYS
from rbctl.config.sweep import SweepConfig, SweepEval
from rbctl.config.train import TrainConfig, for_run
from rbctl.errors import UserError
from rbctl.store.read import read_sweep_resolved
from rbctl.store.rundir import run_key, sweep_run_dir


def check_sweep_start(sweep: SweepConfig, configs: dict[str, TrainConfig], sweep_dir: Path, resolved: dict,
                      force: bool = False, machine: bool = True) -> None:
    """What `rbctl ablate` refuses before it makes or writes anything, and its `--dry-run` with the
    same arguments (`machine` False: the plan states this machine's engine and device): every arm's
    checks (`check_arms_runnable`), then the sweep directory: write access
    (`rbctl.train.preflight.writable_problem`) and the sweep it holds (`sweep_dir_problem`)."""
    from rbctl.train.preflight import writable_problem

    check_arms_runnable(sweep, configs, machine=machine)
    for problem in (writable_problem(sweep_dir), sweep_dir_problem(sweep_dir, resolved, force),
                    forced_runs_problem(sweep, configs, sweep_dir) if force else None):
        if problem is not None:
            raise UserError(problem)


def forced_runs_problem(sweep: SweepConfig, configs: dict[str, TrainConfig], sweep_dir: Path) -> str | None:
    """Why ``--force`` cannot take ``sweep_dir`` for this sweep, else None: runs in it that a sweep
    cannot carry over to the changed one. A run that got somewhere with another training config than
    its arm's now is not resumed with this one (`rbctl.train.run_setup.check_run_dir`: another
    `steps` needs `rbctl train --extend`, which a sweep does not pass; another key, a new run), so it
    would fail, and a finished one would be kept as if it had run this config; a finished run's final
    evaluation under another `eval:` would be kept as this sweep's. A changed sweep is another sweep
    (docs/scaling.md): it gets another directory."""
    from rbctl.config.base import flatten
    from rbctl.config.train import read_run_config
    from rbctl.store.rundir import CONFIG, final_eval_dir
    from rbctl.sweep.grid import units, with_warm_start
    from rbctl.train.run_setup import check_run_dir

    new_eval = flatten(sweep.eval.model_dump(mode="json"))
    old_eval = _saved_eval(sweep_dir)
    eval_change = [f"eval.{k} {old_eval[k]} ≠ {v}" for k, v in new_eval.items() if k in old_eval and old_eval[k] != v]
    stale = []
    for arm, cfg in configs.items():
        for ws, seed in units(sweep):
            key = run_key(arm, seed, ws)
            rd = sweep_run_dir(sweep_dir, key)
            rcfg = with_warm_start(cfg, ws).model_copy(update={"seed": seed})
            try:
                check_run_dir(rcfg, rd, force=False)
            except UserError:
                old, new = flatten(read_run_config(rd / CONFIG).model_dump(mode="json")), flatten(rcfg.model_dump(mode="json"))
                keys = [k for k in new if old.get(k) != new.get(k) and k.split(".")[0] not in RUN_ONLY_KEYS]
                stale.append((key, ", ".join(f"{k} {old.get(k)} ≠ {new.get(k)}" for k in keys[:3]) or "its schedule"))
                continue
            if eval_change and final_eval_dir(rd, rcfg.steps).is_dir():
                stale.append((key, "its final evaluation: " + ", ".join(eval_change[:3])))
    if not stale:
        return None
    return (f"--force: sweep directory {sweep_dir} holds {len(stale)} run{'s' * (len(stale) != 1)} made with another "
            f"config or evaluation than this sweep gives them ({stale[0][0]}: {stale[0][1]}); a run keeps its config "
            "and a finished run its final evaluation, so each would fail or stand for what it did not run. A changed "
            "sweep is another sweep: run it in another directory (-o NEW_DIR)")


def _saved_eval(sweep_dir: Path) -> dict:
    """The flattened `eval:` of the sweep a directory holds: through today's schema (defaults filled in),
    else as recorded where it no longer validates ({} without one)."""
    from pydantic import ValidationError

    from rbctl.config.base import flatten

    saved = (read_sweep_resolved(sweep_dir).get("sweep") or {}).get("eval") if Path(sweep_dir).is_dir() else None
    if not isinstance(saved, dict):
        return {}
    try:
        return flatten(SweepEval.model_validate(saved).model_dump(mode="json"))
    except ValidationError:
        return flatten(saved)


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
