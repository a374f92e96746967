"""Reading run and sweep directories (the layout of `rbctl.store.rundir`) into plain dicts and lists,
for `rbctl report` and scripts: no statistics, no torch. Invalid files are a `UserError` naming them;
a torn last JSON line (a crash mid-write) is dropped.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from rbctl.errors import UserError
from rbctl.store import jsonl
from rbctl.store.rundir import (
    CEILING,
    CONFIG,
    EVAL_DIR,
    EVAL_LINES,
    METRICS,
    PROVENANCE,
    RUN_META,
    SUMMARY,
    SWEEP_FILE,
    SWEEP_RUNS,
    SWEEP_STATE,
    step_of,
)

# Folders of a run or sweep directory that hold no run (skipped when searching for runs).
NOT_RUNS = {EVAL_DIR, "checkpoints", "report", "tb", "wandb", "figures", "tables", "data", "submitit"}


def read_json(path: Path) -> dict:
    """A JSON file; invalid JSON is a `UserError` naming the file."""
    try:
        return json.loads(Path(path).read_text())
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: invalid JSON ({e})") from None


def read_lines(path: Path) -> list[dict]:
    """Every complete line of a run log ([] when absent); an invalid line but a torn last one is a
    `UserError` naming the file and its line number (`rbctl.store.jsonl.read_log`)."""
    return jsonl.read_jsonl(Path(path))


def read_yaml_file(path: Path) -> dict:
    """A YAML mapping ({} when absent or empty); invalid YAML is a `UserError` naming the file."""
    path = Path(path)
    if not path.is_file():
        return {}
    try:
        return yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise UserError(f"{path}: invalid YAML ({e})") from None


def has_metrics(path: Path) -> bool:
    """A run directory the report can read: it holds a metrics log."""
    return (Path(path) / METRICS).is_file()


def is_sweep(path: Path) -> bool:
    return (Path(path) / SWEEP_RUNS).is_dir() or (Path(path) / SWEEP_STATE).is_file()


def final_summaries(run_dir: Path) -> tuple[int | None, dict[str, dict]]:
    """The highest ``RUN/eval/step_N`` holding a summary, and its summaries by benchmark
    (``eval/periodic/`` is never a final evaluation)."""
    found = []
    for d in (Path(run_dir) / EVAL_DIR).glob("step_*"):
        step = step_of(d.name)
        if step is not None and d.is_dir():
            files = sorted(d.glob(f"*/{SUMMARY}"))
            if files:
                found.append((step, files))
    if not found:
        return None, {}
    step, files = max(found, key=lambda t: t[0])
    summaries = {}
    for f in files:
        s = read_json(f)
        summaries[str(s.get("benchmark", f.parent.name))] = s
    return step, summaries


def read_run(path: Path) -> dict:
    """Everything the report reads from one run directory, as plain data:
    ``{"meta": run.json, "config": config.yaml, "provenance": provenance.json, "metrics": [lines],
    "evals": [eval.jsonl lines], "final_step": int | None, "finals": {benchmark: summary}}``
    (absent files give {} or [])."""
    path = Path(path)
    final_step, finals = final_summaries(path)
    return {
        "meta": read_json(path / RUN_META) if (path / RUN_META).is_file() else {},
        "config": read_yaml_file(path / CONFIG),
        "provenance": read_json(path / PROVENANCE) if (path / PROVENANCE).is_file() else {},
        "metrics": read_lines(path / METRICS),
        "evals": read_lines(path / EVAL_LINES),
        "final_step": final_step,
        "finals": finals,
    }


def sweep_run_dirs(sweep: Path) -> list[tuple[str, Path]]:
    """(key, run directory) of every run with metrics under ``SWEEP/runs``, sorted: keys are the
    paths below ``runs/``, ``ARM/seed_S`` or, for a sweep crossing warm starts, ``ARM/WS/seed_S``
    (the keys of state.json)."""
    root = Path(sweep) / SWEEP_RUNS
    found = {d for pattern in ("*/*", "*/*/*") for d in root.glob(pattern) if d.is_dir() and has_metrics(d)}
    return sorted((d.relative_to(root).as_posix(), d) for d in found)


def read_sweep_state(sweep: Path) -> dict[str, dict]:
    """state.json's runs: ``{key: {"status", "error"}}`` ({} when there is no state file)."""
    p = Path(sweep) / SWEEP_STATE
    return (read_json(p).get("runs") or {}) if p.is_file() else {}


def read_sweep_file(sweep: Path) -> dict:
    """The sweep file a sweep directory was run from (the ``sweep`` section of its resolved
    sweep.yaml), or {} when there is none."""
    return read_yaml_file(Path(sweep) / SWEEP_FILE).get("sweep") or {}


def read_ceiling_file(directory: Path) -> tuple[dict, Path] | None:
    """``(ceiling.json, its path)`` of a directory, or None when it has none."""
    p = Path(directory) / CEILING
    return (read_json(p), p) if p.is_file() else None


def newest_metrics_time(directory: Path) -> float | None:
    """The modification time of the newest metrics log under ``directory`` (when its runs last
    logged), or None."""
    times = [p.stat().st_mtime for p in Path(directory).rglob(METRICS)]
    return max(times) if times else None
