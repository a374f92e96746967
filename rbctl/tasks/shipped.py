"""Warm starts shipped inside the package (`rbctl/tasks/warm_starts/`), the way a study fixes its
base-model checkpoint: the same starting policy on every machine.

A warm start trained by the SFT recipe (`rbctl.tasks.tiny.sft_warm_start`) lands on another policy
on another CPU's floating-point kernels, and every arm and seed of a study inherits it; so the main
job starts from files instead. Each shipped warm start is a Hugging Face model folder
`warm_starts/<name>/` (safetensors weights, config, tokenizer, the built-in marker) listed in
`warm_starts/index.json` with:

- ``sha256``: the SHA-256 of every file, checked on load (a changed file is refused, naming it);
- ``task``, ``warm_start``, ``kind``: the task and SFT settings it was trained with (a config that
  selects it must have the same ones, all but the SFT seed, which its name carries: its run
  directory then says truthfully what it ran);
- ``properties``: what it does on the task's held-out split (`scripts/fixpoint_probe.py`'s `probe`),
  measured when it was made.

The index also states the ``targets`` every warm start of a kind must meet (`check_targets`): the
warm start's properties are a controlled part of the task, not an accident of the SFT trajectory
(docs/plateau_task.md). `python -m scripts.warm_starts` regenerates them from the recipe and says
which ones a regenerated copy reproduces bit for bit.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from rbctl.errors import UserError
from rbctl.store.checkpoint import sha256

SHIPPED_DIR = Path(__file__).resolve().parent / "warm_starts"
INDEX = "index.json"


def index() -> dict:
    """The shipped warm starts' index ({"targets": {kind: ...}, "warm_starts": {name: record}})."""
    path = SHIPPED_DIR / INDEX
    if not path.is_file():
        return {"targets": {}, "warm_starts": {}}
    return json.loads(path.read_text())


def names() -> list[str]:
    return sorted(index()["warm_starts"])


def file_hashes(folder: Path) -> dict[str, str]:
    """SHA-256 of every file of a model folder, by name (the folder is flat)."""
    return {f.name: sha256(f) for f in sorted(Path(folder).iterdir()) if f.is_file()}


def record(name: str) -> dict:
    warm = index()["warm_starts"]
    if name not in warm:
        raise UserError(f"data.builtin.warm_start: no shipped warm start '{name}'; shipped: {', '.join(sorted(warm)) or 'none'}")
    return warm[name]


def shipped_warm_start(name: str, spec, ws) -> Path:
    """The folder of shipped warm start `name`, after checking that `spec`/`ws` (the config's task and
    SFT settings) are the ones it was trained with and that every file matches its SHA-256."""
    rec = record(name)
    want = {"kind": spec.kind, "task": asdict(spec), "warm_start": asdict(ws)}
    for part in ("kind", "task", "warm_start"):
        have = rec[part]
        if part == "kind":
            if have != want[part]:
                raise UserError(f"data.builtin.warm_start '{name}' is a {have} warm start, but data.builtin.task is {want[part]}")
            continue
        for key in sorted(set(have) | set(want[part])):
            if part == "warm_start" and key == "seed":
                continue  # the SFT seed is what tells shipped warm starts apart: their names say it
            if have.get(key) != want[part].get(key):
                raise UserError(f"data.builtin.warm_start '{name}' was trained with {part} setting {key}={have.get(key)!r}, "
                                f"but the config has {want[part].get(key)!r}: set it to {have.get(key)!r} or use another warm start")
    folder = SHIPPED_DIR / name
    actual = file_hashes(folder) if folder.is_dir() else {}
    for fname, digest in sorted(rec["sha256"].items()):
        if actual.get(fname) != digest:
            why = "missing" if fname not in actual else "changed (SHA-256 mismatch)"
            raise UserError(f"shipped warm start {folder / fname} is {why}; reinstall rbctl or regenerate it "
                            "with python -m scripts.warm_starts")
    extra = sorted(set(actual) - set(rec["sha256"]))
    if extra:
        raise UserError(f"shipped warm start {folder} holds files its index does not list: {', '.join(extra)}")
    return folder


def check_targets(kind: str, properties: dict) -> list[str]:
    """The targets of `kind` that `properties` miss (empty when it meets them all). A target is
    {property: [low, high]} in the index."""
    targets = index()["targets"].get(kind, {})
    misses = []
    for key, (lo, hi) in sorted(targets.items()):
        v = properties.get(key)
        if v is None or not lo <= v <= hi:
            misses.append(f"{key} = {v} not in [{lo}, {hi}]")
    return misses
