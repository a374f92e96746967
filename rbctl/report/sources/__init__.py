"""Runs trained elsewhere, read into the report's `rbctl.report.runs.Run`: one adapter per format
(`trainer_state` for TRL, `verl_log`, `event_files` for TensorBoard, `long_table`) turns a run's files into records by step, and
`load_manifest` maps their metric names to rbctl's (the manifest's roles, `rbctl.config.manifest`).
Nothing above this layer knows where a run came from.

What a run becomes: ``metrics`` holds each step's records under rbctl's names for the roles
(`ROLE_NAMES`: ``entropy``, ``kappa``, ``kappa_eff``, ``reward/mean`` …) beside every other logged
name as logged; ``evals`` holds the held-out score of each evaluation as ``avg@n`` of its benchmark;
the held-out score at the run's last logged step is its final score (an earlier one never is), a
summary of the logged mean only (``mean_only``: one value per unit, no per-problem counts). A role the
runs do not log is named once (`remarks`), never filled in.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path

import yaml

from rbctl.config.base import read_yaml, validate
from rbctl.config.manifest import MANIFEST_KEY, Roles, RunEntry, RunsManifest
from rbctl.errors import UserError
from rbctl.report.runs import Issue, Run
from rbctl.report.sources import event_files, long_table, trainer_state, verl_log
from rbctl.report.sources.safe_read import NoRecords
from rbctl.store.rundir import run_key

# role -> rbctl's name for it in a run's metrics (docs/metrics.md); "heldout" -> the evals' avg@n
ROLE_NAMES = {"entropy": "entropy", "kappa": "kappa", "kappa_eff": "kappa_eff", "adv_gap": "adv/gap",
              "reward": "reward/mean", "response_length": "response/len_mean"}
ROLE_LABELS = {"heldout": "held-out score", "entropy": "entropy", "kappa": "κ", "kappa_eff": "κ_eff",
               "adv_gap": "advantage gap", "reward": "training reward", "response_length": "response length"}
HELDOUT = "avg@n"
MEAN_ONLY_ID = "mean"  # the one "problem" of a final summary that holds only the logged mean


def is_manifest(path: Path) -> bool:
    """A YAML file whose top level names ``runs_from`` (what tells it from a sweep or study file)."""
    path = Path(path)
    if not path.is_file() or path.suffix.lower() not in (".yaml", ".yml"):
        return False
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError:
        return False
    return isinstance(data, dict) and MANIFEST_KEY in data


def read_manifest(path: Path) -> RunsManifest:
    return validate(RunsManifest, read_yaml(path), str(path))


def _regex(pattern: str) -> re.Pattern:
    """A role's name as a regex: {benchmark} captured (it may hold slashes: verl's data source
    `openai/gsm8k`), {n} captured (digits), any other {x} one path segment."""
    out, pos = "", 0
    for m in re.finditer(r"{(\w+)}", pattern):
        out += re.escape(pattern[pos:m.start()])
        name = m.group(1)
        out += (r"(?P<n>\d+)" if name == "n" else r"(?P<benchmark>.+?)" if name == "benchmark" else r"[^/]+")
        pos = m.end()
    return re.compile(out + re.escape(pattern[pos:]) + r"\Z")


def _find(values: dict[str, float], pattern: str | None) -> tuple[str, float] | None:
    """The logged (name, value) a training role's name matches (the first in sorted order)."""
    if pattern is None:
        return None
    if pattern in values:
        return pattern, values[pattern]
    rx = _regex(pattern)
    hit = sorted(k for k in values if rx.match(k))
    return (hit[0], values[hit[0]]) if hit else None


