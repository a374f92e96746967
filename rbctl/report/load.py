"""Finding runs and sweeps on disk and reading run directories (no statistics here).

A run directory holds ``metrics.jsonl`` (one record per optimizer step), optionally ``run.json``
(arm, seed, baseline, variant), ``config.yaml``, ``eval.jsonl`` (periodic held-out evaluation, one
line per (step, benchmark); a step-0 line is the warm start) and final evaluations
``eval/step_XXXXXX/<bench>/summary.json`` (``eval/periodic/`` is never a final evaluation). A sweep
directory holds ``runs/<arm>/seed_<s>/`` and/or ``state.json``, optionally ``ceiling.json``.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from rbctl.config.sweep import arm_variant
from rbctl.errors import UserError

SEARCH_DEPTH = 3  # levels below an input directory searched for runs and sweeps
SKIP_DIRS = {"eval", "checkpoints", "report", "tb", "wandb", "figures", "tables", "data"}


@dataclass
class Run:
    """One training run as found on disk."""

    path: Path
    arm: str
    seed: int
    baseline: str  # the estimator the arm builds on (grpo, dr_grpo, …)
    variant: str  # base, budget, entropy_static, entropy_adaptive, …
    sweep: str | None
    status: str  # from the sweep's state.json ("done", "failed", …); "" for a run given on its own
    config_steps: int | None
    metrics: list[dict]  # metrics.jsonl, one record per step
    evals: list[dict]  # eval.jsonl, one record per (step, benchmark)
    final_step: int | None  # step of the final evaluation used
    finals: dict[str, dict] = field(default_factory=dict)  # benchmark -> summary.json
    group_size: int | None = None  # G (rollout.group_size in config.yaml)
    sweep_dir: Path | None = None

    @property
    def name(self) -> str:
        return f"{self.arm}/seed_{self.seed}"

    @property
    def last_step(self) -> int:
        return max((int(m["step"]) for m in self.metrics if "step" in m), default=0)


@dataclass
class Issue:
    """A run the report cannot (fully) use: failed, running, pending, missing, or without results."""

    name: str
    status: str
    detail: str = ""


def read_json(path: Path) -> dict:
    """A JSON file; invalid JSON is a `UserError` naming the file."""
    try:
        return json.loads(Path(path).read_text())
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: invalid JSON ({e})") from None


def read_jsonl(path: Path) -> list[dict]:
    """Every complete line of a JSONL file ([] if absent). A torn last line (a crash mid-write) is
    dropped; an invalid line before the last one is a `UserError`."""
    path = Path(path)
    if not path.is_file():
        return []
    lines = path.read_text().splitlines()
    out = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as e:
            if i == len(lines) - 1:
                break
            raise UserError(f"{path}: invalid JSON line before the last one ({e})") from None
    return out


variant_of = arm_variant  # runs without run.json: the variant from the saved config


def final_summaries(run_dir: Path) -> tuple[int | None, dict[str, dict]]:
    """The highest ``RUN/eval/step_XXXXXX`` holding a summary.json, and its summaries by benchmark."""
    found = []
    for d in (Path(run_dir) / "eval").glob("step_*"):
        m = re.fullmatch(r"step_(\d+)", d.name)
        if m and d.is_dir():
            files = sorted(d.glob("*/summary.json"))
            if files:
                found.append((int(m.group(1)), files))
    if not found:
        return None, {}
    step, files = max(found, key=lambda t: t[0])
    summaries = {}
    for f in files:
        s = read_json(f)
        summaries[str(s.get("benchmark", f.parent.name))] = s
    return step, summaries


def load_run(path: Path, sweep: str | None = None, status: str = "", sweep_dir: Path | None = None) -> Run:
    """Read one run directory (see the module docstring for what is used)."""
    path = Path(path)
    info = read_json(path / "run.json") if (path / "run.json").is_file() else {}
    cfg = {}
    if (path / "config.yaml").is_file():
        cfg = yaml.safe_load((path / "config.yaml").read_text()) or {}
    algo = cfg.get("algo") or {}
    seed_dir = re.fullmatch(r"seed_(\d+)", path.name)
    # A sweep's run dir is <arm>/seed_<s>: its name is the seed, its parent's the arm.
    default_arm = path.parent.name if seed_dir else path.name
    seed = info.get("seed", cfg.get("seed"))
    if seed is None:
        seed = int(seed_dir.group(1)) if seed_dir else 0
    final_step, finals = final_summaries(path)
    g = (cfg.get("rollout") or {}).get("group_size")
    return Run(
        path=path,
        arm=str(info.get("arm") or default_arm),
        seed=int(seed),
        baseline=str(info.get("baseline") or algo.get("estimator") or "unknown"),
        variant=str(info.get("variant") or variant_of(algo, cfg.get("rollout"))),
        sweep=info.get("sweep") or sweep,
        status=status,
        config_steps=cfg.get("steps"),
        metrics=read_jsonl(path / "metrics.jsonl"),
        evals=read_jsonl(path / "eval.jsonl"),
        final_step=final_step,
        finals=finals,
        group_size=int(g) if isinstance(g, int) else None,
        sweep_dir=sweep_dir,
    )


def is_run(d: Path) -> bool:
    return (Path(d) / "metrics.jsonl").is_file()


def is_sweep(d: Path) -> bool:
    return (Path(d) / "runs").is_dir() or (Path(d) / "state.json").is_file()


def load_sweep(sweep: Path) -> tuple[list[Run], list[Issue]]:
    """The runs of one sweep directory, and the runs its state.json names as not done or missing."""
    sweep = Path(sweep)
    state = read_json(sweep / "state.json").get("runs", {}) if (sweep / "state.json").is_file() else {}
    runs, issues, on_disk = [], [], set()
    for run_dir in sorted((sweep / "runs").glob("*/*")):
        if run_dir.is_dir() and is_run(run_dir):
            key = f"{run_dir.parent.name}/{run_dir.name}"
            on_disk.add(key)
            status = (state.get(key) or {}).get("status", "")
            runs.append(load_run(run_dir, sweep=sweep.name, status=status, sweep_dir=sweep))
    for key, entry in sorted(state.items()):
        entry = entry or {}
        status = entry.get("status", "unknown")
        if status != "done":
            kept = " (its logged steps are included)" if key in on_disk else ""
            issues.append(Issue(f"{sweep.name}/{key}", status, (entry.get("error") or "") + kept))
        elif key not in on_disk:
            issues.append(Issue(f"{sweep.name}/{key}", "missing", "state.json says done, but runs/" + key
                                + " has no metrics.jsonl"))
    return runs, issues


def _collect(d: Path, depth: int) -> tuple[list[Run], list[Issue], bool]:
    if is_run(d):
        return [load_run(d)], [], True
    if is_sweep(d):
        return (*load_sweep(d), True)
    runs, issues, found = [], [], False
    if depth < SEARCH_DEPTH:
        for child in sorted(d.iterdir()):
            if child.is_dir() and child.name not in SKIP_DIRS and not child.name.startswith("."):
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
            raise UserError(f"no run or sweep directory under {d} (a run holds metrics.jsonl; a sweep holds "
                            "runs/ or state.json)")
        runs.update({x.path.resolve(): x for x in r})
        issues += [x for x in i if x not in issues]
    out = sorted(runs.values(), key=lambda x: (x.arm, x.seed))
    clash = {a for (a, _), c in Counter((x.arm, x.seed) for x in out).items() if c > 1}
    for x in out:
        if x.arm in clash:
            x.arm = f"{x.sweep or x.path.parent.parent.name}:{x.arm}"
    dup = [k for k, c in Counter((x.arm, x.seed) for x in out).items() if c > 1]
    if dup:
        paths = [str(x.path) for x in out if (x.arm, x.seed) == dup[0]]
        raise UserError(f"runs {', '.join(paths)} are the same arm and seed ({dup[0][0]}, seed {dup[0][1]}); "
                        "report them separately")
    return sorted(out, key=lambda x: (x.arm, x.seed)), issues


def default_out(dirs: list[Path]) -> Path:
    """``SWEEP/report`` for a single sweep directory; anything else needs an explicit output folder."""
    if len(dirs) == 1 and is_sweep(Path(dirs[0])) and not is_run(Path(dirs[0])):
        return Path(dirs[0]) / "report"
    raise UserError("pass -o OUT: the output folder defaults to SWEEP/report only for a single sweep directory")


@dataclass(frozen=True)
class Ceiling:
    """A pass@1 level shown reachable on the task (docs/method.md, "Premature convergence")."""

    value: float | None  # fraction; None: unknown
    source: str


def read_ceiling(runs: list[Run], dirs: list[Path], benchmark: str | None = None) -> Ceiling:
    """The ceiling for the plateau test, in this order:

    1. ``ceiling.json`` (``{"value": float, "source": "text"}``) in a sweep directory of the runs, or
       in an input directory;
    2. the warm start's pass@G: the mean over runs of ``pass@G`` on their step-0 ``eval.jsonl`` line
       (``benchmark``, or the first benchmark logged), G the runs' ``rollout.group_size``;
    3. unknown (``Ceiling(None, "unknown")``).
    """
    places = list(dict.fromkeys([*(r.sweep_dir for r in runs if r.sweep_dir), *map(Path, dirs)]))
    for d in places:
        f = Path(d) / "ceiling.json"
        if f.is_file():
            c = read_json(f)
            v = c.get("value")
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise UserError(f"{f}: 'value' must be a number (a fraction of problems solved)")
            return Ceiling(float(v), str(c.get("source") or f"{f}"))
    values, keys = [], set()
    for r in runs:
        g = r.group_size
        for e in r.evals:
            if e.get("step") != 0 or (benchmark is not None and e.get("benchmark") != benchmark):
                continue
            key = f"pass@{g}" if g else None
            if key and isinstance(e.get(key), (int, float)):
                values.append(float(e[key]))
                keys.add(f"{key} on {e.get('benchmark')}")
            break
    if values:
        return Ceiling(sum(values) / len(values), f"warm start's {', '.join(sorted(keys))} (step-0 held-out eval, "
                                                  f"mean over {len(values)} runs)")
    return Ceiling(None, "unknown")
