"""Finding runs and sweeps on disk and reading them (through `rbctl.store.read`; no statistics here).

A run directory (`rbctl.store.rundir`) gives the metrics log, run.json (arm, seed, baseline,
variant, warm start), the resolved config, the periodic held-out evaluation (one line per (step,
benchmark); step 0 is the warm start) and its final evaluations. A sweep directory holds
``runs/<arm>/seed_<s>/`` or, crossing warm starts, ``runs/<arm>/<warm start>/seed_<s>/``, its
state file, its resolved sweep file, and optionally a ceiling file (read by `rbctl.report.analyses.plateau`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from rbctl.config.base import RUN_ONLY_KEYS, validate
from rbctl.config.sweep import Comparisons, Escape, arm_variant
from rbctl.errors import UserError
from rbctl.store import read
from rbctl.store.rundir import REPORT_DIR, SWEEP_FILE, SWEEP_RUNS, run_key, seed_of

SEARCH_DEPTH = 3  # levels below an input directory searched for runs and sweeps


@dataclass
class Run:
    """One training run as found on disk."""

    path: Path
    arm: str
    seed: int
    baseline: str  # the estimator the arm builds on (grpo, dr_grpo, …)
    variant: str  # base, budget, entropy_<mode> (the bonus's mode), …
    sweep: str | None
    status: str  # from the sweep's state.json ("done", "failed", …); "" for a run given on its own
    config_steps: int | None
    metrics: list[dict]  # metrics.jsonl, one record per step
    evals: list[dict]  # eval.jsonl, one record per (step, benchmark)
    final_step: int | None  # step of the final evaluation used
    finals: dict[str, dict] = field(default_factory=dict)  # benchmark -> its final evaluation summary
    group_size: int | None = None  # G (rollout.group_size of the config)
    sweep_dir: Path | None = None
    warm_start: str | None = None  # the warm start, when the sweep crosses warm starts with seeds
    config: dict = field(default_factory=dict)  # the resolved training config ({} when absent)
    provenance: dict = field(default_factory=dict)

    @property
    def unit(self) -> tuple[str, int]:
        """What pairs this run with the other arms' runs: (warm start or "", seed)."""
        return (self.warm_start or "", self.seed)

    @property
    def name(self) -> str:
        return run_key(self.arm, self.seed, self.warm_start)

    def training_config(self) -> dict:
        """The config without what may differ between runs of one arm (`rbctl.config.base.RUN_ONLY_KEYS`)."""
        return {k: v for k, v in self.config.items() if k not in RUN_ONLY_KEYS}

    @property
    def last_step(self) -> int:
        return max((int(m["step"]) for m in self.metrics if "step" in m), default=0)


@dataclass
class Issue:
    """A run the report cannot (fully) use: failed, running, pending, missing, or without results."""

    name: str
    status: str
    detail: str = ""


def unit_label(unit: tuple[str, int]) -> str:
    """``3`` for seed 3; ``ws_a/3`` for seed 3 of warm start ws_a."""
    return f"{unit[0]}/{unit[1]}" if unit[0] else str(unit[1])


def load_run(path: Path, sweep: str | None = None, status: str = "", sweep_dir: Path | None = None) -> Run:
    """Read one run directory (`rbctl.store.read.read_run`). Without run.json the arm, warm start and
    seed come from the sweep layout (``<arm>/seed_<s>`` or ``<arm>/<ws>/seed_<s>`` below runs/, the
    directory's own name otherwise) and the variant from the config."""
    path = Path(path)
    data = read.read_run(path, periodic_final=sweep_dir is None)  # a loose run: its last periodic evaluation may be final
    info, cfg = data["meta"], data["config"]
    algo = cfg.get("algo") or {}
    seed_dir = seed_of(path.name)
    below = path.relative_to(sweep_dir / SWEEP_RUNS).parts if sweep_dir is not None else ()
    deep = seed_dir is not None and len(below) == 3  # <arm>/<warm start>/seed_<s>
    default_arm = (path.parent.parent.name if deep else path.parent.name) if seed_dir is not None else path.name
    seed = info.get("seed", cfg.get("seed"))
    if seed is None:
        seed = seed_dir if seed_dir is not None else 0
    g = (cfg.get("rollout") or {}).get("group_size")
    ws = info.get("warm_start") or (path.parent.name if deep else None)
    return Run(
        path=path,
        arm=str(info.get("arm") or default_arm),
        seed=int(seed),
        baseline=str(info.get("baseline") or algo.get("estimator") or "unknown"),
        variant=str(info.get("variant") or arm_variant(algo, cfg.get("rollout"))),
        sweep=info.get("sweep") or sweep,
        status=status,
        config_steps=cfg.get("steps"),
        metrics=data["metrics"],
        evals=data["evals"],
        final_step=data["final_step"],
        finals=data["finals"],
        group_size=int(g) if isinstance(g, int) else None,
        sweep_dir=sweep_dir,
        warm_start=str(ws) if ws else None,
        config=cfg,
        provenance=data["provenance"],
    )


