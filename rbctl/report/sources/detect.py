"""A folder is enough to start: `rbctl report FOLDER` on runs another framework wrote, without a
manifest. The folder's format is recognised by the files each framework writes (first that holds):

- W&B: a transaction log ``*.wandb`` (a run folder, ``wandb/``, or any folder above);
- MLflow: a file store (``mlruns/``: experiment folders with ``meta.yaml``; an experiment's folder
  or a run's folder of one) or an ``mlflow.db`` beside;
- TRL: ``trainer_state.json`` in an output folder or its ``checkpoint-N/``;
- verl: ``*.jsonl`` whose first line is its file logger's ``{"step": N, "data": {...}}``;
- TensorBoard: ``events.out.tfevents.*`` (any trainer).

Each run found is named by its path below the folder (W&B and MLflow: by its run name). Arms and
seeds are guessed from the names where all of them follow one pattern of `SEED_PATTERNS`
(``grpo/seed_0``, ``grpo-seed0``, ``grpo_s0``); otherwise each run is an arm of its own (seed 0),
listed for the user to map. Whose metric names the runs use (TRL's, verl's) is guessed from what the
first run logged. The result is a `RunsManifest` (`folder_manifest`) with no comparisons: the report
shows the runs, their trajectories and final values, and says how to write a manifest for calls
(`rbctl report --init-manifest FOLDER`, `rbctl.report.sources.init_manifest`).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from rbctl.config.base import validate
from rbctl.config.manifest import PRESETS, RunsManifest
from rbctl.errors import UserError
from rbctl.report.sources.event_files import EVENTS
from rbctl.report.sources.roles import matches
from rbctl.report.sources.trainer_state import STATE

# rbctl's roles as trackers' users commonly name them: a role is guessed only where exactly one
# logged name matches (and a held-out guess only for values in [0, 1]); the report says so.
ROLE_GUESSES = {
    "heldout": re.compile(r"(eval|val|test|valid|validation)[/_\-](.*[/_\-])?(acc|accuracy|reward|score|pass@1|correct)"),
    "entropy": re.compile(r"(.*[/_])?entropy"),
    "kappa": re.compile(r"(.*[/_])?kappa"),
    "kappa_eff": re.compile(r"(.*[/_])?kappa_eff"),
    "adv_gap": re.compile(r"(.*[/_])?adv(antage)?[/_]gap"),
    "reward": re.compile(r"(train[/_])?(reward|rewards?/mean|reward_mean)"),
    "response_length": re.compile(r"(train[/_])?(response|completions?)[/_](mean_)?len(gth)?([/_]mean)?"),
}
SEED_PATTERNS = (re.compile(r"(?P<arm>.+?)[/_.\-]seed[_\-]?(?P<seed>\d+)"), re.compile(r"(?P<arm>.+?)[/_\-]s(?P<seed>\d+)"))
SEARCH_DEPTH = 4  # levels below the folder searched for runs


@dataclass(frozen=True)
class Found:
    """The runs of a folder: their format, the manifest's root (and MLflow experiment), and each
    run's (name, path in the manifest)."""

    runs_from: str
    root: str
    runs: tuple[tuple[str, str], ...]
    experiment: str | None = None


def _files(path: Path, pattern: str) -> list[Path]:
    return sorted(f for f in path.rglob(pattern) if len(f.relative_to(path).parts) <= SEARCH_DEPTH + 1)


def _rel(path: Path, d: Path) -> str:
    return d.relative_to(path).as_posix() if d != path else "."


def _wandb(path: Path) -> Found | None:
    from rbctl.report.sources.wandb_run import Index

    if not _files(path, "*.wandb"):
        return None
    index = Index(path)
    names = index.names()
    runs = [(name, name if len(ids) == 1 else rid) for name, ids in names.items() for rid in ids]
    return Found("wandb", str(path), tuple(runs))


def _mlflow_root(path: Path) -> tuple[Path, str | None] | None:
    """(the store's folder, the experiment id or None) of a file store, an experiment or a run folder."""
    def experiment_like(d: Path) -> bool:
        return (d / "meta.yaml").is_file() and any(p.is_file() for p in d.glob("*/meta.yaml"))
    if (path / "mlruns").is_dir():
        return path / "mlruns", None
    if (path / "meta.yaml").is_file() and (path / "metrics").is_dir():  # a run's folder
        return path.parent.parent, path.parent.name
    if experiment_like(path):
        return path.parent, path.name
    if any(experiment_like(d) for d in path.iterdir() if d.is_dir()):
        return path, None
    return None


