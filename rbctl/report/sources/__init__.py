"""Runs trained elsewhere, read into the report's `rbctl.report.runs.Run`: one adapter per format
(`trainer_state` for TRL, `verl_log`, `event_files` for TensorBoard, `wandb_run` for W&B run folders
and exports, `mlflow_store` for MLflow, `long_table`; `readers` picks one) turns a run's files into
records by step, and `load_manifest` maps their metric names to rbctl's (the manifest's roles,
`rbctl.config.manifest`, matched by `roles`). `detect` recognises a folder of runs without a
manifest and `init_manifest` writes one for it; `declare` records a manifest's versions.
Nothing above this layer knows where a run came from.

What a run becomes: ``metrics`` holds each step's records under rbctl's names for the roles
(`ROLE_NAMES`: ``entropy``, ``kappa``, ``kappa_eff``, ``reward/mean`` …) beside every other logged
name as logged; ``evals`` holds the held-out score of each evaluation as ``avg@n`` of its benchmark;
the held-out score at the run's last logged step is its final score (an earlier one never is), a
summary of the logged mean only (``mean_only``: one value per unit, no per-problem counts), unless
`rbctl eval` scored the run's checkpoints (`checkpoint_evals`: per-problem counts). A value logged as
null or NaN is undefined at that step (κ_eff without a mixed group), not missing. A role the runs do
not log is named once (`remarks`), never filled in.
"""

from __future__ import annotations

import math
from pathlib import Path

import yaml

from rbctl.config.base import read_yaml, validate
from rbctl.config.manifest import MANIFEST_KEY, RunEntry, RunsManifest
from rbctl.errors import UserError
from rbctl.report.runs import Issue, Run
from rbctl.report.sources.checkpoint_evals import check_one_protocol, checkpoint_evals, eval_record
from rbctl.report.sources.readers import Readers
from rbctl.report.sources.remarks import remarks  # noqa: F401  (the report's loader imports it from here)
from rbctl.report.sources.roles import HELDOUT, MEAN_ONLY_ID, ROLE_NAMES, find, heldout_scores  # noqa: F401
from rbctl.report.sources.safe_read import NoRecords
from rbctl.store.rundir import run_key


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
    """The manifest of ``path``: a manifest file, or the one `detect` makes for a folder of runs."""
    if Path(path).is_dir():
        from rbctl.report.sources.detect import folder_manifest

        return folder_manifest(Path(path))
    return validate(RunsManifest, read_yaml(path), str(path))


def is_imported(path: Path) -> bool:
    """A runs manifest, or a folder of runs another framework wrote (`detect`)."""
    if is_manifest(path):
        return True
    from rbctl.report.sources.detect import detect

    return Path(path).is_dir() and detect(Path(path)) is not None


def _check_heldout(key: str, v: float, run: str, step: int) -> float:
    if not math.isfinite(v) or not 0.0 <= v <= 1.0:
        raise UserError(f"run {run}: held-out score {key} = {v!r} at step {step}; rbctl compares fractions in [0, 1] "
                        "(a pass rate): name a score in that range as roles.heldout")
    return v


def _trajectory(m: RunsManifest, records: dict[int, dict[str, float]], label: str) -> tuple[list, list, list]:
    """(metrics, logged held-out evaluations, steps whose held-out score is undefined) of a run's records."""
    roles, esc = m.resolved_roles(), m.escape
    metrics, evals, undefined = [], [], []
    taken = set(ROLE_NAMES.values())
    for step in sorted(records):
        values = records[step]
        rec = {"step": step, **{k: v for k, v in values.items() if k not in taken}}
        for role, name in ROLE_NAMES.items():
            hit = find(values, getattr(roles, role))
            if hit is not None:
                rec[name] = hit[1]
        metrics.append(rec)
        for bench, (key, v) in heldout_scores(values, roles).items():
            if math.isnan(v):  # logged as null or NaN: no score at this step
                undefined.append(step)
                continue
            e = {"step": step, "benchmark": bench, HELDOUT: _check_heldout(key, v, label, step)}
            if esc is not None and esc.signal == "eval" and esc.metric in values:
                e[esc.metric] = values[esc.metric]
            evals.append(e)
    return metrics, evals, undefined


