"""Reading run and sweep directories (the layout of `rbctl.store.rundir`) into plain dicts and lists,
for `rbctl report`, resumes and scripts: no statistics, no torch. Invalid files are a `UserError`
naming them; a torn last JSON line (a crash mid-write) is dropped. A header (provenance.json,
run.json, sweep.yaml) of another `format_version` than `FORMAT_VERSION` is refused; one without a
format_version is version 1.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from rbctl.errors import UserError
from rbctl.store import jsonl
from rbctl.store.rundir import (
    CEILING,
    CHECKPOINTS,
    CONFIG,
    EVAL_DIR,
    EVAL_LINES,
    EVAL_PARTIAL,
    FORMAT_VERSION,
    METRICS,
    PERIODIC_DIR,
    PROTOCOL_FILE,
    PROVENANCE,
    REPORT_DATA,
    REPORT_DIR,
    REPORT_FIGURES,
    REPORT_TABLES,
    RUN_META,
    SUBMITIT,
    SUMMARY,
    SWEEP_FILE,
    SWEEP_RUNS,
    SWEEP_STATE,
    TENSORBOARD,
    WANDB,
    protocol_dirs,
    step_dir_name,
    step_dirs,
    sweep_runs,
)

# Folders of a run or sweep directory that hold no run (skipped when searching for runs).
NOT_RUNS = {EVAL_DIR, CHECKPOINTS, REPORT_DIR, TENSORBOARD, WANDB, REPORT_FIGURES, REPORT_TABLES, REPORT_DATA, SUBMITIT}


def read_json(path: Path) -> dict:
    """A JSON file; invalid JSON is a `UserError` naming the file."""
    try:
        return json.loads(Path(path).read_text())
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: invalid JSON ({e})") from None


def check_format(data: dict, path: Path) -> dict:
    """`data`, the content of header `path`, when its format_version is `FORMAT_VERSION` or absent
    (every directory written before the field was recorded is version 1); else a one-line
    `UserError` naming the file and the version."""
    version = data.get("format_version", 1)
    if version != FORMAT_VERSION or isinstance(version, bool):
        raise UserError(f"{path}: format_version {version!r} is not one this rbctl reads (it reads {FORMAT_VERSION})")
    return data


def read_header(path: Path) -> dict:
    """A JSON header of a run directory (provenance.json, run.json), its format version checked
    (`check_format`); {} when absent."""
    path = Path(path)
    return check_format(read_json(path), path) if path.is_file() else {}


def check_run_format(run_dir: Path) -> None:
    """Refuse a run directory whose headers record another format version (`check_format`)."""
    for name in (PROVENANCE, RUN_META):
        read_header(Path(run_dir) / name)


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


def final_summaries(run_dir: Path, last_step: int | None = None) -> tuple[int | None, dict[str, dict]]:
    """The highest ``RUN/eval/step_N`` holding a summary, and its summaries by benchmark. Without one
    (a run `rbctl train` made: no final evaluation of its own), the periodic evaluation at the run's
    ``last_step`` (``RUN/eval/periodic/step_N``, N = the config's steps) is its final score: the last
    evaluation at the last step, whatever wrote it. An earlier periodic evaluation never is."""
    found = []
    for step, d in step_dirs(Path(run_dir) / EVAL_DIR):
        files = sorted(d.glob(f"*/{SUMMARY}"))
        if files:
            found.append((step, files))
    if not found and last_step is not None:
        d = Path(run_dir) / EVAL_DIR / PERIODIC_DIR / step_dir_name(int(last_step))
        files = sorted(d.glob(f"*/{SUMMARY}"))
        if files:
            found.append((int(last_step), files))
    if not found:
        return None, {}
    step, files = max(found, key=lambda t: t[0])
    summaries = {}
    for f in files:
        s = read_json(f)
        summaries[str(s.get("benchmark", f.parent.name))] = s
    return step, summaries


def _summaries(files) -> dict[str, dict]:
    out = {}
    for f in files:
        s = read_json(f)
        out[str(s.get("benchmark", f.parent.name))] = s
    return out


def read_protocol(folder: Path) -> dict:
    """A protocol folder's protocol.json: ``{"format_version", "id", "protocol": identity, "text",
    "run_protocol": whether it is the run's own declared protocol, "run_benchmarks": the benchmarks
    that protocol declares}`` (rbctl.eval.run writes it)."""
    path = Path(folder) / PROTOCOL_FILE
    return check_format(read_json(path), path)


def protocol_evaluations(run_dir: Path) -> list[dict]:
    """Every `rbctl eval` of a run kept per protocol (``RUN/eval/step_N/protocol_X/``), by step then
    folder: ``{"step", "path", "protocol": protocol.json, "summaries": {benchmark: summary}}``
    (complete benchmarks only)."""
    out = []
    for step, d in step_dirs(Path(run_dir) / EVAL_DIR):
        for folder in protocol_dirs(d):
            out.append({"step": step, "path": folder, "protocol": read_protocol(folder),
                        "summaries": _summaries(_complete(folder))})
    return out


def _complete(folder: Path) -> list[Path]:
    """The summaries of the complete benchmarks of an evaluation folder (no partial.json beside them)."""
    return [f for f in sorted(Path(folder).glob(f"*/{SUMMARY}")) if not (f.parent / EVAL_PARTIAL).exists()]


def _declares(declared: dict | None, summary: dict) -> bool:
    """Whether a summary in a run's final-evaluation folder measured what the run's config declares
    (`eval:` of config.yaml: its benchmarks, n): an older `rbctl eval` wrote side evaluations there
    too. A config that names neither accepts any."""
    declared = declared if isinstance(declared, dict) else {}
    benches, n = declared.get("benchmarks"), declared.get("n")
    return (not benches or summary.get("benchmark") in benches) and (n is None or summary.get("n") == n)


def own_final_summaries(run_dir: Path, steps: int, declared: dict | None = None) -> tuple[int | None, dict[str, dict]]:
    """The final score of a run `rbctl train` made: the evaluation its config declares (`declared`,
    the config's ``eval:``) at its last step `steps`, by benchmark, from (first found wins) the
    periodic evaluation training ran there (``RUN/eval/periodic/step_N``), an `rbctl eval` under the
    run's own protocol (a protocol folder whose protocol.json says so, its declared benchmarks only),
    or a summary an older `rbctl eval` wrote into ``RUN/eval/step_N/BENCH`` that matches the
    declared benchmarks and n. A side evaluation (another protocol, other benchmarks, another step)
    never is: `side_evaluations` lists them. (None, {}) when there is none."""
    run_dir, finals = Path(run_dir), {}
    for bench, s in _summaries(_complete(Path(run_dir) / EVAL_DIR / PERIODIC_DIR / step_dir_name(steps))).items():
        finals.setdefault(bench, s)
    for ev in protocol_evaluations(run_dir):
        p = ev["protocol"]
        if ev["step"] == steps and p.get("run_protocol"):
            for bench, s in ev["summaries"].items():
                if bench in (p.get("run_benchmarks") or []):
                    finals.setdefault(bench, s)
    for bench, s in _summaries(_complete(Path(run_dir) / EVAL_DIR / step_dir_name(steps))).items():
        if _declares(declared, s):
            finals.setdefault(bench, s)
    return (steps, finals) if finals else (None, {})


def side_evaluations(run_dir: Path, final_step: int | None, finals: dict[str, dict]) -> list[dict]:
    """The evaluations of a run that are not its final score (`finals` at `final_step`): each
    protocol folder's benchmarks that are not among them, and the summaries of its final-evaluation
    folders (``RUN/eval/step_N/BENCH``) that are not; ``{"step", "benchmarks", "protocol": words,
    "path"}``, by step."""
    out = []
    for ev in protocol_evaluations(run_dir):
        benches = sorted(b for b, s in ev["summaries"].items() if not (ev["step"] == final_step and finals.get(b) == s))
        if benches:
            out.append({"step": ev["step"], "benchmarks": benches, "protocol": ev["protocol"].get("text", ""),
                        "path": ev["path"]})
    for step, d in step_dirs(Path(run_dir) / EVAL_DIR):
        direct = _summaries(_complete(d))
        benches = sorted(b for b, s in direct.items() if not (step == final_step and finals.get(b) == s))
        if benches:
            n = sorted({str(direct[b].get("n")) for b in benches})
            out.append({"step": step, "benchmarks": benches, "protocol": f"n={', '.join(n)}", "path": d})
    return sorted(out, key=lambda e: e["step"])


def read_run(path: Path, periodic_final: bool = False) -> dict:
    """Everything the report reads from one run directory, as plain data:
    ``{"meta": run.json, "config": config.yaml, "provenance": provenance.json, "metrics": [lines],
    "evals": [eval.jsonl lines], "final_step": int | None, "finals": {benchmark: summary},
    "side_evals": [side_evaluations]}`` (absent files give {} or []; a header of another format
    version is refused, `check_format`). ``periodic_final``: a run outside a sweep. A run `rbctl
    train` made (no run.json) is scored by its own declared evaluation at its last step
    (`own_final_summaries`); a sweep's run by its sweep's final evaluation (`final_summaries`; given
    on its own, its periodic evaluation at its last step where it has none)."""
    path = Path(path)
    config = read_yaml_file(path / CONFIG)
    meta = read_header(path / RUN_META)
    steps = config.get("steps") if isinstance(config, dict) else None
    steps = steps if isinstance(steps, int) and not isinstance(steps, bool) else None
    if periodic_final and not meta and steps is not None:
        final_step, finals = own_final_summaries(path, steps, config.get("eval"))
    else:
        final_step, finals = final_summaries(path, steps if periodic_final else None)
    return {
        "meta": meta,
        "config": config,
        "provenance": read_header(path / PROVENANCE),
        "metrics": read_lines(path / METRICS),
        "evals": read_lines(path / EVAL_LINES),
        "final_step": final_step,
        "finals": finals,
        "side_evals": side_evaluations(path, final_step, finals),
    }


def sweep_run_dirs(sweep: Path) -> list[tuple[str, Path]]:
    """(key, run directory) of every run with metrics under ``SWEEP/runs``, sorted: keys are the
    paths below ``runs/``, ``ARM/seed_S`` or, for a sweep crossing warm starts, ``ARM/WS/seed_S``
    (the keys of state.json)."""
    return [(key, d) for key, d in sweep_runs(sweep) if has_metrics(d)]


def read_sweep_state(sweep: Path) -> dict[str, dict]:
    """state.json's runs, ``{key: {"status", "error"}}``: the one reader of a sweep's state (`rbctl
    ablate` resuming, `rbctl report`, scripts). No state file means a fresh sweep: {}. A state file
    that does not parse as ``{"runs": {...}}`` (torn or edited by hand: `rbctl ablate` writes it
    atomically) is a one-line `UserError` naming the file; delete it to start the state afresh."""
    p = Path(sweep) / SWEEP_STATE
    if not p.is_file():
        return {}
    data = read_json(p)
    runs = data.get("runs") if isinstance(data, dict) else None
    if not isinstance(runs, dict) or not all(isinstance(r, dict) for r in runs.values()):
        raise UserError(f"{p}: not a sweep state (expected {{\"runs\": {{key: {{\"status\", \"error\"}}}}}})")
    return runs


def read_sweep_looks(sweep: Path) -> dict:
    """A sequential design's record in state.json: ``{"design": {...}, "looks": [look record, ...]}``
    (`rbctl.report.sequential_looks.LookRecord.to_json`, in order), or {} when it holds none."""
    p = Path(sweep) / SWEEP_STATE
    data = read_json(p) if p.is_file() else {}
    looks = data.get("looks") if isinstance(data, dict) else None
    if looks is None:
        return {}
    if not isinstance(looks, list) or not all(isinstance(x, dict) for x in looks) or not isinstance(data.get("design"), dict):
        raise UserError(f"{p}: its looks are not a sequential design's record (expected \"design\": {{...}}, \"looks\": [...])")
    return {"design": data["design"], "looks": looks}


def read_sweep_resolved(sweep: Path) -> dict:
    """A sweep directory's resolved sweep.yaml (``{"format_version", "sweep", "configs"}``), its
    format version checked (`check_format`); {} when there is none."""
    path = Path(sweep) / SWEEP_FILE
    return check_format(read_yaml_file(path), path)


def read_sweep_file(sweep: Path) -> dict:
    """The sweep file a sweep directory was run from (the ``sweep`` section of its resolved
    sweep.yaml), or {} when there is none."""
    return read_sweep_resolved(sweep).get("sweep") or {}


def read_ceiling_file(directory: Path) -> tuple[dict, Path] | None:
    """``(ceiling.json, its path)`` of a directory, or None when it has none; of a runs manifest (a
    YAML file with ``runs_from``), its ``ceiling`` section."""
    if Path(directory).is_file():
        data = read_yaml_file(directory)
        found = data.get("ceiling") if isinstance(data, dict) and "runs_from" in data else None
        return (found, Path(directory)) if isinstance(found, dict) else None
    p = Path(directory) / CEILING
    return (read_json(p), p) if p.is_file() else None


def newest_metrics_time(directory: Path) -> float | None:
    """The modification time of the newest metrics log under ``directory`` (when its runs last
    logged), or None."""
    times = [p.stat().st_mtime for p in Path(directory).rglob(METRICS)]
    return max(times) if times else None