def load_sweep(sweep: Path) -> tuple[list[Run], list[Issue]]:
    """The runs of one sweep directory, and the runs its state file names as not done or missing."""
    sweep = Path(sweep)
    state = read.read_sweep_state(sweep)
    runs, issues, on_disk = [], [], set()
    for key, run_dir in read.sweep_run_dirs(sweep):
        on_disk.add(key)
        runs.append(load_run(run_dir, sweep=sweep.name, status=(state.get(key) or {}).get("status", ""),
                             sweep_dir=sweep))
    for key, entry in sorted(state.items()):
        entry = entry or {}
        status = entry.get("status", "unknown")
        if status != "done":
            kept = " (its logged steps are included)" if key in on_disk else ""
            issues.append(Issue(f"{sweep.name}/{key}", status, (entry.get("error") or "") + kept))
        elif key not in on_disk:
            issues.append(Issue(f"{sweep.name}/{key}", "missing", f"the sweep's state says done, but {SWEEP_RUNS}/{key} "
                                "has no metrics"))
    return runs, issues


def _collect(d: Path, depth: int) -> tuple[list[Run], list[Issue], bool]:
    if read.has_metrics(d):
        return [load_run(d)], [], True
    if read.is_sweep(d):
        return (*load_sweep(d), True)
    runs, issues, found = [], [], False
    if depth < SEARCH_DEPTH:
        for child in sorted(d.iterdir()):
            if child.is_dir() and child.name not in read.NOT_RUNS and not child.name.startswith("."):
                r, i, f = _collect(child, depth + 1)
                runs, issues, found = runs + r, issues + i, found or f
    return runs, issues, found


def find_runs(dirs: list[Path]) -> tuple[list[Run], list[Issue]]:
    """Every run under ``dirs`` (each counted once) and the problems the sweeps' state files name.

    When two runs share an arm name and a seed (the same arm in two sweeps), those arms are
    qualified by their sweep: ``sweep:arm``.
    """
    runs: dict[Path, Run] = {}
    issues: list[Issue] = []
    for d in map(Path, dirs):
        if not d.is_dir():
            raise UserError(f"{d} is not a directory")
        r, i, found = _collect(d, 0)
        if not found:
            raise UserError(f"no run or sweep directory under {d} (a run holds a metrics log; a sweep holds "
                            f"{SWEEP_RUNS}/ or a state file)")
        runs.update({x.path.resolve(): x for x in r})
        issues += [x for x in i if x not in issues]
    out = sorted(runs.values(), key=lambda x: (x.arm, x.unit))
    clash = {a for (a, _), c in Counter((x.arm, x.unit) for x in out).items() if c > 1}
    for x in out:
        if x.arm in clash:
            x.arm = f"{x.sweep or x.path.parent.parent.name}:{x.arm}"
    dup = [k for k, c in Counter((x.arm, x.unit) for x in out).items() if c > 1]
    if dup:
        paths = [str(x.path) for x in out if (x.arm, x.unit) == dup[0]]
        raise UserError(f"runs {', '.join(paths)} are the same arm and unit ({dup[0][0]}, "
                        f"{unit_label(dup[0][1])}); report them separately")
    return sorted(out, key=lambda x: (x.arm, x.unit)), issues


def default_out(dirs: list[Path]) -> Path:
    """``DIR/report`` for a single input directory (a run or a sweep); several need an explicit one."""
    if len(dirs) == 1:
        return Path(dirs[0]) / REPORT_DIR
    raise UserError(f"pass -o OUT: the output folder defaults to DIR/{REPORT_DIR} only for a single input directory")


def sweep_settings(runs: list[Run]) -> tuple[Comparisons | None, Escape | None, list[str]]:
    """The report settings of the runs' sweep file (its resolved copy in the sweep directory): the
    principal comparisons, the escape-time setting and the evaluation benchmarks. (None, None, [])
    for runs outside a sweep; runs of several sweeps with different settings are an error."""
    found = {}
    for d in dict.fromkeys(r.sweep_dir for r in runs if r.sweep_dir):
        sweep = read.read_sweep_file(d)
        if not sweep:
            continue
        source = str(d / SWEEP_FILE)
        comps = validate(Comparisons, sweep["comparisons"], source + " comparisons") if sweep.get("comparisons") else None
        escape = validate(Escape, sweep["escape"], source + " escape") if sweep.get("escape") else None
        benches = list((sweep.get("eval") or {}).get("benchmarks") or [])
        found[source] = (comps, escape, benches)
    if len({repr(v[:2]) for v in found.values()}) > 1:
        raise UserError("the runs come from sweeps with different comparisons or escape settings ("
                        + ", ".join(found) + "); report them separately")
    return next(iter(found.values()), (None, None, []))