def _finals(evals: list[dict], scored: dict, last: int, label: str) -> tuple[dict, int | None, list[Issue]]:
    """The final score per benchmark (its evaluation at the last logged step; ``scored``: the
    checkpoint evaluations' summaries by (step, benchmark)) and the benchmarks without one."""
    finals, final_step, issues, last_eval = {}, None, [], {}
    for e in evals:
        last_eval[e["benchmark"]] = e
    for bench, e in last_eval.items():
        if e["step"] == last:
            summary = scored.get((last, bench))
            finals[bench] = summary if summary is not None else {
                "benchmark": bench, "n": 1, "mean_only": True, "step": last,
                "per_problem": [{"id": MEAN_ONLY_ID, "correct": e[HELDOUT], "n": 1}]}
            final_step = last
        else:
            issues.append(Issue(label, "no final evaluation", f"{bench}: its last held-out evaluation is at step "
                                f"{e['step']}, its last logged step is {last} (an earlier evaluation is not a final score)"))
    return finals, final_step, issues


def to_run(m: RunsManifest, entry: RunEntry, path: Path, records: dict[int, dict[str, float]], meta: dict,
           source: Path) -> tuple[Run, list[Issue]]:
    """One run's records as the report's `Run` (the module docstring says what becomes what)."""
    roles, arm = m.resolved_roles(), m.arms[entry.arm]
    label = run_key(entry.arm, entry.seed, entry.warm_start)
    metrics, evals, undefined = _trajectory(m, records, label)
    ckpts = m.checkpoints_of(entry)
    scored = {}
    if ckpts is not None:
        for e in checkpoint_evals(Path(m.root) / ckpts, m.protocol):
            scored[(e["step"], e["benchmark"])] = {**e["summary"], "protocol_folder": e["protocol"]}
            evals = [x for x in evals if x["benchmark"] != e["benchmark"]] + [eval_record(e)]
    evals.sort(key=lambda e: (e["step"], e["benchmark"]))
    last = max(records, default=0)
    finals, final_step, issues = _finals(evals, scored, last, label)
    if not evals:
        issues.append(Issue(label, "no final evaluation", f"no held-out score in its records (roles.heldout: "
                            f"{'`' + roles.heldout + '`' if roles.heldout else 'not named'})"))
    steps = m.steps or meta.get("max_steps")
    run = Run(path=Path(path), arm=entry.arm, seed=entry.seed,
              baseline=arm.baseline, variant=arm.variant, sweep=m.name, status="", config_steps=steps,
              metrics=metrics, evals=evals, final_step=final_step, finals=finals, sweep_dir=source,
              warm_start=entry.warm_start,
              provenance={"imported": "manifest" if is_manifest(source) else "folder",
                          "files": meta.get("files", []), "ended": meta.get("ended"),
                          "unfinished": meta.get("finished") is False, "heldout_undefined": undefined,
                          "checkpoints": str(Path(m.root) / ckpts) if ckpts is not None else None})
    return run, issues


def load_manifest(path: Path) -> tuple[list[Run], list[Issue]]:
    """The runs a manifest (or a folder of runs, `detect`) names, read through its format's adapter,
    and the ones it cannot find."""
    path = Path(path)
    m = read_manifest(path)
    readers, runs, issues, named = Readers(m), [], [], set()
    for entry in m.entries():
        label = run_key(entry.arm, entry.seed, entry.warm_start)
        try:
            found = readers.records(entry)
        except NoRecords as e:
            issues.append(Issue(f"{m.name}/{label}", "missing", f"{e} (the manifest {path} names it)"))
            continue
        if found is None:
            issues.append(Issue(f"{m.name}/{label}", "missing", f"{readers.missing_text(entry)} (the manifest {path} names it)"))
            continue
        named |= {entry.path, str(found[2].get("id")), str(found[2].get("name"))}
        run, problems = to_run(m, entry, *found, source=path)
        runs.append(run)
        issues += problems
    if not runs:
        raise UserError(f"{path}: none of the {len(m.entries())} runs it names was found (first: {issues[0].detail})")
    check_one_protocol({r.name: r.finals for r in runs})
    where, what, extra = readers.unnamed(named)
    if extra:
        issues.append(Issue(where, "not named", f"{what} {', '.join(extra)} are in no arm of {path}; they are not read"))
    return runs, issues