def _mlflow(path: Path) -> Found | None:
    db = path / "mlflow.db"
    where = _mlflow_root(path)
    if where is None and not db.is_file():
        return None
    from rbctl.report.sources.mlflow_store import Store

    root, exp = where if where is not None else (db, None)
    store = Store(str(root), exp)
    runs = [(name, name if len(ids) == 1 else rid) for name, ids in store.names().items() for rid in ids]
    return Found("mlflow", str(root), tuple(runs), exp)


def _trl(path: Path) -> Found | None:
    folders = set()
    for f in _files(path, STATE):
        d = f.parent
        folders.add(d.parent if re.fullmatch(r"checkpoint-\d+", d.name) else d)
    return Found("trl", str(path), tuple((_rel(path, d), _rel(path, d)) for d in sorted(folders))) if folders else None


def is_verl_log(f: Path) -> bool:
    """Whether the file's first line is verl's file logger's ``{"step": N, "data": {...}}``."""
    try:
        with open(f, errors="replace") as fh:
            first = next((line for line in fh if line.strip()), "")
        rec = json.loads(first)
    except (OSError, ValueError):
        return False
    return isinstance(rec, dict) and "step" in rec and isinstance(rec.get("data"), dict)


def _verl(path: Path) -> Found | None:
    logs = [f for f in _files(path, "*.jsonl") if is_verl_log(f)]
    runs = [(_rel(path, f.parent) if len([g for g in logs if g.parent == f.parent]) == 1 else _rel(path, f).removesuffix(".jsonl"),
             _rel(path, f)) for f in logs]
    return Found("verl", str(path), tuple(runs)) if runs else None


def _tensorboard(path: Path) -> Found | None:
    folders = sorted({f.parent for f in _files(path, EVENTS)})
    return Found("tensorboard", str(path), tuple((_rel(path, d), _rel(path, d)) for d in folders)) if folders else None


def detect(path: Path) -> Found | None:
    """The runs another framework wrote under the folder ``path`` (module docstring); None when none."""
    path = Path(path)
    if not path.is_dir():
        return None
    for find in (_wandb, _mlflow, _trl, _verl, _tensorboard):
        found = find(path)
        if found is not None and found.runs:
            return Found(found.runs_from, found.root, tuple(sorted(found.runs)), found.experiment)
    return None


def run_names(found: Found, folder: Path) -> list[str]:
    """The names arms and seeds are guessed from: each run's; a folder that is one run is named with
    its parent's name (``grpo/seed_0``)."""
    folder = Path(folder).resolve()
    return [n if n != "." else f"{folder.parent.name}/{folder.name}" for n, _ in found.runs]


def guess_units(names: list[str]) -> dict[str, tuple[str, int]] | None:
    """{name: (arm, seed)} when every name follows one of `SEED_PATTERNS` and no (arm, seed) repeats;
    else None (the runs are listed for the user to map)."""
    for rx in SEED_PATTERNS:
        got = {n: rx.fullmatch(n) for n in names}
        if all(got.values()):
            units = {n: (m.group("arm").replace("/", "_").strip("._-") or "run", int(m.group("seed"))) for n, m in got.items()}
            if len(set(units.values())) == len(units):
                return units
    return None


def guess_arm(arm: str) -> dict:
    """What an arm is, where its name says it exactly: ``ESTIMATOR`` or ``ESTIMATOR_VARIANT`` (``grpo``,
    ``rloo_budget``) of rbctl's estimators and variants (`known_variants`); else nothing (the defaults:
    grpo, base)."""
    from rbctl.algo import registry
    from rbctl.config.manifest import known_variants

    estimators = [m.name for m in registry.of_kind("estimator")]
    for est in sorted(estimators, key=len, reverse=True):
        rest = arm[len(est):]
        if arm == est:
            return {"baseline": est}
        if arm.startswith(est) and rest[:1] in "_-" and rest[1:] in known_variants():
            return {"baseline": est, "variant": rest[1:]}
    return {}