def heldout_scores(values: dict[str, float], roles: Roles) -> dict[str, tuple[str, float]]:
    """{benchmark: (logged name, score)} of one step: per benchmark the match of ``roles.heldout``
    with the largest {n} (verl's val-core holds the largest n only; an explicit name has none)."""
    if roles.heldout is None:
        return {}
    rx, found = _regex(roles.heldout), {}
    for k in sorted(values):
        m = rx.match(k)
        if m:
            g = m.groupdict()
            bench, n = g.get("benchmark") or roles.benchmark, int(g["n"]) if g.get("n") else 0
            if bench not in found or n > found[bench][0]:
                found[bench] = (n, k, values[k])
    return {b: (k, v) for b, (_, k, v) in found.items()}


def _records(m: RunsManifest, root: Path, entry: RunEntry, tables: dict) -> tuple[Path, dict, dict] | None:
    """(the run's path, its records by step, meta) through the manifest's adapter; None when missing."""
    if m.runs_from == "table":
        source = root / m.table
        if "rows" not in tables:
            tables["rows"] = long_table.read_table(source)
        rows = tables["rows"]
        if entry.path not in rows:
            return None
        return source / entry.path, rows[entry.path], {"max_steps": None, "files": [str(source)]}
    path = root / entry.path
    if not path.exists():
        return None
    if m.runs_from == "trl":
        return (path, *trainer_state.read(path))
    if m.runs_from == "verl":
        return (path, *verl_log.read(path))
    return (path, *event_files.read(path, trl_names=m.preset() == "trl"))


def _check_heldout(key: str, v: float, run: str, step: int) -> float:
    if not math.isfinite(v) or not 0.0 <= v <= 1.0:
        raise UserError(f"run {run}: held-out score {key} = {v!r} at step {step}; rbctl compares fractions in [0, 1] "
                        "(a pass rate): name a score in that range as roles.heldout")
    return v


def to_run(m: RunsManifest, entry: RunEntry, path: Path, records: dict[int, dict[str, float]], meta: dict,
           source: Path) -> tuple[Run, list[Issue]]:
    """One run's records as the report's `Run` (the module docstring says what becomes what)."""
    roles, arm = m.resolved_roles(), m.arms[entry.arm]
    label = run_key(entry.arm, entry.seed, entry.warm_start)
    esc = m.escape
    metrics, evals = [], []
    taken = set(ROLE_NAMES.values())
    for step in sorted(records):
        values = records[step]
        rec = {"step": step, **{k: v for k, v in values.items() if k not in taken}}
        for role, name in ROLE_NAMES.items():
            hit = _find(values, getattr(roles, role))
            if hit is not None:
                rec[name] = hit[1]
        metrics.append(rec)
        scores = heldout_scores(values, roles)
        for bench, (key, v) in scores.items():
            e = {"step": step, "benchmark": bench, HELDOUT: _check_heldout(key, v, label, step)}
            if esc is not None and esc.signal == "eval" and esc.metric in values:
                e[esc.metric] = values[esc.metric]
            evals.append(e)
    last = max(records, default=0)
    finals, final_step, issues = {}, None, []
    last_eval = {}
    for e in evals:
        last_eval[e["benchmark"]] = e
    for bench, e in last_eval.items():
        if e["step"] == last:
            finals[bench] = {"benchmark": bench, "n": 1, "mean_only": True, "step": last,
                             "per_problem": [{"id": MEAN_ONLY_ID, "correct": e[HELDOUT], "n": 1}]}
            final_step = last
        else:
            issues.append(Issue(label, "no final evaluation", f"{bench}: its last held-out evaluation is at step "
                                f"{e['step']}, its last logged step is {last} (an earlier evaluation is not a final score)"))
    if not evals:
        issues.append(Issue(label, "no final evaluation", f"no held-out score in its records (roles.heldout: "
                            f"{'`' + roles.heldout + '`' if roles.heldout else 'not named'})"))
    steps = m.steps or meta.get("max_steps")
    run = Run(path=path, arm=entry.arm, seed=entry.seed, baseline=arm.baseline, variant=arm.variant, sweep=m.name,
              status="", config_steps=steps, metrics=metrics, evals=evals, final_step=final_step, finals=finals,
              sweep_dir=source, warm_start=entry.warm_start, provenance={"files": meta.get("files", [])})
    return run, issues


def load_manifest(path: Path) -> tuple[list[Run], list[Issue]]:
    """The runs a manifest names, read through its format's adapter, and the ones it cannot find."""
    path = Path(path)
    m = read_manifest(path)
    root, runs, issues, tables = Path(m.root), [], [], {}
    for entry in m.entries():
        label = run_key(entry.arm, entry.seed, entry.warm_start)
        try:
            found = _records(m, root, entry, tables)
        except NoRecords as e:
            issues.append(Issue(f"{m.name}/{label}", "missing", f"{e} (the manifest {path} names it)"))
            continue
        if found is None:
            where = f"no run {entry.path!r} in {root / m.table}" if m.runs_from == "table" else f"{root / entry.path} does not exist"
            issues.append(Issue(f"{m.name}/{label}", "missing", f"{where} (the manifest {path} names it)"))
            continue
        run, problems = to_run(m, entry, *found, source=path)
        runs.append(run)
        issues += problems
    if not runs:
        raise UserError(f"{path}: none of the {len(m.entries())} runs it names was found (first: {issues[0].detail})")
    if m.runs_from == "table" and tables.get("rows"):
        named = {e.path for e in m.entries()}
        extra = sorted(set(tables["rows"]) - named)
        if extra:
            issues.append(Issue(str(root / m.table), "not named",
                                f"the table's runs {', '.join(extra)} are in no arm of {path}; they are not read"))
    return runs, issues


def remarks(m: RunsManifest, runs: list[Run]) -> list[str]:
    """What the runs do not log or do unlike each other, one line each: a role no run logs (or only
    some), runs that logged different numbers of steps, and evaluation grids that differ."""
    if not runs:
        return []
    roles, out = m.resolved_roles(), []
    for role, label in ROLE_LABELS.items():
        pattern = getattr(roles, role)
        if role == "heldout":
            having = [r for r in runs if r.evals]
        else:
            having = [r for r in runs if any(math.isfinite(x.get(ROLE_NAMES[role], math.nan)) for x in r.metrics)]
        if pattern is None:
            out.append(f"{label}: not logged by these runs (the manifest names no metric for roles.{role})")
        elif not having:
            out.append(f"{label}: not logged by these runs (no `{pattern}` in their records)")
        elif len(having) < len(runs):
            lacking = ", ".join(r.name for r in runs if all(r is not h for h in having))
            out.append(f"{label}: logged by {len(having)} of {len(runs)} runs (`{pattern}`); not by {lacking}")
    if m.escape is not None:
        where = (lambda r: r.evals) if m.escape.signal == "eval" else (lambda r: r.metrics)
        if not any(m.escape.metric in x for r in runs for x in where(r)):
            out.append(f"escape signal: not logged by these runs (no `{m.escape.metric}` in their "
                       f"{'evaluation' if m.escape.signal == 'eval' else 'training'} records)")
    lasts = Counter(r.last_step for r in runs)
    if len(lasts) > 1:
        out.append("the runs logged different numbers of steps: " + "; ".join(
            f"{s} steps: {', '.join(r.name for r in runs if r.last_step == s)}" for s in sorted(lasts)))
    for bench in sorted({e["benchmark"] for r in runs for e in r.evals}):
        grids = {r.name: tuple(e["step"] for e in r.evals if e["benchmark"] == bench) for r in runs}
        if len(set(grids.values())) > 1:
            by = {}
            for name, g in grids.items():
                by.setdefault(g, []).append(name)
            out.append(f"the runs evaluated {bench} at different steps: " + "; ".join(
                f"{','.join(map(str, g)) or 'never'} ({', '.join(names)})" for g, names in by.items()))
    means = sorted({e["benchmark"] for r in runs for e in r.evals})
    if means:
        out.append(f"held-out scores ({', '.join(means)}) are the runs' logged means per evaluation: one value per "
                   "unit, so no pass@k beyond it, no maj@k and no bootstrap over problems")
    return out