def arm_name(name: str) -> str:
    """A run's name as an arm's (a plain name: no slash, no leading dot)."""
    return re.sub(r"[/\s]+", "_", name).lstrip(".") or "run"


def guess_names(runs_from: str, keys: set[str]) -> str | None:
    """The preset (`rbctl.config.manifest.PRESETS`) whose role names match the most logged names (at
    least three, its response length among them: TRL always logs reward, entropy and
    completions/mean_length, verl critic/score/mean, actor/entropy and response_length/mean), for formats that carry no preset of their own; TensorBoard and W&B see TRL's names
    as transformers renamed them (``train/reward``), undone first."""
    from rbctl.report.sources.event_files import trl_name

    if runs_from in PRESETS:
        return None
    best, score = None, 2
    for preset, roles in PRESETS.items():
        seen = {trl_name(k) for k in keys} if preset == "trl" and runs_from in ("tensorboard", "wandb") else keys
        n = sum(1 for role, pattern in roles.items() if role != "benchmark" and matches(pattern, seen))
        if n > score and matches(roles["response_length"], seen):
            best, score = preset, n
    return best


def _signature(path: Path) -> float:
    """The newest modification time in the folder's tree (what invalidates a cached detection)."""
    newest = path.stat().st_mtime
    for top, dirs, files in os.walk(path):
        for name in files + dirs:
            try:
                newest = max(newest, os.stat(os.path.join(top, name)).st_mtime)
            except OSError:
                continue
    return newest


def folder_manifest(path: Path) -> RunsManifest:
    """The manifest `rbctl report FOLDER` reads the folder's runs with (module docstring)."""
    path = Path(path)
    return _folder_manifest(str(path.resolve()), str(path), _signature(path))


@lru_cache(maxsize=32)
def _folder_manifest(resolved: str, given: str, signature: float) -> RunsManifest:
    found = detect(Path(given))  # runs sorted by name
    if found is None:
        raise UserError(f"no runs under {given}: neither rbctl's (a metrics log, a sweep) nor TRL's, verl's, W&B's, "
                        "MLflow's or TensorBoard's files; a runs manifest names runs anywhere (docs/your_runs.md)")
    here = Path(resolved)
    names = run_names(found, here)
    units = guess_units(names)
    runs = [{"arm": units[n][0] if units else arm_name(n), "seed": units[n][1] if units else 0, "path": p}
            for n, (_, p) in zip(names, found.runs)]
    name = names[0].replace("/", "_") if found.runs == ((".", "."),) else here.name  # one run: grpo_seed_0
    data = {"runs_from": found.runs_from, "name": name, "root": found.root,
            "arms": {r["arm"]: {} for r in runs}, "runs": runs}
    if found.experiment is not None:
        data["experiment"] = found.experiment
    if found.runs_from not in PRESETS:
        records = first_records(validate(RunsManifest, {**data, "runs": runs[:1]}, given))
        preset = guess_names(found.runs_from, {k for vals in records.values() for k in vals})
        if preset is not None:
            data["names"] = preset
        else:
            data["roles"] = guess_roles(records)
    return validate(RunsManifest, data, given)


def guess_roles(records: dict[int, dict[str, float]]) -> dict[str, str]:
    """{role: logged name} where exactly one name a run logged matches the role's `ROLE_GUESSES`
    pattern (a held-out score only when every value is a fraction, and never a training name)."""
    from rbctl.config.manifest import TRAINING_PREFIXES

    keys = sorted({k for vals in records.values() for k in vals})
    out = {}
    for role, rx in ROLE_GUESSES.items():
        hits = [k for k in keys if rx.fullmatch(k)]
        if role == "heldout":
            values = [v for vals in records.values() for k, v in vals.items() if k in hits]
            if hits and (hits[0].startswith(TRAINING_PREFIXES) or not all(0.0 <= v <= 1.0 for v in values if v == v)):
                continue
        if len(hits) == 1:
            out[role] = hits[0]
    return out


def first_records(m: RunsManifest) -> dict[int, dict[str, float]]:
    """The records of the first run of ``m`` (for `guess_names` and `guess_roles`, and the names
    `init_manifest` lists)."""
    from rbctl.report.sources.readers import Readers

    got = Readers(m).records(m.entries()[0])
    return got[1] if got else {}


def logged_keys(m: RunsManifest) -> set[str]:
    return {k for vals in first_records(m).values() for k in vals}
